"""The edges pass's compact state (``engram/lineage/edges.py``): the edits' texts kept in a spill
file and read back (``_Texts``), a place's earlier rows held as numpy columns (``_PlaceRows``), a
pass's refs ordered by time per block (``_ref_rows``, ``Match.linkable``'s rank filter). None may
change a row: each is checked against what it replaced."""

from __future__ import annotations

import bisect
import random

import numpy as np
from claude_log import run_json
from test_lineage_bounded import _indexed, _tables

from engram.lineage import edges
from engram.lineage.rules import _order


def test_texts_round_trip():
    store = edges._Texts()
    try:
        texts = [("", ""), ("a", ""), ("", "b"), ("déjà vu 😀\n" * 50, "x\ud800y"), ("\udfff", "é" * 3000)]
        where = [store.put(b, a) for b, a in texts]
        assert all(w is not None for w in where)
        for (b, a), w in zip(texts, where):
            assert store.get(w, 0) == b and store.get(w, 1) == a
    finally:
        store.close()


def test_spilled_texts_change_no_row(world, capsys, monkeypatch):
    whole, _answer = _indexed(world, capsys)      # (the nodes' texts spilled: the default)
    put = edges._Texts.put
    calls = []

    def held(self, before, after):
        calls.append(1)
        return None          # as when no spill file can be made: the nodes hold their texts

    monkeypatch.setattr(edges._Texts, "put", held)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert calls and _tables(world) == whole
    monkeypatch.setattr(edges._Texts, "put", put)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert _tables(world) == whole


def _old_filter(rows, eid, lo, hi, key):
    """What ``_location_only`` and ``_loc_rows`` kept before ``_PlaceRows``."""
    out = []
    for r in rows:
        if r[0] != eid and r[2] <= hi and max(r[2], r[3]) >= lo and not _order(r[1], r[4], r[5]) >= key:
            out.append((r[0], r[2], r[3]))
    return out


def test_place_rows_keep_what_the_tuples_kept():
    rng = random.Random(5)
    times = [None, ""] + [f"2026-11-26T10:{m:02d}:{s:02d}Z" for m in range(3) for s in range(0, 60, 7)]
    tapes = ["t-a", "t-b", "t-c"]
    for trial in range(40):
        nodes = sorted({_order(rng.choice(times), rng.choice(tapes), rng.randrange(30)) for _ in range(25)})
        rows = []
        for i in range(rng.randrange(0, 60)):
            s = rng.randrange(-3, 80)
            e = s + rng.randrange(-5, 20)
            if trial % 5 == 0 and i % 7 == 0:
                s = float(s) + 0.5          # not an int: held as Python objects, compared as Python does
            if trial % 9 == 0 and i % 5 == 0:
                e = (1 << 70)               # past int64
            rows.append((rng.randrange(1, 40), rng.choice(times), s, e, rng.choice(tapes), rng.randrange(30)))
        rows.sort(key=lambda r: (r[1] or "", r[0]), reverse=True)
        held = edges._PlaceRows(iter(rows), nodes)
        for key in nodes:
            j = bisect.bisect_left(nodes, key)
            for lo, hi in ((0, 10), (5, 5), (-10, 200), (40, 30), (3.5, 7.25), (0, 1 << 80)):
                eid = rng.randrange(1, 40)
                assert list(held.earlier(eid, lo, hi, j)) == _old_filter(rows, eid, lo, hi, key)


def test_linkable_rank_filter():
    groups = edges._Groups(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    blocks = np.array([2, 3, 5, 8, 13, 21], np.int64)
    passing = np.array([True, True, False, True, True, True])
    m = edges.Match(groups, 10, blocks, np.arange(6), np.arange(6), np.arange(6), passing)
    among = np.array([1, 3, 5, 8, 21, 34], np.int64)
    first = np.array([0, 4, 0, 2, 7, 0], np.int64)     # lowest rank of each block of ``among``
    assert [r[1] for r in m.linkable(among)] == [3, 8, 21]
    assert [r[1] for r in m.linkable(among, first, 5)] == [3, 8]
    assert [r[1] for r in m.linkable(among, first, 3)] == [8]
    assert [r[1] for r in m.linkable(among, first, 0)] == []
    assert m.linkable(np.zeros(0, np.int64), np.zeros(0, np.int64), 9) == []
    assert [r[0] for r in m.linkable(among, first, 8)] == [11, 13, 15]
