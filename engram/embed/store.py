"""The vector cache: float16 chunk vectors keyed by chunk hash, one directory per model.

Layout under ``<dir>/<model-slug>/`` (``dir`` is normally ``vectors/`` beside the index)::

    manifest.json   {"format", "model_id", "dim", "dtype"}  (written temp + fsync + rename)
    vectors.f16     row-major float16 [rows, dim], append-only, one contiguous file
    index.sqlite    rows(row → hash), refs(hash → tape_id, offset), tapes done, meta(rows)
    lock            writers hold an exclusive flock on it

The matrix is one contiguous file, memory-mapped for search, so 10^6 rows are scored with one
matrix-vector product and no copy. Writes are crash-safe without rewriting that file: ``add``
truncates any uncommitted tail, appends the new rows, fsyncs, then commits the row→hash mapping and
the new row count in one SQLite transaction. Rows past the committed count (a crash between the two
steps) are ignored by readers and cut off by the next writer; a reader never maps them.

The cache is derived: delete the directory and re-run the worker to get it back. A different
``model_id`` gives a different directory, never mixed vectors.

Scoring device: ``device="auto"`` uses CUDA when torch is *already imported* and a GPU is present
(the matrix is kept resident in fp16 and grown incrementally); on CPU it uses torch's fp16
matrix-vector product straight on the memory map when torch is already imported, else numpy on a
float32 copy kept in memory. The store never imports torch itself unless ``device`` names CUDA.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import xxhash

from engram import paths
from engram.errors import EngramError

log = logging.getLogger(__name__)

FORMAT = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rows(row INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS refs(hash TEXT NOT NULL, tape_id TEXT NOT NULL, ofs INTEGER NOT NULL,
                                PRIMARY KEY(hash, tape_id, ofs)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_tape ON refs(tape_id, ofs);
CREATE TABLE IF NOT EXISTS tapes(tape_id TEXT NOT NULL, chunker TEXT NOT NULL, chunks INTEGER,
                                 t REAL, PRIMARY KEY(tape_id, chunker)) WITHOUT ROWID;
"""
_SQL_VARS = 500  # hashes per IN (...) query


class VectorStoreError(EngramError):
    """The vector cache is unusable (another model's directory, a dimension mismatch, a newer
    format). It is derived data: delete the directory and run ``engram embed`` again."""

    code = "vector-store"


