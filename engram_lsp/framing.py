"""The LSP base protocol's framing, read so that one bad frame cannot make the server deaf.

pygls' reader (``pygls.io_.run_async``) matches ``Content-Length: <n>\\r\\n`` exactly: a header
written in another case (``content-length:``, which HTTP-minded clients send), a frame without a
length, or a negative one leaves it waiting for a length that never comes, and every later
request is lost. ``serve`` replaces it on every transport (``EngramLanguageServer.start_io`` and
``start_tcp``):

* header names are case-insensitive, ``\\n`` is accepted for ``\\r\\n``, blank lines between
  frames are ignored, headers other than ``Content-Length`` are ignored;
* a frame whose header block has no valid length (missing, negative, not a number, over
  ``MAX_BODY_BYTES``, or a malformed header line) is logged and skipped: its body, of unknown
  length, is discarded up to the next ``Content-Length`` header, found even when it follows the
  body on the same line (a body has no newline of its own to end it). Junk between frames is
  skipped the same way. Memory stays bounded: a header line longer than the reader's limit is
  dropped in pieces;
* a complete body goes to ``protocol.handle_body``, which answers malformed JSON with a
  ``-32700 Parse error`` (``EngramProtocol``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 128 * 1024 * 1024  # a didOpen of the largest file an editor syncs, and more
MAX_LINE_BYTES = 64 * 1024  # a header line (the stream readers' limit is at least this)

# a well-formed header line: ``Name: value`` (RFC 7230 token for the name)
_HEADER = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]*:[ \t]*([^\r\n]*)\r?\n?")
_CONTENT_LENGTH = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
_DIGITS = re.compile(rb"[0-9]{1,12}")


class BlockingReader:
    """A blocking binary stream (a file or a terminal as stdin) read on an executor thread,
    with header lines bounded (``asyncio.StreamReader`` bounds them itself)."""

    def __init__(self, stream, executor=None):
        self.stream, self.executor = stream, executor

    async def readline(self) -> bytes:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self.stream.readline, MAX_LINE_BYTES)

    async def readexactly(self, n: int) -> bytes:
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(self.executor, self.stream.read, n)
        if len(data) < n:
            raise asyncio.IncompleteReadError(data, n)
        return data


class FrameReader:
    """Bodies of LSP frames from a reader with ``readline()`` and ``readexactly(n)``."""

    def __init__(self, reader: Any):
        self.reader = reader
        self.skipping = False  # discarding bytes after a bad frame (logged once per run)
        self.bad_frames = 0

    async def next_body(self) -> bytes | None:
        """The next frame's body; ``None`` at the end of the stream."""
        length: int | None = None
        problem: str | None = None
        in_headers = False
        while True:
            try:
                line = await self.reader.readline()
            except ValueError:  # asyncio: a line over the limit (its bytes are dropped)
                if in_headers:
                    problem = problem or "a header line over the size limit"
                else:
                    self._skip("a line over the size limit")
                continue
            if not line:
                return None
            if not line.strip():  # the blank line that ends a header block
                if not in_headers:
                    continue  # blank lines between frames
                if length is not None and problem is None:
                    try:
                        return await self.reader.readexactly(length)
                    except asyncio.IncompleteReadError:
                        log.warning("the client closed the stream inside a %d-byte body", length)
                        return None
                self._bad_frame(problem or "no Content-Length header")
                length, problem, in_headers = None, None, False
                continue
            if not in_headers:
                match = _HEADER.fullmatch(line)
                if match is None:  # junk: look for the next frame's header on this line
                    at = _CONTENT_LENGTH.search(line)
                    if at is None or at.start() > 0:
                        self._skip(f"bytes outside a frame ({_show(line)})")
                    if at is None:
                        continue
                    line = line[at.start() :]
                    match = _HEADER.fullmatch(line)
                    if match is None:
                        continue
                if self.skipping:
                    log.info("LSP input: resynchronised on the next header")
                self.skipping = False
                in_headers = True
            else:
                match = _HEADER.fullmatch(line)
                if match is None:
                    problem = problem or f"a malformed header line ({_show(line)})"
                    continue
            name, value = match.group(1).lower(), match.group(2).strip()
            if name != b"content-length":
                continue
            if not _DIGITS.fullmatch(value):
                problem = problem or f"Content-Length {_show(value)} is not a length"
            elif int(value) > MAX_BODY_BYTES:
                problem = problem or f"Content-Length {int(value)} is over {MAX_BODY_BYTES}"
            elif length is not None and length != int(value):
                problem = problem or "two different Content-Length headers"
            else:
                length = int(value)

    def _bad_frame(self, why: str) -> None:
        self.bad_frames += 1
        log.warning("LSP input: bad frame (%s); skipping to the next header", why)
        self.skipping = True

    def _skip(self, what: str) -> None:
        if not self.skipping:
            log.warning("LSP input: skipping %s up to the next header", what)
            self.skipping = True


def _show(data: bytes, n: int = 40) -> str:
    text = repr(data[:n])
    return text + ("…" if len(data) > n else "")


async def serve(reader: Any, protocol: Any, stop_event, logger: logging.Logger | None = None):
    """Read frames until the stream ends (or ``stop_event`` is set), handing each body to
    ``protocol.handle_body``; a failure handling one message is logged and the next is read."""
    logger = logger or log
    frames = FrameReader(reader)
    while not stop_event.is_set():
        body = await frames.next_body()
        if body is None:
            break
        try:
            protocol.handle_body(body)
        except Exception:
            logger.exception("Unable to handle message")
