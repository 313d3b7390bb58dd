"""Read-side queries of the index. Every lookup by many keys uses ``IN carray(?)``."""

from __future__ import annotations

import array
import itertools
import weakref
from collections.abc import Iterable
from typing import NamedTuple

import apsw
import numpy as np

from engram.index import packed
from engram.sortedset import member, uniq


def _i64(values) -> array.array:
    out = array.array("q")
    if isinstance(values, np.ndarray):
        out.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    else:
        out.extend(int(v) for v in values)
    return out


def _chunks(values: list, n: int = 20000):
    for i in range(0, len(values), n):
        yield values[i:i + n]


INDEX_HASH_BITS = 32


def index_keys(hashes) -> np.ndarray:
    """The index stores the top 32 bits of each 64-bit fingerprint hash (4 bytes a row instead of
    8; a random collision adds one stray posting per ~4·10⁹, far below the confidence floor)."""
    return np.right_shift(np.asarray(hashes, dtype=np.int64), 64 - INDEX_HASH_BITS)


def _keyed(hashes) -> tuple[array.array, dict[int, int]]:
    """``(the distinct index keys of the hashes, sorted; {key: the hash it stands for})`` — the
    largest such hash when two share a key. Callers that look one set of hashes up several times
    compute it once and pass it on (``keyed=``)."""
    full = uniq(np.asarray(hashes, dtype=np.int64))
    keys = index_keys(full)
    back = dict(zip(keys.tolist(), full.tolist()))
    return _i64(uniq(keys)), back


def boilerplate(conn: apsw.Connection, hashes: np.ndarray, keyed=None) -> set[int]:
    """The given (64-bit) hashes that are too common to discriminate. The boilerplate table is
    small (a few hundred keys at most): it is read once per index version and held as a set."""
    if len(hashes) == 0:
        return set()
    keys, back = keyed or _keyed(hashes)
    bp = memo(conn, "boilerplate", lambda: frozenset(
        r[0] for r in conn.execute("SELECT hash FROM boilerplate")))
    return {back[k] for k in keys if k in bp}


def postings(conn: apsw.Connection, hashes: np.ndarray) -> list[tuple[int, int, int]]:
    """``(hash, block, line)`` rows for the given 64-bit fingerprint hashes (``hash`` is the
    caller's own 64-bit value; the index stores only ``index_keys``)."""
    if len(hashes) == 0:
        return []
    keys, back = _keyed(hashes)
    K, B, L = packed.rows(conn, np.frombuffer(keys, dtype=np.int64))
    return [(back[h], b, ln) for h, b, ln in zip(K.tolist(), B.tolist(), L.tolist())]


def block_counts(conn: apsw.Connection, hashes: np.ndarray, keyed=None,
                 rows=None, least: float = 0) -> tuple[dict[int, int], int]:
    """``({block: how many of the given hashes it contains (distinct)}, how many of the hashes occur
    at all)`` in one pass over the hashes' postings: one packed row per key leaves SQLite
    (``engram.index.packed``); the distinct ``(hash, block)`` pairs are counted by numpy.
    ``rows``: the hashes' ``packed.rows``, when the caller read them already; ``least``: only
    the blocks holding at least that many (the others never become Python objects)."""
    if len(hashes) == 0:
        return {}, 0
    keys, _back = keyed or _keyed(hashes)
    K, B, _L = rows if rows is not None else packed.rows(conn, np.frombuffer(keys, dtype=np.int64))
    if not len(K):
        return {}, 0
    first = np.r_[True, (K[1:] != K[:-1]) | (B[1:] != B[:-1])]   # distinct (key, block) pairs
    blocks, n = np.unique(B[first], return_counts=True)
    if least > 0:
        keep = n >= least
        blocks, n = blocks[keep], n[keep]
    return dict(zip(blocks.tolist(), n.tolist())), int(np.count_nonzero(np.r_[True, K[1:] != K[:-1]]))


