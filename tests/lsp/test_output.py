"""Every response reaches the client whole, even when the server's stdout cannot take a frame at
once (the scale bench's unanswered ``engram/explain``: a 149 KB answer cut at 128 KB, after which
the client could parse nothing more)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import termios
import threading
import time

from lsp_helpers import frame, read_message
from waiting import wait_until

from engram.pipes import PIPE_BYTES, widen

N = 300  # requests answered while nobody reads: far more than a pipe holds (64 KB)


def _pipe_max() -> int:
    with open("/proc/sys/fs/pipe-max-size") as f:
        return int(f.read())


def _pipe_bytes(fd: int) -> int:
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


def test_full_stdout_loses_no_response(ws):
    """The server's stdout is a non-blocking pipe (what a raw ``FileIO`` stdout, as
    ``PYTHONUNBUFFERED`` gives, writes short into, like a blocking one interrupted by a signal);
    the client sends ``N`` requests and reads nothing until the pipe is full. Before the fix the
    frames written then were cut or dropped without an error: ids went missing and a body ran
    into the next frame. Now every answer comes, whole."""
    r, w = os.pipe()
    os.set_blocking(w, False)  # the flag is the pipe's: the server's stdout is non-blocking
    env = ws.env()
    assert env.get("PYTHONUNBUFFERED") == "1"  # sys.stdout.buffer is a raw FileIO
    proc = subprocess.Popen([sys.executable, "-m", "engram_lsp"], stdin=subprocess.PIPE,
                            stdout=w, stderr=subprocess.DEVNULL, env=env)
    os.close(w)
    out = os.fdopen(r, "rb")
    killer = threading.Timer(30, proc.kill)  # a lost answer: EOF (a failure), not a hung test
    killer.start()
    try:
        init = {"processId": None, "rootUri": ws.root.as_uri(), "capabilities": {}}
        proc.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
        proc.stdin.flush()
        assert read_message(out)["id"] == 1
        # the server widened its pipe (``engram.pipes.widen``); narrowed again here, so that the
        # answers below overfill it as they did a pipe the server could not widen
        assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) == min(PIPE_BYTES, _pipe_max())
        fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, 65536)
        proc.stdin.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        for i in range(2, N + 2):
            proc.stdin.write(frame({"jsonrpc": "2.0", "id": i, "method": "engram/status",
                                    "params": {}}))
        proc.stdin.flush()
        wait_until(lambda: _pipe_bytes(r) >= 32768, 60, 0.05,
                   message="the server's stdout pipe to fill up")
        time.sleep(1.5)  # the server meets the full pipe with answers still to write
        got: list[int] = []
        while len(got) < N:
            msg = read_message(out)  # a cut body would not parse (or swallow the next frame)
            if "id" in msg and "method" not in msg:
                assert "result" in msg, msg
                assert json.dumps(msg["result"])  # whole JSON
                got.append(msg["id"])
        assert sorted(got) == list(range(2, N + 2))  # each answered once (order: as computed)
    finally:
        killer.cancel()
        proc.kill()
        proc.wait()
        out.close()


def test_widen_pipe_only_widens_pipes(tmp_path):
    """A pipe gets the buffer asked for (within the user's limit); a regular file, a stream
    without a descriptor or a closed one are left alone (None), never an error."""
    import io

    r, w = os.pipe()
    try:
        with os.fdopen(w, "wb") as stream:
            got = widen(stream, 1 << 20)
            assert got == fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) == min(1 << 20, _pipe_max())
            stream.write(b"x" * 200_000)  # what a 64 KB pipe could not take without a reader
            stream.flush()
            assert _pipe_bytes(r) == 200_000
    finally:
        os.close(r)
    with open(tmp_path / "f", "wb") as f:
        assert widen(f, 1 << 20) is None
    assert widen(io.BytesIO(), 1 << 20) is None
    closed = open(tmp_path / "g", "wb")
    closed.close()
    assert widen(closed, 1 << 20) is None
