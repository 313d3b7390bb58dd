"""glibc's malloc knobs through ``ctypes``: ``mallopt`` (settings) and ``malloc_trim`` (give free
heap back to the kernel). Used by one-shot ingests (``engram.ingest.worker``) and the long-running
language server (``engram_lsp.heap``), each with its own settings.

Only glibc has them: elsewhere (musl, macOS) nothing is changed. Settings are also left alone when
the user set any ``MALLOC_*`` variable, glibc's own way to tune them.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys


@functools.lru_cache(maxsize=1)
def libc() -> ctypes.CDLL | None:
    """This process's C library when it is glibc on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(None)
        lib.gnu_get_libc_version  # noqa: B018 — glibc, not musl or another libc
    except (OSError, AttributeError):
        return None
    return lib


def mallopt():
    """glibc's ``mallopt(param, value)`` (1 when taken), or None: not glibc, or the user tunes
    malloc through ``MALLOC_*`` variables."""
    lib = libc()
    if lib is None or any(k.startswith("MALLOC_") for k in os.environ):
        return None
    try:
        f = lib.mallopt
    except AttributeError:
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int]
    f.restype = ctypes.c_int
    return f


def malloc_trim() -> bool:
    """Give the heap's free memory back to the kernel (``malloc_trim(0)``); False where there
    is no glibc."""
    lib = libc()
    if lib is None:
        return False
    try:
        f = lib.malloc_trim
    except AttributeError:
        return False
    f.argtypes = [ctypes.c_size_t]
    f(0)
    return True
