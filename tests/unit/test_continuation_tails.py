"""The continuation pass's tails (``_tail_refs``: the refs of a tape's last ``TAIL_EVENTS``
events) read for many tapes in one query (``_fetch_tails``) are the rows, in the order, that one
query a tape reads; the ``TailCache`` keeps at most ``TAIL_CACHE_ROWS`` rows."""

from __future__ import annotations

import random
from collections import namedtuple

import apsw
import numpy as np

from engram.lineage import continuations
from engram.lineage.rules import TAIL_EVENTS

Tape = namedtuple("Tape", "id n_events")


def _index(seed: int):
    rnd = random.Random(seed)
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE events(id INTEGER PRIMARY KEY, tape INTEGER NOT NULL, ofs INTEGER NOT NULL);"
                 "CREATE UNIQUE INDEX events_tape ON events(tape, ofs);"
                 "CREATE TABLE refs(block INTEGER NOT NULL, event INTEGER NOT NULL, role INTEGER NOT NULL,"
                 " PRIMARY KEY(block, event, role)) WITHOUT ROWID;"
                 "CREATE INDEX refs_event ON refs(event);")
    tapes = []
    eid = 0
    # short tapes (the whole tape is its tail), long ones, tapes without refs, large row ids
    for tid in [1, 2, 3, 7, 40, 41, 1000, 123456, (1 << 31) - 1]:
        n = rnd.choice([1, 5, TAIL_EVENTS - 1, TAIL_EVENTS, TAIL_EVENTS + 1, 150, 400])
        tapes.append(Tape(tid, n))
        for ofs in range(n):
            eid += 1
            conn.execute("INSERT INTO events VALUES (?,?,?)", (eid, tid, ofs))
            if tid == 40:
                continue   # a tape without refs
            for _ in range(rnd.randrange(4)):
                conn.execute("INSERT OR IGNORE INTO refs VALUES (?,?,?)",
                             (rnd.randrange(1, 500), eid, rnd.randrange(1, 5)))
    tapes.append(Tape(99, 3))   # a tape of no events at all
    return conn, tapes


def _one_by_one(conn, tapes) -> dict:
    got = {}
    for a in tapes:
        got[a.id] = continuations._tail_refs(conn, a, continuations.TailCache())
    return got


def test_fetched_tails_equal_one_query_a_tape():
    for seed in range(4):
        conn, tapes = _index(seed)
        want = _one_by_one(conn, tapes)
        assert sum(len(v) for v in want.values()) > 50
        tails = continuations.TailCache()
        continuations._fetch_tails(conn, tapes, tails)
        assert set(tails) == {a.id for a in tapes}
        for a in tapes:
            assert tails[a.id].shape == want[a.id].shape
            assert np.array_equal(tails[a.id], want[a.id]), (seed, a)
            assert tails[a.id].dtype == np.int64 and tails[a.id].flags.c_contiguous
        assert tails.rows == sum(len(v) for v in want.values())
        # then ``_tail_refs`` reads nothing more and gives the same arrays
        assert all(continuations._tail_refs(None, a, tails) is tails[a.id] for a in tapes)


def test_a_full_tail_cache_starts_afresh(monkeypatch):
    conn, tapes = _index(7)
    want = _one_by_one(conn, tapes)
    monkeypatch.setattr(continuations, "TAIL_CACHE_ROWS", 60)
    tails = continuations.TailCache()
    continuations._fetch_tails(conn, tapes, tails)
    assert tails.rows <= max(60, max(len(v) for v in want.values()))
    assert tails.rows == sum(len(v) for v in tails.values())
    for a in tapes:   # what was dropped is read again, the same rows
        assert np.array_equal(continuations._tail_refs(conn, a, tails), want[a.id])
