"""``rules._neg`` (the sort key putting later times first) orders every pair of times as the key
it replaced did: the string of ``chr(0x10FFFF - ord(c))`` per character, ``"~"`` for no time."""

import functools
import random

from engram.lineage.rules import _neg

EDGE = ["\U0010FF80", "\U0010FF81", "\U0010FF82", "\U0010FFFF", "\ud800", "\udfff", "\ud7ff",
        "\ue000", "\x7f", "\x80", "~", "\x00", "\uffff", "\U00010000"]


def _old(t):
    if not t:
        return "~"
    return "".join(chr(0x10FFFF - ord(c)) for c in t)


def _times(rng: random.Random, n: int) -> list:
    out = [None, ""]
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:   # ISO times, many sharing a prefix (some a prefix of another)
            t = f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
            t += rng.choice(["", ":00", f":{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}Z"])
        else:            # anything: edge code points, surrogates, non-ASCII
            t = "".join(rng.choice(EDGE) if rng.random() < 0.4 else chr(rng.choice(
                [rng.randint(0, 0x7F), rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xFFFF),
                 rng.randint(0x10000, 0x10FFFF)])) for _ in range(rng.randint(1, 5)))
        out.append(t)
    out += EDGE + [e + "a" for e in EDGE] + [e + e for e in EDGE]
    return out


def _cmp(a, b) -> int:
    return (a > b) - (a < b)


def test_every_pair_compares_as_before():
    rng = random.Random(33)
    times = _times(rng, 400)
    new, old = [_neg(t) for t in times], [_old(t) for t in times]
    for i, a in enumerate(times):
        for j, b in enumerate(times):
            assert _cmp(new[i], new[j]) == _cmp(old[i], old[j]), (a, b)


def test_sorts_as_before_inside_tuples():
    rng = random.Random(7)
    rows = [(rng.random() < 0.5, t, rng.randint(0, 3)) for t in _times(rng, 300)]
    new = sorted(range(len(rows)), key=lambda i: (rows[i][0], _neg(rows[i][1]), -rows[i][2], i))
    old = sorted(range(len(rows)), key=lambda i: (rows[i][0], _old(rows[i][1]), -rows[i][2], i))
    assert new == old
    # later ISO times first
    assert sorted(["2026-01-01T00:00:00", "2026-01-02T00:00:00", None], key=_neg) == [
        None, "2026-01-02T00:00:00", "2026-01-01T00:00:00"]


def test_no_memo_held():
    # the key is made in C each time: nothing kept per distinct time (a memo held ~20 MB)
    assert not isinstance(_neg, functools._lru_cache_wrapper)
    assert _neg("2026-11-27T00:00:00Z") == _neg("2026-11-27T00:00:00Z")
