"""Session counts for many blocks of one document (code lens, hover): one tokenising pass over the
document, one posting lookup, and the per-block accounting done as a handful of numpy sorts and
joins rather than Python loops over postings. One block alone (a hover) takes a path of its own
that gives the same answer with few numpy calls ("one block" below).

For every block: ``sessions`` (tapes with direct evidence above the explain floor), ``best``
confidence, ``latest`` time, and ``top`` (the best session; with ``windows``, its first transcript
window read from the tape).

The confidence of an indexed block ``b`` for a document block ``d`` is the share of ``d``'s
winnowed fingerprints found in ``b`` (containment). A block is looked up as explain looks up a
span (``explain.query_fingerprints``), so its lens, its hover and its explain see the same direct
evidence:

* up to ``explain.ALL_KGRAMS_MAX`` winnowed fingerprints, every k-gram of the block is looked up
  (a short span matches wherever any run of k tokens of it was copied);
* more: its winnowed fingerprints, and beyond ``SAMPLE`` of them a bottom-k sample, the
  ``SAMPLE`` smallest values. The sample is defined by content (winnowing is local and keeps a
  window's smallest value, so every copy of the block holds and keeps the same small values);
  the share estimated from it has a standard error of at most ``0.5 / sqrt(SAMPLE)`` (≈ 0.06),
  less for blocks not much larger than the sample (it is drawn without replacement), and the
  lookup costs the same for a 60-line and a 600-line block. ``SAMPLE`` is smaller than
  explain's ``MAX_QUERY_FPS``: for blocks between the two, an indexed block whose share sits
  within that error of the floor may fall on the other side of it (a lens can differ from the
  explain of the same block by a session or two).

Boilerplate fingerprints are neither looked up nor counted. Postings come back from SQLite as one
string of packed integers decoded by numpy (a posting never becomes a Python object), or, in a
long-running process that asked for it (``keep_postings``: the language server), from a sorted
array of every posting of the index held in memory (see "postings in memory" below). Rows that
cannot change while the index stays the same (boilerplate, refs, events, tapes) are cached per
connection and dropped when the database changes (``PRAGMA data_version``); ``prefill`` reads
them all ahead, between requests. All reads of one call share one read transaction.
"""

from __future__ import annotations

import contextlib
import logging
import weakref

import apsw
import numpy as np
from xxhash import xxh3_64_intdigest as _xxh

from engram import fingerprint
from engram.fingerprint.tokenize import PAD, encode, hash_spans, line_of, spans
from engram.fingerprint.winnow import _kgram_hashes, _winnow
from engram.index import queries, schema
from engram.index.access import TapeAccess
from engram.index.postings import _cache, _postings, _ranges, _RowCache
from engram.query import direct, explain, window
from engram.query.direct import SAMPLE
from engram.sortedset import member, uniq

_OFS = 1 << 31         # index keys are signed 32-bit; + _OFS makes them non-negative
_LO32 = (1 << 32) - 1
_LO40 = (1 << 40) - 1
_EDIT = schema.KIND_CODE["code.edit"]
_EMPTY = np.zeros(0, dtype=np.int64)

log = logging.getLogger(__name__)


def explain_blocks(conn: apsw.Connection, text: str, blocks: list[tuple[int, int]],
                   windows: bool = False, events: bool = False) -> list[dict]:
    """See the module docstring; with ``events``, each ``top`` also names the event its window is
    read around (``event``: for ``top_window`` later)."""
    out = [{"range": [s, e], "sessions": 0, "best": 0.0, "latest": None, "top": None}
           for s, e in blocks]
    if not blocks:
        return out
    with _reading(conn) as cache:
        if len(blocks) == 1:  # a hover: the same answer without numpy's per-call costs
            return _explain_one(cache, conn, text, blocks[0], windows, events, out)
        return _explain_blocks(cache, conn, text, blocks, windows, events, out)


@contextlib.contextmanager
def _reading(conn: apsw.Connection):
    """The connection's row cache, its lock held and checked, and every read inside seeing one
    state of the index (a read transaction, unless the caller is in one)."""
    cache = _cache(conn)
    snapshot = not conn.in_transaction
    with cache.lock:
        if snapshot:
            conn.execute("BEGIN")
        try:
            cache.check(conn)
            yield cache
        finally:
            if snapshot:
                conn.execute("COMMIT")