def key_block_codes(conn: apsw.Connection, keys) -> np.ndarray:
    """The distinct ``(key, block)`` postings of the given (sorted, distinct) 32-bit index keys as
    sorted int64 codes ``key << 32 | block``."""
    K, B, _L = packed.rows(conn, np.asarray(keys, dtype=np.int64))
    if not len(K):
        return np.zeros(0, dtype=np.int64)
    codes = (K << 32) | B
    return codes[np.r_[True, codes[1:] != codes[:-1]]]


def postings_in_blocks(conn: apsw.Connection, hashes: np.ndarray,
                       blocks: Iterable[int], keyed=None, rows=None) -> list[tuple[int, int, int]]:
    """``(hash, block, line)`` for the given hashes, restricted to the given blocks. ``rows``:
    all of the hashes' ``packed.rows``, when the caller read them already (the same rows: a
    subset of rows in order is in order)."""
    bl = sorted(set(blocks))
    if len(hashes) == 0 or not bl:
        return []
    keys, back = keyed or _keyed(hashes)
    if rows is not None:
        K, B, L = rows
        sel = member(B, np.asarray(bl, np.int64))  # (sorted: np.isin's set-up costs more)
        K, B, L = K[sel], B[sel], L[sel]
    else:
        K, B, L = packed.rows(conn, np.frombuffer(keys, dtype=np.int64), blocks=np.asarray(bl, np.int64))
    return [(back[h], b, ln) for h, b, ln in zip(K.tolist(), B.tolist(), L.tolist())]


def refs_for_blocks(conn: apsw.Connection, blocks: Iterable[int]) -> list[tuple[int, int, int, int]]:
    """``(block, event, role, line0)`` for the given blocks, in block order (then event, role).

    Memoised per block and ``data_version``: a block (a file read whole, a long tool output) is
    found again by every span of the code it holds."""
    bl = sorted(set(blocks))
    cache = _rows(conn)
    held = cache.memo.setdefault("refs", {}) if cache is not None else {}
    got = list(map(held.get, bl))  # (C loops: a popular span's blocks are mostly held)
    if None in got:
        missing = {b: [] for b, refs in zip(bl, got) if refs is None}
        for ch in _chunks(list(missing)):
            for r in conn.execute("SELECT block, event, role, line0 FROM refs WHERE block IN carray(?)",
                                  (apsw.carray(_i64(ch)),)):
                missing[r[0]].append(r)
        if len(held) > ROW_CACHE:
            held.clear()
        held.update(missing)
        got = [missing[b] if refs is None else refs for b, refs in zip(bl, got)]
    return list(itertools.chain.from_iterable(got))


class EventRow(NamedTuple):
    """An ``events`` row (``EVENT_COLS``). Rows are named tuples, not dataclasses: explain makes
    hundreds per call on a cold cache (~4x cheaper to build), and tuples of plain values are not
    tracked by the garbage collector once it has looked at them (the row cache holds many)."""

    id: int
    tape: int
    ofs: int
    kind: int
    t: str | None
    file: str | None
    rel: str | None
    a_start: int | None
    a_end: int | None
    b_start: int | None
    b_end: int | None


EVENT_COLS = "id, tape, ofs, kind, t, file, rel, a_start, a_end, b_start, b_end"

ROW_CACHE = 200_000


class _Rows:
    """Event and tape rows a read connection has fetched, valid for one ``data_version`` of the
    database (any commit, by any connection, starts a new one)."""

    __slots__ = ("version", "events", "tapes", "memo")

    def __init__(self, version: int):
        self.version = version
        self.events: dict[int, EventRow] = {}
        self.tapes: dict[int, TapeRow] = {}
        self.memo: dict = {}  # other values derived from this version (``memo()``)


_row_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _rows(conn: apsw.Connection) -> _Rows | None:
    """The row cache of ``conn``; None inside a transaction (its own uncommitted writes)."""
    if conn.in_transaction:
        return None
    v = conn.data_version()
    c = _row_caches.get(conn)
    if c is None or c.version != v or len(c.events) + len(c.tapes) > ROW_CACHE:
        c = _row_caches[conn] = _Rows(v)
    return c


