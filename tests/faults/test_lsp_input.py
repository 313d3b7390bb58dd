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

    def __init__(self, ws, tmp: Path, command: list[str] | None = None):
        self.log = tmp / "server.log"
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "engram_lsp"]), "--log-file", str(self.log)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=ws.env(),
        )
        self.messages: queue.Queue = queue.Queue()
        self.seen: list[dict] = []  # read while waiting for another message
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
        for i, msg in enumerate(self.seen):
            if match(msg):
                return self.seen.pop(i)
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
            self.seen.append(msg)
            del self.seen[:-1000]

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


def test_odd_documents_hover_none_explain_error(client, ws, odd_files):
    for kind, (uri, needle) in odd_files.items():
        t0 = time.monotonic()
        res = client.call("textDocument/hover", _hover(uri))
        assert res.get("result") is None and "error" not in res, (kind, res)
        res = client.call("textDocument/codeLens", {"textDocument": {"uri": uri}})
        assert res.get("result") in ([], None) and "error" not in res, (kind, res)
        res = client.call("engram/explain", {"textDocument": {"uri": uri}, "range": _range()})
        err = res["error"]
        assert err["code"] == ENGRAM_ERROR and err["data"]["code"] == "unreadable-file", err
        assert needle in err["message"], (kind, err)
        _no_traceback(res)
        assert time.monotonic() - t0 < WAIT_S, kind
    client.assert_alive(ws)


# --- 2. broken frames --------------------------------------------------------------------------


def _body(msg_id: int, method: str = "engram/no-such-method") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {}}).encode()


def _answered(client, msg_id: int, what: str = "") -> dict:
    try:
        res = client.response(msg_id)
    except AssertionError:
        raise AssertionError(f"request {msg_id} not answered after {what}") from None
    assert res["error"]["code"] == -32601, res  # the request reached its handler lookup
    return res


def test_header_names_are_case_insensitive(client, ws):
    client.send(_body(1), header=b"content-length: %d\r\n\r\n")
    _answered(client, 1)
    client.send(_body(2), header=b"CONTENT-LENGTH:%d\ncontent-type: application/json\n\n")
    _answered(client, 2)
    client.assert_alive(ws)


BAD_FRAMES = {
    "no header at all": b"\r\n" + _body(1),
    "no Content-Length": b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + _body(1),
    "negative length": b"Content-Length: -%d\r\n\r\n" % len(_body(1)) + _body(1),
    "length not a number": b"Content-Length: twelve\r\n\r\n" + _body(1),
    "length over the limit": b"Content-Length: 99999999999\r\n\r\n" + _body(1),
    "header without a colon": b"Content-Length %d\r\n\r\n" % len(_body(1)) + _body(1),
    "two lengths": b"Content-Length: 3\r\nContent-Length: %d\r\n\r\n" % len(_body(1)) + _body(1),
    "junk between frames": b"garbage between frames\r\n\x00\xff\x1b[2J",
    "a line over the reader's limit": b"x" * (2 << 20) + b"\r\n",
}


def test_a_bad_frame_is_skipped_and_the_next_is_answered(client, ws):
    msg_id = 10
    for what, bad_frame in BAD_FRAMES.items():
        client.send_bytes(bad_frame)
        client.send(_body(msg_id))
        _answered(client, msg_id, what)
        msg_id += 1
    assert not any(m.get("id") == 1 for m in client.seen)  # the bad frames' request: dropped
    client.assert_alive(ws)
    log = client.log.read_text()
    assert "bad frame" in log and "skipping" in log


def test_body_shorter_than_its_length_claim(client, ws):
    body = _body(1)
    client.send_bytes(b"Content-Length: 10\r\n\r\n" + body)  # the rest of the body is junk
    res = client.wait_for(lambda m: "error" in m and m.get("id") is None)
    assert res["error"]["code"] == PARSE_ERROR
    client.send(_body(2))
    _answered(client, 2)


MALFORMED_JSON = {
    "truncated object": b"{not json",
    "truncated request": b'{"jsonrpc": "2.0", "id": 7, "method": ',
    "not UTF-8": b"\xff\xfe\x00garbage",
    "empty": b"",
    "nested too deeply": b"[" * 100_000,
}


def test_malformed_json_is_a_parse_error(client, ws):
    for what, body in MALFORMED_JSON.items():
        client.send(body)
        res = client.wait_for(lambda m: "error" in m)
        assert res["id"] is None and res["error"]["code"] == PARSE_ERROR, (what, res)
        assert res["error"]["message"].startswith("Parse error"), (what, res)
        _no_traceback(res)
    client.assert_alive(ws)


NOT_REQUESTS = [
    (b"[1, 2, 3]", None),
    (b'"a string"', None),
    (b'{"id": 5, "method": "initialize"}', 5),  # no "jsonrpc"
    (b'{"jsonrpc": "1.0", "id": 6, "method": "engram/status"}', 6),
    (b'{"jsonrpc": "2.0", "id": [1], "method": "engram/status"}', None),
    (b'{"jsonrpc": "2.0", "id": 8, "method": 42}', 8),
]


