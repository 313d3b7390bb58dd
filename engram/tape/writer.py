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
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import orjson
import xxhash
import zstandard

SUFFIX = ".jsonl.zst"
ZSTD_LEVEL = 3


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

    ``stage()`` writes each tape to a temp file in its directory; ``flush()`` makes them durable
    (one sync), renames them into place and fsyncs each directory once. Until ``flush()`` a tape is
    invisible; after it, exactly as ``write_tape`` would have left it. Ingest flushes before it
    commits the index rows that point at the tapes.

    Compressing and writing the temp file happen on a background thread (``workers`` > 0; both
    release the GIL), so the caller goes on indexing meanwhile; ``flush()`` waits for them and
    raises the first error any of them met (the other temp files are then removed).
    """

    def __init__(self, workers: int = 1):
        self.pending: list[tuple[str, Path]] = []
        self._names: set[Path] = set()
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._writes: list[tuple[Future, Path]] = []

    def stage(self, directory: Path, events: list[dict]) -> TapeRef:
        raw, tape_id, final = _prepare(directory, events)
        directory = final.parent
        if final in self._names or final.exists():
            return TapeRef(tape_id, final, False, len(events), len(raw), raw)
        if self._workers > 0:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._workers,
                                                thread_name_prefix="engram-tape")
            self._writes.append((self._pool.submit(_write_temp, directory, tape_id, raw), final))
        else:
            self.pending.append((_write_temp(directory, tape_id, raw), final))
        self._names.add(final)
        return TapeRef(tape_id, final, True, len(events), len(raw), raw)

    def _wait(self) -> None:
        """Collect the background writes into ``pending`` (all of them, even after an error)."""
        error = None
        for fut, final in self._writes:
            e = fut.exception()  # waits
            if e is None:
                self.pending.append((fut.result(), final))
            else:
                error = error or e
        self._writes = []
        if error is not None:
            self.discard()
            raise error

    def flush(self) -> int:
        self._wait()
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
        for fut, final in self._writes:
            if fut.exception() is None:  # waits; a failed write left no file behind
                self.pending.append((fut.result(), final))
        self._writes = []
        for tmp, _final in self.pending:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.pending = []
        self._names.clear()

    def close(self) -> None:
        """Stop the background thread (after ``flush()`` or ``discard()``)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _write_temp(directory: Path, tape_id: str, raw: bytes) -> str:
    """The compressed tape in a new temp file of ``directory`` (not synced); its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{tape_id}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw))
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


def _prepare(directory: Path, events: list[dict]) -> tuple[bytes, str, Path]:
    """Canonical bytes, tape id and final path of a tape (its directory created)."""
    if not events or events[0].get("k") != "meta":
        raise ValueError("a tape's first event must be meta")
    raw = encode_events(events)
    tape_id = xxhash.xxh3_128_hexdigest(raw)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return raw, tape_id, directory / f"{tape_id}{SUFFIX}"


def write_tape(directory: Path, events: list[dict]) -> TapeRef:
    raw, tape_id, final = _prepare(directory, events)
    directory = final.parent
    if final.exists():
        return TapeRef(tape_id, final, False, len(events), len(raw))
    data = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)
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
