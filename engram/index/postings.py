"""Postings and rows held in memory by a long-running process (the language server): every
``key << 32 | block`` posting of the index as a sorted array, and the rows that stay the same while
the index does (refs, events, tapes). Queries read through them when they are there and from SQLite
otherwise; the answers are the same."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import weakref

import apsw
import numpy as np

from engram.index import packed as packed_rows
from engram.index import queries, schema
from engram.sortedset import member, uniq

_OFS = 1 << 31         # index keys are signed 32-bit; + _OFS makes them non-negative
_LO32 = (1 << 32) - 1
_EDIT = schema.KIND_CODE["code.edit"]
_EMPTY = np.zeros(0, dtype=np.int64)

log = logging.getLogger(__name__)


# -- postings ------------------------------------------------------------------------------------

# Every (key, block) posting of the given keys as ``key << 32 | block`` (keys are signed 32-bit,
# so this is a valid int64 ordered by key, then block): one packed row per key
# (``engram.index.packed``), decoded by numpy, no per-posting Python object; a block holding a key
# on several lines yields adjacent repeats.


def _postings(conn: apsw.Connection, keys: np.ndarray, cache: _RowCache | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``key << 32 | block`` codes of the given (sorted, distinct) keys, sorted, and for
    each the index of its key in ``keys``: from the postings held in memory where there are some
    (``keep_postings``), else from the index."""
    held = cache.held_postings(conn) if cache is not None else None
    if held is None:
        codes = _postings_sql(conn, keys)
        return codes, np.searchsorted(keys, codes >> 32)
    snap, newer = held
    codes, kid = snap.lookup(keys)
    if newer:  # blocks added since the snapshot was read
        extra = _postings_sql(conn, keys, snap.top)
        if len(extra):
            codes = np.union1d(codes, extra)
            kid = np.searchsorted(keys, codes >> 32)
    return codes, kid


def _postings_sql(conn: apsw.Connection, keys: np.ndarray, above: int | None = None
                  ) -> np.ndarray:
    K, B, _L = packed_rows.rows(conn, keys, above=above)
    if not len(K):
        return _EMPTY
    codes = (K << 32) | B
    if len(codes) > 1 and not (codes[1:] >= codes[:-1]).all():
        codes = np.sort(codes)
    keep = np.empty(len(codes), dtype=bool)
    keep[:1] = True
    np.not_equal(codes[1:], codes[:-1], out=keep[1:])
    return codes[keep]


# -- postings in memory (the language server) -----------------------------------------------------
#
# A cold code lens of a 5,000-line file looks up ~7,000 keys (~70,000 postings): 12-30 ms in
# SQLite, mostly formatting rows; from a sorted array of every distinct posting of the index
# (8 bytes each: ~9 MB for 1.3M fingerprint rows) it is two binary searches per key, ~1 ms. The
# language server asks for it (``keep_postings``); the array is read on a thread of its own with
# its own connection (~0.2 s for 1.3M rows), queries use SQLite until it is there, and every
# connection of the process shares it.
#
# Why it stays exact: blocks are content-addressed, never updated, and a new block gets the
# largest id + 1, so while the snapshot's largest block (``top``) still exists with the same
# hash, every block up to ``top`` still has the postings read. Blocks added since (ids above
# ``top``) are looked up in SQLite (``AND block > top``: the same primary-key seeks, few rows) until
# a fresh snapshot is read (at most every ``_REFRESH_S``). A block removed by ``engram gc`` keeps
# stale postings, which point at a block without refs and are dropped by ``explain_blocks`` like
# any unreferenced block. The snapshot is validated inside each query's read transaction (two
# primary-key lookups, only after a commit); on first use by a connection the hashes of
# ``_SAMPLES`` blocks spread over the ids are compared too, so an index file replaced by another
# (a rebuild) is never mistaken for the one read.

MAX_POSTINGS = 12_000_000   # fingerprint rows held in memory at most; more: SQLite per lookup
_REFRESH_S = 10.0           # a snapshot behind the index is read again at most this often
_SAMPLES = 32
_CHUNKS = 16                # the snapshot is read in key ranges (bounded transient memory)
_BUCKET_SHIFT = 12          # keys are bucketed by their top 20 bits (a 4 MB table)


