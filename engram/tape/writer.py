"""Write a tape: ``<xxh3_128(jsonl)>.jsonl.zst``, atomically, never overwriting.

The JSONL bytes are canonical (keys sorted, compact separators, UTF-8), so the same events always
give the same tape id. The file is written to a temp file in the target directory, fsynced, then
renamed into place; if a tape with that name already exists nothing is written (its content is, by
construction, the same). Tape directories are 0700 and tapes 0600, whatever the umask.

A temp file is named ``.<tape id>.<pid>-<host>.<random>.tmp``: a writer killed before its rename
(kill -9, power loss) leaves it behind, and ``sweep_temp`` removes those of writers that are gone
(``<host>`` tells this machine's processes, whose pids can be checked, from others').

A tape holds at most ``MAX_TAPE_BYTES`` of JSONL, and its file is never smaller than
1/``MAX_RATIO`` of that past ``RATIO_FLOOR`` (``size_limit``): the reader refuses anything else as
a zstd bomb. The writer keeps to it: a session too large raises ``TapeTooLarge``, and the rare
tape that compresses better than ``MAX_RATIO`` is padded with a zstd skippable frame.

Events are encoded one at a time (``_Encoded``): the tape id is an incremental xxh3-128 over the
lines as they are made, and the JSONL is held once — in memory up to ``SPILL_BYTES``, past that in
an unnamed temp file of the tape's directory (never a second copy, never a list of lines). A tape
already there under its name is not compressed at all. The file is one zstd frame made in one call
(``_compress``) from those bytes (a spilled tape: its temp file mapped, read by the kernel's page
cache rather than held on the heap): a frame compressed piece by piece differs, past the 2 MiB
window, from the one-call frame, and a tape's bytes must not depend on how it was written.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import mmap
import os
import re
import socket
import stat
import struct
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import orjson
import xxhash
import zstandard

from engram import paths
from engram.errors import EngramError
from engram.files import fsync_dir

SUFFIX = ".jsonl.zst"
ZSTD_LEVEL = 3

MAX_TAPE_BYTES = 1 << 30
"""The most JSONL bytes a tape holds (1 GiB); the reader refuses to decompress more."""
RATIO_FLOOR = 64 << 20
MAX_RATIO = 100
"""Past ``RATIO_FLOOR`` bytes, a tape decompresses to at most ``MAX_RATIO`` bytes per byte of its
file (real tapes: 3-15)."""


def size_limit(file_bytes: int) -> int:
    """The most bytes a tape file of ``file_bytes`` may decompress to."""
    return min(MAX_TAPE_BYTES, max(RATIO_FLOOR, file_bytes * MAX_RATIO))


class TapeTooLarge(EngramError):
    """A session's JSONL is larger than a tape may hold (``MAX_TAPE_BYTES``)."""

    code = "tape-too-large"

_local = threading.local()


