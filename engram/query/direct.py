"""Direct evidence's rules, and a count of a document's blocks' sessions in plain Python (no numpy).

The rules (the numbers ``explain`` and ``blocks`` look a span up with; both import them from here):

* ``DIRECT_FLOOR``: a session is direct evidence for a span when an indexed block holds more than
  this share of the span's winnowed fingerprints (its *confidence*);
* ``ALL_KGRAMS_MAX``: a span with at most this many distinct winnowed keys is looked up by every
  k-gram of it (a short span matches wherever any run of k tokens of it was copied);
* ``SAMPLE``: a block with more is looked up by its ``SAMPLE`` smallest winnowed keys, which are
  also the denominator of its confidence (``engram.query.blocks``, a bottom-k sample).

``lens_counts`` answers what a code lens shows — each top-level block's range (Python's by
``symbols``' scan without numpy, others' by their parse) and how many sessions hold it —
exactly as ``Engine.explain_blocks`` counts them (``sessions``), without numpy
or the engine: a language server that has just started answers its first code lens with it while
the engine (numpy's import alone: ~150 ms of CPU) is still being imported. Every step is the
numpy path's, on Python ints, in C loops where the standard library has one (``map``, slices of
bytes, big-integer arithmetic, ``Counter``): tokens (``engram.fingerprint.tokenize``: a run of
identifier bytes or one printable punctuation byte, each distinct one hashed with xxh3_64), k-gram
hashes (the polynomial fold of ``winnow._kgram_hashes`` for all k-grams as one big-integer
product, then XXH3's avalanche on 8-byte lanes, as int64), winnowing (a window's minimum, from
minima of pairs; as a set of values the rightmost-on-ties choice does not matter), index keys
(the top 32 bits), boilerplate keys neither looked up nor counted, postings from the packed rows
(``engram.index.packed``) and the wide ones, then refs → events → tapes. A session is a tape with
an event referring to a block above the floor. ``tests/unit/test_direct.py`` compares the counts
with ``explain_blocks`` on every block of real files over a real index.

It answers only what it can answer exactly: an index of this schema and these fingerprint
parameters (else ``None``: the caller takes the engine's path, which reports a mismatch). Reads
are one read transaction on a read-only connection of its own; nothing is written.
"""

from __future__ import annotations

import array
import contextlib
import functools
import json
import os
import re
import struct
import sys
import threading
from collections import Counter
from itertools import accumulate, chain, compress, repeat
from operator import floordiv, getitem, le, lt, rshift, sub
from pathlib import Path

import apsw
import xxhash

DIRECT_FLOOR = 0.25       # direct evidence below this is noise unless --all
ALL_KGRAMS_MAX = 32       # spans with up to this many winnowed fingerprints look up every k-gram
SAMPLE = 64               # winnowed fingerprints a block is looked up by, at most (bottom-k)

# What this module reads: the index's schema and fingerprint parameters it was written for
# (``engram.index.db``: ``SCHEMA_VERSION``, ``fingerprint_params()``; a test checks they are the
# same) — any other index is left to the engine.
SCHEMA = 8
FINGERPRINT = {"blocks": 2, "fp_version": 1, "index_hash_bits": 32, "k": 5, "w": 8}
BOILERPLATE_MAX = 200_000  # a larger boilerplate table is not held (``postings._RowCache``)
MMAP_BYTES = 256 << 20     # of the index file read through a memory map (``db.MMAP_BYTES``)

_KEY_SHIFT = 64 - FINGERPRINT["index_hash_bits"]
_OFS = 1 << 31            # packed rows are keyed by key + 2**31
_REC = struct.Struct(">IH")  # a packed record: block (u32), line (u16), big-endian
_M64 = (1 << 64) - 1
_KM = 0x9E3779B97F4A7C15  # winnow._M
_MX1 = 0x165667919E3779F9  # tokenize._MX1 (XXH3's avalanche)
# tokenize.py's tokens: a run of identifier bytes, else one printable ASCII punctuation byte
TOKEN = re.compile(rb"[0-9A-Za-z_\x80-\xff]+|[\x21-\x7e]")
_CALIBRATION = ("ENGRAM_CALIBRATE_K", "ENGRAM_CALIBRATE_W")
_LITTLE = sys.byteorder == "little"


