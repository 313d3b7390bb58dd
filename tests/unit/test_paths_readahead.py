"""``engram.paths.readahead``: the index's files asked into the page cache, a piece at a time, and
nothing asked for (no error, no wait) where there is nothing a regular file of a bounded size."""

from __future__ import annotations

import ctypes
import mmap
import os
import time

import pytest

from engram import paths


def _resident(path) -> float | None:
    """The share of ``path``'s pages in the page cache (``mincore`` over a mapping of it), None
    where that cannot be told."""
    mincore = getattr(ctypes.CDLL(None, use_errno=True), "mincore", None)
    if mincore is None:
        return None
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size = os.path.getsize(path)
    n = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * n)()
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)  # (writable: from_buffer)
        try:
            at = ctypes.c_char.from_buffer(m)
            try:
                rc = mincore(ctypes.addressof(at), size, vec)
            finally:
                del at
        finally:
            m.close()
    return None if rc != 0 else sum(v & 1 for v in vec) / n


def _evict(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this system")
def test_the_index_and_its_wal_are_asked_for_whole(tmp_path):
    index = tmp_path / "index.sqlite"
    index.write_bytes(os.urandom(3 * paths.READAHEAD_PIECE + 12345))  # more than one piece
    wal = tmp_path / "index.sqlite-wal"
    wal.write_bytes(os.urandom(5000))
    assert paths.readahead(index) == index.stat().st_size + 5000
    _evict(index)
    before = _resident(index)
    if before is None or before > 0.5:
        pytest.skip("page residency cannot be told (or the file stays cached) here")
    paths.readahead(index)
    deadline = time.monotonic() + 10
    while (_resident(index) or 0) < 0.99 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _resident(index) >= 0.99  # every piece, not only the first few MB of one call


def test_nothing_is_asked_for_beyond_the_limit_or_without_a_file(tmp_path, monkeypatch):
    index = tmp_path / "index.sqlite"
    assert paths.readahead(index) == 0  # no index yet
    index.write_bytes(b"x" * 4096)
    assert paths.readahead(index, limit=4095) == 0
    assert paths.readahead(index, limit=4096) == 4096
    monkeypatch.delattr(os, "posix_fadvise", raising=False)
    assert paths.readahead(index) == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_special_files_are_not_read_nor_waited_on(tmp_path):
    os.mkfifo(tmp_path / "index.sqlite")  # a reader would block until a writer came
    (tmp_path / "index.sqlite-wal").mkdir()
    started = time.monotonic()
    assert paths.readahead(tmp_path / "index.sqlite") == 0
    assert time.monotonic() - started < 5
