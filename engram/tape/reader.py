"""Read tapes, verifying the name against the content.

``read_tape`` decompresses the whole tape (tapes are small next to zstd's ~1.5 GB/s), checks that
xxh3_128 of the bytes equals the tape id in the file name, and parses each line. Any mismatch,
truncation or bad line raises ``CorruptTape`` naming the file (and line). Unknown keys are kept.
A small LRU keeps recently read tapes so a window read on hover does not decompress twice.

A tape may come from a teammate, so it is untrusted input: it is decompressed with a limit
(``writer.size_limit``: at most ``MAX_TAPE_BYTES``, and past ``RATIO_FLOOR`` at most
``MAX_RATIO`` bytes per byte of file), so a zstd bomb -- a small file that decompresses to
gigabytes -- fails with ``CorruptTape`` before its output is allocated (a frame that declares its
size, as every tape Engram writes does) or after at most the limit (one that does not).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path

import orjson
import xxhash
import zstandard

from engram.errors import CorruptTape
from engram.tape.check import check_event
from engram.tape.writer import MAX_TAPE_BYTES, SUFFIX, size_limit

MAX_FILE_BYTES = MAX_TAPE_BYTES + (MAX_TAPE_BYTES >> 7)
"""The largest tape file read (zstd's worst case adds less than 1/256 to incompressible data)."""

log = logging.getLogger(__name__)

_FEED = 256
"""Compressed bytes fed at a time to a frame that does not declare its size: one such step
yields at most 8 MiB (a 4-byte RLE block makes 128 KiB), so the limit is overshot by no more."""


def tape_id_of(path: Path | str) -> str:
    name = os.path.basename(os.fspath(path).rstrip("/"))
    if not name.endswith(SUFFIX):
        raise CorruptTape(f"not a tape file name (expected <id>{SUFFIX})", path=str(Path(path)))
    return name[: -len(SUFFIX)]


_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor: making one costs about as much as decompressing a small tape,
    and one may not be used by two threads at once."""
    d = getattr(_local, "zstd", None)
    if d is None:
        d = _local.zstd = zstandard.ZstdDecompressor()
    return d


@contextlib.contextmanager
def _opened(path: Path | str):
    """``(file, size)`` of the tape at ``path``, open for reading; ``CorruptTape`` for a file that
    is missing, unreadable (also while the body reads it) or larger than a tape may be."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise CorruptTape("tape file vanished or does not exist", path=str(Path(path))) from None
    except OSError as e:
        raise CorruptTape(f"cannot read tape: {e.strerror or e}", path=str(Path(path))) from None
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_FILE_BYTES:
                raise CorruptTape(f"tape file is {size} bytes, more than a tape may hold "
                                  f"({MAX_FILE_BYTES})", path=str(Path(path)))
            yield f, size
        except OSError as e:
            raise CorruptTape(f"cannot read tape: {e.strerror or e}", path=str(Path(path))) from None


def read_raw(path: Path | str) -> bytes:
    """The tape's JSONL bytes, decompressed within ``size_limit`` and checked against its name
    (always: a tape whose name is not the hash of its content is refused). ``path`` is used as
    given (no ``Path`` made of it: the lineage pass reads thousands of tapes); errors name it as
    ``Path`` writes it."""
    want = tape_id_of(path)
    with _opened(path) as (f, size):
        data = f.read(size + 1)
    limit = size_limit(len(data))
    if _large(data, limit):
        _check_streamed(data, want, limit, path)
    raw = _decompress(data, limit, path)
    got = xxhash.xxh3_128_hexdigest(raw)
    if got != want:
        raise CorruptTape(f"content hash {got} does not match the tape's name", path=str(Path(path)))
    return raw


STREAM_CHECK_BYTES = 64 << 20
"""A tape that may decompress to more than this is first checked as a stream (decompressed
``_FEED`` bytes at a time, hashed, never held), so one that is not what its name says -- a zstd
bomb padded to pass the ratio rule, a mis-named or truncated big tape from a tape source -- is
refused in a few MiB instead of after holding up to ``MAX_TAPE_BYTES``; a tape that passes is
then decompressed whole as usual (twice the CPU, for tapes this large only)."""


def _large(data: bytes, limit: int) -> bool:
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        return False  # not zstd: ``_decompress`` says so
    if declared >= 0:  # more than ``limit``: ``_decompress`` refuses it from the header
        return STREAM_CHECK_BYTES < declared <= limit
    return limit > STREAM_CHECK_BYTES


def large(path: Path | str) -> bool:
    """Whether the tape at ``path`` may hold more than ``STREAM_CHECK_BYTES`` of content (its
    frame's declared size; without one, what its file's size allows): one ``read_raw`` would
    hold whole. False where it cannot tell (``read_raw`` then says why)."""
    try:
        with open(path, "rb") as f:
            head = f.read(18)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return False
    return _large(head, size_limit(size))


def check_raw(path: Path | str) -> None:
    """``read_raw``'s checks of the tape at ``path`` -- the file's size cap, one frame within its
    limit that ends and hashes to the tape's name -- and its ``CorruptTape``, with none of its
    content held (``_stream_frame``, nothing gathered): a tape already there is verified in a few
    MiB whatever its size, where ``read_raw`` holds it whole (a 1.5 GB session's tape: ~1 GB)."""
    want = tape_id_of(path)
    with _opened(path) as (f, size):
        data = f.read(_READ)
        for _piece in _stream_frame(f, data, size, size_limit(size), want, path, gather=False):
            pass


def _check_streamed(data: bytes, want: str, limit: int, path: Path) -> None:
    """Refuse a tape whose content is larger than ``limit``, does not end, or does not hash to
    ``want``, without holding its content (``_stream_frame`` over ``data``, nothing gathered)."""
    for _piece in _stream_frame(io.BytesIO(), data, len(data), limit, want, path, gather=False):
        pass


def _decompress(data: bytes, limit: int, path: Path) -> bytes:
    """One zstd frame, never more than ``limit`` bytes of output."""
    try:
        declared = zstandard.frame_content_size(data)
        if declared >= 0:  # the size is in the frame header: refuse before allocating
            if declared > limit:
                raise CorruptTape(f"tape declares {declared} bytes of content, more than its "
                                  f"{len(data)}-byte file may hold ({limit}): a zstd bomb?",
                                  path=str(Path(path)))
            # exactly ``declared`` bytes are allocated; a frame that makes more fails
            return _decompressor().decompress(data)
        dobj = _decompressor().decompressobj()
        out = bytearray()
        for i in range(0, len(data), _FEED):
            out += dobj.decompress(data[i:i + _FEED])
            if len(out) > limit:
                raise CorruptTape(f"tape decompresses to more than its {len(data)}-byte file "
                                  f"may hold ({limit} bytes): a zstd bomb?", path=str(Path(path)))
            if dobj.eof:
                break
        if not dobj.eof:
            raise CorruptTape("truncated zstd data (the frame does not end)", path=str(Path(path)))
        return bytes(out)
    except zstandard.ZstdError as e:
        raise CorruptTape(f"corrupt or truncated zstd data: {e}", path=str(Path(path))) from None


def _line_event(line: bytes, no: int, path: Path | str) -> dict:
    """Tape line ``no`` (1-based) parsed; ``CorruptTape`` when it is not a JSON object."""
    try:
        ev = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise CorruptTape(f"bad JSON in tape: {e}", path=str(path), line=no) from None
    if not isinstance(ev, dict):
        raise CorruptTape("tape line is not an object", path=str(path), line=no)
    return ev


def parse_lines(raw: bytes, path: Path | str = "<tape>") -> list[dict]:
    out = []
    for i, line in enumerate(raw.split(b"\n")):
        if line:
            out.append(_line_event(line, i + 1, path))
    if not out or out[0].get("k") != "meta":
        raise CorruptTape("tape does not start with a meta event", path=str(path), line=1)
    for n, ev in enumerate(out):  # the documented fields of the documented types (untrusted)
        check_event(ev, n, path)
    return out


def read_tape(path: Path) -> list[dict]:
    """All events of a tape; event offset n is list index n."""
    return parse_lines(read_raw(path), path)


# -- a tape read as a stream (a big tape from a tape directory: ``Ingestor._index_tape_dirs``) -----

STREAM_MIN_BYTES = 32 << 20
"""A tape whose content may be this big or bigger -- the size its zstd frame declares, or for a
frame that declares none the most its file may decompress to (``size_limit``) -- is indexed from a
tape directory as a stream (``stream_events``), never held whole; a smaller one is read whole
(``read_tape``), which is quicker for small tapes. The same threshold as a log's
(``ingestor.STREAM_MIN_BYTES``)."""

_PIECE = 1 << 20   # decompressed bytes gathered before they are cut into lines
_READ = 1 << 16    # compressed bytes read from the file at a time (fed ``_FEED`` at a time)


def content_bound(path: Path | str) -> int:
    """The most bytes the tape at ``path`` may hold: its frame's declared content size, else the
    most its file may decompress to; 0 when it is not a zstd frame, -1 when the file cannot be
    read (``read_raw`` says why, at once)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(18)   # (a zstd frame header is at most 18 bytes)
    except OSError:
        return -1
    limit = size_limit(size)
    try:
        declared = zstandard.frame_content_size(head)
    except zstandard.ZstdError:
        return 0   # not a zstd frame (or an empty file): ``read_raw`` refuses it at once
    return declared if 0 <= declared <= limit else limit


def stream_raw(path: Path | str):
    """The tape's JSONL as a stream, a piece of about ``_PIECE`` bytes at a time (a piece ends
    anywhere, not on a line), decompressed within ``size_limit`` as ``read_raw`` decompresses it
    -- the same file size cap, the same refusal of a frame declaring more than its file may hold,
    at most ``_FEED`` compressed bytes fed at a time -- and hashed as it goes: after the last
    piece, ``CorruptTape`` when the content does not end (a truncated frame) or does not hash to
    the tape's name. Whatever came before is then not the tape's: the caller keeps nothing of a
    stream that did not end without error."""
    want = tape_id_of(path)
    with _opened(path) as (f, size):
        data = f.read(_READ)
        yield from _stream_frame(f, data, size, size_limit(size), want, path)


def _stream_frame(f, data: bytes, size: int, limit: int, want: str, path, gather: bool = True):
    """(``stream_raw``) the frame of ``f``, whose first bytes are ``data``; without ``gather``,
    only checked (``_check_streamed``): nothing is gathered or yielded."""
    h = xxhash.xxh3_128()
    total = 0
    piece = bytearray()
    try:
        try:
            declared = zstandard.frame_content_size(data)
        except zstandard.ZstdError:
            declared = -1   # (not a zstd frame: the decompressor says so)
        if declared > limit:
            raise CorruptTape(f"tape declares {declared} bytes of content, more than its "
                              f"{size}-byte file may hold ({limit}): a zstd bomb?",
                              path=str(Path(path)))
        dobj = _decompressor().decompressobj()
        while data and not dobj.eof:
            view = memoryview(data)
            for i in range(0, len(view), _FEED):
                out = dobj.decompress(view[i:i + _FEED])
                total += len(out)
                if total > limit:
                    raise CorruptTape(f"tape decompresses to more than its {size}-byte file "
                                      f"may hold ({limit} bytes): a zstd bomb?", path=str(Path(path)))
                h.update(out)
                if gather:
                    piece += out
                if dobj.eof:
                    break
                if len(piece) >= _PIECE:
                    yield bytes(piece)
                    piece.clear()
            if not dobj.eof:
                data = f.read(_READ)
    except zstandard.ZstdError as e:
        raise CorruptTape(f"corrupt or truncated zstd data: {e}", path=str(Path(path))) from None
    except OSError as e:
        raise CorruptTape(f"cannot read tape: {e.strerror or e}", path=str(Path(path))) from None
    if piece:
        yield bytes(piece)
    if not dobj.eof:
        raise CorruptTape("truncated zstd data (the frame does not end)", path=str(Path(path)))
    got = h.hexdigest()
    if got != want:
        raise CorruptTape(f"content hash {got} does not match the tape's name", path=str(Path(path)))


def stream_lines(path: Path | str):
    """``(line number, line)`` of every non-empty line of the tape's JSONL, from ``stream_raw``
    (its errors raised where it raises them: the hash after the last line). A line longer than a
    piece is joined once, at its end."""
    pending: list[bytes] = []   # the pieces of a line not ended yet
    no = 0
    for piece in stream_raw(path):
        nl = piece.find(b"\n")
        if nl < 0:
            pending.append(piece)
            continue
        head = piece[:nl]
        if pending:
            pending.append(head)
            head = b"".join(pending)
            pending.clear()
        no += 1
        if head:
            yield no, head
        lines = piece[nl + 1:].split(b"\n")
        rest = lines.pop()
        for line in lines:
            no += 1
            if line:
                yield no, line
        if rest:
            pending.append(rest)
    if pending:
        yield no + 1, b"".join(pending)


def stream_events(path: Path | str, lines: bool = False):
    """The tape's events in order, each parsed and checked (``check.check_event``) as
    ``read_tape`` checks them, without the tape held whole (``stream_raw``); with ``lines``,
    ``(event, its line)``. ``CorruptTape`` as ``read_tape`` raises it, at the first bad line or
    event -- and after the last event when the content is not what the tape's name says (which
    ``read_tape`` finds first): what was yielded before an error is not the tape's. The error is
    then ``read_tape``'s only when the stream is read to its end first (``verify_stream``)."""
    n = 0
    for no, line in stream_lines(path):
        ev = _line_event(line, no, path)
        if n == 0 and ev.get("k") != "meta":
            raise CorruptTape("tape does not start with a meta event", path=str(path), line=1)
        check_event(ev, n, path)
        n += 1
        yield (ev, line) if lines else ev
    if n == 0:
        raise CorruptTape("tape does not start with a meta event", path=str(path), line=1)