def lens_counts(index: str | os.PathLike, text: str, path, close: bool = True) -> list[dict] | None:
    """``[{"range": [start, end], "sessions": n}, ...]`` for every top-level block of ``text``
    (``symbols.top_level_blocks``), as ``explain_blocks`` counts them; None when this index
    cannot be answered here (missing, another schema or fingerprint parameters). Read through the
    connection ``prepare`` opened for ``index`` when there is one; ``close=False`` keeps the
    connection for the next count (``release`` closes it) instead of closing it now."""
    from engram.query import symbols

    if any(os.environ.get(v) for v in _CALIBRATION) or not Path(index).is_file():
        return None
    blocks = [(s, e) for s, e, _n in symbols.top_level_blocks(text, path, plain=True)]
    conn = _take(index)
    if conn is None:
        return None
    try:
        with _read(conn):
            if not _same_params(conn):
                return None
            counts = block_sessions(conn, text, blocks)
    except BaseException:
        close = True
        raise
    finally:
        if close:
            _close(conn)
        else:
            _keep(index, conn)
    return [{"range": [s, e], "sessions": n} for (s, e), n in zip(blocks, counts, strict=True)]


def warm(index: str | os.PathLike | None = None) -> None:
    """Load what ``lens_counts`` needs beyond this module (the parser of the commonest language;
    others load on their first lens), ahead of the first; with ``index``, also ``prepare`` it."""
    from engram.query import symbols

    symbols.top_level_blocks("def warm():\n    return 1\n", "warm.py", scan=False)
    symbols.top_level_blocks("def warm():\n    return 1\n", "warm.py", plain=True)
    if index is not None:
        prepare(index)


# A connection opened ahead for the next count (``prepare``; one at a time): (the index's path,
# its file's identity then, the connection). Whatever a count reads is read in its own read
# transaction, so an ingest meanwhile changes nothing but the index's contents, which it sees.
_prepared: tuple[str, tuple[int, int], apsw.Connection] | None = None
_prepared_lock = threading.Lock()
_preparing = threading.Lock()  # held by ``prepare``: a count that starts meanwhile waits for it
_PREPARING_WAIT_S = 0.25


