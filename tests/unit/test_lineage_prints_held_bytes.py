"""The ingest cache's prints held in memory are capped with their objects counted
(``PRINT_OBJECT_BYTES`` a text, besides its arrays' bytes): many short texts — most edits' arrays
are a few hundred bytes — no longer let what is held grow to ~2x ``PRINTS_IN_MEMORY``. Past it the
prints go to the spill file and read back the same."""

from __future__ import annotations

import tracemalloc

import numpy as np

from engram.digest import text_key
from engram.lineage import cache

CAP = 256 << 10


def _texts(n: int) -> list[str]:
    return [f"v_{i} = f({i})\n" for i in range(n)]   # short: a handful of hashes each


def _held(texts: list[str]) -> tuple[cache.IngestCache, int]:
    kept = cache.IngestCache()
    kept.text_prints("warm = up\n")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for t in texts:
            kept.text_prints(t)
        return kept, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_held_prints_stay_within_the_cap_with_their_objects(monkeypatch):
    monkeypatch.setattr(cache, "PRINTS_IN_MEMORY", CAP)
    texts = _texts(4000)
    kept, held = _held(texts)
    arrays = sum(v[0].nbytes + v[1].nbytes for v in kept.prints.values())
    assert kept.prints and len(kept.prints) < len(texts)          # the rest spilled
    assert arrays + len(kept.prints) * cache.PRINT_OBJECT_BYTES <= CAP
    # the arrays' bytes alone: every text held (24 bytes of arrays each, ~400 of objects)
    monkeypatch.setattr(cache, "PRINT_OBJECT_BYTES", 0)
    uncounted, held_uncounted = _held(texts)
    assert len(uncounted.prints) == len(texts) + 1
    assert held < 0.7 * held_uncounted, (held, held_uncounted)
    # every text answers as a fresh fingerprint does, held or spilled
    fresh = cache.IngestCache()
    monkeypatch.setattr(cache, "PRINTS_IN_MEMORY", 0)
    for t in texts[::97] + texts[-3:]:
        a, b = kept.text_prints(t), fresh.text_prints(t)
        assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
    assert any(text_key(t) not in kept.prints for t in texts)


def test_replacing_a_held_print_gives_its_bytes_back(monkeypatch):
    monkeypatch.setattr(cache, "PRINTS_IN_MEMORY", CAP)
    kept = cache.IngestCache()
    h = np.arange(5, dtype=np.int64)
    for _ in range(3):   # the same text kept again: counted once
        kept._put_print(b"k" * 16, (h, h.copy(), False))
    assert kept._prints_in_memory == 2 * h.nbytes + cache.PRINT_OBJECT_BYTES
    assert kept.prints_bytes == 2 * h.nbytes
