"""``explain.query_fingerprints`` picks a long span's k-grams among its winnowed hashes by a binary
search of the sorted hashes: the same k-grams, lines and order as ``np.isin`` picked, on spans of
every size class (all k-grams, winnowed, sampled) cut from real source files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import engram
from engram.query import explain


def by_isin(text: str):
    qh, qlines, wh = explain.span_fingerprints(text)
    if len(wh) <= explain.ALL_KGRAMS_MAX:
        return qh, qlines, wh, False
    sampled = len(wh) > explain.MAX_QUERY_FPS
    if sampled:
        wh = wh[:explain.MAX_QUERY_FPS]
    m = np.isin(qh, wh)
    return qh[m], qlines[m], wh, sampled


def test_query_fingerprints_equal_the_isin_selection():
    seen = {False: 0, True: 0}
    kinds = set()
    for f in sorted(Path(engram.__file__).parent.glob("query/*.py")):
        lines = f.read_text().splitlines(keepends=True)
        for size in (3, 12, 40, 150, 600):
            for start in range(0, max(len(lines) - size, 1), max(size, 50)):
                text = "".join(lines[start:start + size])
                got, want = explain.query_fingerprints(text), by_isin(text)
                assert got[3] == want[3]
                for a, b in zip(got[:3], want[:3]):
                    assert a.tobytes() == b.tobytes()
                n = len(explain.span_fingerprints(text)[2])
                kinds.add("all" if n <= explain.ALL_KGRAMS_MAX else "sampled" if got[3] else "winnowed")
                seen[got[3]] += 1
    assert kinds == {"all", "winnowed", "sampled"}
