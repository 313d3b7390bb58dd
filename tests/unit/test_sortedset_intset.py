"""``sortedset.IntSet`` (the set of block ids ``Batch._commit_parts`` keeps as sorted arrays)
answers ``in`` and ``len`` as a Python set of the same values does, across its merges."""

import random

import numpy as np

from engram.sortedset import IntSet


def test_as_a_set():
    rng = random.Random(3)
    for merge_at in (1, 2, 7, 4096):
        s, ref = IntSet(merge_at), set()
        for _ in range(3000):
            v = rng.choice([rng.randrange(-50, 50), rng.randrange(1 << 40), -(1 << 63), (1 << 63) - 1])
            if rng.random() < 0.6:
                s.add(v)
                ref.add(v)
            probe = rng.choice([v, v + 1, rng.randrange(-60, 60)])
            probe = max(min(probe, (1 << 63) - 1), -(1 << 63))
            assert (probe in s) == (probe in ref)
        assert len(s) == len(ref)
        assert s.values.tolist() == sorted(ref) and s.values.dtype == np.int64
        assert all(v in s for v in ref)


def test_empty():
    s = IntSet()
    assert 5 not in s and len(s) == 0
