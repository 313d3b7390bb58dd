"""The lineage pass fingerprints its edits' texts in batches (``IngestCache.texts_prints``,
``Linker._queried``): the same arrays as one text at a time, whatever the cache held."""

from __future__ import annotations

import random

import numpy as np

from engram.lineage import edges
from engram.lineage.cache import IngestCache


def _texts() -> list[str]:
    rng = random.Random(3)
    words = ["def", "return", "x", "(", ")", ":", "self", "value", "+", "1", "if", "é", "😀"]
    out = ["", "x", "a b", "def f(x):\n    return x\n"]
    for _ in range(60):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 12)))
                 for _ in range(rng.randrange(1, 30))]
        out.append("\n".join(lines))
    return out + out[4:10]   # repeats


def test_texts_prints_equal_text_prints_one_at_a_time():
    texts = _texts()
    want = [IngestCache().text_prints(t) for t in texts]   # a fresh cache each: nothing kept
    warm = IngestCache()
    for t in texts[::3]:   # some kept already
        warm.text_prints(t)
    for cache in (IngestCache(), warm):
        got = cache.texts_prints(texts)
        assert len(got) == len(texts)
        for (w1, k1), (w2, k2) in zip(want, got):
            assert np.array_equal(w1, w2) and np.array_equal(k1, k2)
            assert w2.dtype == np.int64 and k2.dtype == np.int64


class _Node:
    def __init__(self, before, after):
        self.before, self.after = before, after
        self.qa = self.qb = self.cont = None
        self.tomb = False


def test_queried_nodes_get_the_queries_of_one_at_a_time(monkeypatch):
    texts = _texts()
    pairs = list(zip(texts, texts[1:] + texts[:1]))
    monkeypatch.setattr(edges, "QUERY_BATCH", 7)          # several batches, cut by count ...
    monkeypatch.setattr(edges, "QUERY_BATCH_CHARS", 300)  # ... and by characters
    linker = edges.Linker.__new__(edges.Linker)
    linker.cache = IngestCache()
    plain = edges.Linker.__new__(edges.Linker)
    plain.cache = IngestCache()
    got = list(linker._queried([_Node(b, a) for b, a in pairs]))
    assert len(got) == len(pairs)
    for n, (b, a) in zip(got, pairs):
        m = _Node(b, a)
        plain._queries(m)
        assert (n.cont, n.tomb) == (m.cont, m.tomb)
        for q, r in ((n.qa, m.qa), (n.qb, m.qb)):
            assert (q is None) == (r is None)
            if q is not None:
                assert np.array_equal(q[0], r[0]) and q[1] == r[1]
    assert any(n.qa is not None for n in got) and any(n.qb is not None for n in got)