def verify_stream(path: Path | str, each=None) -> int:
    """Read the tape at ``path`` as a stream to its end, checking all that ``read_tape`` checks,
    and raise the ``CorruptTape`` that ``read_tape`` would raise (the same message and line) --
    the content's size, end and hash first, then the first line that is not a JSON object, then
    the meta event, then the first event of the wrong shape; ``each(event)`` is called on each
    event (in order; those after a bad one are not given). The number of events.

    The content is checked first on its own (decompressed and hashed, none of it held), as
    ``read_raw`` checks a big tape: a zstd bomb or a tape that is not what its name says -- whose
    content may be one endless line -- is refused before any line of it is gathered."""
    check_raw(path)
    first_bad: CorruptTape | None = None    # the first bad line (JSON), else the first bad event
    bad_event = False
    n = 0
    for no, line in stream_lines(path):
        if first_bad is not None and not bad_event:
            continue   # (a line that is not JSON: the rest is hashed only)
        try:
            ev = _line_event(line, no, path)
        except CorruptTape as e:
            first_bad, bad_event = e, False
            continue
        if first_bad is not None:
            continue   # (an event of the wrong shape: later lines are still checked as JSON)
        if n == 0 and ev.get("k") != "meta":
            first_bad, bad_event = CorruptTape("tape does not start with a meta event",
                                               path=str(path), line=1), True
            continue
        try:
            check_event(ev, n, path)
        except CorruptTape as e:
            first_bad, bad_event = e, True
            continue
        n += 1
        if each is not None:
            each(ev)
    if first_bad is not None:
        raise first_bad
    if n == 0:
        raise CorruptTape("tape does not start with a meta event", path=str(path), line=1)
    return n