def test_json_that_is_not_a_request_is_an_invalid_request(client, ws):
    for body, msg_id in NOT_REQUESTS:
        client.send(body)
        res = client.wait_for(lambda m: "error" in m)
        assert res["id"] == msg_id and res["error"]["code"] == -32600, (body, res)
    # params may be left out (JSON-RPC): a method without params is not "invalid params"
    res = client.call("engram/no-such-method")
    assert res["error"]["code"] == -32601, res
    client.assert_alive(ws)


# --- 3. a handler that fails: the error says what, the traceback stays in the log -------------

CRASHING_SERVER = """
import sys
from engram_lsp import server
from engram_lsp.__main__ import main

make = server.create_server

def create_server(**kw):
    srv = make(**kw)

    @srv.feature("test/crash")
    async def crash(ls, params):
        raise RuntimeError("boom\\nsecond line of the message")

    @srv.feature("test/crash-sync")
    def crash_sync(ls, params):
        return {}["no such key"]

    return srv

server.create_server = create_server
sys.exit(main(sys.argv[1:]))
"""


def test_internal_errors_carry_no_traceback(ws, tmp_path):
    c = RawClient(ws, tmp_path, command=[sys.executable, "-c", CRASHING_SERVER])
    try:
        c.initialize(ws)
        for method, needle in (("test/crash", "RuntimeError: boom"), ("test/crash-sync", "KeyError")):
            res = c.call(method, {})
            err = res["error"]
            assert err["code"] == -32603 and needle in err["message"], err
            assert "data" not in err and "\n" not in err["message"], err
            _no_traceback(res)
        c.assert_alive(ws)
        assert "Traceback" in c.log.read_text()  # ... it went to the log
    finally:
        c.close()


# --- 3b. terminal escapes from the logs stay out of the hover ----------------------------------

RAW_CONTROLS = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"


def test_hover_escapes_terminal_controls_from_logs(ws, tmp_path):
    import re

    nasty = "Adding it \x1b]52;c;ZXZpbA==\x07 now\x1b]0;pwned\x07 \u202eevil\u202c \x9b2J"
    ws.append_write("fib.py", workspaces.NEW_CODE, text=nasty)
    (ws.root / "fib.py").write_text(workspaces.NEW_CODE)
    c = RawClient(ws, tmp_path)
    try:
        c.call(
            "initialize",
            {"processId": os.getpid(), "rootUri": ws.root.as_uri(), "capabilities": {},
             "initializationOptions": {"watch": {"enabled": False}}},
        )
        c.notify("initialized", {})
        deadline = time.monotonic() + 60
        while True:  # the startup ingest has to finish first
            res = c.call("textDocument/hover", _hover(ws.uri("fib.py"), 2))
            if res.get("result") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        value = res["result"]["contents"]["value"]
        assert not re.findall(RAW_CONTROLS, value), value
        assert "\\x1b\\]52;c;ZXZpbA==\\x07" in value and "\\u202eevil\\u202c" in value, value
    finally:
        c.close()


# --- 4. bad params, many of them ----------------------------------------------------------------

FUZZ_SECONDS = 15.0
FUZZ_MAX = 2600
FUZZ_BATCH = 40


def _nested(depth: int):
    value: object = {"line": 1}
    for _ in range(depth):
        value = {"start": value}
    return value


def _fuzz_values(rng, ws, odd: dict) -> list:
    uris = [
        ws.uri("hello.py"), "file:///nonexistent/x.py", "untitled:Untitled-1", "http://x/y.py",
        "file:", "file://", "file:///", "file:///%00x.py", "file:///" + "a" * 5000, "file:///dev/zero",
        "file://host/share/x.py", "FILE:///x.py", "file:///tmp/%ZZ", "", " ", "\x1b]52;c;eA==\x07",
        *(u for u, _ in odd.values()),
    ]
    scalars = [None, True, False, 0, -1, 1, 2**31 - 1, 2**31, 2**53, 2**63, -(2**63), 10**30, 1.5,
               -0.0, 1e308, float("inf"), float("nan"), "", "x", "3-5", "\u202e", "a" * 10000, [],
               {}, [None], {"a": 1}, _nested(900)]
    lines = [0, 1, 3, -1, -(2**31), 2**31 - 1, 2**31, 2**53, 10**30, 1.5, "1", None, True]
    pos = lambda: rng.choice([  # noqa: E731
        {"line": rng.choice(lines), "character": rng.choice(lines)},
        {"line": rng.choice(lines)}, {}, rng.choice(scalars), [1, 2]])
    rngs = lambda: rng.choice([  # noqa: E731
        {"start": pos(), "end": pos()}, {"start": pos()}, {"end": pos()}, rng.choice(scalars),
        {"start": {"line": 0, "character": 0}, "end": {"line": rng.choice(lines), "character": 0}}])
    doc = lambda: rng.choice([{"uri": rng.choice(uris)}, {"uri": rng.choice(scalars)}, {},  # noqa: E731
                              rng.choice(scalars), {"uri": rng.choice(uris), "version": "x"}])
    return [uris, scalars, lines, pos, rngs, doc]


