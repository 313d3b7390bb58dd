"""The tape reader's LRU held to a lower budget while a pass that reads each tape once runs
(``reader.capped``: the ingest's lineage pass), and its own budget back afterwards."""

from __future__ import annotations

import pytest

from engram.tape import reader, write_tape

META = {"k": "meta", "t": "2026-01-01T00:00:00Z", "harness": "claude_code", "session": "s1"}


@pytest.fixture
def lru(monkeypatch):
    monkeypatch.delenv(reader.ENV_CACHE_MB, raising=False)
    monkeypatch.setattr(reader, "_lru", type(reader._lru)())
    monkeypatch.setattr(reader, "_lru_bytes", 0)
    monkeypatch.setattr(reader, "_caps", [])
    return reader


def _tapes(tmp_path, n: int, size: int):
    out = []
    for i in range(n):
        d = tmp_path / f"t{i}"
        d.mkdir()
        ev = {"k": "msg.in", "t": "2026-01-01T00:00:01Z", "text": f"{i} " + "x" * size}
        out.append(write_tape(d, [dict(META, session=f"s{i}"), ev]).path)
    return out


def test_capped_bounds_the_lru_and_gives_the_budget_back(tmp_path, lru):
    paths = _tapes(tmp_path, 12, 20_000)
    full = [lru.raw_lines_cached(p) for p in paths[:4]]   # within the default budget: all kept
    assert len(lru._lru) == 4 and lru._lru_bytes > 80_000
    with lru.capped(50_000):
        assert lru.budget() == 50_000
        assert lru._lru_bytes <= 50_000 and len(lru._lru) == 2   # evicted down to the cap now
        for p in paths:
            lines = lru.raw_lines_cached(p)
            assert lru._lru_bytes <= 50_000   # never more than the cap while it holds
            assert lines == tuple(reader.read_raw(p).split(b"\n"))   # the same lines, capped or not
        with lru.capped(1 << 30):   # a nested, larger cap does not raise the outer one
            assert lru.budget() == 50_000
        assert lru.budget() == 50_000
    assert lru.budget() == lru.cache_bytes() == reader.CACHE_MB << 20
    for p in paths:
        lru.raw_lines_cached(p)
    assert len(lru._lru) == 12   # the whole budget again
    assert lru.raw_lines_cached(paths[0]) == full[0]


def test_capped_to_nothing_keeps_the_last_tape_and_reads_right(tmp_path, lru):
    paths = _tapes(tmp_path, 3, 1_000)
    with lru.capped(0):
        for p in paths + paths:
            assert b'"k":"meta"' in lru.raw_lines_cached(p)[0]
            assert len(lru._lru) == 1
    assert lru._caps == []


def test_capped_is_undone_on_error(lru):
    with pytest.raises(RuntimeError), lru.capped(10):
        raise RuntimeError("boom")
    assert lru._caps == [] and lru.budget() == reader.CACHE_MB << 20


def test_the_lineage_pass_runs_capped(monkeypatch, lru):
    """``derive.after_ingest`` runs under ``capped(TAPE_CACHE_BYTES)`` and restores the budget."""
    import apsw

    from engram.lineage import derive

    seen = []
    monkeypatch.setattr(derive, "_after_ingest", lambda conn, cache, stats: seen.append(lru.budget()))
    conn = apsw.Connection(":memory:")
    assert derive.after_ingest(conn)["tapes"] == 0
    assert seen == [min(derive.TAPE_CACHE_BYTES, lru.cache_bytes())]
    assert lru._caps == []


def test_caps_of_two_threads_ending_out_of_order_give_the_budget_back(lru):
    """Two passes capped at once (on two threads) may end in either order: the budget is the
    lowest cap still held, and the whole budget once none is."""
    a, b = lru.capped(100), lru.capped(200)
    a.__enter__()
    b.__enter__()
    assert lru.budget() == 100
    a.__exit__(None, None, None)  # the first one ends first
    assert lru.budget() == 200
    b.__exit__(None, None, None)
    assert lru._caps == [] and lru.budget() == reader.CACHE_MB << 20