def _explain_blocks(cache: _RowCache, conn: apsw.Connection, text: str,
                    blocks: list[tuple[int, int]], windows: bool, events: bool,
                    out: list[dict]) -> list[dict]:
    q_block, q_key, denom = _block_queries(cache, conn, text, blocks)
    if not len(q_key):
        return out
    # (document block, indexed block, confidence) above the floor
    d, b, conf = _matches(conn, q_block, q_key, denom, cache)
    if not len(d):
        return out
    # indexed block → its events (a pair per reference) → tape and kind
    lo, cnt, ref_e = cache.refs(conn, b)
    has = cnt > 0
    d, conf, lo, cnt = d[has], conf[has], lo[has], cnt[has]
    if not len(d):
        return out
    b = np.repeat(b[has], cnt)
    e = ref_e[_ranges(lo, cnt)]
    d, conf = np.repeat(d, cnt), np.repeat(conf, cnt)
    tape, kind, ok = cache.events(conn, e)
    d, b, conf, e, tape, edit = d[ok], b[ok], conf[ok], e[ok], tape[ok], kind[ok] == _EDIT
    if not len(d):
        return out
    # per (document block, tape): the best confidence; on ties an edit (the last one by block
    # and event), else the first reference by block and event
    order = np.lexsort((np.where(edit, e, -e), np.where(edit, b, -b), edit, conf, tape, d))
    d, tape, conf, e = d[order], tape[order], conf[order], e[order]
    last = np.ones(len(d), dtype=bool)
    last[:-1] = (d[1:] != d[:-1]) | (tape[1:] != tape[:-1])
    d, tape, conf, e = d[last], tape[last], conf[last], e[last]
    times, newest, tape_order, ok = cache.tapes(conn, tape)
    if not ok.all():  # not expected inside one snapshot
        d, tape, conf, e = d[ok], tape[ok], conf[ok], e[ok]
        if not len(d):
            return out
    # per document block, rank its tapes: confidence (to 2 places), then the most recent, then
    # tape id; the first is ``top``
    u, inv = np.unique(conf, return_inverse=True)   # Python's round, as explain ranks
    conf2 = np.array([round(c, 2) for c in u.tolist()])[inv]
    order = np.lexsort((tape_order, newest, -conf2, d))
    d, tape, conf, e, newest = d[order], tape[order], conf[order], e[order], newest[order]
    first = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    n_sessions = np.diff(np.r_[first, len(d)])
    latest = np.minimum.reduceat(newest, first)
    rows = cache.tape_rows(conn, sorted(set(tape[first].tolist())))
    access = TapeAccess(conn) if windows else None
    for f, n, lr in zip(first.tolist(), n_sessions.tolist(), latest.tolist()):
        top = rows.get(int(tape[f]))
        if top is not None:
            _fill(out[int(d[f])], conn, top, float(conf[f]), n, times[lr] or None, int(e[f]),
                  events, access)
    return out


def _fill(res: dict, conn: apsw.Connection, top: queries.TapeRow, top_conf: float, n: int,
          latest: str | None, eid: int, events: bool, access: TapeAccess | None) -> None:
    """One block's entry: ``n`` sessions, the best one ``top`` (its reference ``eid``)."""
    res.update({
        "sessions": n, "best": round(top_conf, 4), "latest": latest,
        "top": {"tape_id": top.tape_id, "harness": top.harness, "session": top.session,
                "model": top.model, "label": top.label, "tier": top.tier or "agent",
                "last_t": top.last_t, "confidence": round(top_conf, 4)}})
    if events:
        res["top"]["event"] = eid
    if access is not None:
        r = queries.events(conn, [eid])[eid]
        res["top"]["windows"] = [_window(access, top, r, top_conf)]


