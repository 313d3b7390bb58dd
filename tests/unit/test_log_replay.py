"""``location._replay`` (the file as its logged edits leave it) spliced on a list gives the arrays
the replay by array slicing and concatenation gave, on every kind of region the log holds."""

from __future__ import annotations

import random

import numpy as np

from engram.index.queries import EditLines
from engram.query import location


def by_arrays(ordered, texts, exact):
    """The replay as it was written with numpy (slice, concatenate per edit): the definition."""
    unknown = np.full(1, -1, dtype=np.int64)
    text = np.zeros(0, dtype=np.int64)
    for _ids, regions in reversed(ordered):
        for b_s, b_e, a_s, a_e, eid in reversed(regions):
            n = max(a_e - a_s + 1, 0)
            el = texts.get(eid)
            side = None if el is None else el.after_x if exact else el.after
            if side is not None and exact and len(side) != len(el.after):
                side = None
            after = side[:n].astype(np.int64) if side is not None else unknown[:0]
            if len(after) < n:
                after = np.concatenate([after, unknown.repeat(n - len(after))])
            lo = max(b_s - 1, 0)
            hi = max(b_e, lo)
            if lo > len(text):
                text = np.concatenate([text, unknown.repeat(lo - len(text))])
            text = np.concatenate([text[:lo], after, text[hi:]])
    return text


def random_history(rng: random.Random):
    """Calls of one to four regions each, latest first, over a text that grows and shrinks; edits
    whose lines are unknown, shorter than their range, without exact hashes, with exact hashes of
    another length; before-ranges past the end, empty (inserts) and reversed."""
    ordered, texts, eid, length = [], {}, 0, 0
    for _call in range(rng.randint(0, 40)):
        regions = []
        for _r in range(rng.randint(1, 4)):
            eid += 1
            b_s = rng.randint(0, length + 5)
            b_e = b_s - 1 if rng.random() < 0.2 else b_s + rng.randint(0, 8)
            a_s = max(b_s, 1)
            a_e = a_s + rng.randint(-1, 10)
            n = max(a_e - a_s + 1, 0)
            kind = rng.random()
            if kind < 0.1:
                pass  # lines unknown
            else:
                m = n + (rng.randint(-3, 2) if kind < 0.3 else 1)
                after = np.array([rng.choice([0, rng.randint(-2**31, 2**31 - 1)])
                                  for _ in range(max(m, 0))], dtype=np.int32)
                x = (None if rng.random() < 0.2 else
                     after[:-1].copy() if len(after) and rng.random() < 0.1 else after ^ 7)
                texts[eid] = EditLines(after, np.zeros(0, dtype=np.int32), x, None)
            regions.append((b_s, b_e, a_s, a_e, eid))
            length = max(length + n - max(b_e - b_s + 1, 0), 0)
        ordered.append((tuple(r[4] for r in regions), sorted(regions)))
    return ordered[::-1], texts


def test_replay_equals_the_array_replay():
    rng = random.Random(7)
    for _ in range(400):
        ordered, texts = random_history(rng)
        for exact in (False, True):
            got = location._replay(ordered, texts, exact)
            want = by_arrays(ordered, texts, exact)
            assert got.dtype == np.int64 and not got.flags.writeable
            assert got.tobytes() == want.tobytes()


def test_replay_of_nothing_is_empty():
    got = location._replay([], {}, False)
    assert got.dtype == np.int64 and got.shape == (0,)
