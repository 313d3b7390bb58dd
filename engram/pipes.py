"""Pipe buffers for the processes that write large messages through one: the ingest's parse
worker (``engram.ingest.worker``), ``engram mcp`` (``engram.mcp.stdio``) and the language server
(``engram_lsp.server``). A leaf module: the language server imports it before anything else of
``engram`` is loaded."""

from __future__ import annotations

import os
import stat

PIPE_BYTES = 1 << 20
"""The buffer asked for: Linux's default is 64 KiB; 1 MiB is the most an unprivileged process may
ask for by default (``/proc/sys/fs/pipe-max-size``)."""


def widen(pipe, size: int = PIPE_BYTES) -> int | None:
    """Ask the kernel for a ``size``-byte buffer on ``pipe`` (a descriptor, or a stream with
    one) when it is a pipe (Linux: ``F_SETPIPE_SZ``); its size then, or None where it is not a
    pipe or cannot be asked. A message bigger than the buffer (an explain answer is 50-150 KB, a
    worker's results megabytes) is otherwise written a buffer at a time, the writer waiting for
    the reader after each. What cannot be had (an older kernel, the user's quota of pipe memory
    spent) leaves the pipe as it was."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return None
    try:
        fd = pipe if isinstance(pipe, int) else pipe.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode) or not hasattr(fcntl, "F_SETPIPE_SZ"):
            return None
    except (AttributeError, OSError, ValueError):
        return None
    try:
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
    except OSError:
        try:
            return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        except OSError:
            return None
