"""Verify a tape that came from elsewhere before anything trusts it, in bounded memory.

A tape from a remote is hostile until proven otherwise. ``verify_stream`` reads its compressed
bytes once, in chunks, and at the same time

* copies them to ``sink`` (the temp file it will be renamed from, or nowhere),
* decompresses them piece by piece (a frame that does not declare its size, 256 bytes of input at
  a time: at most 8 MiB of output each), so a zstd bomb is never held: memory stays a few MiB
  whatever the frame claims,
* hashes the output with xxh3-128 as it streams and counts it: past the cap (``cap_for``: the
  configured ``sharing.maxTapeBytes``, default ``MAX_TAPE_BYTES`` = 512 MiB, and never more than
  the local reader accepts for a file of that size, ``engram.tape.writer.size_limit``) it stops,
* checks the first line is a ``meta`` event.

The name must equal the hash. A frame header that declares more than the cap is refused before
any decompression. A frame that does not end (a truncated file) or bytes that are not zstd are
refused. Each refusal is a ``CorruptTape`` naming the tape, so the caller can go on with the rest.
"""

from __future__ import annotations

import io
import re

import orjson
import xxhash
import zstandard

from engram.errors import CorruptTape
from engram.tape.writer import SUFFIX, size_limit

MAX_TAPE_BYTES = 512 << 20
"""Default cap on a foreign tape's decompressed size (``sharing.maxTapeBytes`` changes it)."""
IN_CHUNK = 1 << 16
_FEED = 256
META_PREFIX = 1 << 20
"""The first line (the ``meta`` event) must end within this many bytes."""

TAPE_ID = re.compile(r"^[0-9a-f]{32}$")
TAPE_NAME = re.compile(r"^([0-9a-f]{32})" + re.escape(SUFFIX) + "$")


def cap_for(file_bytes: int, max_tape_bytes: int = MAX_TAPE_BYTES) -> int:
    """The most bytes a foreign tape file of ``file_bytes`` may decompress to."""
    return min(max_tape_bytes, size_limit(file_bytes))


class _Tee(io.RawIOBase):
    """``size`` bytes of ``src`` (a pipe may hold more after them), copied to ``sink`` as read."""

    def __init__(self, src, size: int, sink):
        self.src, self.left, self.sink = src, size, sink

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.left <= 0:
            return 0
        data = self.src.read(min(len(b), self.left, IN_CHUNK))
        if not data:
            raise CorruptTape("the tape's bytes end early")
        self.left -= len(data)
        if self.sink is not None:
            self.sink.write(data)
        b[:len(data)] = data
        return len(data)

    def drain(self) -> None:
        """Read what is left (a pipe must be read to the end of this object)."""
        while self.left > 0:
            data = self.src.read(min(self.left, IN_CHUNK))
            if not data:
                return
            self.left -= len(data)


def verify_stream(src, size: int, tape_id: str, *, name: str, sink=None,
                  max_tape_bytes: int = MAX_TAPE_BYTES) -> dict:
    """Verify ``size`` compressed bytes read from ``src`` as the tape ``tape_id``; ``name`` is
    what an error calls it. Returns ``{"tape_id", "bytes", "raw_bytes", "meta"}``; raises
    ``CorruptTape`` (``src`` is read to the end of the tape either way)."""
    tee = _Tee(src, size, sink)
    try:
        return _verify(tee, size, tape_id, name, max_tape_bytes)
    finally:
        tee.drain()


def _verify(tee: _Tee, size: int, tape_id: str, name: str, max_tape_bytes: int) -> dict:
    if not TAPE_ID.match(tape_id):
        raise CorruptTape("not a tape name (expected 32 hex digits)", path=name)
    cap = cap_for(size, max_tape_bytes)
    head = tee.read(min(IN_CHUNK, size)) if size else b""
    if len(head) < 4:
        raise CorruptTape("empty or truncated tape (no zstd frame)", path=name)
    try:
        declared = zstandard.frame_content_size(head)
    except zstandard.ZstdError:
        raise CorruptTape("not zstd data", path=name) from None
    if declared > cap:
        raise CorruptTape(f"tape declares {declared} bytes of content, more than the "
                          f"{cap} allowed: a zstd bomb?", path=name)
    # fed ``_FEED`` bytes at a time: one step yields at most 8 MiB (a 4-byte RLE block makes
    # 128 KiB), whatever the frame declares (libzstd only bounds the total by the declared size)
    feed = _FEED
    dobj = zstandard.ZstdDecompressor().decompressobj()
    h = xxhash.xxh3_128()
    total = 0
    first = bytearray()
    meta = None
    data = head
    try:
        while data and not dobj.eof:
            for i in range(0, len(data), feed):
                out = dobj.decompress(data[i:i + feed])
                total += len(out)
                if total > cap:
                    raise CorruptTape(f"tape decompresses to more than the {cap} bytes allowed: "
                                      "a zstd bomb?", path=name)
                h.update(out)
                if meta is None and out:
                    meta = _meta(first, out, name)
                if dobj.eof:
                    break
            data = tee.read(IN_CHUNK)
    except zstandard.ZstdError as e:
        raise CorruptTape(f"corrupt or truncated zstd data: {e}", path=name) from None
    if not dobj.eof or (declared >= 0 and total != declared):
        raise CorruptTape("truncated zstd data (the frame does not end)", path=name)
    got = h.hexdigest()
    if got != tape_id:
        raise CorruptTape(f"content hash {got} does not match the tape's name", path=name)
    if meta is None:
        raise CorruptTape("tape does not start with a meta event", path=name, line=1)
    return {"tape_id": tape_id, "bytes": size, "raw_bytes": total, "meta": meta}


def _meta(first: bytearray, chunk: bytes, name: str) -> dict | None:
    """The meta event once the first line is complete (None until then)."""
    nl = chunk.find(b"\n")
    first += chunk if nl < 0 else chunk[:nl]
    if nl < 0:
        if len(first) > META_PREFIX:
            raise CorruptTape("the tape's first line is longer than a meta event may be",
                              path=name, line=1)
        return None
    try:
        ev = orjson.loads(bytes(first))
    except orjson.JSONDecodeError:
        raise CorruptTape("bad JSON in the tape's first line", path=name, line=1) from None
    if not isinstance(ev, dict) or ev.get("k") != "meta":
        raise CorruptTape("tape does not start with a meta event", path=name, line=1)
    return ev