CACHE_MB = 128
"""Default budget of the LRU of decompressed tapes, in MiB of tape text."""
ENV_CACHE_MB = "ENGRAM_TAPE_CACHE_MB"
_warned: set[str] = set()


def cache_bytes() -> int:
    """The LRU's budget: ``$ENGRAM_TAPE_CACHE_MB`` (read when used, so a bad value cannot break
    ``import engram``) when it is a whole number >= 0, else ``CACHE_MB`` with one warning."""
    value = os.environ.get(ENV_CACHE_MB, "").strip()
    if not value:
        return CACHE_MB << 20
    try:
        mb = int(value)
        if mb < 0:
            raise ValueError
    except ValueError:
        if value not in _warned:
            _warned.add(value)
            log.warning("%s=%r is not a whole number of MiB; using %d", ENV_CACHE_MB, value,
                        CACHE_MB)
        return CACHE_MB << 20
    return mb << 20


_caps: list[int] = []   # ``capped``: lower budgets while passes that read each tape once run


def budget() -> int:
    """The LRU's budget now: ``cache_bytes()``, or less while ``capped``."""
    b = cache_bytes()
    return min(b, *_caps) if _caps else b


@contextlib.contextmanager
def capped(limit: int):
    """Hold at most ``limit`` bytes of tape text in the LRU while the block runs (and evict down to
    it now): for a pass that reads most tapes once (the lineage pass of an ingest), whose reads
    would otherwise fill the whole budget with tapes it does not read again — what a one-shot
    ingest holds then grows with the tapes it reads, up to ``CACHE_MB``. The previous budget
    comes back after it (the LRU refills as it is used)."""
    with _lru_lock:
        _caps.append(limit)  # (blocks on several threads may end in any order)
        _evict(budget())
    try:
        yield
    finally:
        with _lru_lock:
            _caps.remove(limit)


