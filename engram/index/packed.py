"""Fingerprint postings packed one row per index key (``packed`` table, migration 0008).

A fingerprint row is ``(key, block, line)``: the 32-bit index key of a winnowed k-gram, the block
that holds it, the line of the block it starts on. Stored one SQLite row each (the ``fingerprints``
table, ``WITHOUT ROWID``), a row cost ~17 bytes: a 4-byte key repeated in every row, the record
header, the cell's size and pointer. Here every row of one key is one blob of 6-byte records
(block: unsigned 32-bit, line: unsigned 16-bit, big-endian, in (block, line) order) in a row keyed
by ``key + 2**31`` (a non-negative rowid: 5 bytes at most as a varint). On the 16k-session scale
corpus that is 7.2 M rows in 1.2 M keys, 123 → ~55 MB.

Nothing is lost: a row whose line does not fit 16 bits (a block of more than 65,534 lines) stays in
``fingerprints``, and every reader here unions the two tables (an index written before 0008 holds
its rows there until migrated; tests may write rows there directly). The readers give the rows the
old table gave, in its order (key, block, line), distinct.

Rows are only ever added for new blocks (content-addressed: a block is fingerprinted once), whose
ids are above every id a key's blob holds, so appending keeps a blob sorted; readers check that and
sort when it does not hold (after ``delete_blocks`` reused an id, say).
"""

from __future__ import annotations

import array

import apsw
import numpy as np

from engram.sortedset import member

OFS = 1 << 31                      # rowid = key + OFS: keys are signed 32-bit
REC = np.dtype([("b", ">u4"), ("l", ">u2")])
WIDE = 0xFFFF                      # lines from here on stay in ``fingerprints``
_EMPTY = np.zeros(0, dtype=np.int64)
ADD_CHUNK = 1 << 15                # keys bound per ``executemany`` in ``add``

_UPSERT = ("INSERT INTO packed(key, rows) VALUES (?, ?)"
           " ON CONFLICT(key) DO UPDATE SET rows = CAST(packed.rows || excluded.rows AS BLOB)")