def _fuzz_request(rng, ws, odd: dict) -> tuple[str, object]:
    uris, scalars, lines, pos, rngs, doc = _fuzz_values(rng, ws, odd)
    opt = lambda: {k: rng.choice(scalars) for k in rng.sample(  # noqa: E731
        ["before", "after", "minConfidence", "all", "expandUntil", "brief", "windows"], rng.randint(0, 3))}
    method = rng.choice(["hover", "lens", "explain", "explain", "command", "view", "search", "raw"])
    if method == "hover":
        return "textDocument/hover", rng.choice(
            [{"textDocument": doc(), "position": pos()}, {"textDocument": doc()}, rng.choice(scalars)])
    if method == "lens":
        return "textDocument/codeLens", rng.choice([{"textDocument": doc()}, rng.choice(scalars)])
    if method == "explain":
        return "engram/explain", rng.choice(
            [{"textDocument": doc(), "range": rngs(), **opt()}, {"textDocument": doc()},
             rng.choice(scalars)])
    if method == "command":
        args = rng.choice([[rng.choice(uris), rngs()], [rng.choice(uris), rngs(), opt()],
                           [rng.choice(scalars)], rng.choice(scalars), []])
        return "workspace/executeCommand", {"command": "engram.explain", "arguments": args}
    if method == "view":
        return "engram/view", rng.choice(
            [{"tapeId": rng.choice(scalars), "at": rng.choice(lines)},
             {"tapeId": "x", "at": 0, "before": rng.choice(scalars), "after": rng.choice(scalars)},
             rng.choice(scalars)])
    if method == "search":
        return "engram/search", rng.choice(
            [{"query": rng.choice(scalars), "limit": rng.choice(lines)}, rng.choice(scalars)])
    return rng.choice(["engram/status", "textDocument/hover", "engram/explain"]), rng.choice(scalars)


def test_fuzzed_params_never_crash_nor_leak_tracebacks(client, ws, odd_files):
    import random

    rng = random.Random(20261125)
    deadline = time.monotonic() + FUZZ_SECONDS
    sent = answered = 0
    codes: dict[int, int] = {}
    internal = []
    # notifications with bad params too: they have no answer, but must not kill the server
    for params in (None, {}, {"textDocument": 7}, {"textDocument": {"uri": "file:///dev/zero",
                   "languageId": 1, "version": "x", "text": None}}):
        client.notify("textDocument/didOpen", params)
        client.notify("textDocument/didClose", params)
        client.notify("workspace/didChangeConfiguration", params)
    while sent < FUZZ_MAX and time.monotonic() < deadline:
        batch = {}
        for _ in range(FUZZ_BATCH):
            method, params = _fuzz_request(rng, ws, odd_files)
            batch[client.request(method, params)] = (method, params)
        sent += len(batch)
        for msg_id, (method, params) in batch.items():
            try:
                res = client.response(msg_id, timeout=30)
            except AssertionError:
                raise AssertionError(f"no answer to {method} {params!r:.300}") from None
            answered += 1
            _no_traceback(res)
            if "error" in res:
                err = res["error"]
                codes[err["code"]] = codes.get(err["code"], 0) + 1
                assert isinstance(err["message"], str) and "\n" not in err["message"], err
                if err["code"] not in (INVALID_PARAMS, ENGRAM_ERROR):
                    internal.append((method, params, err))
    print("fuzz:", sent, "requests", codes)
    assert answered == sent >= 200, (sent, answered)
    assert not internal, internal[:5]
    assert codes.get(INVALID_PARAMS, 0) > sent // 4, codes
    client.assert_alive(ws)


# --- the TCP transport reads frames the same way ------------------------------------------------


def test_tcp_transport_survives_bad_frames(ws, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "tcp.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_lsp", "--tcp", f"127.0.0.1:{port}", "--log-file", str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ws.env(),
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no TCP server"
                time.sleep(0.1)
        with conn:
            stream = conn.makefile("rwb")
            stream.write(BAD_FRAMES["negative length"] + BAD_FRAMES["junk between frames"])
            stream.write(b"content-length: %d\r\n\r\n" % len(_body(5)) + _body(5))
            stream.write(b"Content-Length: 9\r\n\r\n{not json")
            stream.flush()
            got = []
            while len(got) < 2:
                length = None
                while (line := stream.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                assert length is not None, "the server closed the connection"
                got.append(json.loads(stream.read(length)))
        assert got[0]["id"] == 5 and got[0]["error"]["code"] == -32601, got
        assert got[1]["id"] is None and got[1]["error"]["code"] == PARSE_ERROR, got
    finally:
        proc.kill()
        proc.wait()
