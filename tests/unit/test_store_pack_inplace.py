"""``store._pack`` (one temporary column at a time) gives the values of the expression it replaced,
and a chunk's packed rows sorted in place and made distinct are ``uniq`` of them; ``packed.add``
binds the same bytes as ``rec.tobytes()`` gave."""

import numpy as np

from engram.index import store
from engram.sortedset import distinct, uniq


def test_pack_is_the_expression():
    rng = np.random.default_rng(34)
    for _ in range(50):
        n = int(rng.integers(0, 2000))
        H = rng.integers(-(1 << 31), 1 << 31, n, dtype=np.int64)
        B = rng.integers(5, 5 + int(rng.integers(1, 1 << 12)), n, dtype=np.int64)
        L = rng.integers(0, int(rng.integers(1, 1 << 12)), n, dtype=np.int64)
        p = store._packing(B, L)
        if p is None:
            continue
        want = (H << 32) | ((B - p.block0) << p.line_bits) | L
        got = store._pack(H, B, L, p)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        got.sort(kind="stable")
        assert np.array_equal(distinct(got), uniq(want))
        h, b, ln = store._unpack(distinct(got), p)
        back = np.lexsort((ln, b, h))
        assert np.array_equal(back, np.arange(len(h)))


def test_record_bytes_view():
    from engram.index.packed import REC
    rec = np.empty(7, dtype=REC)
    rec["b"], rec["l"] = np.arange(7) * 100_003, np.arange(7) * 7
    assert bytes(memoryview(rec.view(np.uint8))) == rec.tobytes()
    assert bytes(memoryview(rec.view(np.uint8))[6:12]) == rec.tobytes()[6:12]