def refresh(conn: apsw.Connection) -> int:
    """Bring ``conn``'s ``data_version`` up to the last commit, by any connection; call it once
    at the start of a request, on the thread whose connection answers it.

    ``Connection.data_version()`` (what ``_rows`` keys on: a file control, ~0.2 µs) keeps the
    version this connection last read until it next reads a table, so after another
    connection's commit (an ingest) a request's first lookups would be served the rows and
    memos of before the commit. ``PRAGMA data_version`` opens a read of the database and moves
    the file control with it (~13 µs); once per request, not per lookup."""
    return conn.execute("PRAGMA data_version").fetchone()[0]


def memo(conn: apsw.Connection, key, compute):
    """``compute()``, memoised for the current ``data_version`` of ``conn`` (not inside a
    transaction). For values derived from many rows that explain needs again and again."""
    cache = _rows(conn)
    if cache is None:
        return compute()
    if key not in cache.memo:
        if len(cache.memo) > 4096:
            cache.memo.clear()
        cache.memo[key] = compute()
    return cache.memo[key]


def _cached_rows(conn: apsw.Connection, ids: Iterable[int], which: str, sql: str, make):
    """``{id: row}`` of the given ids that exist, in id order, through ``conn``'s row cache.

    (A heavy explain asks for ~1,000 ids at a time, most of them cached: the cached rows are
    gathered by C loops, ``map`` over the sorted ids, and only the misses are read.)"""
    cache = _rows(conn)
    table = getattr(cache, which) if cache is not None else {}
    ids = sorted(set(ids))
    got = list(map(table.get, ids))
    if None not in got:
        return dict(zip(ids, got))
    missing = [i for i, r in zip(ids, got) if r is None]
    for ch in _chunks(missing):
        for r in conn.execute(sql, (apsw.carray(_i64(ch)),)):
            table[r[0]] = make(*r)
    out = {}
    for i, r in zip(ids, got):
        if r is None:
            r = table.get(i)
            if r is None:  # no such row
                continue
        out[i] = r
    return out


def events(conn: apsw.Connection, ids: Iterable[int]) -> dict[int, EventRow]:
    return _cached_rows(conn, ids, "events", f"SELECT {EVENT_COLS} FROM events WHERE id IN carray(?)",
                        EventRow)


class TapeRow(NamedTuple):
    """A ``tapes`` row (``TAPE_COLS``), a named tuple like ``EventRow``."""

    id: int
    tape_id: str
    path: str | None
    live: int
    harness: str | None
    session: str | None
    tier: str | None
    model: str | None
    cwd: str | None
    label: str | None
    first_t: str | None
    last_t: str | None
    n_events: int
    source_path: str | None
    source_key: str | None
    continues: str | None
    coverage: str | None


TAPE_COLS = ("id, tape_id, path, live, harness, session, tier, model, cwd, label, first_t, last_t,"
             " n_events, source_path, source_key, continues, coverage")


def tapes(conn: apsw.Connection, ids: Iterable[int]) -> dict[int, TapeRow]:
    return _cached_rows(conn, ids, "tapes", f"SELECT {TAPE_COLS} FROM tapes WHERE id IN carray(?)",
                        TapeRow)


def tape_by_id(conn: apsw.Connection, tape_id: str) -> TapeRow | None:
    """Exact tape id, or a unique prefix of one (at least 6 characters)."""
    r = conn.execute(f"SELECT {TAPE_COLS} FROM tapes WHERE tape_id=?", (tape_id,)).fetchone()
    if r:
        return TapeRow(*r)
    if len(tape_id) >= 6:
        rows = list(conn.execute(f"SELECT {TAPE_COLS} FROM tapes WHERE tape_id >= ? AND tape_id < ?"
                                 " LIMIT 2", (tape_id, tape_id + "\uffff")))
        if len(rows) == 1:
            return TapeRow(*rows[0])
    return None


def tape_events_in_range(conn: apsw.Connection, tape_row: int, lo: int, hi: int) -> list[EventRow]:
    return [EventRow(*r) for r in conn.execute(
        f"SELECT {EVENT_COLS} FROM events WHERE tape=? AND ofs BETWEEN ? AND ? ORDER BY ofs",
        (tape_row, lo, hi))]


