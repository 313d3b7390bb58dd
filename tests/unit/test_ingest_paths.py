"""The fast ingest paths index exactly what the plain one does: the parse worker process (with
the block work done there), the ingest cache the lineage pass reads, commits every few bytes,
continuations computed in the worker, and the one-read tape table of the continuation pass."""

from __future__ import annotations

import json
import os

import pytest
from claude_log import World

from engram.cli import main
from engram.engine import Engine
from engram.ingest import ingestor as ingest
from engram.lineage import continuations

PARSE = '''def parse_header(line):
    """Split a raw header line into a (name, value) pair."""
    name, sep, value = line.partition(":")
    if not sep:
        raise ValueError("not a header line: " + line)
    return name.strip().lower(), value.strip()
'''

PARSE_V2 = PARSE.replace('raise ValueError("not a header line: " + line)', "return None")

HELPERS = '''def split_pairs(text, sep=","):
    """Split ``a=1, b=2`` into a dict, ignoring blank items."""
    out = {}
    for item in text.split(sep):
        if item.strip():
            key, _, value = item.partition("=")
            out[key.strip()] = value.strip()
    return out
'''

TABLES = {
    "tapes": "SELECT * FROM tapes ORDER BY id",
    "events": "SELECT * FROM events ORDER BY id",
    "blocks": "SELECT * FROM blocks ORDER BY id",
    "refs": "SELECT * FROM refs ORDER BY block, event, role",
    "fingerprints": "SELECT * FROM fingerprints ORDER BY hash, block, line",
    "packed": "SELECT * FROM packed ORDER BY key",
    "block_lines": "SELECT * FROM block_lines ORDER BY block",
    "boilerplate": "SELECT * FROM boilerplate ORDER BY hash",
    "edges": "SELECT * FROM edges ORDER BY id",
    "tombstones": "SELECT * FROM tombstones ORDER BY id",
    "continuations": "SELECT * FROM continuations ORDER BY from_tape, to_tape",
    "lineage_done": "SELECT * FROM lineage_done ORDER BY tape_id",
}


def _ingest(capsys) -> dict:
    code = main(["ingest", "--rebuild", "--seal"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _dump(w: World) -> dict:
    eng = Engine(w.root)
    try:
        conn = eng.conn()
        return {name: list(conn.execute(sql)) for name, sql in TABLES.items()}
    finally:
        eng.close()


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    s = w.session(session_id="aaaa0101-0000-0000-0000-000000000001").user("header parser")
    s.write("http.py", "import re\n\n" + PARSE).save()
    w.session(session_id="bbbb0101-0000-0000-0000-000000000002").user("be lenient") \
        .read("http.py").edit("http.py", PARSE, PARSE_V2).save()
    w.session(session_id="cccc0101-0000-0000-0000-000000000003").user("move the helpers") \
        .write("util.py", HELPERS).edit("http.py", PARSE_V2, "").save()
    w.session(session_id="dddd0101-0000-0000-0000-000000000004").user("reinsert the parser") \
        .edit("util.py", HELPERS, HELPERS + "\n\n" + PARSE_V2).save()
    w.session(session_id="eeee0101-0000-0000-0000-000000000005", name="continued") \
        .user("This session is being continued from a previous conversation. We moved "
              "parse_header into util.py next to split_pairs:\n" + HELPERS + PARSE_V2,
              compact_summary=True) \
        .say("continuing").read("util.py").save()
    w.checkout()
    return w


def test_fast_paths_index_the_same(world, capsys, monkeypatch):
    # the plain path: parsing in a thread, no cache, one commit, SQL per tape
    monkeypatch.setattr(ingest, "PROCESS_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(ingest, "_ingest_cache", lambda: None)
    monkeypatch.setattr(continuations, "TABLE_MIN_TAPES", 1 << 30)
    plain = _ingest(capsys)
    want = _dump(world)
    assert want["edges"] and want["tombstones"] and want["continuations"]

    # every fast path at once: worker process, groups of two sources, a commit per source,
    # continuations in the worker, the tape table, the ingest cache
    monkeypatch.undo()
    monkeypatch.chdir(world.root)
    monkeypatch.setattr(ingest, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(ingest, "GROUP_SOURCES", 2)
    monkeypatch.setattr(ingest, "BATCH_BYTES", 1)
    monkeypatch.setattr(continuations, "TABLE_MIN_TAPES", 1)
    monkeypatch.setattr(continuations, "SPLIT_MIN_TAPES", 1)  # the pass shared by both processes
    calls = []
    real = continuations.apply_remote
    monkeypatch.setattr(continuations, "apply_remote",
                        lambda conn, remote, stats: calls.append(remote) or real(conn, remote, stats))
    fast = _ingest(capsys)
    got = _dump(world)
    # the continuations came from the worker and this process, the claims file removed after
    assert len(calls) == 1 and calls[0] is not None and calls[0].here is not None
    assert not os.path.exists(calls[0].claims.path)
    for name in TABLES:
        assert got[name] == want[name], name
    for k in ("sessions", "sealed", "events", "blocks", "fingerprints", "tapes_indexed"):
        assert fast[k] == plain[k], k
    assert {k: v for k, v in fast["lineage"].items() if k != "elapsed_s"} == \
        {k: v for k, v in plain["lineage"].items() if k != "elapsed_s"}


def test_worker_exiting_falls_back_to_parsing_here(world, capsys, monkeypatch):
    monkeypatch.setattr(ingest, "_ingest_cache", lambda: None)
    monkeypatch.setattr(ingest, "PROCESS_MIN_BYTES", 1 << 62)
    _ingest(capsys)
    want = _dump(world)

    from engram.ingest import worker as parse_worker

    class Dead(parse_worker.ParseProcess):
        def __init__(self):
            super().__init__()
            self.proc.kill()
            self.proc.wait()

    monkeypatch.setattr(ingest, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(parse_worker, "ParseProcess", Dead)
    _ingest(capsys)
    assert _dump(world) == want


def test_parsing_here_while_the_worker_is_busy_indexes_the_same(world, capsys, monkeypatch):
    """The ingest parses queued groups itself while the worker is still on the next source (here:
    the worker's answers are never seen ready, so every group not yet sent is parsed here)."""
    monkeypatch.setattr(ingest, "PROCESS_MIN_BYTES", 1 << 62)
    plain = _ingest(capsys)
    want = _dump(world)

    monkeypatch.setattr(ingest, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(ingest, "GROUP_SOURCES", 1)
    monkeypatch.setattr(ingest, "PROCESS_AHEAD_BYTES", 1)  # one group at a time to the worker
    monkeypatch.setattr(ingest, "_ready", lambda ticket: False)
    mixed = _ingest(capsys)
    assert 0 < mixed["parsed_here"] < mixed["parsed"]
    assert _dump(world) == want
    for k in ("sessions", "sealed", "events", "blocks", "fingerprints", "tapes_indexed"):
        assert mixed[k] == plain[k], k

    # what is parsed ahead stays bounded: with no room, nothing is parsed here
    monkeypatch.setattr(ingest, "AHEAD_BYTES", 1)
    bounded = _ingest(capsys)
    assert "parsed_here" not in bounded
    assert _dump(world) == want