def top_window(conn: apsw.Connection, top: dict) -> dict | None:
    """The first transcript window of a block's best session (``top`` of an ``explain_blocks``
    entry asked for with ``events``: it names its anchor event), as ``explain_blocks(windows=True)`` gives it: for an
    entry computed without windows (a code lens's) that a hover then shows. None when ``top``
    names no event or the index no longer holds it."""
    eid = top.get("event")
    if type(eid) is not int:
        return None
    with _reading(conn) as cache:
        event = queries.events(conn, [eid]).get(eid)
        row = cache.tape_rows(conn, [event.tape]).get(event.tape) if event else None
        if row is None or row.tape_id != top.get("tape_id"):
            return None
        return _window(TapeAccess(conn), row, event, top.get("confidence") or 0.0)


def _window(access: TapeAccess, tape: queries.TapeRow, r, conf: float) -> dict:
    """The window around event row ``r`` of ``tape`` (one event either side)."""
    w = {"anchor": r.ofs, "kind": schema.kind_name(r.kind), "confidence": round(conf, 4),
         "file": r.file}
    w.update(window.window(access, tape, r.ofs, 1, 1))
    return w


# -- fingerprints of the blocks ---------------------------------------------------------------


def _block_queries(cache: _RowCache, conn: apsw.Connection, text: str,
                   blocks: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(block, key)`` pairs to look up, sorted by key, and each block's denominator.

    One tokenising pass over the whole document: a block's tokens are the document's tokens on
    its lines (tokens never cross a line break), so its k-grams and winnowed fingerprints are
    exactly those of the block's own text — what a hover or explain of that block computes."""
    k, w = fingerprint.DEFAULT_K, fingerprint.DEFAULT_W
    nb = len(blocks)
    denom = np.zeros(nb, dtype=np.int64)
    buf, _ = encode([text])
    n = len(buf) - PAD
    starts, ends = spans(buf, n)
    if len(starts) < k:
        return _EMPTY, _EMPTY, denom
    tok_line = line_of(buf, n, starts)
    kg = _kgram_hashes(hash_spans(buf, starts, ends), k)
    se = np.asarray(blocks, dtype=np.int64).reshape(-1, 2)
    a = np.searchsorted(tok_line, se[:, 0] - 1, "left")
    z = np.searchsorted(tok_line, se[:, 1], "left")
    nk = np.maximum(z - a - (k - 1), 0)
    off = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(nk, out=off[1:])
    if off[-1] == 0:
        return _EMPTY, _EMPTY, denom
    v = kg[_ranges(a, nk)]                                    # every block's k-grams, in turn
    seg = np.repeat(np.arange(nb, dtype=np.int64), nk)
    code = (seg << 32) | (queries.index_keys(v) + _OFS)             # block · key, both non-negative
    wcode = uniq(code[_winnow(v, off, w)])                    # distinct winnowed, by block, key
    wseg = wcode >> 32
    n_win = np.bincount(wseg, minlength=nb)
    small = n_win <= explain.ALL_KGRAMS_MAX
    # short blocks: every k-gram; longer ones: their winnowed keys, the SAMPLE smallest at most
    # (``wcode`` is sorted by block, then key)
    rank = np.arange(len(wcode)) - np.searchsorted(wseg, wseg, "left")
    wcode = wcode[rank < SAMPLE]
    wseg = wcode >> 32
    q = np.concatenate([uniq(code[small[seg]]), wcode[~small[wseg]]])
    # boilerplate keys are neither looked up nor counted in the denominator
    bp = cache.boilerplate(conn)
    if len(bp):
        q = q[~member((q & _LO32) - _OFS, bp)]
        wseg = wseg[~member((wcode & _LO32) - _OFS, bp)]
    denom = np.bincount(wseg, minlength=nb)
    q = q[denom[q >> 32] > 0]
    q_block, q_key = q >> 32, (q & _LO32) - _OFS
    order = np.argsort(q_key, kind="stable")
    return q_block[order], q_key[order], denom


def _matches(conn: apsw.Connection, q_block: np.ndarray, q_key: np.ndarray, denom: np.ndarray,
             cache: _RowCache | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(document block, indexed block, confidence)`` above the explain floor."""
    new = np.r_[True, q_key[1:] != q_key[:-1]]
    first = np.flatnonzero(new)
    ukeys = q_key[first]
    per = np.diff(np.r_[first, len(q_key)])
    codes, kid = _postings(conn, ukeys, cache)
    if not len(codes):
        return _EMPTY, _EMPTY, np.zeros(0)
    blk = codes & _LO32
    # a key asked for by several document blocks counts for each of them
    rep = per[kid]
    if (rep == 1).all():
        doc = q_block[first[kid]]
    else:
        doc = q_block[_ranges(first[kid], rep)]
        blk = np.repeat(blk, rep)
    d, b, hits = _count_pairs(doc, blk, len(denom))
    conf = np.minimum(1.0, hits / denom[d])
    sel = conf > explain.DIRECT_FLOOR
    return d[sel], b[sel], conf[sel]


_MAX_BINS = 1 << 22


def _count_pairs(doc: np.ndarray, blk: np.ndarray, n_doc: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct ``(doc, blk)`` pairs, sorted, with how often each occurs."""
    top = int(blk.max()) + 1
    if top <= _MAX_BINS:
        present = np.zeros(top, dtype=bool)
        present[blk] = True
        ids = np.flatnonzero(present)                  # the distinct blocks, sorted
        if n_doc * len(ids) <= _MAX_BINS:              # counts in one bincount over doc × block
            # each block's rank among them (a scatter: a cumsum over ``present`` costs ~3x more)
            dense = np.empty(top, dtype=np.int64)
            dense[ids] = np.arange(len(ids))
            counts = np.bincount(doc * len(ids) + dense[blk], minlength=n_doc * len(ids))
            cell = np.flatnonzero(counts > 0)  # (on a bool array: 2-3x faster)
            return cell // len(ids), ids[cell % len(ids)], counts[cell]
    pair = np.sort((doc << 40) | blk, kind="stable")
    edge = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1], True])
    pair = pair[edge[:-1]]
    return pair >> 40, pair & _LO40, np.diff(edge)


