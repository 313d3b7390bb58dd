"""Fault injection on the language server: the real ``python -m engram_lsp`` process over stdio.

A raw client writes bytes to the server's stdin (broken frames pytest-lsp cannot send) and a
reader thread parses what comes back, so every wait has a deadline: a server that goes deaf
fails the test instead of hanging the suite. Every test ends by checking that the server still
answers, and kills the process (and waits for it) whatever happens.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))
import workspaces  # noqa: E402

pytestmark = pytest.mark.e2e

PARSE_ERROR = -32700
INVALID_PARAMS = -32602
ENGRAM_ERROR = -32001
WAIT_S = 15.0


class RawClient:
    """Speaks LSP to a server process byte by byte; responses are collected by a thread."""

    def __init__(self, ws, tmp: Path):
        self.log = tmp / "server.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engram_lsp", "--log-file", str(self.log)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=ws.env(),
        )
        self.messages: queue.Queue = queue.Queue()
        self.next_id = 1000
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # --- transport -----------------------------------------------------------------------------

    def _read(self) -> None:
        out = self.proc.stdout
        try:
            while True:
                length = None
                while True:
                    line = out.readline()
                    if not line:
                        return
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                    elif line in (b"\r\n", b"\n"):
                        break
                self.messages.put(json.loads(out.read(length)))
        finally:
            self.messages.put(None)  # EOF

    def send_bytes(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj, *, header: bytes = b"Content-Length: %d\r\n\r\n") -> None:
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_bytes((header % len(body) if b"%d" in header else header) + body)

    def request(self, method: str, params=None, **frame) -> int:
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg, **frame)
        return self.next_id

    def notify(self, method: str, params=None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait_for(self, match, timeout: float = WAIT_S) -> dict:
        """The first message ``match(msg)`` accepts; the others are kept in ``self.seen``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("the server did not answer in time")
            try:
                msg = self.messages.get(timeout=left)
            except queue.Empty:
                raise AssertionError("the server did not answer in time") from None
            if msg is None:
                raise AssertionError(f"the server closed stdout (exit {self.proc.poll()})")
            if match(msg):
                return msg

    def response(self, msg_id, timeout: float = WAIT_S) -> dict:
        return self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    def call(self, method: str, params=None, timeout: float = WAIT_S, **frame) -> dict:
        return self.response(self.request(method, params, **frame), timeout)

    # --- session -------------------------------------------------------------------------------

    def initialize(self, ws) -> dict:
        res = self.call(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": ws.root.as_uri(),
                "capabilities": {},
                "initializationOptions": {"ingestOnStartup": False, "watch": {"enabled": False}},
            },
        )
        assert "result" in res, res
        self.notify("initialized", {})
        return res

    def assert_alive(self, ws) -> None:
        """Well-formed requests are still answered: a hover, and an unknown method."""
        res = self.call("textDocument/hover", _hover(ws.uri("hello.py")))
        assert "result" in res, res
        res = self.call("engram/no-such-method", {})
        assert res["error"]["code"] == -32601, res
        assert self.proc.poll() is None

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.response(self.request("shutdown"), timeout=5)
                    self.notify("exit")
                    self.proc.wait(timeout=5)
                except Exception:
                    pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass


@pytest.fixture
def ws(tmp_path):
    return workspaces.make_workspace(tmp_path / "ws")


@pytest.fixture
def client(ws, tmp_path):
    c = RawClient(ws, tmp_path)
    try:
        c.initialize(ws)
        yield c
    finally:
        c.close()


def _range(a=0, b=2):
    return {"start": {"line": a, "character": 0}, "end": {"line": b, "character": 0}}


def _hover(uri: str, line: int = 0) -> dict:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": 0}}


def _no_traceback(msg: dict) -> None:
    err = msg.get("error")
    if err is None:
        return
    text = json.dumps(err)
    assert "Traceback" not in text and "traceback" not in text and 'File "' not in text, err


# --- 1. documents that are not regular files --------------------------------------------------


@pytest.fixture
def odd_files(tmp_path, ws):
    d = tmp_path / "odd"
    d.mkdir()
    os.mkfifo(d / "pipe.py")
    with open(d / "huge.py", "wb") as f:  # sparse: 20 MiB + 1 without using the disk
        f.truncate(20 * 1024 * 1024 + 1)
    return {
        "fifo": ((d / "pipe.py").as_uri(), "FIFO"),
        "zero": ("file:///dev/zero", "character device"),
        "huge": ((d / "huge.py").as_uri(), "too large"),
        "dir": (d.as_uri(), "directory"),
    }


@pytest.mark.parametrize("kind", ["fifo", "zero", "huge", "dir"])
def test_odd_documents_hover_none_explain_error(client, ws, odd_files, kind):
    uri, needle = odd_files[kind]
    t0 = time.monotonic()
    res = client.call("textDocument/hover", _hover(uri))
    assert res.get("result") is None and "error" not in res, res
    res = client.call("textDocument/codeLens", {"textDocument": {"uri": uri}})
    assert res.get("result") in ([], None) and "error" not in res, res
    res = client.call("engram/explain", {"textDocument": {"uri": uri}, "range": _range()})
    err = res["error"]
    assert err["code"] == ENGRAM_ERROR and err["data"]["code"] == "unreadable-file", err
    assert needle in err["message"]
    _no_traceback(res)
    assert time.monotonic() - t0 < WAIT_S
    client.assert_alive(ws)
