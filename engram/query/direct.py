"""Direct evidence's rules, and a count of a document's blocks' sessions in plain Python (no numpy).

The rules (the numbers ``explain`` and ``blocks`` look a span up with; both import them from here):

* ``DIRECT_FLOOR``: a session is direct evidence for a span when an indexed block holds more than
  this share of the span's winnowed fingerprints (its *confidence*);
* ``ALL_KGRAMS_MAX``: a span with at most this many distinct winnowed keys is looked up by every
  k-gram of it (a short span matches wherever any run of k tokens of it was copied);
* ``SAMPLE``: a block with more is looked up by its ``SAMPLE`` smallest winnowed keys, which are
  also the denominator of its confidence (``engram.query.blocks``, a bottom-k sample).

``lens_counts`` answers what a code lens shows — each top-level block's range and how many
sessions hold it — exactly as ``Engine.explain_blocks`` counts them (``sessions``), without numpy
or the engine: a language server that has just started answers its first code lens with it while
the engine (numpy's import alone: ~150 ms of CPU) is still being imported. Every step is the
numpy path's, on Python ints: tokens (``engram.fingerprint.tokenize``: a run of identifier bytes
or one printable punctuation byte, each hashed with xxh3_64), k-gram hashes (the polynomial fold
of ``winnow._kgram_hashes``, rolled, then XXH3's avalanche, as int64), winnowing (a window's
minimum; as a set of values the rightmost-on-ties choice does not matter), index keys (the top 32
bits), boilerplate keys neither looked up nor counted, postings from the packed rows
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
from collections import Counter
from itertools import chain
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


def lens_counts(index: str | os.PathLike, text: str, path) -> list[dict] | None:
    """``[{"range": [start, end], "sessions": n}, ...]`` for every top-level block of ``text``
    (``symbols.top_level_blocks``), as ``explain_blocks`` counts them; None when this index
    cannot be answered here (missing, another schema or fingerprint parameters)."""
    from engram.query import symbols

    if any(os.environ.get(v) for v in _CALIBRATION) or not Path(index).is_file():
        return None
    blocks = [(s, e) for s, e, _n in symbols.top_level_blocks(text, path, scan=False)]
    try:
        conn = apsw.Connection(str(index), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error:
        return None
    try:
        conn.set_busy_timeout(1000)
        with _read(conn):
            if not _same_params(conn):
                return None
            counts = block_sessions(conn, text, blocks)
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    return [{"range": [s, e], "sessions": n} for (s, e), n in zip(blocks, counts, strict=True)]


def warm() -> None:
    """Load what ``lens_counts`` needs beyond this module (the parser of the commonest language;
    others load on their first lens), ahead of the first."""
    from engram.query import symbols

    symbols.top_level_blocks("def warm():\n    return 1\n", "warm.py", scan=False)


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
    queries = [block_keys(v, a, n, bp) for v, a, n in _block_kgrams(text, blocks)]
    keys = sorted({key for q, _d in queries for key in q})
    held = postings(conn, keys)
    matched: list[list[int]] = []
    for q, denom in queries:
        hits = Counter(chain.from_iterable(held.get(key, ()) for key in q))
        least = least_hits(denom)
        matched.append([b for b, n in hits.items() if n >= least])
    tapes = block_tapes(conn, sorted({b for m in matched for b in m}))
    return [len(set().union(*(tapes.get(b, ()) for b in m))) if m else 0 for m in matched]


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


def _block_kgrams(text: str, blocks: list[tuple[int, int]]):
    """``(k-gram hashes of the document, first of the block's, how many)`` for each block: one
    pass over the document (tokens never cross a line break, so a block's k-grams are exactly
    its own text's)."""
    k = FINGERPRINT["k"]
    memo: dict[bytes, int] = {}
    h: list[int] = []
    first = []  # index of each line's first token
    for line in text.encode("utf-8", "surrogatepass").split(b"\n"):
        first.append(len(h))
        for tok in TOKEN.findall(line):
            x = memo.get(tok)
            if x is None:
                x = memo[tok] = xxhash.xxh3_64_intdigest(tok)
            h.append(x)
    first.append(len(h))
    v = kgram_hashes(h, k)
    last = len(first) - 1
    for s, e in blocks:
        a, z = first[min(max(s - 1, 0), last)], first[min(max(e, 0), last)]
        yield v, a, max(z - a - (k - 1), 0)


def kgram_hashes(h: list[int], k: int) -> list[int]:
    """int64 hash of every k consecutive token hashes (``winnow._kgram_hashes``): the fold
    ``acc * M + h`` mod 2**64, rolled, then XXH3's avalanche."""
    if len(h) < k:
        return []
    top = pow(_KM, k - 1, 1 << 64)
    acc = 0
    for x in h[:k]:
        acc = (acc * _KM + x) & _M64
    out = []
    append = out.append
    for i in range(len(h) - k + 1):
        if i:
            acc = ((acc - h[i - 1] * top) * _KM + h[i + k - 1]) & _M64
        x = acc ^ (acc >> 37)
        x = (x * _MX1) & _M64
        x ^= x >> 32
        append(x - (1 << 64) if x >> 63 else x)
    return out


def block_keys(v: list[int], a: int, n: int, bp: frozenset) -> tuple[list[int], int]:
    """The sorted distinct index keys the block of k-grams ``v[a:a+n]`` is looked up by, and its
    confidence's denominator (``blocks._block_queries`` for one block; ``([], 0)``: none)."""
    if n <= 0:
        return [], 0
    w = FINGERPRINT["w"]
    seg = v[a:a + n]
    # winnowing keeps each window's minimum: the set of kept values is the set of minima
    win = {min(seg[i:i + w]) for i in range(n - w + 1)} if n >= w else {min(seg)}
    return pick_keys(sorted({x >> _KEY_SHIFT for x in win}),
                     lambda: {x >> _KEY_SHIFT for x in seg}, bp)


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


def postings(conn: apsw.Connection, keys: list[int]) -> dict[int, set[int]]:
    """``{key: the blocks holding it}`` for the given keys that have postings (packed rows and
    the rows too wide to pack, ``engram.index.packed``)."""
    out: dict[int, set[int]] = {}
    if not keys:
        return out
    got = conn.execute("SELECT key, rows FROM packed WHERE key IN carray(?)",
                       (_carray([x + _OFS for x in keys]),)).fetchall()
    blocks = _blocks_of(b"".join(rows for _k, rows in got))
    at = 0
    for k, rows in got:
        n = len(rows) // _REC.size
        out[k - _OFS] = set(blocks[at:at + n])
        at += n
    if conn.execute("SELECT 1 FROM fingerprints LIMIT 1").fetchone() is not None:
        for k, b in conn.execute("SELECT hash, block FROM fingerprints WHERE hash IN carray(?)",
                                 (_carray(keys),)):
            out.setdefault(k, set()).add(b)
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
    """``{block: the tapes with an event referring to it}`` (events and tapes that exist)."""
    out: dict[int, set[int]] = {}
    if blocks:
        for b, t in conn.execute(
                "SELECT r.block, e.tape FROM refs r JOIN events e ON e.id = r.event"
                " JOIN tapes t ON t.id = e.tape WHERE r.block IN carray(?)", (_carray(blocks),)):
            out.setdefault(b, set()).add(t)
    return out
