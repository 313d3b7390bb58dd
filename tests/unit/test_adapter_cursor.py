"""Cursor adapter: agent-transcript JSONL (real fixture) and state.vscdb.

The state.vscdb databases here are **synthetic**: no real licensed state.vscdb exists, so
``_make_vscdb`` writes one from the documented ``cursorDiskKV`` schema (composerData / bubbleId
keys, toolFormerData with rawArgs/result as JSON strings, result.diff.chunks).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.adapters import sqlite_store
from engram.adapters.cursor import ADAPTER
from engram.errors import UnsupportedLog

ROOT = Path(__file__).resolve().parents[2]
FIX = Path("tests/data/harness/cursor/gitai__cursor-session-simple__agent-transcript.jsonl")
GOLDEN = ROOT / "tests/golden/tapes/cursor"
SLUG = "Users-aidancunniffe-Desktop-testing-gitflows-git-ai"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _dump(sessions) -> str:
    return "".join(json.dumps(ev, sort_keys=True, ensure_ascii=False) + "\n"
                   for s in sessions for ev in s.events)


# -- agent transcripts ------------------------------------------------------------------------


def test_transcript_golden(golden_compare):
    out = ADAPTER.parse_source(FIX)
    assert out.errors == [] and out.end_offset == FIX.stat().st_size
    golden_compare(GOLDEN / "agent_transcript_simple.jsonl", _dump(out.sessions))
    [s] = out.sessions
    meta, *evs = s.events
    assert meta["label"] == "Generate a file with all the HBO shows from the 90's in it"
    assert meta["format"] == "agent-transcript" and meta["coverage"]["grade"] == "full"
    assert evs[0] == {"t": None, "k": "msg.in", "line": 1,
                      "text": "Generate a file with all the HBO shows from the 90's in it"}
    assert all(e["t"] is None for e in s.events)  # the format has no timestamps
    assert not any(e.get("text") == "[REDACTED]" for e in evs)
    calls = [e for e in evs if e["k"] == "tool.call"]
    assert [c["tool"] for c in calls].count("WebSearch") == 4
    assert calls[0]["call_id"] == "L2.1" and calls[0]["args"]["limit"] == 40
    [edit] = [e for e in evs if e["k"] == "code.edit"]
    assert edit["file"].endswith("/hbo-shows-1990s.txt") and edit["range_known"] is False
    assert edit["after_text"].startswith("HBO shows that aired during the 1990s (1990–1999)\n")
    assert "The Sopranos (premiered 1999)\n" in edit["after_text"]


def test_transcript_cwd_from_project_slug(tmp_path):
    d = tmp_path / ".cursor/projects" / SLUG / "agent-transcripts"
    d.mkdir(parents=True)
    shutil.copy(FIX, d / "abc.jsonl")
    sub = d / "abc/subagents"
    sub.mkdir(parents=True)
    shutil.copy(FIX, sub / "child.jsonl")
    assert list(ADAPTER.discover(tmp_path / ".cursor/projects")) == [d / "abc/subagents/child.jsonl",
                                                                     d / "abc.jsonl"]
    [s] = ADAPTER.parse_source(d / "abc.jsonl").sessions
    assert s.key == "abc" and s.events[0]["project"] == SLUG
    assert s.events[0]["cwd"] == "/Users/aidancunniffe/Desktop/testing-gitflows-git-ai"
    [edit] = [e for e in s.events if e["k"] == "code.edit"]
    assert edit["rel"] == "hbo-shows-1990s.txt"
    [c] = ADAPTER.parse_source(sub / "child.jsonl").sessions
    assert c.events[0]["subagent"] is True and c.events[0]["parent_session"] == "abc"


def test_transcript_edits_and_malformed_lines(tmp_path):
    lines = [
        {"role": "user", "message": {"content": [{"type": "text", "text": "edit it"}]}},
        {"role": "assistant", "message": {"content": [
            {"type": "tool_use", "name": "Write", "input": {"path": "/p/a.py",
                                                            "contents": "a\nb\nc\n"}}]}},
        "{not json",
        {"type": "turn_ended", "status": "ok"},
        {"role": "assistant", "message": {"content": [
            {"type": "tool_use", "name": "StrReplace",
             "input": {"path": "/p/a.py", "old_string": "b", "new_string": "B"}}]}},
    ]
    f = tmp_path / "s.jsonl"
    f.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
                 + '{"role": "user", "mess')  # a partial last line is not read yet
    out = ADAPTER.parse_source(f)
    assert [e["error"]["line"] for e in out.errors] == [3]
    edits = [e for e in out.sessions[0].events if e["k"] == "code.edit"]
    assert edits[1]["before_range"] == [2, 2] and edits[1]["after_text"] == "B\n"
    assert out.end_offset == len(f.read_bytes()) - len('{"role": "user", "mess')


def test_transcript_unknown_shape(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"role": "user", "message": {"content": [{"type": "text",
                                                                      "text": "hi"}]}}) + "\n"
                 + json.dumps({"role": "narrator", "message": {"content": []}}) + "\n")
    cov = ADAPTER.parse_source(f).sessions[0].events[0]["coverage"]
    assert cov["grade"] == "degraded"
    assert cov["reasons"] == ["unknown record shape (role 'narrator', type None)"]
    with pytest.raises(UnsupportedLog):
        ADAPTER.parse_source(f, mode="strict")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda ch: st.lists(ch, max_size=4)
                     | st.dictionaries(st.text(max_size=8), ch, max_size=4), max_leaves=12)
_valid = st.builds(lambda role, text: {"role": role, "message": {"content": [
    {"type": "text", "text": text}]}}, st.sampled_from(["user", "assistant"]),
    st.text(min_size=1, max_size=30).filter(lambda s: s.strip() not in ("", "[REDACTED]")
                                            and "\n" not in s))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(_valid.map(lambda v: ("valid", v)), _json.map(lambda v: ("any", v)),
                          st.text(max_size=30).map(lambda v: ("raw", v))), max_size=12))
def test_property_transcript_never_crashes_and_keeps_valid_lines(items):
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "x.jsonl"
        with open(f, "w", encoding="utf-8") as fh:
            for kind, v in items:
                fh.write((v.replace("\n", " ") if kind == "raw" else json.dumps(v)) + "\n")
            fh.write('{"role": "us')  # truncated tail
        out = ADAPTER.parse_source(f)
        texts = [e.get("text") for s in out.sessions for e in s.events]
        for kind, v in items:
            if kind == "valid":
                t = v["message"]["content"][0]["text"]
                assert any(t in (x or "") for x in texts)


# -- state.vscdb (synthetic) --------------------------------------------------------------------

CID = "c0ffee00-0000-4000-8000-000000000001"


def _kv(conn, key, value):
    conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)",
                 (key, value if isinstance(value, (str, bytes)) else json.dumps(value)))


def _make_vscdb(path: Path, *, wal: bool = False) -> apsw.Connection:
    """A synthetic global state.vscdb with one composer (schema as documented, _v 3)."""
    conn = apsw.Connection(str(path))
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
    conn.execute("CREATE TABLE cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
    bubbles = ["b1", "b2", "b3", "b4", "b5", "b6"]
    _kv(conn, f"composerData:{CID}", {
        "composerId": CID, "_v": 3, "name": "Rename the helper", "createdAt": 1760000000000,
        "lastUpdatedAt": 1760000060000, "modelConfig": {"modelName": "claude-4.5-sonnet"},
        "workspaceIdentifier": {"id": "w", "uri": {"fsPath": "/home/u/proj"}},
        "fullConversationHeadersOnly": [{"bubbleId": b, "type": 1 if b == "b1" else 2}
                                        for b in bubbles + ["b_missing"]]})
    _kv(conn, f"bubbleId:{CID}:b1", {"bubbleId": "b1", "type": 1, "text": "rename foo to bar",
                                     "createdAt": "2025-10-09T08:53:20.000Z"})
    _kv(conn, f"bubbleId:{CID}:b2", {"bubbleId": "b2", "type": 2, "text": "Reading the file.",
                                     "thinking": {"text": "need to see util.py"},
                                     "createdAt": "2025-10-09T08:53:21.000Z"})
    _kv(conn, f"bubbleId:{CID}:b3", {"bubbleId": "b3", "type": 2, "capabilityType": 15,
                                     "createdAt": "2025-10-09T08:53:22.000Z",
                                     "toolFormerData": {
        "tool": 5, "name": "read_file", "toolCallId": "toolu_1", "status": "completed",
        "rawArgs": json.dumps({"target_file": "src/util.py", "startLineOneIndexed": 10}),
        "result": json.dumps({"contents": "def foo():\n    return 1\n"})}})
    _kv(conn, f"bubbleId:{CID}:b4", {"bubbleId": "b4", "type": 2, "capabilityType": 15,
                                     "createdAt": "2025-10-09T08:53:23.000Z",
                                     "toolFormerData": {
        "tool": 7, "name": "edit_file", "toolCallId": "toolu_2", "status": "completed",
        "rawArgs": json.dumps({"target_file": "src/util.py", "instructions": "rename",
                               "code_edit": "def bar():\n// ... existing code ..."}),
        "result": json.dumps({"diff": {"chunks": [{
            "diffString": " # helpers\n-def foo():\n+def bar():\n     return 1\n",
            "oldStart": 9, "newStart": 9, "oldLines": 3, "newLines": 3,
            "linesAdded": 1, "linesRemoved": 1}]}})}})
    _kv(conn, f"bubbleId:{CID}:b5", {"bubbleId": "b5", "type": 2, "createdAt":
                                     "2025-10-09T08:53:24.000Z", "toolFormerData": {
        "name": "run_terminal_cmd", "toolCallId": "toolu_3", "status": "completed",
        "rawArgs": json.dumps({"command": "pytest -q"}),
        "result": json.dumps({"output": "1 passed\n", "exitCode": 0})}})
    _kv(conn, f"bubbleId:{CID}:b6", {"bubbleId": "b6", "type": 2, "createdAt":
                                     "2025-10-09T08:53:25.000Z", "toolFormerData": {
        "name": "search_replace", "toolCallId": "toolu_4", "status": "error",
        "rawArgs": json.dumps({"file_path": "src/x.py", "old_string": "a", "new_string": "b"}),
        "error": "old_string not found"}})
    _kv(conn, "bubbleId:other:zz", {"type": 1, "text": "another composer's bubble"})
    return conn


def test_vscdb_golden(tmp_path, monkeypatch, golden_compare):
    _make_vscdb(tmp_path / "state.vscdb").close()
    monkeypatch.chdir(tmp_path)
    out = ADAPTER.parse_source(Path("state.vscdb"))
    assert out.errors == []
    golden_compare(GOLDEN / "vscdb_synthetic.jsonl", _dump(out.sessions))
    [s] = out.sessions
    meta, *evs = s.events
    assert (s.key, meta["label"], meta["model"], meta["cwd"]) == (
        CID, "Rename the helper", "claude-4.5-sonnet", "/home/u/proj")
    assert meta["t"] == "2025-10-09T08:53:20.000Z" and meta["schema_version"] == 3
    assert meta["coverage"]["reasons"] == ["1 bubble(s) listed by the composer are missing"]
    [read] = [e for e in evs if e["k"] == "code.read"]
    assert read["range"] == [10, 11] and read["rel"] == "src/util.py"
    [edit] = [e for e in evs if e["k"] == "code.edit"]
    assert edit["before_range"] == [10, 10] and edit["after_range"] == [10, 10]
    assert (edit["before_text"], edit["after_text"]) == ("def foo():\n", "def bar():\n")
    shell = [e for e in evs if e["k"] == "tool.result" and e["tool"] == "run_terminal_cmd"]
    assert shell[0]["stdout"] == "1 passed\n" and shell[0]["exit"] == 0
    failed = [e for e in evs if e.get("call_id") == "toolu_4"]
    assert [e["k"] for e in failed] == ["tool.call", "tool.result"]  # no code.edit
    assert failed[1]["stderr"] == "old_string not found"
    assert [e["text"] for e in evs if e.get("reasoning")] == ["need to see util.py"]


def test_vscdb_incremental(tmp_path):
    db = tmp_path / "state.vscdb"
    conn = _make_vscdb(db)
    keys, cur = ADAPTER.changed_since(db, None)
    assert keys == [CID, "other"]
    assert ADAPTER.changed_since(db, cur) == ([], cur)
    _kv(conn, f"bubbleId:{CID}:b2", {"bubbleId": "b2", "type": 2, "text": "rewritten"})
    keys, cur2 = ADAPTER.changed_since(db, cur)
    assert keys == [CID] and cur2["rowid"] > cur["rowid"]
    out = ADAPTER.parse_source(db, only={CID})
    assert [s.key for s in out.sessions] == [CID]
    assert "rewritten" in [e.get("text") for e in out.sessions[0].events]
    assert ADAPTER.parse_source(db, only={"nope"}).sessions == []


def test_vscdb_reader_never_blocks_the_editor(tmp_path, monkeypatch):
    db = tmp_path / "state.vscdb"
    editor = _make_vscdb(db, wal=True)
    editor.setbusytimeout(0)
    editor.execute("BEGIN IMMEDIATE")
    _kv(editor, f"bubbleId:{CID}:b7", {"type": 1, "text": "uncommitted"})
    [s] = ADAPTER.parse_source(db).sessions  # reads while the editor holds its write lock
    assert "uncommitted" not in [e.get("text") for e in s.events]
    editor.execute("COMMIT")  # and the editor's commit is not blocked by the reader
    # exclusive locking (rollback journal): lock-free retry, flagged in coverage
    db2 = tmp_path / "locked.vscdb"
    _make_vscdb(db2).close()
    locker = apsw.Connection(str(db2))
    locker.execute("PRAGMA locking_mode=EXCLUSIVE")
    locker.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(ADAPTER, "busy_timeout_ms", 50)
    try:
        [s] = ADAPTER.parse_source(db2).sessions
        assert sqlite_store.IMMUTABLE_REASON in s.events[0]["coverage"]["reasons"]
    finally:
        locker.execute("ROLLBACK")
        locker.close()


def test_vscdb_malformed_values_and_workspace_db(tmp_path):
    db = tmp_path / "state.vscdb"
    conn = _make_vscdb(db)
    _kv(conn, "composerData:broken", "{nope")
    _kv(conn, f"bubbleId:{CID}:b3", b"\xff\xfe not json")
    conn.close()
    out = ADAPTER.parse_source(db)
    assert sorted(e["error"]["message"].split(":")[0] for e in out.errors) == [
        "bubbleId", "composerData"]
    assert [s.key for s in out.sessions] == [CID]  # the rest still parsed
    ws = tmp_path / "ws.vscdb"
    apsw.Connection(str(ws)).execute("CREATE TABLE ItemTable (key TEXT, value BLOB)")
    assert ADAPTER.parse_source(ws).sessions == [] and ADAPTER.parse_source(ws).errors == []


def test_default_paths():
    paths = [str(p) for p in ADAPTER.default_paths()]
    assert str(Path.home() / ".config/Cursor/User/globalStorage/state.vscdb") in paths
    assert str(Path.home() / ".cursor/projects") in paths