# -- one block (a hover) ------------------------------------------------------------------------
#
# A hover asks for one block of ~100 tokens, whose keys hit ~1,000 postings of ~70 indexed blocks,
# ~90 references and ~80 sessions (the scale corpus's median). The general path above spends most
# of its time in numpy's fixed cost per call on arrays that small; this path gives the same answer
# with fewer calls: the tokens by one regular expression (hashed one by one by xxhash, as
# ``hash_spans`` hashes a few), the winnowed set as the windows' minima (winnowing keeps each
# window's minimum: its position only decides which copies of a value are kept), the keys chosen
# by ``direct.pick_keys`` (the rule the first code lens counts by), the refs and events held in
# memory read directly, and the sessions ranked in plain Python.
# ``tests/unit/test_blocks_one.py`` compares both paths on every block of real files.

_bp_sets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _one_keys(cache: _RowCache, conn: apsw.Connection, text: str, block: tuple[int, int]
              ) -> tuple[np.ndarray, int]:
    """The sorted distinct index keys one block is looked up by, and its denominator (as
    ``_block_queries`` gives them for a single block; the keys chosen by ``direct``'s rule, the
    one the first code lens counts by)."""
    s, e = block
    # tokens never cross a line break: the block's tokens are those of its lines alone
    lines = text.split("\n")[max(s - 1, 0):max(e, 0)]
    toks = direct.TOKEN.findall("\n".join(lines).encode("utf-8", "surrogatepass"))
    if len(toks) < fingerprint.DEFAULT_K:
        return _EMPTY, 0
    v = _kgram_hashes(np.fromiter(map(_xxh, toks), dtype=np.uint64, count=len(toks)),
                      fingerprint.DEFAULT_K)
    # each window's minimum (by doubling: a span of a + b from two overlapping spans of a)
    m, span, w = v, 1, fingerprint.DEFAULT_W
    while span < w and len(m) > 1:
        step = min(span, w - span, len(m) - 1)
        m = np.minimum(m[:-step], m[step:])
        span += step
    q, denom = direct.pick_keys(sorted(set(queries.index_keys(m).tolist())),
                                lambda: queries.index_keys(v).tolist(), _boilerplate(cache, conn))
    return (np.array(q, dtype=np.int64), denom) if q else (_EMPTY, 0)


def _boilerplate(cache: _RowCache, conn: apsw.Connection) -> frozenset:
    """The boilerplate keys as a set, made once per array the cache holds."""
    arr = cache.boilerplate(conn)
    held = _bp_sets.get(cache)
    if held is None or held[0] is not arr:
        held = _bp_sets[cache] = (arr, frozenset(arr.tolist()))
    return held[1]


