"""Write a tape: ``<xxh3_128(jsonl)>.jsonl.zst``, atomically, never overwriting.

The JSONL bytes are canonical (keys sorted, compact separators, UTF-8), so the same events always
give the same tape id. The file is written to a temp file in the target directory, fsynced, then
renamed into place; if a tape with that name already exists nothing is written (its content is, by
construction, the same).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
from collections import deque
from pathlib import Path

import orjson
import xxhash
import zstandard

SUFFIX = ".jsonl.zst"
ZSTD_LEVEL = 3

_local = threading.local()


def _compress(raw: bytes) -> bytes:
    """``raw`` as one zstd frame, by this thread's compressor: making one costs half as much again
    as compressing a typical tape, and one may not be used by two threads at once."""
    c = getattr(_local, "zstd", None)
    if c is None:
        c = _local.zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c.compress(raw)


@dataclasses.dataclass(frozen=True)
class TapeRef:
    tape_id: str
    path: Path
    created: bool
    n_events: int
    raw_bytes: int
    raw: bytes = dataclasses.field(default=b"", repr=False, compare=False)
    """The canonical JSONL (``TapeStager.stage`` only: ingest keeps what the lineage pass reads)."""


def encode_event(ev: dict) -> bytes:
    return orjson.dumps(ev, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def encode_events(events: list[dict]) -> bytes:
    """Canonical JSONL bytes of a list of events (one line each, newline-terminated)."""
    return b"".join(encode_event(ev) + b"\n" for ev in events)


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
        self._queued: deque[tuple[Path, str, bytes, Path]] = deque()
        self._names: set[Path] = set()
        self._dirs: set[Path] = set()

    def stage(self, directory: Path, events: list[dict]) -> TapeRef:
        directory = Path(directory)
        raw, tape_id = _encode(events)
        if directory not in self._dirs:  # created once per stager, not once per tape
            directory.mkdir(parents=True, exist_ok=True)
            self._dirs.add(directory)
        final = directory / f"{tape_id}{SUFFIX}"
        if final in self._names or final.exists():
            return TapeRef(tape_id, final, False, len(events), len(raw), raw)
        self._queued.append((directory, tape_id, raw, final))
        self._names.add(final)
        return TapeRef(tape_id, final, True, len(events), len(raw), raw)

    def write_one(self) -> bool:
        """Write the temp file of the oldest staged tape; False when none is left to write."""
        if not self._queued:
            return False
        directory, tape_id, raw, final = self._queued.popleft()
        try:
            self.pending.append((_write_temp(directory, tape_id, raw), final))
        except BaseException:
            self.discard()
            raise
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
            _fsync_dir(d)
        n = len(self.pending)
        self.pending = []
        self._names.clear()
        return n

    def discard(self) -> None:
        """Forget the staged tapes; remove the temp files written."""
        self._queued.clear()
        for tmp, _final in self.pending:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.pending = []
        self._names.clear()


def _write_temp(directory: Path, tape_id: str, raw: bytes) -> str:
    """The compressed tape in a new temp file of ``directory`` (not synced); its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{tape_id}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_compress(raw))
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _encode(events: list[dict]) -> tuple[bytes, str]:
    """Canonical bytes and tape id of a tape."""
    if not events or events[0].get("k") != "meta":
        raise ValueError("a tape's first event must be meta")
    raw = encode_events(events)
    return raw, xxhash.xxh3_128_hexdigest(raw)


def _prepare(directory: Path, events: list[dict]) -> tuple[bytes, str, Path]:
    """Canonical bytes, tape id and final path of a tape (its directory created)."""
    raw, tape_id = _encode(events)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return raw, tape_id, directory / f"{tape_id}{SUFFIX}"


def write_tape(directory: Path, events: list[dict]) -> TapeRef:
    raw, tape_id, final = _prepare(directory, events)
    directory = final.parent
    if final.exists():
        return TapeRef(tape_id, final, False, len(events), len(raw))
    data = _compress(raw)
    fd, tmp = tempfile.mkstemp(prefix=f".{tape_id}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if final.exists():  # a concurrent writer won the race with identical content
            os.unlink(tmp)
            return TapeRef(tape_id, final, False, len(events), len(raw))
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
    return TapeRef(tape_id, final, True, len(events), len(raw))