def live_bodies(conn: apsw.Connection, event_ids: Iterable[int]) -> dict[int, bytes]:
    il = sorted(set(event_ids))
    out = {}
    for ch in _chunks(il):
        for eid, body in conn.execute("SELECT event, body FROM live_events WHERE event IN carray(?)",
                                      (apsw.carray(_i64(ch)),)):
            out[eid] = body
    return out


def counts(conn: apsw.Connection) -> dict:
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    return {
        "tapes": one("SELECT count(*) FROM tapes WHERE live=0"),
        "live_sessions": one("SELECT count(*) FROM tapes WHERE live=1"),
        "sessions": one("SELECT count(DISTINCT coalesce(session, tape_id)) FROM tapes"),
        "events": one("SELECT count(*) FROM events"),
        "blocks": one("SELECT count(*) FROM blocks"),
        "fingerprints": packed.count(conn),
        "boilerplate": one("SELECT count(*) FROM boilerplate"),
        "edges": one("SELECT count(*) FROM edges"),
        "errors": one("SELECT count(*) FROM errors"),
    }


class EditLines(NamedTuple):
    """Line hashes of one edit's two sides: ``after``/``before`` whitespace-stripped, 0 for trivial
    lines (to match a span's lines wherever they are indented now); ``after_x``/``before_x`` exact
    (trailing whitespace only stripped; None in indexes written before they were kept), to diff the
    edit's own before → after the way a line diff of the real text does."""

    after: np.ndarray
    before: np.ndarray
    after_x: np.ndarray | None
    before_x: np.ndarray | None

    def diff_keys(self) -> tuple[bytes, bytes]:
        """The two sides to diff, as bytes (exact when both are known)."""
        if (self.after_x is not None and self.before_x is not None
                and len(self.after_x) == len(self.after) and len(self.before_x) == len(self.before)):
            return self.after_x.tobytes(), self.before_x.tobytes()
        return self.after.tobytes(), self.before.tobytes()


def edit_lines(conn: apsw.Connection, event_ids: Iterable[int]) -> dict[int, EditLines]:
    """event → its ``EditLines``, for code.edit events (memoised per ``data_version``)."""
    cache = _rows(conn)
    held = cache.memo.setdefault("edit_lines", {}) if cache is not None else {}
    want = set(event_ids)
    out = {e: held[e] for e in want if e in held}
    missing = want - out.keys()
    if missing:
        got = _edit_lines(conn, missing)
        if len(held) > ROW_CACHE:
            held.clear()
        held.update(got)
        held.update({e: None for e in missing if e not in got})
        out.update(got)
    return {e: v for e, v in sorted(out.items()) if v is not None}


def _edit_lines(conn: apsw.Connection, event_ids: Iterable[int]) -> dict[int, EditLines]:
    il = sorted(set(event_ids))
    blocks: dict[int, dict[int, int]] = {}
    for ch in _chunks(il):
        for eid, b, role in conn.execute(
                "SELECT event, block, role FROM refs WHERE event IN carray(?) AND role IN (0, 1)",
                (apsw.carray(_i64(ch)),)):
            blocks.setdefault(eid, {})[role] = b
    bl = sorted({b for d in blocks.values() for b in d.values()})
    blob: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
    for ch in _chunks(bl):
        for b, h, x in conn.execute("SELECT block, hashes, exact FROM block_lines WHERE block IN carray(?)",
                                    (apsw.carray(_i64(ch)),)):
            blob[b] = (np.frombuffer(h, dtype=np.int32),
                       np.frombuffer(x, dtype=np.int32) if x is not None else None)
    empty = (np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))
    out = {}
    for eid, d in blocks.items():
        a = blob.get(d.get(0), empty) if 0 in d else empty
        b = blob.get(d.get(1), empty) if 1 in d else empty
        out[eid] = EditLines(a[0], b[0], a[1], b[1])
    return out
