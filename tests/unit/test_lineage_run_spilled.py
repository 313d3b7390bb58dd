"""What a lineage run holds per edit kept in its spill file (``edges._Texts``), so that a long
session's run holds no more than a short one's: the node keys in groups with a first key each
held (``_KeyOrder``), the places' earlier rows past ``PLACE_ROWS_HELD`` bytes (``_PlaceCache``).
Each answers as the held form did, with or without a spill file, and a whole run writes the same
tables with everything spilled as with everything held."""

from __future__ import annotations

import bisect
import random

from claude_log import run_json
from test_lineage_bounded import _indexed, _tables
from test_lineage_key_order import _N, _key

from engram.lineage import edges
from engram.lineage.rules import _order


def test_grouped_keys_search_as_bisect(monkeypatch):
    rng = random.Random(38)
    for group in (1, 3, 64):
        monkeypatch.setattr(edges, "KEY_GROUP", group)
        texts = edges._Texts()
        try:
            for trial in range(60):
                keys = [_key(rng) for _ in range(rng.randrange(0, 200))]
                want = sorted(set(keys))
                for store in (texts, None):
                    got = edges._KeyOrder.of([_N(k) for k in keys], store)
                    assert len(got) == len(want)
                    assert [got[i] for i in range(len(got))] == want
                    for q in keys + [_key(rng) for _ in range(30)]:
                        assert got.left(q) == bisect.bisect_left(want, q), (group, trial, q)
                        assert got.right(q) == bisect.bisect_right(want, q), (group, trial, q)
            assert texts._spill is not None and texts._spill.size > 0   # (the groups were spilled)
        finally:
            texts.close()


def test_grouped_keys_held_without_a_spill_file(monkeypatch):
    monkeypatch.setattr(edges, "KEY_GROUP", 2)
    monkeypatch.setattr(edges._Texts, "_file", lambda self: None)
    keys = [("2026-11-27T10:00:0%dZ" % (i % 10), "t", i) for i in range(25)]
    got = edges._KeyOrder.of([_N(k) for k in keys], edges._Texts())
    assert all(isinstance(g, bytes) for g in got._groups)
    want = sorted(set(keys))
    assert [got.left(k) for k in keys] == [bisect.bisect_left(want, k) for k in keys]


def _rows(rng, n):
    times = [None, ""] + [f"2026-11-26T10:{m:02d}:{s:02d}Z" for m in range(3) for s in range(0, 60, 7)]
    rows = [(rng.randrange(1, 40), rng.choice(times), rng.randrange(0, 50), rng.randrange(0, 60),
             rng.choice(["t-a", "t-b"]), rng.randrange(30)) for _ in range(n)]
    rows.sort(key=lambda r: (r[1] or "", r[0]), reverse=True)
    return rows


def test_place_cache_spills_and_reads_back(monkeypatch):
    rng = random.Random(9)
    monkeypatch.setattr(edges, "PLACE_ROWS_HELD", 2_000)   # (a place or two held)
    monkeypatch.setattr(edges, "PLACE_ENTRY_BYTES", 0)
    monkeypatch.setattr(edges, "PLACE_SPILL_ROWS", 1)      # (every place with a row spilled)
    keys = sorted({_order("2026-11-26T10:01:00Z", "t-a", i) for i in range(30)})
    texts = edges._Texts()
    try:
        cache = edges._PlaceCache(texts)
        made = {}
        for p in range(12):
            made[p] = _rows(rng, rng.randrange(0, 60))
            cache.put(p, edges._PlaceRows(iter(made[p]), keys))
        assert cache._spilled and len(cache._held) < 12 and cache._bytes <= 2_000 + 60 * 40
        for p in list(range(12)) * 2:
            got, fresh = cache.get(p), edges._PlaceRows(iter(made[p]), keys)
            for j in range(len(keys)):
                assert list(got.earlier(5, 0, 30, j)) == list(fresh.earlier(5, 0, 30, j))
        assert cache.get("none") is None
    finally:
        texts.close()


def test_place_cache_lets_small_places_go(monkeypatch):
    """A place of fewer than ``PLACE_SPILL_ROWS`` rows is let go, not spilled (read from the
    index again when asked for); each held place counts ``PLACE_ENTRY_BYTES``, empty or not, so
    a session of many small places holds a bounded number of them."""
    monkeypatch.setattr(edges, "PLACE_ROWS_HELD", 10 * edges.PLACE_ENTRY_BYTES)
    texts = edges._Texts()
    try:
        cache = edges._PlaceCache(texts)
        for p in range(1_000):
            cache.put(p, edges._PlaceRows(iter([]), []))
            assert len(cache._held) <= 10
        assert not cache._spilled and texts._spill is None
        assert cache.get(3) is None and cache.get(999) is not None
    finally:
        texts.close()


def test_place_cache_holds_all_without_a_spill_file(monkeypatch):
    monkeypatch.setattr(edges, "PLACE_ROWS_HELD", 0)
    monkeypatch.setattr(edges, "PLACE_SPILL_ROWS", 0)     # (every place one to spill)
    monkeypatch.setattr(edges._Texts, "_file", lambda self: None)
    cache = edges._PlaceCache(edges._Texts())
    rows = {p: edges._PlaceRows(iter(_rows(random.Random(p), 20)), []) for p in range(5)}
    for p, r in rows.items():
        cache.put(p, r)
    assert all(cache.get(p) is r for p, r in rows.items())


def test_tables_as_with_everything_held(world, capsys, monkeypatch):
    whole, _answer = _indexed(world, capsys)      # (the defaults: little spilled on this history)
    monkeypatch.setattr(edges, "KEY_GROUP", 1)
    monkeypatch.setattr(edges, "PLACE_ROWS_HELD", 0)
    monkeypatch.setattr(edges, "PLACE_SPILL_ROWS", 1)
    spilled = []
    put = edges._PlaceCache.put

    def counted(self, key, rows):
        put(self, key, rows)
        spilled.append(len(self._spilled))

    monkeypatch.setattr(edges._PlaceCache, "put", counted)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert max(spilled) > 0 and _tables(world) == whole
    monkeypatch.setattr(edges, "PLACE_SPILL_ROWS", 1 << 30)   # every place let go, read again
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert _tables(world) == whole
    monkeypatch.setattr(edges._Texts, "_file", lambda self: None)   # every node, key and row held
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert _tables(world) == whole
