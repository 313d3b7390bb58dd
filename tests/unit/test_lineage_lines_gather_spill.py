"""The parse worker's kept lines gathered through a temp file (``PackedLines.gather(directory)``,
spilled every ``SPILL_BYTES``) are the same ``PackedLines`` as gathered in memory: the same buffer,
offsets, places and answers, with a line given twice, long lines past the spill size, none; and
``SpillFile.read_into`` fills a buffer with the bytes at a place."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from engram.lineage import cache
from engram.spill import SpillFile


def _lines(seed: int, n: int) -> list[tuple[int, bytes]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        size = rnd.choice((0, 1, 7, 40, 300, 5000))
        out.append((rnd.randrange(3 * n) if i % 9 == 4 else i * 2 + 1, bytes(rnd.randrange(256) for _ in range(size))))
    return out


def _gathered(lines, directory=None):
    g = cache.PackedLines.gather(directory)
    for ofs, line in lines:
        g.add(ofs, line)
    return g, g.packed()


@pytest.mark.parametrize("seed,n,spill_bytes", [(1, 0, 64), (2, 1, 1), (3, 200, 64), (4, 500, 4096), (5, 50, 1 << 20)])
def test_gathered_through_a_file_the_same(tmp_path, monkeypatch, seed, n, spill_bytes):
    monkeypatch.setattr(cache._LineGatherer, "SPILL_BYTES", spill_bytes)
    lines = _lines(seed, n)
    _, plain = _gathered(lines)
    g, spilled = _gathered(lines, tmp_path)
    assert bytes(spilled.buf) == bytes(plain.buf)
    for name in ("offs", "start", "end"):
        assert np.array_equal(getattr(spilled, name), getattr(plain, name))
    assert dict(spilled.items()) == dict(plain.items()) == dict(lines)   # (the last line of an offset)
    assert len(spilled) == len(dict(lines)) and spilled.nbytes == plain.nbytes
    again = pickle.loads(pickle.dumps(spilled, protocol=5))
    assert dict(again.items()) == dict(lines)
    assert g.spill is None and not g.buf and not len(g.at)   # emptied, its file closed
    if sum(len(b) for _, b in lines) > spill_bytes:
        assert not list(tmp_path.iterdir())   # (an unnamed temp file: nothing left in the directory)


def test_gatherer_spills_as_it_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(cache._LineGatherer, "SPILL_BYTES", 100)
    g = cache.PackedLines.gather(tmp_path)
    for i in range(50):
        g.add(i, b"x" * 30)
        assert len(g.buf) < 100 + 30
    assert g.spill is not None and g.spill.size >= 50 * 30 - 130
    assert dict(g.packed().items()) == dict.fromkeys(range(50), b"x" * 30)


def test_spill_read_into(tmp_path):
    f = SpillFile(tmp_path)
    data = bytes(range(256)) * 50
    f.append(data[:1000], np.frombuffer(data[1000:], np.uint8))
    buf = bytearray(3000)
    f.read_into(500, memoryview(buf)[:2500])
    assert bytes(buf[:2500]) == data[500:3000] and bytes(buf[2500:]) == bytes(500)
    with pytest.raises(OSError, match="not there"):
        f.read_into(len(data) - 10, bytearray(20))
    f.close()
