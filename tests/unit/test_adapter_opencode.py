"""OpenCode adapter: SQLite store and JSON storage tree.

Fixtures in tests/data/harness/opencode/ are **synthetic** samples of the two store layouts
(see SOURCES.md there). Databases built inside these tests are synthetic too, written from the
documented schema (``sqlite/gitai__schema.sql`` + the message-v2 part shapes).
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import apsw
import pytest

from engram.adapters import base, sqlite_store, unified_diff
from engram.adapters.opencode import ADAPTER, strip_read_output
from engram.errors import UnsupportedLog

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("tests/data/harness/opencode")
GOLDEN = ROOT / "tests/golden/tapes/opencode"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # relative source paths keep the golden tapes machine-independent


def _dump(sessions) -> str:
    return "".join(json.dumps(ev, sort_keys=True, ensure_ascii=False) + "\n"
                   for s in sessions for ev in s.events)


def _kinds(events):
    return [e["k"] for e in events]


# -- fixtures ---------------------------------------------------------------------------------


def test_sqlite_fixture_golden(golden_compare):
    out = ADAPTER.parse_source(DATA / "sqlite/gitai__opencode.db")
    assert out.errors == []
    golden_compare(GOLDEN / "sqlite_gitai.jsonl", _dump(out.sessions))
    [s] = out.sessions
    assert s.key == "test-session-123"
    meta, *evs = s.events
    assert meta["harness_version"] == "1.0" and meta["model"] == "gpt-5"
    assert meta["cwd"] == "/Users/test/project" and meta["label"] == "Test Session"
    assert meta["parent_session"] == "parent-session-456" and meta["store"] == "sqlite"
    assert meta["coverage"] == {"grade": "full", "reasons": [], "redactions": 0}
    assert meta["t"] == "2024-01-28T16:37:10.000Z"
    assert _kinds(evs) == ["msg.in", "msg.out", "tool.call", "tool.result", "code.edit", "msg.out"]
    assert evs[0]["text"] == "Please update index.ts using sqlite transcript data"
    edit = evs[4]
    assert edit["file"] == "/Users/test/project/index.ts" and edit["rel"] == "index.ts"
    assert edit["after_text"].startswith("// sqlite path") and edit["range_known"] is False
    assert evs[3]["stdout"] == "Edit applied" and evs[3]["call_id"] == "call-sql-001"


def test_storage_fixture_golden(golden_compare):
    out = ADAPTER.parse_source(DATA / "storage_v2")
    assert out.errors == []
    golden_compare(GOLDEN / "storage_v2.jsonl", _dump(out.sessions))
    large, small = out.sessions
    assert (large.key, small.key) == ("s_stage0_large", "s_stage0_small")
    assert small.events[0]["label"] == "OpenCode Small" and small.events[0]["store"] == "json"
    assert [e["text"] for e in small.events if e["k"].startswith("msg")] == ["Hello",
                                                                           "Found 2 files."]
    res = [e for e in large.events if e["k"] == "tool.result"]
    assert res[0]["exit"] == 1 and "No such file or directory" in res[0]["stdout"]
    reasoning = [e for e in large.events if e.get("reasoning")]
    assert [e["text"] for e in reasoning] == ["Investigating failing command."]
    err = [e for e in large.events if e.get("error")]
    assert err[0]["text"] == "MessageAbortedError: The operation was aborted."
    assert large.events[0]["harness_version"] == "1.3.17"
    assert all(s.events[0]["coverage"]["grade"] == "full" for s in out.sessions)


def test_parse_is_deterministic():
    a = ADAPTER.parse_source(DATA / "storage_v2")
    b = ADAPTER.parse_source(DATA / "storage_v2")
    assert _dump(a.sessions) == _dump(b.sessions)


def test_discover_prefers_database(tmp_path):
    root = tmp_path / "opencode"
    shutil.copytree(DATA / "storage_v2", root / "storage")
    assert list(ADAPTER.discover(root)) == [root / "storage"]
    shutil.copy(DATA / "sqlite/gitai__opencode.db", root / "opencode.db")
    (root / "opencode.db-wal").write_bytes(b"")
    assert list(ADAPTER.discover(root)) == [root / "opencode.db"]
    assert list(ADAPTER.discover(root / "storage")) == [root / "storage"]
    # the data root itself is a valid source for the tree
    out = ADAPTER.parse_source(tmp_path / "opencode")
    assert [s.key for s in out.sessions] == ["s_stage0_large", "s_stage0_small"]


def test_default_paths_honour_xdg(monkeypatch, tmp_path):
    assert ADAPTER.default_paths() == [Path.home() / ".local/share/opencode"]
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert ADAPTER.default_paths() == [tmp_path / "opencode"]


# -- a synthetic database with every part shape -------------------------------------------------

SCHEMA = (DATA / "sqlite/gitai__schema.sql")

DIFF = """Index: /w/app.py
===================================================================
--- /w/app.py
+++ /w/app.py
@@ -1,4 +1,4 @@
 import os
