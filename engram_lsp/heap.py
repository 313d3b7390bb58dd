"""glibc malloc settings for the long-running server: keep the heap it has grown.

A code lens of a big file allocates a few MB of numpy arrays and frees them. With glibc's
defaults those arrays come from ``mmap`` (or from a query thread's own arena, which is trimmed as
soon as its top is free) and go back to the kernel when freed, so the next big request faults
every page in again: ~1,600 page faults, about a third of a 5,000-line file's lens on a VM
(``docs/benchmarks.md``). One arena, and thresholds that keep freed memory in the process, make
the second big request reuse the pages of the first. The memory a server keeps is what its
biggest request needed, a few tens of MB at most.

Only glibc has these knobs (``mallopt``); elsewhere, or when the user set any ``MALLOC_*``
variable (glibc's own way to tune them), nothing is changed.
"""

from __future__ import annotations

import ctypes

from engram import glibc

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD = 32 << 20   # glibc's upper bound for it (64-bit)
TRIM_THRESHOLD = 512 << 20

_kept: bool | None = None


def keep_heap() -> bool:
    """Apply the settings once (call it before any thread starts: arenas are made per thread).
    True when glibc took all three; the answer is remembered for ``engram/status``."""
    global _kept
    if _kept is None:
        _kept = _apply()
    return _kept


def _apply() -> bool:
    mallopt = glibc.mallopt()
    if mallopt is None:
        return False
    ok = [mallopt(M_ARENA_MAX, 1), mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD),
          mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)]
    return all(r == 1 for r in ok)


def kept() -> bool | None:
    """Whether ``keep_heap`` changed the settings (None: it was not called)."""
    return _kept



KEEP_FREE = 64 << 20  # free heap kept for the next requests; more is given back (``trim``)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def free_bytes() -> int | None:
    """Free bytes held by the heap (glibc's ``mallinfo2().fordblks``); None where unknown."""
    try:
        f = glibc.libc().mallinfo2
    except AttributeError:  # (None: not glibc; an older glibc)
        return None
    f.restype = _Mallinfo2
    return int(f().fordblks)


def trim(keep: int = KEEP_FREE) -> bool:
    """Give the heap's free memory back to the kernel (glibc's ``malloc_trim``) when
    ``keep_heap`` raised the thresholds and more than ``keep`` bytes are free: after an ingest,
    whose parsed sessions and index batches would otherwise stay resident for the server's
    lifetime, and once idle (a snapshot of the postings read, a big answer). What the requests
    need is a few tens of MB, kept otherwise. True when it trimmed."""
    if not _kept:
        return False
    free = free_bytes()
    if free is not None and free <= keep:
        return False
    return glibc.malloc_trim()
