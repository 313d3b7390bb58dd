"""The rows the lineage walk reads: the edges a walk at a confidence floor may follow are chosen in
SQLite (the others never reach Python), and a tape's first event is one index probe. Both must
give exactly what the plain formulations give: the same rows in the same order, the same walks."""

from __future__ import annotations

import pytest
from claude_log import run_json
from test_lineage import RETRY, _parser_history

from engram.engine import Engine
from engram.lineage import rules
from engram.query import walk
from engram.tape import writer

PLAIN_FIRST = "SELECT tape, id, min(ofs) FROM events GROUP BY tape"


@pytest.fixture
def indexed(world, capsys):
    """A real index with edges of every sort: a rewritten parser (edit chain), a retry helper read
    by more sessions than the fan-out and then reshaped (reads, low-confidence edges), and an
    agent-declared link below the floor (a tape written directly, as another source would)."""
    w = world
    _parser_history(w, "0031")
    w.session(session_id="aaaa0032-0000-0000-0000-000000000001").user("retry helper") \
        .write("net.py", RETRY).save()
    for i in range(rules.MAX_FANOUT + 3):
        w.session(name=f"reader-{i:03d}").user(f"review the retry helper ({i})").read("net.py") \
            .say("Looks fine.").save()
    new = RETRY.replace("delay * 2", "delay * 3").replace("return fn()", "return fn(attempt)")
    w.session(session_id="bbbb0032-0000-0000-0000-000000000002").user("slower backoff") \
        .edit("net.py", RETRY, new).save()
    w.checkout()
    new_code = ("async def with_retries(call, policy):\n    async for attempt in policy:\n"
                "        with attempt:\n            return await call()\n")
    t = "2026-01-05T10:00:00.000Z"
    writer.write_tape(w.root / ".engram" / "tapes", [
        {"t": t, "k": "meta", "harness": "manual", "session": "link-0032", "cwd": str(w.root),
         "tier": "agent", "label": "port retry", "coverage": {"grade": "full", "reasons": []}},
        {"t": t, "k": "msg.in", "text": "port retry_with_backoff to the async policy API"},
        {"t": t, "k": "code.edit", "file": w.path("aio.py"), "rel": "aio.py", "before_range": [1, 0],
         "after_range": [1, 4], "before_text": "", "after_text": new_code},
        {"t": t, "k": "span.link", "from_file": w.path("net.py"), "from_range": [1, 11],
         "to_file": w.path("aio.py"), "to_range": [1, 4], "note": "rewrote retry_with_backoff"}])
    (w.root / "aio.py").write_text(new_code)
    run_json(capsys, "ingest", "--seal")
    eng = Engine(w.root)
    try:  # the agent link is below the floor: a walk follows it all the same
        assert eng.conn().execute("SELECT count(*) FROM edges WHERE agent_link AND confidence < 0.5"
                                  ).fetchone()[0] >= 1
    finally:
        eng.close()
    return w


def _kept(row, floor: float) -> bool:
    """The walk's own test of an edge row at ``floor`` before any side is considered."""
    return bool(row[5]) or (not row[6] and row[2] >= floor)


def test_edges_at_a_floor_are_the_plain_rows_it_may_follow(indexed):
    eng = Engine(indexed.root)
    try:
        conn = eng.conn()
        ids = [r[0] for r in conn.execute("SELECT DISTINCT from_event FROM edges")] + [10 ** 9]
        plain = dict(walk._edges_from(conn, ids))
        assert sum(len(v) for v in plain.values()) > 10
        dropped = 0
        for floor in (0.0, 0.5, 0.9, 1.0):
            got = walk._edges_from(conn, ids, floor)
            for i in ids:
                want = [r for r in plain[i] if _kept(r, floor)]
                assert got[i] == want  # the same rows, in the same order
                dropped += len(plain[i]) - len(want)
        assert dropped > 0  # some rows were left in SQLite (the test compares something)
    finally:
        eng.close()


@pytest.mark.parametrize("opts", [{}, {"min_confidence": 0.9}, {"all": True},
                                  {"min_confidence": 0.2, "max_fanout": 3}])
def test_walks_with_the_rows_filtered_in_sqlite_are_unchanged(indexed, monkeypatch, opts):
    """Every walk from every edge end, on the filtered rows and (a fresh connection) on all the
    rows filtered in Python alone: identical answers."""
    ends = "SELECT from_event FROM edges UNION SELECT to_event FROM edges ORDER BY 1"

    def walks():
        eng = Engine(indexed.root)
        try:
            conn = eng.conn()
            ids = [r[0] for r in conn.execute(ends)]
            return {i: walk.walk(conn, {i: 1.0}, **opts) for i in ids} | {
                "all seeds": walk.walk(conn, {i: 0.5 + (i % 5) / 10 for i in ids}, **opts)}
        finally:
            eng.close()

    filtered = walks()
    plain_edges = walk._edges_from
    monkeypatch.setattr(walk, "_edges_from", lambda conn, events, floor=None: plain_edges(conn, events))
    assert walks() == filtered
    assert any(out["lineage"] for out in filtered.values())


def test_first_events_are_the_lowest_offsets(indexed):
    eng = Engine(indexed.root)
    try:
        conn = eng.conn()
        want = {t: i for t, i, _o in conn.execute(PLAIN_FIRST)}
        tapes = [r[0] for r in conn.execute("SELECT id FROM tapes")]
        assert len(want) > rules.MAX_FANOUT
        got = walk._first_events(conn, tapes + [10 ** 9])  # a tape row that does not exist: left out
        assert got == want
    finally:
        eng.close()