-x = 1
+x = 2
 y = 3
 z = 4
"""


def _make_db(path: Path, *, wal: bool = False, version: str = "1.3.0") -> apsw.Connection:
    conn = apsw.Connection(str(path))
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    ddl = SCHEMA.read_text().split("INSERT INTO")[0]
    conn.execute(ddl)
    conn.execute("CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, parent_id "
                 "TEXT, slug TEXT NOT NULL, directory TEXT NOT NULL, title TEXT NOT NULL, version "
                 "TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL)")
    conn.execute("INSERT INTO session VALUES ('ses_a','p',NULL,'a','/w',"
                 "'New session - 2026-01-01T00:00:00.000Z',?,1000,1000)", (version,))
    msg(conn, "msg_1", "ses_a", 1000, {"role": "user", "time": {"created": 1000}})
    msg(conn, "msg_2", "ses_a", 2000, {"role": "assistant", "modelID": "claude-x",
                                       "time": {"created": 2000}})
    part(conn, "prt_1", "msg_1", "ses_a", 1001, {"type": "text", "text": "fix x in app.py"})
    tool = lambda status, **kw: {"type": "tool", "tool": kw.pop("tool"), "callID": kw.pop("cid"),
                                 "state": {"status": status, **kw}}
    part(conn, "prt_2", "msg_2", "ses_a", 2001, tool(
        "completed", tool="read", cid="c1", input={"filePath": "/w/app.py", "offset": 0},
        output="<file>\n00001| import os\n00002| x = 1\n00003| y = 3\n\n"
               "(File has more lines. Use 'offset' parameter to read beyond line 3)\n</file>",
        time={"start": 2001, "end": 2002}))
    part(conn, "prt_3", "msg_2", "ses_a", 2003, tool(
        "completed", tool="edit", cid="c2",
        input={"filePath": "/w/app.py", "oldString": "x = 1", "newString": "x = 2"},
        output="", metadata={"diff": DIFF}, time={"start": 2003, "end": 2004}))
    part(conn, "prt_4", "msg_2", "ses_a", 2005, tool(
        "completed", tool="write", cid="c3", input={"filePath": "/w/new.py", "content": "a\nb\n"},
        output="", metadata={"filediff": {"file": "/w/new.py", "before": "a\n", "after": "a\nb\n"}},
        time={"start": 2005, "end": 2006}))
    part(conn, "prt_5", "msg_2", "ses_a", 2007, tool(
        "completed", tool="edit", cid="c4",
        input={"filePath": "/w/new.py", "oldString": "b", "newString": "B"},
        output="", metadata={}, time={"start": 2007, "end": 2008}))
    part(conn, "prt_6", "msg_2", "ses_a", 2009, tool(
        "error", tool="bash", cid="c5", input={"command": "false"}, error="exit 1",
        time={"start": 2009, "end": 2010}))
    part(conn, "prt_7", "msg_2", "ses_a", 2011, tool(
        "running", tool="bash", cid="c6", input={"command": "sleep 9"}, time={"start": 2011}))
    part(conn, "prt_8", "msg_2", "ses_a", 2012, {"type": "reasoning", "text": "think",
                                                  "time": {"start": 2012}})
    return conn


def msg(conn, mid, sid, t, data):
    conn.execute("INSERT INTO message VALUES (?,?,?,?,?)", (mid, sid, t, t, json.dumps(data)))


def part(conn, pid, mid, sid, t, data):
    conn.execute("INSERT INTO part VALUES (?,?,?,?,?,?)",
                 (pid, mid, sid, t, t, data if isinstance(data, str) else json.dumps(data)))


def test_synthetic_db_part_shapes(tmp_path):
    db = tmp_path / "opencode.db"
    _make_db(db).close()
    out = ADAPTER.parse_source(db)
    assert out.errors == []
    [s] = out.sessions
    meta, *evs = s.events
    assert meta["label"] == "fix x in app.py"  # the default title is not a label
    assert meta["model"] == "claude-x"
    reads = [e for e in evs if e["k"] == "code.read"]
    assert reads == [base.ev_read(reads[0]["t"], "/w/app.py", 1, "import os\nx = 1\ny = 3\n",
                                  cwd="/w", tool="read", call_id="c1", part_id="prt_2")]
    edits = [e for e in evs if e["k"] == "code.edit"]
    # unified diff → exactly the changed line, at its real position
    assert edits[0]["before_range"] == [2, 2] and edits[0]["after_range"] == [2, 2]
    assert (edits[0]["before_text"], edits[0]["after_text"]) == ("x = 1\n", "x = 2\n")
    # filediff before/after → inserted line 2
    assert edits[1]["rel"] == "new.py" and edits[1]["before_range"] == [2, 1]
    assert edits[1]["after_text"] == "b\n"
    # oldString/newString located in the content known from the previous write
    assert edits[2]["before_range"] == [2, 2] and edits[2]["after_text"] == "B\n"
    assert "range_known" not in edits[2]
    errs = [e for e in evs if e["k"] == "tool.result" and e.get("status") == "error"]
    assert errs[0]["stderr"] == "exit 1" and errs[0]["stdout"] is None
    running = [e for e in evs if e.get("call_id") == "c6"]
    assert _kinds(running) == ["tool.call"]  # no result yet
    assert evs[-1] == {"t": "1970-01-01T00:00:02.012Z", "k": "msg.out", "text": "think",
                       "reasoning": True, "part_id": "prt_8"}


def test_malformed_rows_are_reported_and_the_rest_parsed(tmp_path):
    db = tmp_path / "opencode.db"
    conn = _make_db(db)
    part(conn, "prt_9", "msg_2", "ses_a", 2013, '{"type": "text", "text": "trunc')
    part(conn, "prt_10", "msg_2", "ses_a", 2014, {"type": "text", "text": "after the junk"})
    conn.close()
    out = ADAPTER.parse_source(db)
    assert len(out.errors) == 1
    e = out.errors[0]["error"]
    assert e["code"] == "E_ADAPTER_PARSE" and e["path"] == str(db) and "prt_9" in e["message"]
    assert out.sessions[0].events[-1]["text"] == "after the junk"


def test_unknown_shapes_degrade_or_fail_strict(tmp_path):
    db = tmp_path / "opencode.db"
    conn = _make_db(db, version="9.0.0")
    part(conn, "prt_9", "msg_2", "ses_a", 2013, {"type": "hologram", "text": "?"})
    conn.close()
    cov = ADAPTER.parse_source(db).sessions[0].events[0]["coverage"]
    assert cov["grade"] == "degraded"
    assert cov["reasons"] == ["opencode 9.0.0 is outside the tested range 0.1.0..1.3",
                              "unknown part type 'hologram'"]
    with pytest.raises(UnsupportedLog):
        ADAPTER.parse_source(db, mode="strict")


def test_not_an_opencode_database(tmp_path):
    db = tmp_path / "other.db"
    apsw.Connection(str(db)).execute("CREATE TABLE t(x)")
    out = ADAPTER.parse_source(db)
    assert out.sessions == [] and "no table message, part, session" in out.errors[0]["error"][
        "message"]
    with pytest.raises(UnsupportedLog):
        ADAPTER.parse_source(db, mode="strict")


# -- incremental ------------------------------------------------------------------------------


def test_changed_since_and_only(tmp_path):
    db = tmp_path / "opencode.db"
    conn = _make_db(db)
    conn.execute("INSERT INTO session VALUES ('ses_b','p',NULL,'b','/w','B','1.3.0',1500,1500)")
    msg(conn, "msg_b", "ses_b", 1500, {"role": "user", "time": {"created": 1500}})
    part(conn, "prt_b", "msg_b", "ses_b", 1501, {"type": "text", "text": "other session"})
    keys, cur = ADAPTER.changed_since(db, None)
    assert keys == ["ses_a", "ses_b"] and cur["time_updated"] == 2012
    assert ADAPTER.changed_since(db, cur) == ([], cur)
    # a row in the same millisecond as the cursor is not lost; a newer one is seen
    part(conn, "prt_b2", "msg_b", "ses_b", 2012, {"type": "text", "text": "same ms"})
    keys, cur2 = ADAPTER.changed_since(db, cur)
    assert keys == ["ses_b"]
    assert ADAPTER.changed_since(db, cur2)[0] == []
    out = ADAPTER.parse_source(db, only=set(keys))
    assert [s.key for s in out.sessions] == ["ses_b"]
    assert out.sessions[0].events[-1]["text"] == "same ms"
    assert ADAPTER.parse_source(db, only=set()).sessions == []


def test_changed_since_storage_tree(tmp_path):
    st = tmp_path / "storage"
    shutil.copytree(DATA / "storage_v2", st)
    keys, cur = ADAPTER.changed_since(st, None)
    assert keys == ["s_stage0_large", "s_stage0_small"]
    assert ADAPTER.changed_since(st, cur)[0] == []
    p = st / "part/m_assistant_small/003.json"
    p.write_text(json.dumps({"id": "p_new", "type": "text", "text": "more"}))
    import os
    os.utime(p, ns=(cur["mtime_ns"] + 10, cur["mtime_ns"] + 10))
    keys, _ = ADAPTER.changed_since(st, cur)
    assert keys == ["s_stage0_small"]


# -- never lock the owner out --------------------------------------------------------------------


def test_reader_does_not_block_a_concurrent_writer(tmp_path):
    db = tmp_path / "opencode.db"
    writer = _make_db(db, wal=True)
    writer.setbusytimeout(0)  # any lock held by the reader would make the writer fail at once
    stop = threading.Event()
    results, failures = [], []

    def reader():
        while not stop.is_set():
            try:
                results.append(len(ADAPTER.parse_source(db).sessions[0].events))
            except Exception as e:  # pragma: no cover - reported below
                failures.append(e)

    th = threading.Thread(target=reader)
    th.start()
    try:
        for i in range(200):
            writer.execute("BEGIN IMMEDIATE")
            part(writer, f"prt_w{i:03d}", "msg_2", "ses_a", 3000 + i, {"type": "text",
                                                                       "text": f"w{i}"})
            writer.execute("COMMIT")
        # a writer holding an open write transaction does not block the reader either
        writer.execute("BEGIN IMMEDIATE")
        part(writer, "prt_pending", "msg_2", "ses_a", 9000, {"type": "text", "text": "pending"})
        out = ADAPTER.parse_source(db)
        assert "pending" not in [e.get("text") for e in out.sessions[0].events]
        assert out.sessions[0].events[-1]["text"] == "w199"
        writer.execute("COMMIT")
    finally:
        stop.set()
        th.join()
    assert failures == [] and results
    assert ADAPTER.parse_source(db).sessions[0].events[-1]["text"] == "pending"
    assert not (tmp_path / "opencode.db-journal").exists()


def test_locked_database_is_read_lock_free_and_says_so(tmp_path, monkeypatch):
    db = tmp_path / "opencode.db"
    _make_db(db).close()  # rollback-journal mode: an exclusive lock shuts readers out
    locker = apsw.Connection(str(db))
    locker.execute("PRAGMA locking_mode=EXCLUSIVE")
    locker.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(ADAPTER, "busy_timeout_ms", 50)
    try:
        out = ADAPTER.parse_source(db)
        assert out.errors == []
        cov = out.sessions[0].events[0]["coverage"]
        assert cov["grade"] == "degraded" and cov["reasons"] == [sqlite_store.IMMUTABLE_REASON]
    finally:
        locker.execute("ROLLBACK")
        locker.close()


def test_unreadable_store_is_a_clear_error(tmp_path):
    bad = tmp_path / "opencode.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    out = ADAPTER.parse_source(bad)
    assert out.sessions == []
    err = out.errors[0]["error"]
    assert err["code"] == "E_SOURCE_BUSY" and err["path"] == str(bad)
    assert "not an SQLite database" in err["message"] or "locked" in err["message"]


def test_storage_malformed_file(tmp_path):
    st = tmp_path / "storage"
    shutil.copytree(DATA / "storage_v2", st)
    (st / "part/m_assistant_small/001.json").write_text('{"id": "p_tool_1", "type": ')
    out = ADAPTER.parse_source(st)
    assert len(out.errors) == 1 and out.errors[0]["error"]["path"].endswith("001.json")
    small = out.sessions[1]
    assert [e["k"] for e in small.events] == ["meta", "msg.in", "msg.out"]


# -- helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("output,expected", [
    ("<file>\n00010| a\n00011| b\n\n(End of file - total 11 lines)\n</file>", ("a\nb\n", 10)),
    ("<path>/x</path>\n<type>file</type>\n<content>\n1: a\n2: b\n\n(End of file - total 2 lines)"
     "\n</content>", ("a\nb\n", 1)),
    ("     3→a\n     4→b", ("a\nb\n", 3)),
    ("File not found: /x", (None, None)),
])
def test_strip_read_output(output, expected):
    assert strip_read_output(output) == expected


def test_unified_diff_zero_context_and_git_headers():
    d = ("diff --git a/src/m.py b/src/m.py\n--- a/src/m.py\n+++ b/src/m.py\n@@ -5,0 +6,2 @@\n"
         "+x\n+y\ndiff --git a/n.py b/n.py\n--- a/n.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n")
    files = unified_diff.parse_unified(d)
    assert [f for f, _ in files] == ["src/m.py", "n.py"]
    [h] = files[0][1]
    assert (h["oldStart"], h["newStart"]) == (6, 6)
    [ev] = base.edits_from_hunks(None, "src/m.py", [h])
    assert ev["before_range"] == [6, 5] and ev["after_range"] == [6, 7]
    [ev] = base.edits_from_hunks(None, "n.py", files[1][1])
    assert ev["before_range"] == [1, 1] and ev["after_range"] == [1, 0]
    assert unified_diff.parse_unified("just some text") == []