def _evict(limit: int) -> None:
    """(under ``_lru_lock``) Drop the least recently used tapes down to ``limit`` bytes (the last
    one read stays)."""
    global _lru_bytes
    while _lru_bytes > limit and len(_lru) > 1:
        _k, old = _lru.popitem(last=False)
        _lru_bytes -= sum(len(x) + 1 for x in old) - 1


_lru: OrderedDict[tuple[str, int, int], tuple[bytes, ...]] = OrderedDict()
_lru_bytes = 0
_lru_lock = threading.Lock()


def _cached(path: str, mtime_ns: int, size: int) -> tuple[bytes, ...]:
    """The verified lines of a tape, from an LRU bounded by the bytes it holds (a tape's name is
    its content hash, and (mtime, size) in the key notices a file replaced under the same name)."""
    global _lru_bytes
    key = (path, mtime_ns, size)
    with _lru_lock:
        hit = _lru.get(key)
        if hit is not None:
            _lru.move_to_end(key)
            return hit
    raw = read_raw(path)
    lines = tuple(raw.split(b"\n"))
    limit = budget()
    with _lru_lock:
        if key not in _lru:
            _lru[key] = lines
            _lru_bytes += len(raw)
            _evict(limit)
    return lines


def events_at(lines: tuple[bytes, ...], offsets: range | list[int], path: Path | str
              ) -> list[tuple[int, dict]]:
    """``(offset, event)`` for the given offsets of a tape's lines (``raw_lines_cached``)."""
    out = []
    for n in offsets:
        if 0 <= n < len(lines) and lines[n]:
            try:
                out.append((n, orjson.loads(lines[n])))
            except orjson.JSONDecodeError:
                raise CorruptTape("bad JSON in tape", path=str(path), line=n + 1) from None
    return out


def raw_lines_cached(path: Path) -> tuple[bytes, ...]:
    """The tape's JSONL lines (unparsed), from the same verified LRU."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CorruptTape("tape file vanished or does not exist", path=str(path)) from None
    except OSError as e:
        raise CorruptTape(f"cannot read tape: {e.strerror or e}", path=str(path)) from None
    return _cached(str(path), st.st_mtime_ns, st.st_size)