def _compress(raw) -> bytes:
    """``raw`` (bytes, or any buffer: a mapped spill file) as one zstd frame (its size in the
    header), by this thread's compressor: making one costs half as much again as compressing a
    typical tape, and one may not be used by two threads at once. A frame smaller than
    ``size_limit`` allows is followed by a skippable frame."""
    c = getattr(_local, "zstd", None)
    if c is None:
        c = _local.zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    data = c.compress(raw)
    if len(raw) > size_limit(len(data)):
        pad = max(0, -(-len(raw) // MAX_RATIO) - len(data) - 8)
        data += struct.pack("<II", 0x184D2A50, pad) + bytes(pad)
    return data


DROP_EVERY_S = 0.02
"""While a spilled tape is compressed from its mapped file, the pages zstd has read are dropped
from this process this often (``_compress_file``)."""


def _compress_file(fd: int, start: int, size: int) -> bytes:
    """``_compress`` of ``size`` bytes of the file ``fd`` from ``start``, in one call (the same
    frame as from bytes), from the file mapped. zstd reads it once, front to back, and needs only
    its window (2 MiB at ``ZSTD_LEVEL``) behind where it is: a thread drops the mapping's pages
    from this process every ``DROP_EVERY_S`` while it runs (``MADV_DONTNEED``: the file and the
    page cache keep them, a page read again is mapped again), so the mapped tape does not count
    whole in its resident memory (it did: 277 MB of file pages for a 400 MB log). The compressor
    releases the GIL while it works."""
    base = start - start % mmap.ALLOCATIONGRANULARITY
    with mmap.mmap(fd, start - base + size, access=mmap.ACCESS_READ, offset=base) as mm:
        try:
            mm.madvise(mmap.MADV_SEQUENTIAL)
        except (AttributeError, OSError):
            pass
        stop = threading.Event()
        dropper = None
        if size > 2 * SPILL_BYTES and hasattr(mmap, "MADV_DONTNEED"):
            def drop() -> None:
                while not stop.wait(DROP_EVERY_S):
                    try:
                        mm.madvise(mmap.MADV_DONTNEED)
                    except (OSError, ValueError):
                        return
            dropper = threading.Thread(target=drop, name="engram-tape-drop", daemon=True)
            dropper.start()
        view = memoryview(mm)[start - base:]
        try:
            return _compress(view)
        finally:
            view.release()
            stop.set()
            if dropper is not None:
                dropper.join()


def _cffi_compressor():
    """This thread's ``zstandard`` compressor of the cffi backend (the same zstd library and
    parameters as ``_compress``'s, so the same frame) and its ``ffi``/``lib``; None without cffi."""
    got = getattr(_local, "zstd_cffi", None)
    if got is None:
        try:
            from zstandard import backend_cffi
        except ImportError:
            got = False
        else:
            major, minor, patch = zstandard.ZSTD_VERSION
            if backend_cffi.lib.ZSTD_versionNumber() != major * 10000 + minor * 100 + patch:
                got = False   # another zstd than the one ``_compress`` uses
            else:
                got = (backend_cffi.ZstdCompressor(level=ZSTD_LEVEL), backend_cffi.ffi,
                       backend_cffi.lib)
        _local.zstd_cffi = got
    return got or None


def _compress_file_into(fd: int, start: int, size: int, out_fd: int) -> int | None:
    """``_compress_file(fd, start, size)`` written into the empty file ``out_fd`` rather than
    returned: the same frame (one ``ZSTD_e_end`` call over the whole input into room for
    ``ZSTD_compressBound`` bytes, as ``_compress``), made into the output file mapped, whose pages
    are dropped from this process as they are written (with the input's, ``DROP_EVERY_S``): the
    compressed tape is never held in memory (67 MB for an 800 MB log). The room is reserved on
    disk first (``posix_fallocate``), so a full disk is an ``OSError`` here, never a fault in the
    mapping; the file is then cut to the frame. Its length (the padding ``_compress`` adds
    included); None when this cannot be done here (no cffi backend, no room to reserve, no
    ``fallocate``): the caller compresses in memory then."""
    got = _cffi_compressor()
    if got is None or not hasattr(os, "posix_fallocate"):
        return None
    comp, ffi, lib = got
    bound = lib.ZSTD_compressBound(size)
    try:
        os.posix_fallocate(out_fd, 0, bound)
    except OSError:
        os.ftruncate(out_fd, 0)
        return None
    base = start - start % mmap.ALLOCATIONGRANULARITY
    with mmap.mmap(fd, start - base + size, access=mmap.ACCESS_READ, offset=base) as mm, \
            mmap.mmap(out_fd, bound, access=mmap.ACCESS_WRITE) as om:
        for m, advice in ((mm, "MADV_SEQUENTIAL"), (om, "MADV_SEQUENTIAL")):
            try:
                m.madvise(getattr(mmap, advice))
            except (AttributeError, OSError):
                pass
        stop = threading.Event()
        dropper = None
        if hasattr(mmap, "MADV_DONTNEED"):
            def drop() -> None:
                while not stop.wait(DROP_EVERY_S):
                    try:
                        mm.madvise(mmap.MADV_DONTNEED)
                        om.madvise(mmap.MADV_DONTNEED)   # written pages stay in the page cache
                    except (OSError, ValueError):
                        return
            dropper = threading.Thread(target=drop, name="engram-tape-drop", daemon=True)
            dropper.start()
        view = memoryview(mm)[start - base:]
        src = ffi.from_buffer(view)
        dst = ffi.from_buffer(om, require_writable=True)
        try:
            cctx = comp._cctx
            lib.ZSTD_CCtx_reset(cctx, lib.ZSTD_reset_session_only)
            z = lib.ZSTD_CCtx_setPledgedSrcSize(cctx, size)
            if lib.ZSTD_isError(z):
                raise zstandard.ZstdError("error setting source size")
            outb = ffi.new("ZSTD_outBuffer *")
            inb = ffi.new("ZSTD_inBuffer *")
            outb.dst, outb.size, outb.pos = dst, bound, 0
            inb.src, inb.size, inb.pos = src, size, 0
            z = lib.ZSTD_compressStream2(cctx, outb, inb, lib.ZSTD_e_end)   # GIL released
            if lib.ZSTD_isError(z) or z:
                raise zstandard.ZstdError("cannot compress")
            n = outb.pos
        finally:
            stop.set()
            if dropper is not None:
                dropper.join()
            del src, dst
            view.release()
    os.ftruncate(out_fd, n)
    if size > size_limit(n):
        pad = max(0, -(-size // MAX_RATIO) - n - 8)
        _pwrite_all(out_fd, struct.pack("<II", 0x184D2A50, pad) + bytes(pad), n)
        n += 8 + pad
    return n


@dataclasses.dataclass(frozen=True)
class TapeRef:
    tape_id: str
    path: Path
    created: bool
    n_events: int
    raw_bytes: int


def encode_event(ev: dict) -> bytes:
    """An event's canonical JSON line (no newline), in a bytes object of its own size.

    orjson's result keeps the buffer it was written in (this orjson: 4 KB for any line, ~10x the
    length of a long one), and in a heap already used those pages are resident: the lines a caller
    keeps (the ingest cache's, a parse batch's encoded events) cost that much each. The copy is a
    memcpy of the line (~0.2 s for a 1.5 GB session's events)."""
    return bytes(memoryview(orjson.dumps(ev, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)))


def encode_events(events: Iterable[dict]) -> bytes:
    """Canonical JSONL bytes of events (one line each, newline-terminated)."""
    return b"".join(encode_event(ev) + b"\n" for ev in events)


SPILL_BYTES = 4 << 20
"""A tape's JSONL past this many bytes goes to an unnamed temp file while it is encoded."""


class _Encoded:
    """The canonical JSONL of a tape's events, made one event at a time: ``tape_id`` (xxh3-128,
    updated line by line), ``size``, ``n_events``; the bytes themselves in ``buf`` up to
    ``SPILL_BYTES``, then in ``spill`` (an unnamed 0600 temp file of ``directory``, gone with the
    process however it ends). ``events``: any iterable (read once), its first event the ``meta``.
    Raises ``ValueError`` without a ``meta`` first, ``TapeTooLarge`` as soon as the JSONL passes
    ``MAX_TAPE_BYTES``. ``close()`` drops the spill."""

    def __init__(self, directory: Path, events: Iterable[dict]):
        self.buf = bytearray()
        self.spill = None
        self.size = self.n_events = 0
        h = xxhash.xxh3_128()
        source = None
        try:
            for ev in events:
                if not self.n_events:
                    if not isinstance(ev, dict) or ev.get("k") != "meta":
                        raise ValueError("a tape's first event must be meta")
                    source = ev.get("source_path")
                line = encode_event(ev)
                self.n_events += 1
                self.size += len(line) + 1
                if self.size > MAX_TAPE_BYTES:
                    raise TapeTooLarge(f"session of more than {MAX_TAPE_BYTES} bytes is larger "
                                       f"than a tape may hold ({MAX_TAPE_BYTES}); it is not "
                                       "written", path=str(source or "") or None)
                h.update(line)
                h.update(b"\n")
                self.buf += line
                self.buf += b"\n"
                if len(self.buf) >= SPILL_BYTES:
                    self._spill(directory)
            if not self.n_events:
                raise ValueError("a tape's first event must be meta")
            if self.spill is not None:
                self._spill(directory)
        except BaseException:
            self.close()
            raise
        self.tape_id = h.hexdigest()

    def _spill(self, directory: Path) -> None:
        """``buf`` appended to the spill file. An ``OSError`` (disk full, ``ulimit -f``) names
        the tape directory, as a failed tape write does."""
        try:
            if self.spill is None:
                self.spill = tempfile.TemporaryFile(dir=directory)
            view = memoryview(self.buf)
            while view:
                view = view[os.write(self.spill.fileno(), view):]
            view.release()
        except OSError as e:
            if e.filename is None:
                raise OSError(e.errno, e.strerror, str(directory)) from e
            raise
        self.buf = bytearray()

    def compressed(self) -> bytes:
        """The tape file's bytes (``_compress`` of the whole JSONL, in one call)."""
        if self.spill is None:
            return _compress(self.buf)
        return _compress_file(self.spill.fileno(), 0, self.size)

    def compress_into(self, fd: int) -> int | None:
        """A spilled tape's file written into ``fd`` (``_compress_file_into``): its length;
        None when not done (held in memory, or not possible here: ``compressed()`` then)."""
        if self.spill is None:
            return None
        return _compress_file_into(self.spill.fileno(), 0, self.size, fd)

    def raw(self) -> bytes:
        """The JSONL itself (tests; a spilled tape is read back)."""
        if self.spill is None:
            return bytes(self.buf)
        return os.pread(self.spill.fileno(), self.size, 0)

    def close(self) -> None:
        self.buf = bytearray()
        if self.spill is not None:
            self.spill.close()
            self.spill = None


META_RESERVE = 1 << 20
"""Bytes left free before a streamed tape's spilled lines for its ``meta`` line (``Streamed``)."""


class Streamed:
    """A tape's JSONL made while its session is still being read: ``add()`` each event after
    the ``meta`` (in order), then ``finish(meta)`` once the ``meta`` is known (it depends on the
    whole log). The same bytes, tape id and file as ``_Encoded`` of ``[meta, *events]``: the lines
    go to ``buf``, past ``SPILL_BYTES`` to an unnamed temp file at offset ``META_RESERVE``; the
    meta line is written just before them (a longer one: the file is copied behind it), the id
    is hashed from the file and the tape compressed from it in one call. Holds one event at a
    time, whatever the session. ``close()`` drops the spill."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.buf = bytearray()
        self.spill = None
        self.start = 0          # where the JSONL starts in the spill file
        self.written = 0        # lines' bytes in the spill file
        self.body = 0           # bytes of the lines after the meta
        self.n_events = 1
        self.size = 0
        self.tape_id = ""

    def add(self, ev: dict) -> bytes:
        """Append an event; its line (without the newline)."""
        line = encode_event(ev)
        self.n_events += 1
        self.body += len(line) + 1
        if self.body > MAX_TAPE_BYTES:
            self.close()
            raise TapeTooLarge(f"session of more than {MAX_TAPE_BYTES} bytes is larger than a "
                               f"tape may hold ({MAX_TAPE_BYTES}); it is not written")
        self.buf += line
        self.buf += b"\n"
        if len(self.buf) >= SPILL_BYTES:
            self._spill()
        return line

    def _spill(self) -> None:
        """``buf`` written to the spill file after the lines already there."""
        try:
            if self.spill is None:
                self.spill = tempfile.TemporaryFile(dir=self.directory)
            _pwrite_all(self.spill.fileno(), self.buf, META_RESERVE + self.written)
        except OSError as e:
            self.close()
            if e.filename is None:
                raise OSError(e.errno, e.strerror, str(self.directory)) from e
            raise
        self.written += len(self.buf)
        self.buf = bytearray()

    def finish(self, meta: dict) -> None:
        """The ``meta`` line first, then ``tape_id`` and ``size``. Raises ``ValueError`` for
        something that is not a ``meta`` event, ``TapeTooLarge`` past ``MAX_TAPE_BYTES``."""
        try:
            if not isinstance(meta, dict) or meta.get("k") != "meta":
                raise ValueError("a tape's first event must be meta")
            head = encode_event(meta) + b"\n"
            self.size = len(head) + self.body
            if self.size > MAX_TAPE_BYTES:
                raise TapeTooLarge(f"session of more than {MAX_TAPE_BYTES} bytes is larger than "
                                   f"a tape may hold ({MAX_TAPE_BYTES}); it is not written",
                                   path=str(meta.get("source_path") or "") or None)
            if self.spill is None:
                self.buf[:0] = head
                self.tape_id = xxhash.xxh3_128_hexdigest(self.buf)
                return
            if self.buf:
                self._spill()
            fd = self.spill.fileno()
            if len(head) <= META_RESERVE:
                self.start = META_RESERVE - len(head)
                _pwrite_all(fd, head, self.start)
            else:  # a meta line longer than the room left for it: the lines copied behind it
                moved = tempfile.TemporaryFile(dir=self.directory)
                _pwrite_all(moved.fileno(), head, 0)
                _copy(fd, META_RESERVE, moved.fileno(), len(head), self.body)
                self.spill.close()
                self.spill, self.start = moved, 0
            h = xxhash.xxh3_128()
            pos, end = self.start, self.start + self.size
            while pos < end:
                chunk = os.pread(self.spill.fileno(), min(SPILL_BYTES, end - pos), pos)
                if not chunk:
                    raise OSError(errno.EIO, "spill file shorter than written", str(self.directory))
                h.update(chunk)
                pos += len(chunk)
            self.tape_id = h.hexdigest()
        except OSError as e:
            self.close()
            if e.filename is None:
                raise OSError(e.errno, e.strerror, str(self.directory)) from e
            raise
        except BaseException:
            self.close()
            raise

    def compressed(self) -> bytes:
        if self.spill is None:
            return _compress(self.buf)
        return _compress_file(self.spill.fileno(), self.start, self.size)

    def compress_into(self, fd: int) -> int | None:
        """As ``_Encoded.compress_into``."""
        if self.spill is None:
            return None
        return _compress_file_into(self.spill.fileno(), self.start, self.size, fd)

    def raw(self) -> bytes:
        """The JSONL itself (tests; a spilled tape is read back)."""
        if self.spill is None:
            return bytes(self.buf)
        return os.pread(self.spill.fileno(), self.size, self.start)

    def close(self) -> None:
        self.buf = bytearray()
        if self.spill is not None:
            self.spill.close()
            self.spill = None


def _pwrite_all(fd: int, data, offset: int) -> None:
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            view = view[n:]
            offset += n
    finally:
        view.release()


def _copy(src: int, src_off: int, dst: int, dst_off: int, n: int) -> None:
    """``n`` bytes of the file ``src`` from ``src_off`` into ``dst`` at ``dst_off``."""
    while n > 0:
        chunk = os.pread(src, min(SPILL_BYTES, n), src_off)
        if not chunk:
            raise OSError(errno.EIO, "spill file shorter than written")
        _pwrite_all(dst, chunk, dst_off)
        src_off += len(chunk)
        dst_off += len(chunk)
        n -= len(chunk)


class TapeStager:
    """Writes many tapes with one ``os.sync()`` instead of one fsync per file.

    ``stage()`` names a tape (its id, from the canonical bytes) and queues it; ``write_one()``
    compresses the oldest queued tape into a temp file in its directory; ``flush()`` writes the
    rest, makes them durable (one sync), renames them into place and fsyncs each directory once.
    Until ``flush()`` a tape is invisible; after it, exactly as ``write_tape`` would have left it.
    Ingest writes while it waits for parsing and flushes before it commits the index rows that
    point at the tapes.

    The caller writes in its idle moments rather than a thread in the background: creating a
    file can take a millisecond, and a thread beside CPU-bound Python gets the GIL back after
    each system call only at a switch interval, so its writes piled up until ``flush()``.
    A write that fails removes the temp files written so far and raises.
    """

    def __init__(self) -> None:
        self.pending: list[tuple[str, Path]] = []   # (temp file written, final path)
        self._queued: deque[tuple[Path, str, _Encoded, Path]] = deque()
        self._names: set[Path] = set()
        self._dirs: set[Path] = set()

    def stage(self, directory: Path, events: Iterable[dict]) -> TapeRef:
        """Name and queue the tape of ``events`` (any iterable, read once). A tape whose JSONL
        was spilled (``SPILL_BYTES``) is compressed into its temp file at once, so that what is
        queued stays small."""
        directory = self._dir(directory)
        return self.stage_encoded(directory, _Encoded(directory, events))

    def _dir(self, directory: Path) -> Path:
        directory = Path(directory)
        if directory not in self._dirs:  # once per stager (an ingest), not once per tape
            paths.private_dir(directory)
            sweep_temp(directory)  # what writers killed before their rename left behind
            self._dirs.add(directory)
        return directory

    def adopt(self, ref: TapeRef, tmp: str | None) -> TapeRef:
        """Stage a tape whose compressed temp file ``tmp`` another process (the parse worker,
        ``write_streamed``) wrote in its directory (None: the tape was already there); renamed
        into place by ``flush()`` like the others."""
        self._dir(ref.path.parent)
        if tmp is None or ref.path in self._names or ref.path.exists():
            if tmp is not None:
                os.unlink(tmp)
            return dataclasses.replace(ref, created=False)
        self._names.add(ref.path)
        self.pending.append((tmp, ref.path))
        return dataclasses.replace(ref, created=True)

    def staged(self, path: Path) -> bool:
        """Whether the tape ``path`` is staged (by ``stage``, ``adopt``) and not flushed yet."""
        return path in self._names

    def stage_encoded(self, directory: Path, enc) -> TapeRef:
        """``stage`` of a tape already encoded (``_Encoded`` or a finished ``Streamed``)."""
        tape_id = enc.tape_id
        final = directory / f"{tape_id}{SUFFIX}"
        ref = TapeRef(tape_id, final, True, enc.n_events, enc.size)
        if final in self._names or final.exists():
            enc.close()
            return dataclasses.replace(ref, created=False)
        self._names.add(final)
        if enc.spill is None:
            self._queued.append((directory, tape_id, enc, final))
            return ref
        try:
            self.pending.append((_write_temp(directory, tape_id, enc), final))
        except BaseException:
            self.discard()
            raise
        finally:
            enc.close()
        return ref

    def write_one(self) -> bool:
        """Write the temp file of the oldest staged tape; False when none is left to write."""
        if not self._queued:
            return False
        directory, tape_id, enc, final = self._queued.popleft()
        try:
            self.pending.append((_write_temp(directory, tape_id, enc), final))
        except BaseException:
            self.discard()
            raise
        finally:
            enc.close()
        return True

    def flush(self) -> int:
        while self.write_one():
            pass
        if not self.pending:
            return 0
        os.sync()
        dirs = set()
        for tmp, final in self.pending:
            if final.exists():
                os.unlink(tmp)
            else:
                os.replace(tmp, final)
            dirs.add(final.parent)
        for d in sorted(dirs):
            fsync_dir(d)
        n = len(self.pending)
        self.pending = []
        self._names.clear()
        return n

    def discard(self) -> None:
        """Forget the staged tapes; remove the temp files written."""
        for _d, _id, enc, _f in self._queued:
            enc.close()
        self._queued.clear()
        for tmp, _final in self.pending:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.pending = []
        self._names.clear()


def _write_temp(directory: Path, tape_id: str, enc: _Encoded, sync: bool = False) -> str:
    """The compressed tape in a new 0600 temp file of ``directory``; its path. An ``OSError``
    (disk full, ``ulimit -f``) names the file; the temp file is removed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{tape_id}.{os.getpid()}-{_host_tag()}.", suffix=".tmp",
                               dir=directory)
    try:
        try:
            if enc.compress_into(fd) is None:
                view = memoryview(enc.compressed())
                while view:
                    view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and e.filename is None:
            raise OSError(e.errno, e.strerror, tmp) from e
        raise
    return tmp


def write_streamed(enc: Streamed, directory: Path | None = None) -> tuple[TapeRef, str | None]:
    """The compressed temp file of a finished ``Streamed`` in ``directory`` (default: its
    spill's; a tape directory, made private) — None when the tape is there already — for a
    ``TapeStager.adopt`` (in another process) to rename into place; the spill is closed."""
    try:
        directory = paths.private_dir(Path(directory or enc.directory))
        final = directory / f"{enc.tape_id}{SUFFIX}"
        ref = TapeRef(enc.tape_id, final, True, enc.n_events, enc.size)
        if final.exists():
            return dataclasses.replace(ref, created=False), None
        return ref, _write_temp(directory, enc.tape_id, enc)
    finally:
        enc.close()


def write_tape(directory: Path, events: Iterable[dict]) -> TapeRef:
    """Write the tape of ``events`` (any iterable, read once) into ``directory``, durably; a tape
    already there is left as it is (``created`` False)."""
    directory = paths.private_dir(directory)
    enc = _Encoded(directory, events)
    try:
        final = directory / f"{enc.tape_id}{SUFFIX}"
        ref = TapeRef(enc.tape_id, final, True, enc.n_events, enc.size)
        if final.exists():
            return dataclasses.replace(ref, created=False)
        tmp = _write_temp(directory, enc.tape_id, enc, sync=True)
    finally:
        enc.close()
    try:
        if final.exists():  # a concurrent writer won the race with identical content
            os.unlink(tmp)
            return dataclasses.replace(ref, created=False)
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)
    return ref


# -- temp files left by writers that are gone --------------------------------------------------

STALE_AFTER_S = 3600
"""Age past which a temp file whose writer cannot be checked (another machine or pid namespace,
or a name without a writer) counts as abandoned: a writer renames its temp files within one
ingest's staging, minutes at most."""

_TEMP_NAME = re.compile(r"^\.[0-9a-f]{32}\.(?:(\d+)-([0-9a-f]{8})\.)?[^/]*\.tmp$")


def temp_name(what: str) -> str:
    """A new name for a work file of this process (``what``: what it holds), named as a tape's
    temp file: ``sweep_temp`` of its directory removes it once this process is gone (a kill -9
    before its owner removed it)."""
    return f".{os.urandom(16).hex()}.{os.getpid()}-{_host_tag()}.{what}.tmp"


@functools.lru_cache(maxsize=1)
def _host_tag() -> str:
    """8 hex digits naming this machine and pid namespace: a pid in a temp file's name can only
    be checked by a process that sees the same pids."""
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return xxhash.xxh32_hexdigest(f"{socket.gethostname()}:{ns}".encode())


def _writer_alive(pid: int, written: float) -> bool:
    """Whether the process ``pid`` of this machine may still be the writer of a temp file last
    written at ``written``: it exists, is not a zombie, and did not start after the write (a
    reused pid)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if fields[0] == b"Z":
            return False
        with open("/proc/stat", "rb") as f:
            btime = next(int(ln.split()[1]) for ln in f if ln.startswith(b"btime "))
        started = btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return started <= written + 2  # btime has whole seconds
    except (OSError, ValueError, IndexError, StopIteration):
        return True  # no /proc: the pid exists, so assume it is the writer


def sweep_temp(directory: Path, *, now: float | None = None) -> list[Path]:
    """Remove the tape temp files of ``directory`` whose writer is gone: on this machine, its pid
    is dead (or reused); otherwise, unchanged for ``STALE_AFTER_S``. A live writer's temp files
    (another ingest, the watcher) are kept. The paths removed."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = os.scandir(directory)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return removed  # nothing to sweep; a write there says what is wrong
    with entries:
        for e in entries:
            m = _TEMP_NAME.match(e.name) if e.name.endswith(".tmp") else None
            if m is None:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            pid, tag = m.group(1), m.group(2)
            if pid and tag == _host_tag():
                stale = not _writer_alive(int(pid), st.st_mtime)
            else:
                stale = now - st.st_mtime >= STALE_AFTER_S
            if stale:
                try:
                    os.unlink(e.path)
                except FileNotFoundError:
                    continue
                removed.append(Path(e.path))
    return removed
