"""``edges._Touched`` (the events whose edges' cardinality the lineage run recomputes) is made
distinct as it doubles: an event is added once per edge to it, and a long session's run adds
tens of thousands of edges to a few thousand events. It gives back the same events."""

from __future__ import annotations

import random

import numpy as np

from engram.lineage import edges


def test_touched_holds_the_distinct_events(monkeypatch):
    monkeypatch.setattr(edges, "TOUCHED_DISTINCT_AT", 64)
    rng = random.Random(7)
    added = [rng.randrange(200) for _ in range(20_000)] + [-5, 2**62]
    t = edges._Touched(range(150))
    for eid in added:
        t.add(eid)
        assert len(t._ids) <= 2 * 202 + 64   # never every edge's
    want = sorted(set(added) | set(range(150)))
    assert t.ids().tolist() == want and t.ids().dtype == np.int64
    assert list(t) == want


def test_few_events_are_kept_as_added():
    t = edges._Touched()
    for eid in (3, 1, 3):
        t.add(eid)
    assert t._ids.tolist() == [3, 1, 3]   # (under TOUCHED_DISTINCT_AT: nothing made distinct)
    assert list(t) == [1, 3]
    assert list(edges._Touched()) == []
