"""Helpers for the pytest-lsp end-to-end tests (also used by the nvim tests and the bench)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

from lsprotocol import types
from waiting import async_wait_until, wait_until

TIMEOUT = 30.0


async def call(coro, timeout: float = TIMEOUT):
    """Every request with a deadline: a server that never answers fails the test, not hangs it."""
    return await asyncio.wait_for(coro, timeout)


async def request(client, method: str, params):
    return await call(client.protocol.send_request_async(method, params))


async def wait_indexed(client, timeout: float = TIMEOUT) -> dict:
    """Poll ``engram/status`` until the startup ingest has finished; returns that status."""
    last = []

    async def indexed():
        status = await request(client, "engram/status", {})
        last[:] = [status]
        return status if status.server.last_ingest_at and not status.server.ingesting else None

    try:
        return await async_wait_until(indexed, timeout, interval=0.1,
                                      message="the index to be ready (an ingest finished)")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last engram/status: {last[0] if last else None}") from None


def open_doc(client, ws, rel: str, text: str | None = None, language: str = "python") -> str:
    uri = ws.uri(rel)
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri,
                language_id=language,
                version=1,
                text=text if text is not None else (ws.root / rel).read_text(),
            )
        )
    )
    return uri


async def hover(client, uri: str, line: int):
    return await call(
        client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line, character=0),
            )
        )
    )


async def lenses(client, uri: str):
    return await call(
        client.text_document_code_lens_async(
            types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
    )


# --- a raw stdio client, for what pytest-lsp cannot send (malformed params, a vanishing editor) ---


def explain_params(uri: str, start: int, end: int, **extra) -> dict:
    """``engram/explain`` params for 0-based lines ``start``..``end`` (whole lines)."""
    return {
        "textDocument": {"uri": uri},
        "range": {"start": {"line": start, "character": 0}, "end": {"line": end, "character": 0}},
        **extra,
    }


def plain(obj):
    """Named tuples (index rows) as dicts, recursively: comparable and printable."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def frame(obj) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_message(stream) -> dict:
    length = 0
    while True:
        line = stream.readline()
        if not line:
            raise EOFError
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        elif line in (b"\r\n", b"\n"):
            return json.loads(stream.read(length))


def read_until(proc, match, timeout: float = TIMEOUT, what: str = "a message") -> dict:
    """Read the server's messages until one satisfies ``match``, and return it; the test fails
    after ``timeout`` seconds, or when stdout ends first. (A thread reads: a pipe read has no
    deadline. Should it time out, the thread ends when the test kills the process.)"""
    found: list = []

    def reader():
        try:
            while True:
                msg = read_message(proc.stdout)
                if match(msg):
                    found.append(msg)
                    return
        except (EOFError, ValueError, OSError) as exc:
            found.append(exc)

    threading.Thread(target=reader, name="read_until", daemon=True).start()
    (got,) = wait_until(lambda: found, timeout, message=f"{what} from the server")
    if isinstance(got, BaseException):
        raise AssertionError(f"the server's output ended before {what}: {got!r}")
    return got


def start_raw(ws):
    return subprocess.Popen(
        [sys.executable, "-m", "engram_lsp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ws.env(),
    )


def initialize_raw(proc, ws):
    proc.stdin.write(
        frame(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"processId": None, "rootUri": ws.root.as_uri(), "capabilities": {}},
            }
        )
    )
    proc.stdin.flush()
    return read_until(proc, lambda msg: msg.get("id") == 1, what="the initialize response")