def _arr(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _carray(values: np.ndarray) -> apsw.carray:
    out = array.array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    return apsw.carray(out)


def add(conn: apsw.Connection, H: np.ndarray, B: np.ndarray, L: np.ndarray) -> None:
    """Add rows ``(H, B, L)``: sorted by (key, block, line) and distinct, of new blocks."""
    H, B, L = _arr(H), _arr(B), _arr(L)
    if not len(H):
        return
    wide = (L >= WIDE) | (L < 0) | (B < 0) | (B >= 1 << 32)
    if wide.any():
        conn.executemany("INSERT OR IGNORE INTO fingerprints VALUES (?,?,?)",
                         zip(H[wide].tolist(), B[wide].tolist(), L[wide].tolist()))
        keep = ~wide
        H, B, L = H[keep], B[keep], L[keep]
        if not len(H):
            return
    rec = np.empty(len(H), dtype=REC)
    rec["b"], rec["l"] = B, L
    buf = memoryview(rec.view(np.uint8))   # (its bytes, not a copy of them)
    starts = np.flatnonzero(np.r_[True, H[1:] != H[:-1]])
    ends = np.r_[starts[1:], len(H)] * REC.itemsize
    keys = H[starts] + OFS
    starts *= REC.itemsize
    for i in range(0, len(keys), ADD_CHUNK):   # Python objects for a chunk of keys at a time
        j = i + ADD_CHUNK
        conn.executemany(_UPSERT, zip(keys[i:j].tolist(), (
            buf[s:e] for s, e in zip(starts[i:j].tolist(), ends[i:j].tolist()))))


def _decode(got: list[tuple[int, bytes]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not got:
        return _EMPTY, _EMPTY, _EMPTY
    if any(got[i][0] > got[i + 1][0] for i in range(len(got) - 1)):
        got = sorted(got)
    lens = np.fromiter((len(r) for _k, r in got), dtype=np.int64, count=len(got)) // REC.itemsize
    rec = np.frombuffer(b"".join(r for _k, r in got), dtype=REC)
    K = np.repeat(np.fromiter((k for k, _r in got), dtype=np.int64, count=len(got)) - OFS, lens)
    return K, rec["b"].astype(np.int64), rec["l"].astype(np.int64)


def _has_wide(conn: apsw.Connection) -> bool:
    return conn.execute("SELECT 1 FROM fingerprints LIMIT 1").fetchone() is not None


def _order(K: np.ndarray, B: np.ndarray, L: np.ndarray, merged: bool
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key, block, line) order, distinct: as packed blobs are when appended in id order."""
    n = len(K)
    if n < 2:
        return K, B, L
    same = K[1:] == K[:-1]
    if merged or bool((same & ((B[1:] < B[:-1]) | ((B[1:] == B[:-1]) & (L[1:] <= L[:-1])))).any()):
        o = np.lexsort((L, B, K))
        K, B, L = K[o], B[o], L[o]
        keep = np.r_[True, (K[1:] != K[:-1]) | (B[1:] != B[:-1]) | (L[1:] != L[:-1])]
        if not keep.all():
            K, B, L = K[keep], B[keep], L[keep]
    return K, B, L


def rows(conn: apsw.Connection, keys: np.ndarray, blocks: np.ndarray | None = None,
         above: int | None = None, outside: tuple[int, int] | None = None
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row of the given (32-bit, signed) keys as arrays ``(K, B, L)`` in (key, block, line)
    order: all of them, or those of ``blocks`` (sorted, distinct), of blocks ``> above``, or of
    blocks outside the closed range ``outside``."""
    keys = _arr(keys)
    if not len(keys):
        return _EMPTY, _EMPTY, _EMPTY
    got = conn.execute("SELECT key, rows FROM packed WHERE key IN carray(?)",
                       (_carray(keys + OFS),)).fetchall()
    K, B, L = _decode(got)
    merged = False
    if _has_wide(conn):
        sql = "SELECT hash, block, line FROM fingerprints WHERE hash IN carray(?)"
        w = conn.execute(sql, (_carray(keys),)).fetchall()
        if w:
            a = np.array(w, dtype=np.int64).reshape(-1, 3)
            K, B, L = np.r_[K, a[:, 0]], np.r_[B, a[:, 1]], np.r_[L, a[:, 2]]
            merged = True
    sel = None
    if blocks is not None:
        # (binary search in the sorted blocks: numpy's ``isin`` costs more to set up than the
        # few dozen blocks an explain asks for)
        sel = member(B, np.sort(_arr(blocks)))
    if above is not None:
        s = B > above
        sel = s if sel is None else sel & s
    if outside is not None:
        s = (B < outside[0]) | (B > outside[1])
        sel = s if sel is None else sel & s
    if sel is not None and not sel.all():
        K, B, L = K[sel], B[sel], L[sel]
    return _order(K, B, L, merged)


def key_counts(conn: apsw.Connection, keys: np.ndarray) -> dict[int, int]:
    """``{key: its number of rows}`` for the given keys that have any."""
    keys = _arr(keys)
    out: dict[int, int] = {}
    if not len(keys):
        return out
    for k, n in conn.execute("SELECT key, length(rows) FROM packed WHERE key IN carray(?)",
                             (_carray(keys + OFS),)):
        out[k - OFS] = n // REC.itemsize
    if _has_wide(conn):
        for k, n in conn.execute("SELECT hash, count(*) FROM fingerprints WHERE hash IN carray(?)"
                                 " GROUP BY hash", (_carray(keys),)):
            out[k] = out.get(k, 0) + n
    return out


def count(conn: apsw.Connection) -> int:
    """How many fingerprint rows the index holds."""
    packed = conn.execute("SELECT coalesce(sum(length(rows)), 0) FROM packed").fetchone()[0]
    return packed // REC.itemsize + conn.execute("SELECT count(*) FROM fingerprints").fetchone()[0]


def key_range(conn: apsw.Connection, lo: int = -OFS, hi: int = OFS
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(K, B, L)`` of every row with ``lo <= key < hi`` (all by default), in (key, block, line)
    order."""
    got = conn.execute("SELECT key, rows FROM packed WHERE key >= ? AND key < ?",
                       (lo + OFS, hi + OFS)).fetchall()
    K, B, L = _decode(got)
    merged = False
    if _has_wide(conn):
        w = conn.execute("SELECT hash, block, line FROM fingerprints WHERE hash >= ? AND hash < ?",
                         (lo, hi)).fetchall()
        if w:
            a = np.array(w, dtype=np.int64).reshape(-1, 3)
            K, B, L = np.r_[K, a[:, 0]], np.r_[B, a[:, 1]], np.r_[L, a[:, 2]]
            merged = True
    return _order(K, B, L, merged)


def delete_blocks(conn: apsw.Connection, blocks) -> None:
    """Remove every row of the given blocks (``engram gc``: blocks no event refers to)."""
    bl = np.unique(_arr(list(blocks)))
    if not len(bl):
        return
    conn.execute("DELETE FROM fingerprints WHERE block IN carray(?)", (_carray(bl),))
    changed = []
    for k, r in conn.execute("SELECT key, rows FROM packed").fetchall():
        rec = np.frombuffer(r, dtype=REC)
        drop = np.isin(rec["b"].astype(np.int64), bl)
        if drop.any():
            changed.append((k, rec[~drop].tobytes()))
    for k, r in changed:
        if r:
            conn.execute("UPDATE packed SET rows = ? WHERE key = ?", (r, k))
        else:
            conn.execute("DELETE FROM packed WHERE key = ?", (k,))