class _Snapshot:
    """Every distinct ``key << 32 | block`` posting of the index as of one read transaction,
    sorted, and where each bucket of keys starts in it."""

    def __init__(self, codes: np.ndarray, top: int, samples: dict[int, bytes]):
        self.codes, self.top, self.samples = codes, top, samples
        n = 1 << (32 - _BUCKET_SHIFT)
        counts = np.bincount(((codes >> 32) + _OFS) >> _BUCKET_SHIFT, minlength=n)
        self.starts = np.zeros(n + 1, dtype=np.int32)  # MAX_POSTINGS < 2**31
        np.cumsum(counts, out=self.starts[1:])

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, key index)`` of the given sorted distinct keys (as ``_postings``): the codes
        of each key's bucket, those of the key kept (sorted, as keys and buckets are)."""
        b = (keys + _OFS) >> _BUCKET_SHIFT
        lo = self.starts[b].astype(np.int64)
        n = self.starts[b + 1] - lo
        cand = self.codes[_ranges(lo, n)]
        owner = np.repeat(np.arange(len(keys)), n)
        hit = (cand >> 32) == keys[owner]
        return cand[hit], owner[hit]


class _Held:
    """The snapshot of one index file, and its refresh."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.snapshot: _Snapshot | None = None
        self.reading = False
        self.read_at = 0.0          # monotonic time of the last read
        self.too_big = False
        self.paused = 0             # no reads while the index file is being replaced

    def refresh(self, force: bool = False) -> None:
        """Read a new snapshot on a thread, unless one is being read (or was, lately)."""
        with self.lock:
            if self.reading or self.too_big or self.paused or (
                    not force and time.monotonic() - self.read_at < _REFRESH_S):
                return
            self.reading = True
        threading.Thread(target=self._read, name="engram-postings", daemon=True).start()

    def pause(self, timeout: float = 10.0) -> None:
        with self.lock:
            self.paused += 1
            self.idle.wait_for(lambda: not self.reading, timeout)

    def resume(self) -> None:
        with self.lock:
            self.paused -= 1
        self.refresh(force=True)

    def _read(self) -> None:
        try:
            snap = _read_snapshot(self.path)
        except Exception:  # the index changed under us, or is gone: SQLite answers meanwhile
            log.debug("reading the postings into memory failed", exc_info=True)
            snap = None
        with self.lock:
            self.reading = False
            self.read_at = time.monotonic()
            if snap is False:
                self.too_big, self.snapshot = True, None
            elif snap is not None:
                self.snapshot = snap
            self.idle.notify_all()


def _read_snapshot(path: str) -> _Snapshot | bool | None:
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.set_busy_timeout(5000)
        conn.execute("BEGIN")
        top, rows = conn.execute("SELECT max(id), sum(n_fp) FROM blocks").fetchone()
        if top is None:
            return None
        if (rows or 0) > MAX_POSTINGS:
            return False
        samples = _sample(conn, top)
        parts = []
        bounds = np.linspace(-(1 << 31), 1 << 31, _CHUNKS + 1).astype(np.int64).tolist()
        for lo, hi in itertools.pairwise(bounds):
            K, B, _L = packed_rows.key_range(conn, lo, hi)
            if len(K):
                codes = (K << 32) | B
                keep = np.empty(len(codes), dtype=bool)
                keep[:1] = True
                np.not_equal(codes[1:], codes[:-1], out=keep[1:])
                parts.append(codes[keep])
        conn.execute("COMMIT")
        return _Snapshot(np.concatenate(parts) if parts else _EMPTY, top, samples)
    finally:
        conn.close()


def _sample(conn: apsw.Connection, top: int) -> dict[int, bytes]:
    ids = sorted({top, *np.linspace(1, top, _SAMPLES).astype(np.int64).tolist()})
    return dict(conn.execute("SELECT id, hash FROM blocks WHERE id IN carray(?)",
                             (apsw.carray(queries._i64(ids)),)))


_held: dict[str, _Held] = {}
_held_lock = threading.Lock()


def _held_for(conn: apsw.Connection) -> _Held | None:
    return _held.get(conn.filename)


def prefill(conn: apsw.Connection, stop=None) -> bool | None:
    """Read the rows ``explain_blocks`` looks up (refs, events, tapes) for ``conn`` now, while
    nothing waits for them (a long-running process, between requests): the next lookups on this
    connection need no SQLite until the index changes. False when the tables are too large; None
    when ``stop()`` (asked between steps of a few ms) said to leave the rest for later."""
    cache = _cache(conn)
    with cache.lock:
        snapshot = not conn.in_transaction
        if snapshot:
            conn.execute("BEGIN")
        try:
            cache.check(conn)
            return cache.fill(conn, stop)
        finally:
            if snapshot:
                conn.execute("COMMIT")


def held_block_counts(conn: apsw.Connection, keys: np.ndarray, least: float = 0
                      ) -> tuple[dict[int, int], int] | None:
    """``({block: how many of the given sorted distinct index keys it holds, for the blocks
    holding at least ``least``}, how many of the keys occur at all)`` from the postings held in
    memory (``keep_postings``); None when none are held for ``conn``'s index (the caller asks
    SQLite: ``queries.block_counts``). (The blocks below ``least`` are dropped in numpy: a popular
    span's keys are in thousands of blocks, a few dozen of which are kept.)"""
    held = _held_for(conn)
    if held is None or held.snapshot is None:
        return None
    cache = _cache(conn)
    with cache.lock:
        cache.check(conn)
        if cache.held_postings(conn) is None:
            return None
        codes, kid = _postings(conn, keys, cache)
    blocks, n = np.unique(codes & _LO32, return_counts=True)
    if least > 0:
        keep = n >= least
        blocks, n = blocks[keep], n[keep]
    return dict(zip(blocks.tolist(), n.tolist())), len(uniq(kid))


def keep_postings(conn: apsw.Connection) -> None:
    """Hold the postings of ``conn``'s index in memory from now on (read in the background;
    ``explain_blocks`` uses them once they are there). For a long-running process: the language
    server."""
    with _held_lock:
        held = _held.get(conn.filename)
        if held is None:
            held = _held[conn.filename] = _Held(conn.filename)
    held.refresh(force=held.snapshot is None)


@contextlib.contextmanager
def postings_paused(filename: str | None):
    """No reading of the postings of ``filename`` (waits for a read under way): for replacing
    the index file (a rebuild), which a reader's connection would hold open. A fresh read starts
    afterwards."""
    held = _held.get(filename) if filename else None
    if held is None:
        yield
        return
    held.pause()
    try:
        yield
    finally:
        held.resume()


def held_postings_status(filename: str) -> dict:
    """``{"postings": rows held (None: none), "reading": bool}`` for the index file ``filename``
    (``Connection.filename``), for a status report."""
    held = _held.get(filename)
    snap = held.snapshot if held is not None else None
    return {"postings": len(snap.codes) if snap is not None else None,
            "reading": bool(held and held.reading)}


# -- rows that stay the same while the index does --------------------------------------------------


class _RowCache:
    """Boilerplate keys, refs, event (tape, kind) and tape rows read through one connection.

    Valid while ``data_version`` is unchanged: nothing has been committed, so none of these rows
    can have changed. Lookups of many ids are numpy joins against sorted arrays."""

    MAX_ROWS = 1_000_000       # refs + events held, at most (then the cache starts over)
    MAX_BOILERPLATE = 200_000   # a larger table is asked per lookup instead of held

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version = None
        self._reset()
        # the postings snapshot (``keep_postings``) as last checked on this connection
        self.snap: _Snapshot | None = None
        self.snap_version = None
        self.snap_use: tuple[_Snapshot, bool] | None = None

    def _reset(self) -> None:
        self.bp: np.ndarray | None = None
        self.ref_blocks = _EMPTY          # blocks whose refs are held (sorted)
        self.ref_b = _EMPTY               # refs, sorted by (block, event)
        self.ref_e = _EMPTY
        self.ev_id = _EMPTY               # events held, sorted by id
        self.ev_tape = _EMPTY
        self.ev_kind = _EMPTY
        self.tape_meta: dict[int, tuple[str, str]] = {}   # id → (tape_id, last_t or "")
        self.rows: dict[int, queries.TapeRow] = {}
        self.refs_full = self.events_full = False   # every ref / event is held (``fill``)
        self.full = False                 # ... and every tape's id and time

    def check(self, conn: apsw.Connection) -> None:
        """Drop what a commit may have changed (call inside the read transaction). The pragma
        starts the read transaction; ``Connection.data_version()`` right after ``BEGIN`` still
        gives the previous transaction's value, so a commit went unnoticed for one query."""
        version = conn.execute("PRAGMA data_version").fetchone()[0]  # another connection committed
        if version != self.version or len(self.ref_b) + len(self.ev_id) > self.MAX_ROWS:
            self.version = version
            self._reset()

    def fill(self, conn: apsw.Connection, stop=None) -> bool | None:
        """Read every ref, event and tape (id, last time) now (call inside a read transaction,
        after ``check``), unless there are more than ``MAX_ROWS`` (False): lookups then never
        ask SQLite until the next commit (but for the few tape rows of the blocks' best
        sessions). ``stop()`` is asked between the three reads (a few ms each); when it says so
        the rest is left to the lookups (None). What ``prefill`` does between requests."""
        if self.full:
            return True
        top = conn.execute("SELECT max(id) FROM events").fetchone()[0] or 0
        if top > self.MAX_ROWS // 2:
            return False
        packed = conn.execute(
            "SELECT group_concat(c) FROM (SELECT (block << 32) | event AS c FROM refs LIMIT ?)",
            (self.MAX_ROWS // 2 + 1,)).fetchone()[0]
        codes = np.fromstring(packed, dtype=np.int64, sep=",") if packed else _EMPTY
        if len(codes) > self.MAX_ROWS // 2:
            return False
        codes = np.sort(codes, kind="stable")
        self.ref_b, self.ref_e = codes >> 32, codes & _LO32
        self.ref_blocks = uniq(self.ref_b)
        self.refs_full = True
        if stop is not None and stop():
            return None
        packed = conn.execute(
            "SELECT group_concat(id || ',' || tape || ',' || kind) FROM events").fetchone()[0]
        arr = (np.fromstring(packed, dtype=np.int64, sep=",") if packed else _EMPTY).reshape(-1, 3)
        order = np.argsort(arr[:, 0], kind="stable")
        self.ev_id, self.ev_tape, self.ev_kind = (arr[order, 0], arr[order, 1], arr[order, 2])
        self.events_full = True
        if stop is not None and stop():
            return None
        for tid, tape_id, last_t in conn.execute("SELECT id, tape_id, last_t FROM tapes"):
            self.tape_meta[tid] = (tape_id, last_t or "")
        self.full = True
        return True

    def held_postings(self, conn: apsw.Connection) -> tuple[_Snapshot, bool] | None:
        """The postings snapshot if it holds for this read transaction, with whether blocks were
        added since it was read (those are looked up in SQLite); None: SQLite answers."""
        held = _held_for(conn)
        snap = held.snapshot if held is not None else None
        if snap is None:
            return None
        if snap is not self.snap or self.snap_version != self.version:
            # first use on this connection: compare the sampled blocks; later: only the top one
            ids = list(snap.samples) if snap is not self.snap else [snap.top]
            rows = dict(conn.execute("SELECT id, hash FROM blocks WHERE id IN carray(?)",
                                     (apsw.carray(queries._i64(ids)),)))
            if all(rows.get(i) == snap.samples[i] for i in ids):
                newer = conn.execute("SELECT max(id) FROM blocks").fetchone()[0] > snap.top
                self.snap_use = (snap, newer)
            else:
                self.snap_use = None
            self.snap, self.snap_version = snap, self.version
            if self.snap_use is None or self.snap_use[1]:
                held.refresh()
        return self.snap_use

    def boilerplate(self, conn: apsw.Connection) -> np.ndarray:
        """The boilerplate index keys, sorted."""
        if self.bp is None:
            rows = conn.execute("SELECT hash FROM boilerplate ORDER BY hash LIMIT ?",
                                (self.MAX_BOILERPLATE + 1,)).fetchall()
            if len(rows) > self.MAX_BOILERPLATE:
                return _EMPTY  # not expected; boilerplate then only thins out the denominators
            self.bp = np.array([r[0] for r in rows], dtype=np.int64)
        return self.bp

    def refs(self, conn: apsw.Connection, blocks: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each given block: the start and count of its events in the returned array."""
        want = uniq(blocks)
        missing = want[~member(want, self.ref_blocks)] if len(self.ref_blocks) else want
        if len(missing) and not self.refs_full:
            packed = conn.execute(
                "SELECT group_concat((block << 32) | event) FROM refs WHERE block IN carray(?)",
                (apsw.carray(queries._i64(missing)),)).fetchone()[0]
            codes = np.fromstring(packed, dtype=np.int64, sep=",") if packed else _EMPTY
            # two sorted runs: a stable sort merges them in one pass
            allc = np.sort(np.concatenate([(self.ref_b << 32) | self.ref_e, codes]), kind="stable")
            self.ref_b, self.ref_e = allc >> 32, allc & _LO32
            self.ref_blocks = np.sort(np.concatenate([self.ref_blocks, missing]), kind="stable")
        lo = np.searchsorted(self.ref_b, blocks, "left")
        return lo, np.searchsorted(self.ref_b, blocks, "right") - lo, self.ref_e

    def events(self, conn: apsw.Connection, ids: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(tape, kind, found)`` for each given event id."""
        want = uniq(ids)
        missing = want[~member(want, self.ev_id)] if len(self.ev_id) else want
        if len(missing) and not self.events_full:
            packed = conn.execute(
                "SELECT group_concat(id || ',' || tape || ',' || kind) FROM events"
                " WHERE id IN carray(?)", (apsw.carray(queries._i64(missing)),)).fetchone()[0]
            if packed:
                arr = np.fromstring(packed, dtype=np.int64, sep=",").reshape(-1, 3)
                i = np.concatenate([self.ev_id, arr[:, 0]])
                order = np.argsort(i, kind="stable")
                self.ev_id = i[order]
                self.ev_tape = np.concatenate([self.ev_tape, arr[:, 1]])[order]
                self.ev_kind = np.concatenate([self.ev_kind, arr[:, 2]])[order]
        if not len(self.ev_id):
            return _EMPTY, _EMPTY, np.zeros(len(ids), dtype=bool)
        pos = np.minimum(np.searchsorted(self.ev_id, ids), len(self.ev_id) - 1)
        return self.ev_tape[pos], self.ev_kind[pos], self.ev_id[pos] == ids

    def tapes(self, conn: apsw.Connection, tapes: np.ndarray
              ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """The given tapes' distinct ``last_t`` values, newest first (``""``, no time, last); and
        for each given tape: its rank in that list, its rank by tape id, whether its row exists."""
        want = uniq(tapes).tolist()
        missing = [] if self.full else [t for t in want if t not in self.tape_meta]
        for i in range(0, len(missing), 20000):
            for tid, tape_id, last_t in conn.execute(
                    "SELECT id, tape_id, last_t FROM tapes WHERE id IN carray(?)",
                    (apsw.carray(queries._i64(missing[i:i + 20000])),)):
                self.tape_meta[tid] = (tape_id, last_t or "")
        have = [t for t in want if t in self.tape_meta]
        if not have:
            return [], _EMPTY, _EMPTY, np.zeros(len(tapes), dtype=bool)
        meta = [self.tape_meta[t] for t in have]
        times = sorted({m[1] for m in meta}, reverse=True)
        t_rank = {t: i for i, t in enumerate(times)}
        newest = np.array([t_rank[m[1]] for m in meta], dtype=np.int64)
        by_id = np.empty(len(have), dtype=np.int64)
        by_id[sorted(range(len(have)), key=lambda i: meta[i][0])] = np.arange(len(have))
        u = np.array(have, dtype=np.int64)
        pos = np.minimum(np.searchsorted(u, tapes), len(u) - 1)
        return times, newest[pos], by_id[pos], u[pos] == tapes

    def tape_rows(self, conn: apsw.Connection, ids: list[int]) -> dict[int, queries.TapeRow]:
        missing = [t for t in ids if t not in self.rows]
        if missing:
            self.rows.update(queries.tapes(conn, missing))
        return {t: self.rows[t] for t in ids if t in self.rows}


_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def _cache(conn: apsw.Connection) -> _RowCache:
    with _caches_lock:
        c = _caches.get(conn)
        if c is None:
            c = _caches[conn] = _RowCache()
        return c


def _ranges(lo: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """``concatenate([arange(l, l + c) for l, c in zip(lo, cnt)])``, vectorised."""
    total = int(cnt.sum())
    return np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
