"""Which texts of an event the index fingerprints (``engram/index/store.py``), on real logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.adapters.claude_code import ADAPTER
from engram.index import schema, store

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "harness" / "claude_code"
# real sessions with Read calls (``SOURCES.md`` in that folder)
WITH_READS = ["codemie__4c2ddfdc__v2.0.64.jsonl", "codemie__session-624a4a58__compaction.jsonl",
              "gitai__example-claude-code__v1.0.111.jsonl"]


def test_a_listing_with_gutters_is_the_files_text():
    """Claude Code's Read shows a file ``"a\\nb\\n"`` as three numbered lines (the last one empty);
    the block is the file's text, from its first line number on."""
    out = store.event_blocks({"k": "tool.result", "tool": "Read",
                              "stdout": "    12→def f():\n    13→    return 1\n    14→\n"})
    assert out == [("def f():\n    return 1\n", schema.ROLE_TOOL_OUTPUT, 12)]
    # ``cat -n`` / tab gutters: each line numbered once
    out = store.event_blocks({"k": "tool.result", "stdout": "     1\tx = 1\n     2\ty = 2\n"})
    assert out == [("x = 1\ny = 2\n", schema.ROLE_TOOL_OUTPUT, 1)]


def test_text_after_a_listing_is_kept_and_harness_reminders_are_not():
    out = store.event_blocks({"k": "tool.result",
                              "stdout": "     1\tx = 1\n     2\ty = 2\n\n2 lines\n"})
    assert out == [("x = 1\ny = 2\n", schema.ROLE_TOOL_OUTPUT, 1),
                   ("\n2 lines\n", schema.ROLE_TOOL_OUTPUT, 1)]
    out = store.event_blocks({"k": "tool.result", "stdout": (
        "     5→a = 1\n     6→b = 2\n\n"
        "<system-reminder>\nWhenever you read a file ...\n</system-reminder>\n")})
    assert out == [("a = 1\nb = 2", schema.ROLE_TOOL_OUTPUT, 5)]


@pytest.mark.parametrize("text", ["12 passed in 0.31s\n", "1→ not a listing\nplain line\n",
                                  "  3 files changed\n"])
def test_other_output_is_kept_as_it_is(text):
    assert store.event_blocks({"k": "tool.result", "stdout": text}) == \
        [(text, schema.ROLE_TOOL_OUTPUT, 1)]


@pytest.mark.parametrize("name", WITH_READS)
def test_a_read_result_is_one_block_with_its_code_read(name):
    """The output of a Read call and the ``code.read`` made of it are one text block (fingerprinted
    once), not the file's lines twice — once with gutters, which give every line tokens of its
    own."""
    events = ADAPTER.parse_source(DATA / name).sessions[0].events
    reads = {ev.get("call_id"): ev for ev in events if ev["k"] == "code.read"}
    pairs = [(ev, reads[ev["call_id"]]) for ev in events if ev["k"] == "tool.result"
             and ev.get("tool") == "Read" and ev.get("call_id") in reads]
    assert pairs, "the fixture has Read calls"
    for result, read in pairs:
        (text, _role, line0), = store.event_blocks(result)
        (want, _role, want0), = store.event_blocks(read)
        assert (text, line0) == (want, want0), result["call_id"]


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "at-commit"])
def test_a_session_that_read_a_file_once_touched_it_once(tmp_path, prepared):
    """The Read's output, being the code.read's block, is not referenced a second time by the
    tool result: one event of the session holds the file's text, whichever path indexes it."""
    from engram.index import db

    events = ADAPTER.parse_source(DATA / WITH_READS[1]).sessions[0].events
    conn = db.connect(tmp_path / "index.sqlite")
    batch = store.Batch(conn)
    batch.add(store.SessionRecord("t" * 32, events, path=str(tmp_path / "t.jsonl.zst"),
                                  prepared=store.prepare([events])[0] if prepared else None))
    batch.commit()
    kinds = dict(conn.execute(
        "SELECT r.role, count(DISTINCT r.event) FROM refs r WHERE r.block IN"
        " (SELECT block FROM refs WHERE role = ?) GROUP BY r.role", (schema.ROLE_READ,)))
    reads = sum(ev["k"] == "code.read" for ev in events)
    assert kinds.get(schema.ROLE_READ) and kinds[schema.ROLE_READ] <= reads
    assert schema.ROLE_TOOL_OUTPUT not in kinds, "a Read's output is referenced besides its code.read"
    conn.close()


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.jsonl")))
def test_the_snippet_echoed_after_an_edit_is_not_indexed_again(name):
    """Claude Code answers an Edit with the edited lines, numbered ("Here's the result of running
    `cat -n` on a snippet of the edited file"): the code.edit of the same call holds them."""
    events = ADAPTER.parse_source(DATA / name).sessions[0].events
    edits = {ev.get("call_id") for ev in events if ev["k"] == "code.edit"}
    echoes = [ofs for ofs, ev in enumerate(events) if ev["k"] == "tool.result"
              and ev.get("call_id") in edits and "on a snippet of the edited file" in
              (ev.get("stdout") or "")]
    blocks = store.prepare([events])[0].blocks
    for ofs in echoes:
        assert blocks[ofs] == [], events[ofs]["stdout"][:120]
    # the edits themselves are indexed, and the output of calls that made no code event is kept
    assert all(blocks[o] for o, ev in enumerate(events) if ev["k"] == "code.edit"
               and (ev.get("after_text") or "").strip())
    coded = edits | {ev.get("call_id") for ev in events if ev["k"] == "code.read"}
    assert all(blocks[o] for o, ev in enumerate(events) if ev["k"] == "tool.result"
               and ev.get("call_id") not in coded and (ev.get("stdout") or "").strip())