def model_slug(model_id: str) -> str:
    """Directory name for a model id: the id itself when it is filename-safe, else a sanitised form
    plus a short hash so two ids never share a directory."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("._") or "model"
    if safe == model_id and len(safe) <= 100:
        return safe
    return f"{safe[:80]}-{xxhash.xxh3_64_hexdigest(model_id.encode())[:8]}"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class VectorStore:
    """``VectorStore(dir, model_id, *, device="auto")`` — see the module docstring.

    ``device``: ``auto``; ``cpu`` (torch on CPU if already imported, else numpy); ``numpy``;
    ``torch`` (torch on CPU, imported if needed); ``cuda`` / ``cuda:N``.

    Rows are unit vectors (the embedder's output), so ``search`` scores are cosine similarities.
    Several processes may read while one writes; writers serialise on a file lock.
    """

    def __init__(self, dir: Path, model_id: str, *, device: str = "auto"):
        import apsw

        self.model_id = model_id
        self.path = Path(dir) / model_slug(model_id)
        paths.private_dir(dir)  # 0700 directories and 0600 files: vectors of private text
        paths.private_dir(self.path)
        self._device_pref = device
        self._manifest = self.path / "manifest.json"
        self._vec_path = self.path / "vectors.f16"
        for name in ("vectors.f16", "manifest.json", "lock", "index.sqlite-wal",
                     "index.sqlite-shm", "last_run.json"):  # left readable by an older Engram
            paths.private_file(self.path / name)
        self.dim: int | None = None
        if self._manifest.exists():
            man = self._read_manifest()
            self.dim = int(man["dim"]) if man.get("dim") else None
        paths.create_private(self.path / "index.sqlite")  # its -wal and -shm follow its mode
        self._db = apsw.Connection(str(self.path / "index.sqlite"))
        self._db.setbusytimeout(10_000)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        with self._db:
            self._db.execute(_SCHEMA)
        # search caches (rebuilt / grown when the committed row count changes)
        self._mm: np.ndarray | None = None
        self._f32: np.ndarray | None = None
        self._dev_mat = None
        self._dev_rows = 0
        self._hash_cache: list[str] = []

    # ---------------------------------------------------------------- metadata

    def _read_manifest(self) -> dict:
        try:
            man = json.loads(self._manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise VectorStoreError(f"unreadable manifest: {e}", path=str(self._manifest)) from e
        if man.get("format", 0) > FORMAT:
            raise VectorStoreError("vector cache written by a newer Engram", path=str(self.path))
        if man.get("model_id") != self.model_id:
            raise VectorStoreError(f"vector cache belongs to model {man.get('model_id')!r}, "
                                   f"not {self.model_id!r}", path=str(self.path))
        return man

    def _write_manifest(self, dim: int) -> None:
        data = {"format": FORMAT, "model_id": self.model_id, "dim": dim, "dtype": "float16"}
        _atomic_write(self._manifest, json.dumps(data, sort_keys=True).encode() + b"\n")
        self.dim = dim

    def __len__(self) -> int:
        """Committed rows (distinct chunk hashes with a vector)."""
        for (v,) in self._db.execute("SELECT value FROM meta WHERE key='rows'"):
            return int(v)
        return 0

    def stats(self) -> dict:
        refs = self._db.execute("SELECT count(*) FROM refs").fetchall()[0][0]
        tapes = self._db.execute("SELECT count(DISTINCT tape_id) FROM tapes").fetchall()[0][0]
        n = len(self)
        return {"model_id": self.model_id, "path": str(self.path), "dim": self.dim, "rows": n,
                "refs": refs, "tapes_done": tapes,
                "bytes": n * (self.dim or 0) * 2}

    # ---------------------------------------------------------------- lookups

    def has(self, hash: str) -> bool:
        return bool(self._db.execute("SELECT 1 FROM rows WHERE hash=?", (hash,)).fetchall())

    def missing(self, hashes: Sequence[str]) -> list[str]:
        """The hashes (deduplicated, first-seen order) that have no vector yet."""
        uniq = list(dict.fromkeys(hashes))
        have: set[str] = set()
        for s in range(0, len(uniq), _SQL_VARS):
            part = uniq[s:s + _SQL_VARS]
            q = f"SELECT hash FROM rows WHERE hash IN ({','.join('?' * len(part))})"
            have.update(h for (h,) in self._db.execute(q, part))
        return [h for h in uniq if h not in have]

    def refs(self, hashes: Sequence[str]) -> dict[str, list[tuple[str, int]]]:
        """``hash → [(tape_id, offset), ...]`` sorted, for the given hashes."""
        out: dict[str, list[tuple[str, int]]] = {h: [] for h in hashes}
        uniq = list(out)
        for s in range(0, len(uniq), _SQL_VARS):
            part = uniq[s:s + _SQL_VARS]
            q = (f"SELECT hash, tape_id, ofs FROM refs WHERE hash IN ({','.join('?' * len(part))})"
                 " ORDER BY hash, tape_id, ofs")
            for h, tape, ofs in self._db.execute(q, part):
                out[h].append((tape, ofs))
        return out

    def tape_hashes(self, tape_id: str) -> list[tuple[int, str]]:
        """``[(offset, hash), ...]`` of a tape's chunks that are referenced here."""
        return [(o, h) for o, h in self._db.execute(
            "SELECT ofs, hash FROM refs WHERE tape_id=? ORDER BY ofs, hash", (tape_id,))]

    def get(self, hashes: Sequence[str]) -> np.ndarray:
        """float32 vectors of the given hashes, ``[n, dim]``; a hash without a vector raises
        KeyError."""
        rows = {}
        uniq = list(dict.fromkeys(hashes))
        for s in range(0, len(uniq), _SQL_VARS):
            part = uniq[s:s + _SQL_VARS]
            q = f"SELECT hash, row FROM rows WHERE hash IN ({','.join('?' * len(part))})"
            rows.update(dict(self._db.execute(q, part)))
        missing = [h for h in uniq if h not in rows]
        if missing:
            raise KeyError(missing[0])
        if not hashes:
            return np.zeros((0, self.dim or 0), np.float32)
        mm = self._matrix(len(self))
        return np.asarray(mm[[rows[h] for h in hashes]], dtype=np.float32)

    def tape_done(self, tape_id: str, chunker: str) -> bool:
        return bool(self._db.execute("SELECT 1 FROM tapes WHERE tape_id=? AND chunker=?",
                                     (tape_id, chunker)).fetchall())

    # ---------------------------------------------------------------- writes

    @contextmanager
    def _write_lock(self):
        try:
            import fcntl
        except ImportError:  # not POSIX: single-writer is the caller's job
            yield
            return
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT | os.O_APPEND, paths.FILE_MODE)
        with os.fdopen(fd, "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def add(self, hashes: Sequence[str], vectors: np.ndarray,
            refs: Iterable[tuple[str, str, int]] = ()) -> int:
        """Store ``vectors[i]`` (unit vectors) for ``hashes[i]``, plus ``refs`` as
        ``(hash, tape_id, offset)`` triples (for these or any already stored hashes).

        Hashes already stored (or repeated in the call) are skipped. Returns the rows added.
        """
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(hashes):
            raise ValueError(f"vectors shape {vectors.shape} does not match {len(hashes)} hashes")
        refs = list(refs)
        with self._write_lock():
            if self.dim is None and self._manifest.exists():
                self.dim = int(self._read_manifest()["dim"])
            if self.dim is None and len(hashes):
                self._write_manifest(int(vectors.shape[1]))
            if len(hashes) and vectors.shape[1] != self.dim:
                raise VectorStoreError(f"vector dimension {vectors.shape[1]} != cache's {self.dim}",
                                       path=str(self.path))
            new = self.missing(hashes)
            first: dict[str, int] = {}
            for i, h in enumerate(hashes):
                first.setdefault(h, i)
            n = len(self)
            if new:
                block = np.ascontiguousarray(vectors[[first[h] for h in new]], dtype=np.float16)
                fd = os.open(self._vec_path, os.O_RDWR | os.O_CREAT, paths.FILE_MODE)
                try:
                    os.ftruncate(fd, n * self.dim * 2)  # drop an uncommitted tail
                    os.lseek(fd, 0, os.SEEK_END)
                    data = memoryview(block.tobytes())
                    while data:
                        data = data[os.write(fd, data):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            with self._db:
                if new:
                    self._db.executemany("INSERT INTO rows(row, hash) VALUES(?, ?)",
                                         [(n + i, h) for i, h in enumerate(new)])
                    self._db.execute("INSERT INTO meta(key, value) VALUES('rows', ?) "
                                     "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                                     (str(n + len(new)),))
                if refs:
                    self._db.executemany("INSERT OR IGNORE INTO refs(hash, tape_id, ofs) "
                                         "VALUES(?, ?, ?)", refs)
        return len(new)

    def add_refs(self, refs: Iterable[tuple[str, str, int]]) -> None:
        """Record ``(hash, tape_id, offset)`` references (idempotent)."""
        refs = list(refs)
        if refs:
            with self._db:
                self._db.executemany("INSERT OR IGNORE INTO refs(hash, tape_id, ofs) "
                                     "VALUES(?, ?, ?)", refs)

    def drop_refs(self, tape_ids: Iterable[str]) -> None:
        """Forget every reference of these tapes (before re-chunking them under a new chunker key,
        so stale chunks stop pointing at them). Vectors stay: other tapes may share them."""
        ids = [(t,) for t in tape_ids]
        if ids:
            with self._db:
                self._db.executemany("DELETE FROM refs WHERE tape_id=?", ids)

    def mark_tapes_done(self, done: Iterable[tuple[str, int]], chunker: str) -> None:
        """Record ``(tape_id, n_chunks)`` as fully embedded under chunker key ``chunker``."""
        rows = [(t, chunker, n, time.time()) for t, n in done]
        if rows:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO tapes(tape_id, chunker, chunks, t) "
                                     "VALUES(?, ?, ?, ?)", rows)

    # ---------------------------------------------------------------- search

    def _matrix(self, n: int) -> np.ndarray:
        """Memory map of the first ``n`` committed rows (copy-on-write mode: never written)."""
        if self.dim is None and self._manifest.exists():
            self.dim = int(self._read_manifest()["dim"])
        if n == 0 or self.dim is None:
            return np.zeros((0, self.dim or 0), np.float16)
        if self._mm is None or self._mm.shape[0] != n:
            self._mm = np.memmap(self._vec_path, dtype=np.float16, mode="c", shape=(n, self.dim))
        return self._mm

    def _hashes(self, n: int) -> list[str]:
        if len(self._hash_cache) < n:
            rows = self._db.execute("SELECT hash FROM rows WHERE row >= ? AND row < ? ORDER BY row",
                                    (len(self._hash_cache), n)).fetchall()
            self._hash_cache.extend(h for (h,) in rows)
        return self._hash_cache

    def device(self) -> str:
        """The scoring device ``search`` will use: ``cuda:N``, ``cpu-torch`` or ``cpu-numpy``."""
        pref = self._device_pref
        torch = sys.modules.get("torch")
        if pref.startswith("cuda"):
            import torch  # noqa: F811 - explicit CUDA request
            if not torch.cuda.is_available():
                raise VectorStoreError("device 'cuda' requested but no CUDA GPU is available")
            return pref if ":" in pref else "cuda:0"
        if pref == "torch":
            import torch  # noqa: F811 - explicit request
            return "cpu-torch"
        if pref == "auto" and torch is not None and torch.cuda.is_available():
            return "cuda:0"
        return "cpu-torch" if torch is not None and pref != "numpy" else "cpu-numpy"

    def scores(self, query_vec: np.ndarray) -> np.ndarray:
        """Cosine scores of one unit query vector against every committed row, float32 ``[rows]``
        (row order), computed with one matrix-vector product."""
        n = len(self)
        q = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        if n == 0:
            return np.zeros(0, np.float32)
        if q.shape[0] != self.dim:
            raise VectorStoreError(f"query dimension {q.shape[0]} != cache's {self.dim}")
        mm = self._matrix(n)
        dev = self.device()
        if dev.startswith("cuda"):
            import torch

            stale = self._dev_mat is None or self._dev_rows > n
            if stale or self._dev_mat.device != torch.device(dev):
                self._dev_mat, self._dev_rows = torch.from_numpy(mm).to(dev), n
            elif self._dev_rows < n:
                tail = torch.from_numpy(np.ascontiguousarray(mm[self._dev_rows:n])).to(dev)
                self._dev_mat, self._dev_rows = torch.cat([self._dev_mat, tail]), n
            qt = torch.from_numpy(q).to(dev, dtype=torch.float16)
            return (self._dev_mat @ qt).float().cpu().numpy()
        if dev == "cpu-torch":
            import torch

            return (torch.from_numpy(mm) @ torch.from_numpy(q.astype(np.float16))).float().numpy()
        if self._f32 is None or self._f32.shape[0] > n:
            self._f32 = np.asarray(mm, dtype=np.float32)
        elif self._f32.shape[0] < n:
            self._f32 = np.concatenate([self._f32, np.asarray(mm[self._f32.shape[0]:n],
                                                              dtype=np.float32)])
        return self._f32 @ q

    def search(self, query_vec: np.ndarray, top_k: int = 20
               ) -> list[tuple[float, str, list[tuple[str, int]]]]:
        """The ``top_k`` nearest chunks: ``[(score, hash, [(tape_id, offset), ...]), ...]``, best
        first; ties broken by hash so the order is deterministic."""
        s = self.scores(query_vec)
        n = s.shape[0]
        if n == 0 or top_k <= 0:
            return []
        k = min(top_k, n)
        idx = np.argpartition(-s, k - 1)[:k] if k < n else np.arange(n)
        hashes = self._hashes(n)
        hits = sorted(((float(s[i]), hashes[i]) for i in idx), key=lambda x: (-x[0], x[1]))
        refs = self.refs([h for _, h in hits])
        return [(sc, h, refs[h]) for sc, h in hits]

    def close(self) -> None:
        self._mm = self._f32 = self._dev_mat = None
        self._db.close()

    def __enter__(self) -> VectorStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
