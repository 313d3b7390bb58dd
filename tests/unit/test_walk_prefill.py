"""The lineage walk's plans prepared ahead (``walk.prefill``, called by ``Engine.prefill_postings``
in the servers): walks afterwards are identical to walks that prepared their own plans, read no
lineage rows of their own, and a prefill stopped between batches goes on where it stopped."""

from __future__ import annotations

import apsw
import pytest
from test_walk_rows import indexed  # noqa: F401 - the fixture (a real index with edges of every sort)

from engram.engine import Engine
from engram.lineage import rules
from engram.query import walk

ENDS = "SELECT from_event FROM edges UNION SELECT to_event FROM edges ORDER BY 1"


def _walks(conn, ids, **opts) -> dict:
    return {i: walk.walk(conn, {i: 1.0}, **opts) for i in ids} | {
        "all seeds": walk.walk(conn, {i: 0.5 + (i % 5) / 10 for i in ids}, **opts)}


def _lineage_reads(conn: apsw.Connection) -> list[str]:
    """Record the statements that read lineage rows (edges, continuations, tombstones)."""
    seen: list[str] = []

    def trace(_cursor, sql, _bindings):
        if any(t in sql for t in ("FROM edges", "FROM continuations", "FROM tombstones")):
            seen.append(sql)
        return True

    conn.exec_trace = trace
    return seen


def test_a_prefill_always_asked_to_stop_still_finishes(indexed, monkeypatch):  # noqa: F811
    """Each call prepares one batch before it asks: a caller whose ``stop`` always says yes (a
    slow machine, where the bookkeeping alone outlasts a step) still gets there."""
    monkeypatch.setattr(walk, "PREFILL_BATCH", 3)
    eng = Engine(indexed.root)
    try:
        conn = eng.conn()
        calls = 1
        while walk.prefill(conn, 0.5, lambda: True) is None:
            calls += 1
            assert calls < 10_000
        assert calls > 2 and walk._Plans.of(conn, 0.5, False, rules.MAX_FANOUT).prefilled
    finally:
        eng.close()


@pytest.mark.parametrize("floor", [0.5, 0.2])
def test_walks_after_a_prefill_are_unchanged_and_read_no_lineage_rows(indexed, floor):  # noqa: F811
    eng = Engine(indexed.root)
    try:
        conn = eng.conn()
        ids = [r[0] for r in conn.execute(ENDS)]
        want = _walks(conn, ids, min_confidence=floor)
    finally:
        eng.close()
    eng = Engine(indexed.root)
    try:
        conn = eng.conn()
        ids = [r[0] for r in conn.execute(ENDS)]
        assert walk.prefill(conn, floor) is True
        assert walk.prefill(conn, floor) is True  # done: nothing read again
        reads = _lineage_reads(conn)
        got = _walks(conn, ids, min_confidence=floor)
        conn.exec_trace = None
        assert got == want
        assert any(out["lineage"] for out in got.values())
        assert reads == []  # every step, hop and tombstone was prepared
        # other options prepare their own plans, as before
        assert _walks(conn, ids, min_confidence=floor, all=True) == _walks_fresh(indexed, ids, all=True)
    finally:
        eng.close()


def _walks_fresh(w, ids, **opts) -> dict:
    eng = Engine(w.root)
    try:
        return _walks(eng.conn(), ids, **opts)
    finally:
        eng.close()


def test_a_stopped_prefill_goes_on_where_it_stopped(indexed, monkeypatch):  # noqa: F811
    monkeypatch.setattr(walk, "PREFILL_BATCH", 2)
    eng = Engine(indexed.root)
    try:
        conn = eng.conn()
        asked = 0

        def stop() -> bool:
            nonlocal asked
            asked += 1
            return asked % 3 == 0  # every third batch: a request came

        results = []
        while not results or results[-1] is None:
            results.append(walk.prefill(conn, 0.5, stop))
            assert len(results) < 1000
        assert results[-1] is True and None in results[:-1]
        ids = [r[0] for r in conn.execute(ENDS)]
        reads = _lineage_reads(conn)
        got = _walks(conn, ids, min_confidence=0.5)
        conn.exec_trace = None
        assert reads == []
        assert got == _walks_fresh(indexed, ids, min_confidence=0.5)
    finally:
        eng.close()


def test_a_prefill_that_would_not_fit_prepares_nothing(indexed, monkeypatch):  # noqa: F811
    monkeypatch.setattr(walk, "MAX_PLANS", 10)
    eng = Engine(indexed.root)
    try:
        conn = eng.conn()
        assert walk.prefill(conn, 0.5) is False
        plans = walk._Plans.of(conn, 0.5, False, rules.MAX_FANOUT)
        assert not plans._steps and not plans.prefilled
        conn.execute("BEGIN")
        try:
            assert walk.prefill(conn, 0.5) is False  # inside a transaction: nothing kept
        finally:
            conn.execute("COMMIT")
    finally:
        eng.close()


def test_the_engine_prefill_prepares_the_walk_at_its_floor(indexed):  # noqa: F811
    eng = Engine(indexed.root)
    try:
        eng.prefill_postings()
        conn = eng.conn()
        plans = walk._Plans.of(conn, eng.config.min_confidence, False, rules.MAX_FANOUT)
        assert plans.prefilled and plans._steps
    finally:
        eng.close()


def test_an_opened_files_read_ahead_ends_with_the_walks_plans(indexed):  # noqa: F811
    """``Engine.prefetch_steps`` (the editors' read-ahead at ``didOpen``) prepares the walk's
    plans after the file's own rows, in steps; later files find them there (no step at all)."""
    eng = Engine(indexed.root)
    try:
        text = (indexed.root / "net.py").read_text()
        steps = sum(1 for _ in eng.prefetch_steps(str(indexed.root / "net.py"), text))
        plans = walk._Plans.of(eng.conn(), eng.config.min_confidence, False, rules.MAX_FANOUT)
        assert plans.prefilled and plans._steps and steps > 1
        again = sum(1 for _ in eng.prefetch_steps(str(indexed.root / "aio.py"),
                                                  (indexed.root / "aio.py").read_text()))
        assert again <= steps
    finally:
        eng.close()


def test_the_mcp_servers_walk_read_ahead_prepares_the_loops_connection(indexed, monkeypatch):  # noqa: F811
    """``engram mcp`` prepares the walk's plans on the event loop's connection (where ``explain``
    runs), in steps that give the loop back: other work runs in between, and explains answer
    as before."""
    import asyncio

    from engram.mcp import server
    from engram.query import prefetch

    monkeypatch.setattr(walk, "PREFILL_BATCH", 2)
    monkeypatch.setattr(prefetch, "STEP_S", 0.0)  # a batch a step
    monkeypatch.chdir(indexed.root)
    want = _walks_fresh(indexed, [1, 2, 3], min_confidence=0.5)
    app = server.EngramMCP(indexed.root)
    try:
        ticks = 0

        async def other() -> None:  # the loop's other work (the calls)
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        async def main() -> None:
            t = asyncio.get_running_loop().create_task(other())
            await server._walk_ahead(app)
            t.cancel()

        asyncio.run(main())
        conn = app.engine.conn()
        plans = walk._Plans.of(conn, app.engine.config.min_confidence, False, rules.MAX_FANOUT)
        assert plans.prefilled and ticks > 2
        assert _walks(conn, [1, 2, 3], min_confidence=0.5) == want
    finally:
        app.close()