def _explain_one(cache: _RowCache, conn: apsw.Connection, text: str, block: tuple[int, int],
                 windows: bool, events: bool, out: list[dict]) -> list[dict]:
    """``_explain_blocks`` of one block (``out`` has its one entry)."""
    q, denom = _one_keys(cache, conn, text, block)
    if not len(q):
        return out
    codes, _kid = _postings(conn, q, cache)
    if not len(codes):
        return out
    # codes are distinct (key, block) pairs: a block's count is how many of the keys it holds
    blk = np.sort(codes & _LO32)
    edge = np.flatnonzero(np.diff(blk, prepend=-1, append=-1))
    hits = np.diff(edge)
    conf = np.minimum(1.0, hits / denom)
    sel = np.flatnonzero(conf > explain.DIRECT_FLOOR)
    if not len(sel):
        return out
    b, conf = blk[edge[sel]], conf[sel]
    bl, cl, el, tl, kl = _references(cache, conn, b, conf)
    # per tape: the best confidence; on ties an edit (the last one by block and event), else the
    # first reference by block and event
    best: dict[int, tuple] = {}
    for bb, c, ee, t, kd in zip(bl, cl, el, tl, kl):
        key = (c, True, bb, ee) if kd == _EDIT else (c, False, -bb, -ee)
        cur = best.get(t)
        if cur is None or key > cur[0]:
            best[t] = (key, ee)
    if not best:
        return out
    meta = _tape_meta(cache, conn, best)
    if not meta:
        return out
    # the sessions ranked by confidence (to 2 places), then the most recent, then tape id: the
    # first is ``top``
    c2 = {t: round(best[t][0][0], 2) for t in meta}
    hi = max(c2.values())
    first = [t for t in meta if c2[t] == hi]
    newest = max(meta[t][1] for t in first)
    t = min((meta[t][0], t) for t in first if meta[t][1] == newest)[1]
    top = cache.tape_rows(conn, [t]).get(t)
    if top is not None:
        _fill(out[0], conn, top, best[t][0][0], len(meta),
              max(m[1] for m in meta.values()) or None, best[t][1], events,
              TapeAccess(conn) if windows else None)
    return out


def _references(cache: _RowCache, conn: apsw.Connection, b: np.ndarray, conf: np.ndarray
                ) -> tuple[list, list, list, list, list]:
    """Every reference of the (sorted, distinct) indexed blocks ``b`` whose event exists, in order
    of block and event: its block, the block's confidence, event, tape, kind (lists)."""
    if cache.refs_full:  # every ref held (``prefill``): read directly
        ref_b = cache.ref_b
        lo = ref_b.searchsorted(b, "left")
        cnt = ref_b.searchsorted(b, "right") - lo
        e = cache.ref_e[_ranges(lo, cnt)]
    else:
        lo, cnt, ref_e = cache.refs(conn, b)
        e = ref_e[_ranges(lo, cnt)]
    if not len(e):
        return [], [], [], [], []
    if cache.events_full and len(cache.ev_id):
        ev_id = cache.ev_id
        pos = np.minimum(ev_id.searchsorted(e), len(ev_id) - 1)
        tape, kind, ok = cache.ev_tape[pos], cache.ev_kind[pos], ev_id[pos] == e
    else:
        tape, kind, ok = cache.events(conn, e)
    bl, cl = np.repeat(b, cnt), np.repeat(conf, cnt)
    if not ok.all():
        bl, cl, e, tape, kind = bl[ok], cl[ok], e[ok], tape[ok], kind[ok]
    return bl.tolist(), cl.tolist(), e.tolist(), tape.tolist(), kind.tolist()


def _tape_meta(cache: _RowCache, conn: apsw.Connection, tapes) -> dict[int, tuple[str, str]]:
    """``{tape: (tape_id, last_t or "")}`` of the given tapes whose row exists."""
    meta = cache.tape_meta
    if not all(t in meta for t in tapes):  # read them (``_RowCache.tapes`` keeps what it reads)
        cache.tapes(conn, np.array(sorted(tapes), dtype=np.int64))
    return {t: meta[t] for t in tapes if t in meta}
