"""``edges._KeyOrder`` (the run's node keys as one bytes string) answers every search as
``bisect`` over the sorted list of the key tuples did — odd strings (NUL, lone surrogates, one a
prefix of another, astral code points), offsets at the int64 edges, keys with no bytes form."""

import bisect
import random

import pytest

from engram.lineage import edges
from engram.lineage.rules import _order


class _N:
    def __init__(self, key):
        self.key = key


_CHARS = ["", "a", "b", "\0", "\1", "\0\1", "~", "\x7f", "\x80", "é", "\ud800", "\udfff", "\ud7ff",
          "\ue000", "\uffff", "\U00010000", "\U0010ffff", "2026-11-27T10:00:00Z", "2026-11-27T10:00:00.5Z"]


def _text(rng):
    return "".join(rng.choice(_CHARS) for _ in range(rng.randrange(0, 4)))


def _key(rng):
    ofs = rng.choice([0, 1, 2, 255, 256, 65535, -1, -(1 << 63), (1 << 63) - 1, rng.randrange(1000)])
    return _order(rng.choice([None, _text(rng)]), rng.choice(["t-a", "t-b", "", "t\0", _text(rng)]), ofs)


def test_key_order_searches_as_bisect_on_the_tuples():
    rng = random.Random(34)
    for trial in range(300):
        keys = [_key(rng) for _ in range(rng.randrange(0, 40))]
        nodes = [_N(k) for k in keys]
        want = sorted(set(keys))
        got = edges._KeyOrder.of(nodes)
        assert isinstance(got, edges._KeyOrder)
        assert len(got) == len(want)
        assert [got[i] for i in range(len(got))] == want   # made back: the same tuples
        for q in keys + [_key(rng) for _ in range(30)]:
            assert got.left(q) == bisect.bisect_left(want, q), (trial, q)
            assert got.right(q) == bisect.bisect_right(want, q), (trial, q)
            assert edges._left(got, q) == edges._left(want, q)
            assert edges._right(got, q) == edges._right(want, q)


def test_key_bytes_order_is_the_tuples_order():
    rng = random.Random(7)
    keys = sorted({_key(rng) for _ in range(2000)})
    enc = [edges._key_bytes(k) for k in keys]
    assert enc == sorted(enc) and len(set(enc)) == len(enc)


def test_keys_without_bytes_form():
    # a node key of another type: the sorted list, as before
    nodes = [_N(("2026", "t", 1)), _N((5, "t", 2))]
    with pytest.raises(TypeError):   # (sorting them raised before too)
        edges._KeyOrder.of(nodes)
    big = [_N(("a", "t", 1 << 70)), _N(("a", "t", 3))]
    got = edges._KeyOrder.of(big)
    assert got == sorted({n.key for n in big})
    # a query with no bytes form is compared as the tuples are
    order = edges._KeyOrder.of([_N(("a", "t", 1)), _N(("b", "t", 2)), _N(("c", "t", 3))])
    want = [("a", "t", 1), ("b", "t", 2), ("c", "t", 3)]
    for q in [("b", "t", 1 << 70), ("b", "t", 2.0), ("b", "t", 2.5), ("b", "t", True), ("a", "t", -(1 << 64))]:
        assert order.left(q) == bisect.bisect_left(want, q)
        assert order.right(q) == bisect.bisect_right(want, q)
    with pytest.raises(TypeError):
        order.left((7, "t", 1))
    with pytest.raises(TypeError):
        bisect.bisect_left(want, (7, "t", 1))


def test_place_rows_with_a_key_order():
    rng = random.Random(3)
    times = [None, ""] + [f"2026-11-26T10:{m:02d}:{s:02d}Z" for m in range(3) for s in range(0, 60, 7)]
    for _ in range(30):
        keys = [_order(rng.choice(times), rng.choice(["t-a", "t-b"]), rng.randrange(30)) for _ in range(25)]
        order = edges._KeyOrder.of([_N(k) for k in keys])
        listed = sorted(set(keys))
        rows = [(rng.randrange(1, 40), rng.choice(times), rng.randrange(0, 50), rng.randrange(0, 60),
                 rng.choice(["t-a", "t-b", "t-c"]), rng.randrange(30)) for _ in range(rng.randrange(0, 40))]
        a, b = edges._PlaceRows(iter(rows), order), edges._PlaceRows(iter(rows), listed)
        assert a.after.tolist() == b.after.tolist()