def _identity(index: str) -> tuple[int, int] | None:
    try:
        st = os.stat(index)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _open(index: str) -> apsw.Connection | None:
    try:
        conn = apsw.Connection(index, flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error:
        return None
    conn.set_busy_timeout(1000)
    conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")  # as the engine's readers: no copy of a cold page
    return conn


def prepare(index: str | os.PathLike) -> None:
    """Open the read-only connection the next ``lens_counts`` of ``index`` reads through, ahead
    of it (a server's start, before a file is opened): SQLite reads the schema and compiles the
    count's statements (apsw keeps them), and the index's top pages are mapped, here rather than
    in the count (~1.5-2 ms of a first count's CPU). Nothing is kept but the connection: every
    count reads the index afresh. Errors are left to the count."""
    index = str(index)
    with _preparing:
        ident = _identity(index)
        if ident is None or (_prepared is not None and _prepared[:2] == (index, ident)):
            return
        conn = _open(index)
        if conn is None:
            return
        try:
            with _read(conn):
                if _same_params(conn):  # the statements a count runs, on a key no block has
                    boilerplate(conn)
                    postings(conn, [0])
                    block_tapes(conn, [0])
        except apsw.Error:
            _close(conn)
            return
        _keep(index, conn, ident)


def _keep(index, conn: apsw.Connection, ident: tuple[int, int] | None = None) -> None:
    """Keep ``conn`` for the next count of ``index`` (closing the one kept before); closed when
    the index's file is gone."""
    global _prepared
    index = str(index)
    ident = ident or _identity(index)
    with _prepared_lock:
        old, _prepared = _prepared, ((index, ident, conn) if ident is not None else None)
    if old is not None and old[2] is not conn:
        _close(old[2])
    if ident is None:
        _close(conn)


def _close(conn: apsw.Connection) -> None:
    with contextlib.suppress(Exception):
        conn.close()


def _take(index) -> apsw.Connection | None:
    """The connection ``prepare`` opened for ``index`` (its file the same one), else a new one."""
    global _prepared
    index = str(index)
    if _preparing.acquire(timeout=_PREPARING_WAIT_S):  # (a prepare under way: nearly done)
        _preparing.release()
    with _prepared_lock:
        got, _prepared = _prepared, None
    if got is not None:
        if got[:2] == (index, _identity(index)):
            return got[2]
        _close(got[2])
    return _open(index)


def release() -> None:
    """Close the connection kept for the next count, if any."""
    global _prepared
    with _prepared_lock:
        got, _prepared = _prepared, None
    if got is not None:
        _close(got[2])


@contextlib.contextmanager
def _read(conn: apsw.Connection):
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _same_params(conn: apsw.Connection) -> bool:
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('schema', 'fingerprint')"))
        return (meta.get("schema") == str(SCHEMA)
                and json.loads(meta.get("fingerprint") or "null") == FINGERPRINT)
    except (apsw.Error, ValueError):
        return False


def block_sessions(conn: apsw.Connection, text: str, blocks: list[tuple[int, int]]) -> list[int]:
    """How many sessions hold each block (1-based inclusive line ranges) of ``text`` above the
    floor (``explain_blocks``' ``sessions``), read through ``conn`` (inside a read transaction)."""
    if not blocks:
        return []
    bp = boilerplate(conn)
    v, minima, spans = _document(text, blocks)
    queries = [block_keys(v, a, n, bp, minima) for a, n in spans]
    keys = sorted({key for q, _d in queries for key in q})
    held = postings(conn, keys)
    get, none = held.get, ()
    matched: list[list[int]] = []
    for q, denom in queries:
        hits = Counter(chain.from_iterable(map(get, q, repeat(none))))
        # the blocks with at least ``least`` hits, without a Python loop over them
        matched.append(list(compress(hits, map(le, repeat(least_hits(denom)), hits.values()))))
    tapes = block_tapes(conn, sorted(set().union(*matched)))
    get = tapes.get
    return [len(set().union(*map(get, m, repeat(none)))) if m else 0 for m in matched]


@functools.lru_cache(maxsize=1024)
def least_hits(denom: int) -> int:
    """The fewest hits whose confidence ``min(1.0, hits / denom)`` is above ``DIRECT_FLOOR``
    (found with that very expression; a count compared with it costs less than a division)."""
    if denom <= 0 or not 1.0 > DIRECT_FLOOR:
        return 1 << 62  # none
    n = max(1, int(denom * DIRECT_FLOOR))
    while n > 1 and min(1.0, (n - 1) / denom) > DIRECT_FLOOR:
        n -= 1
    while not min(1.0, n / denom) > DIRECT_FLOOR:
        n += 1
    return n


def _document(text: str, blocks: list[tuple[int, int]]):
    """The document's k-gram hashes ``v``, the minimum of every winnowing window of ``v``
    (``minima[i] = min(v[i:i + w])``) and, for each block, ``(first of its k-grams, how many)``:
    one pass over the document (tokens never cross a line break, so a block's k-grams are exactly
    its own text's)."""
    k = FINGERPRINT["k"]
    lines = text.encode("utf-8", "surrogatepass").split(b"\n")
    per_line = list(map(TOKEN.findall, lines))
    first = list(accumulate(map(len, per_line), initial=0))  # each line's first token
    toks = list(chain.from_iterable(per_line))
    distinct = list(set(toks))
    memo = dict(zip(distinct, map(xxhash.xxh3_64_intdigest, distinct)))
    v = kgram_hashes(list(map(memo.__getitem__, toks)), k)
    last = len(first) - 1
    spans = []
    for s, e in blocks:
        a, z = first[min(max(s - 1, 0), last)], first[min(max(e, 0), last)]
        spans.append((a, max(z - a - (k - 1), 0)))
    return v, window_minima(v, FINGERPRINT["w"]), spans


def window_minima(v: list[int], w: int) -> list[int]:
    """``min(v[i:i + w])`` for every window of ``w`` values (``len(v) - w + 1`` of them): minima of
    pairs, then of pairs of those, ... (``_pairwise_min``: no Python loop per value)."""
    out, width = v, 1
    while width * 2 <= w:
        out = _pairwise_min(out, out[width:])
        width *= 2
    if width < w:  # w not a power of two: the last window's overlap
        out = _pairwise_min(out, out[w - width:])
    return out


def _pairwise_min(a: list[int], b: list[int]) -> list[int]:
    """``[min(x, y) for x, y in zip(a, b)]``, by C loops: each pair indexed by ``y < x`` (0 keeps
    ``x``, 1 takes ``y``; ``min`` itself parses its keyword arguments on every call, ~3x the cost)."""
    return list(map(getitem, zip(a, b), map(lt, b, a)))


# The k-gram fold (``acc * M + h`` over k token hashes, mod 2**64) for every k-gram at once: the
# token hashes as the digits of one big integer in base 2**(8 * _FOLD) (little-endian slots of
# _FOLD bytes), times the polynomial ``sum M**s * base**s`` (s < k); digit ``i + k - 1`` of the
# product is k-gram i's ``sum h[i+j] * M**(k-1-j)`` (< k * 2**128: no carry out of a slot), whose
# low 8 bytes are the fold. XXH3's avalanche on the 8-byte lanes of one integer likewise: shifts
# masked to their lane, the multiplication in 16-byte slots. All of it C loops over bytes and ints.
_FOLD = 17


def _spread(b: bytes, width: int, slot: int, n: int, at: int = 0) -> bytearray:
    """``n`` lanes of ``width`` bytes of ``b`` in slots of ``slot`` bytes (lane i in slot i + at)."""
    out = bytearray(slot * (n + at))
    for j in range(width):
        out[at * slot + j::slot] = b[j:width * n:width]
    return out


def _gather(b: bytes, slot: int, width: int, first: int, n: int) -> bytes:
    """The low ``width`` bytes of ``n`` slots of ``slot`` bytes of ``b``, from slot ``first``."""
    out = bytearray(width * n)
    part = b[first * slot:(first + n) * slot]
    for j in range(width):
        out[j::width] = part[j::slot]
    return bytes(out)


@functools.lru_cache(maxsize=8)
def _fold_poly(k: int) -> int:
    return sum(pow(_KM, s, 1 << 64) << (8 * _FOLD * s) for s in range(k))


def _lanes(n: int, low_bits: int) -> int:
    """A mask of ``n`` 8-byte lanes, each with its ``low_bits`` lowest bits set."""
    return int.from_bytes(((1 << low_bits) - 1).to_bytes(8, "little") * n, "little")


def kgram_hashes(h: list[int], k: int) -> list[int]:
    """int64 hash of every k consecutive token hashes (``winnow._kgram_hashes``): the fold
    ``acc * M + h`` mod 2**64, then XXH3's avalanche (see ``_FOLD``)."""
    n = len(h)
    m = n - k + 1
    if m <= 0:
        return []
    u64 = array.array("Q", h).tobytes()
    if not _LITTLE:
        u64 = array.array("Q", u64)
        u64.byteswap()
        u64 = u64.tobytes()
    fold = int.from_bytes(_spread(u64, 8, _FOLD, n), "little") * _fold_poly(k)
    x = int.from_bytes(_gather(fold.to_bytes(_FOLD * (n + k), "little"), _FOLD, 8, k - 1, m),
                       "little")
    x ^= (x >> 37) & _lanes(m, 27)
    x = int.from_bytes(_spread(x.to_bytes(8 * m, "little"), 8, 16, m), "little") * _MX1
    x = int.from_bytes(_gather(x.to_bytes(16 * m + 16, "little"), 16, 8, 0, m), "little")
    x ^= (x >> 32) & _lanes(m, 32)
    out = array.array("q", x.to_bytes(8 * m, "little"))
    if not _LITTLE:
        out.byteswap()
    return out.tolist()


def block_keys(v: list[int], a: int, n: int, bp: frozenset,
               minima: list[int] | None = None) -> tuple[list[int], int]:
    """The sorted distinct index keys the block of k-grams ``v[a:a+n]`` is looked up by, and its
    confidence's denominator (``blocks._block_queries`` for one block; ``([], 0)``: none).
    ``minima``: ``window_minima(v, w)``, when already computed."""
    if n <= 0:
        return [], 0
    w = FINGERPRINT["w"]
    # winnowing keeps each window's minimum: the set of kept values is the set of minima
    if n < w:
        win = {min(v[a:a + n])}
    elif minima is not None:
        win = set(minima[a:a + n - w + 1])
    else:
        win = set(window_minima(v[a:a + n], w))
    return pick_keys(sorted(set(map(rshift, win, repeat(_KEY_SHIFT)))),
                     lambda: map(rshift, v[a:a + n], repeat(_KEY_SHIFT)), bp)


def pick_keys(keys: list[int], every, bp: frozenset) -> tuple[list[int], int]:
    """The rule by which one block is looked up, given its sorted distinct winnowed ``keys`` and
    ``every()``, the keys of all its k-grams: at most ``ALL_KGRAMS_MAX`` keys, by every k-gram,
    else by the ``SAMPLE`` smallest; boilerplate keys are neither looked up nor counted. The keys
    (sorted, distinct) and the confidence's denominator (``([], 0)``: none)."""
    sample = keys[:SAMPLE]
    q = sorted(set(every())) if len(keys) <= ALL_KGRAMS_MAX else sample
    if bp:
        sample = [x for x in sample if x not in bp]
        q = [x for x in q if x not in bp]
    return (q, len(sample)) if sample else ([], 0)


def boilerplate(conn: apsw.Connection) -> frozenset:
    """The boilerplate index keys (none when the table is larger than ``BOILERPLATE_MAX``)."""
    rows = conn.execute("SELECT hash FROM boilerplate LIMIT ?", (BOILERPLATE_MAX + 1,)).fetchall()
    return frozenset(r[0] for r in rows) if len(rows) <= BOILERPLATE_MAX else frozenset()


def _carray(values) -> apsw.carray:
    return apsw.carray(array.array("q", values))


def postings(conn: apsw.Connection, keys: list[int]) -> dict[int, dict[int, None]]:
    """``{key: the blocks holding it (a dict's keys)}`` for the given keys that have postings
    (packed rows and the rows too wide to pack, ``engram.index.packed``)."""
    out: dict[int, dict[int, None]] = {}
    if not keys:
        return out
    got = conn.execute("SELECT key, rows FROM packed WHERE key IN carray(?)",
                       (_carray([x + _OFS for x in keys]),)).fetchall()
    if got:
        packed_keys, rows = zip(*got)
        blocks = _blocks_of(b"".join(rows))
        ends = list(accumulate(map(floordiv, map(len, rows), repeat(_REC.size))))
        slices = map(slice, [0, *ends[:-1]], ends)  # each key's records
        # each key's blocks as a dict's keys: a dict of ints only is not tracked by the garbage
        # collector (a set is: its collections during the count traversed them all), and its
        # keys iterate from a dense table (the count below iterates ~40,000 of them)
        out = dict(zip(map(sub, packed_keys, repeat(_OFS)),
                       map(dict.fromkeys, map(blocks.__getitem__, slices))))
    if conn.execute("SELECT 1 FROM fingerprints LIMIT 1").fetchone() is not None:
        for k, b in conn.execute("SELECT hash, block FROM fingerprints WHERE hash IN carray(?)",
                                 (_carray(keys),)):
            out.setdefault(k, {})[b] = None
    return out


def _blocks_of(rows: bytes) -> array.array:
    """The block (the first 4 bytes, big-endian) of every 6-byte record of ``rows``: moved into
    4-byte slots by slice assignments and read as one array (no Python object per record)."""
    n = len(rows) // _REC.size
    buf = bytearray(4 * n)
    for i in range(4):
        buf[i::4] = rows[i:_REC.size * n:_REC.size]
    out = array.array("I")
    if out.itemsize != 4:  # not expected: struct, one record at a time
        return array.array("q", (b for b, _l in _REC.iter_unpack(rows[:_REC.size * n])))
    out.frombytes(buf)
    if _LITTLE:
        out.byteswap()
    return out


def block_tapes(conn: apsw.Connection, blocks: list[int]) -> dict[int, set[int]]:
    """``{block: the tapes with an event referring to it}`` (events and tapes that exist).

    When the tapes' ids are one unbroken run (``count(*) = max(id) - min(id) + 1``: the usual
    case, tapes are seldom deleted), a tape exists exactly when its id is in that run: checked in
    the query instead of a lookup in ``tapes`` per event (its rows are wide: ~800 pages read for
    a ~600-line file's first lens at 16k sessions)."""
    out: dict[int, set[int]] = {}
    if blocks:
        n, lo, hi = conn.execute("SELECT (SELECT count(*) FROM tapes), (SELECT min(id) FROM tapes),"
                                 " (SELECT max(id) FROM tapes)").fetchone()
        if not n:
            return out
        if n == hi - lo + 1:
            rows = conn.execute("SELECT r.block, e.tape FROM refs r JOIN events e ON e.id = r.event"
                                " WHERE r.block IN carray(?) AND e.tape BETWEEN ? AND ?",
                                (_carray(blocks), lo, hi))
        else:
            rows = conn.execute("SELECT r.block, e.tape FROM refs r JOIN events e ON e.id = r.event"
                                " JOIN tapes t ON t.id = e.tape WHERE r.block IN carray(?)",
                                (_carray(blocks),))
        for b, t in rows:
            out.setdefault(b, set()).add(t)
    return out
