"""Lineage edges at ingest (``engram/lineage/rules.py`` explains the rules): every new
``code.edit`` is fingerprinted again from its tape, its before-text (and any new text of its
after-text) looked up among earlier edit/read blocks in one vectorised pass over the postings,
location-only edges and tombstones recorded, ``span.link`` events turned into agent links, and the
cardinality of every touched edge recomputed.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import pickle
import sys
from array import array
from collections import OrderedDict, defaultdict

import apsw
import numpy as np

from engram import paths
from engram.adapters.base import rel_path
from engram.errors import CorruptTape
from engram.index import queries, schema
from engram.index.store import event_blocks
from engram.lineage.cache import CachedAccess, IngestCache, _keyed, boilerplate, postings
from engram.lineage.rules import (
    _EDIT,
    _LINK,
    LINK_THRESHOLD,
    MAX_EDIT_CANDIDATES_PER_TAPE,
    MAX_LOCATION_CANDIDATES,
    MAX_RELINK,
    MERGE_COVER,
    NEW_TEXT_MAX,
    POPULAR_POSTINGS,
    REINSERT_THRESHOLD,
    ROUND,
    _chunks,
    _int,
    _neg,
    _order,
    _overlap,
    _place,
    _rng,
    location_delta,
)
from engram.sortedset import member, uniq
from engram.spill import SpillFile

log = logging.getLogger(__name__)

LINK_PASS_HASHES = 250_000     # query hashes matched in one pass of ``_link`` (memory bound: the
# pass's edits hold their queries until it ends; at 1 M a big session's first pass held ~13 k edits'
# — ~10 MB with their arrays' objects — only to be split by ``LINK_PASS_POSTINGS`` down to ~800 edits)
LINK_PASS_POSTINGS = 640_000  # postings one pass holds: more, and its edits are split in two
# (at 1 M, a 400 MB steady session's passes held up to ~700 k and a 1.5 GB one's ~950 k: an edit's
# queries meet more postings as its file's versions add up, so the pass's postings, and the
# ``match_all`` peak on top of them, grew with the log until that cap; at 640 k both reach it)
LINK_PASS_FILL = 0.9             # a pass is cut at the query hashes whose postings, at the last
# pass's postings per query hash, fill this much of ``LINK_PASS_POSTINGS`` (``_link``): few passes
# then fetch past the cap only to be split and fetched again
# postings gathered by one ``match_all`` (queries x their postings): its arrays take ~90 bytes a
# row at their peak, on top of the pass's postings (at 1 M, the peak of a big session's lineage
# pass grew with the log up to ~800 MB of it; at 500 k it was still the peak at 1.5 GB; the groups
# of a pass never change a row)
LINK_MATCH_ROWS = 250_000
LINK_REF_BLOCKS = 4_096          # blocks whose refs one ``_ref_rows`` reads (``_link_matched``): the
# blocks a pass's queries may link to grow with the session (each edit matches its file's earlier
# versions: ~5 k in a pass at 400 MB, ~13 k at 1.5 GB), and their refs' rows are small objects
# (a tuple and its time order key a ref) that set the high-water mark of the pass's arenas
CARDINALITY_EVENTS = 2_048       # touched events whose edges ``_cardinality`` reads at once
PLACE_ROWS_HELD = 256 << 10      # bytes of places' earlier rows held in memory (``_PlaceCache``),
PLACE_ENTRY_BYTES = 800          # ... counting each held place's own objects (arrays' headers, key)
PLACE_SPILL_ROWS = 64            # a place let go with fewer rows is read from the index again
KEY_GROUP = 64                   # node keys read back at once by a ``_KeyOrder`` search
TOUCHED_DISTINCT_AT = 4_096      # touched events held before they are first made distinct
READ_EVENTS = 1_024              # a new tape's edits parsed at a time (``run``)
QUERY_BATCH = 256               # edits whose texts are fingerprinted in one batch (``_queried``),
QUERY_BATCH_CHARS = 1 << 20     # ... and characters of their texts (what the batch holds stays small)
FETCH_HASHES = 1_000            # hashes whose postings are fetched at once: fewer than
#   BOILERPLATE_MIN (400) postings each once the boilerplate ones are left out (< 400 k rows, whose
#   fetch, filter and sort take ~80 bytes a row for a moment: at 2,500 this was a pass's peak)


class Node:
    """A code.edit being linked (its texts come from the tape). Given a ``_Texts``, its before-
    and after-text are kept there (a spill file) and read back when asked for (``before``,
    ``after``): a run's nodes then hold no text, however many edits the session made."""

    __slots__ = (
        "_store",
        "_txt",
        "a_range",
        "b_range",
        "cont",
        "eid",
        "file",
        "has_before",
        "ofs",
        "qa",
        "qb",
        "rel",
        "session",
        "t",
        "tape",
        "tape_id",
        "tomb",
    )

    def __init__(self, eid, tape: queries.TapeRow, ofs: int, ev: dict, texts: _Texts | None = None):
        self.eid, self.tape, self.tape_id, self.ofs = eid, tape.id, tape.tape_id, ofs
        self.session = tape.session
        self.t = ev.get("t")
        # (interned: a session's thousands of edits name a few files; held for the whole run)
        self.file = sys.intern(ev["file"]) if isinstance(ev.get("file"), str) else None
        self.rel = sys.intern(ev["rel"]) if isinstance(ev.get("rel"), str) else None
        before = ev.get("before_text") if isinstance(ev.get("before_text"), str) else ""
        after = ev.get("after_text") if isinstance(ev.get("after_text"), str) else ""
        self.has_before = bool(before)
        self._store = texts if texts is not None and (before or after) else None
        self._txt = (before, after) if self._store is None else self._store.put(before, after)
        if self._txt is None:   # (no spill file: held)
            self._store, self._txt = None, (before, after)
        self.b_range = ev.get("before_range")
        self.a_range = ev.get("after_range")
        self.qa = self.qb = None
        self.tomb = False
        self.cont = None

    @property
    def before(self) -> str:
        return self._txt[0] if self._store is None else self._store.get(self._txt, 0)

    @property
    def after(self) -> str:
        return self._txt[1] if self._store is None else self._store.get(self._txt, 1)

    @property
    def key(self):
        return _order(self.t, self.tape_id, self.ofs)


class _Texts:
    """The before- and after-texts of one run's nodes in a private spill file (``SpillFile``
    in the user's tape directory, as the ingest cache's; nothing left behind, even by a kill),
    UTF-8 (lone surrogates kept: ``surrogatepass``). Where no spill file can be made the nodes
    hold their texts (``put`` gives None)."""

    def __init__(self) -> None:
        self._spill: SpillFile | None = None
        self._failed = False

    def _file(self) -> SpillFile | None:
        """The spill file, made on first use; None where it cannot be made."""
        if self._spill is None and not self._failed:
            try:
                self._spill = SpillFile(paths.private_dir(paths.user_tapes_dir()))
            except OSError:
                log.warning("lineage: no spill file for the edits' texts; held in memory", exc_info=True)
                self._failed = True
        return self._spill

    def put(self, before: str, after: str) -> tuple[int, int, int] | None:
        spill = self._file()
        if spill is None:
            return None
        b = before.encode("utf-8", "surrogatepass")
        a = after.encode("utf-8", "surrogatepass")
        return spill.append(b, a), len(b), len(a)

    def get(self, where: tuple[int, int, int], side: int) -> str:
        pos, nb, na = where
        if side:
            pos, n = pos + nb, na
        else:
            n = nb
        return self._spill.read(pos, n).decode("utf-8", "surrogatepass") if n else ""

    def put_record(self, data: bytes) -> int | None:
        """``data`` appended to the spill file (made if need be); its offset, or None where no
        spill file can be made."""
        spill = self._file()
        return None if spill is None else spill.append(data)

    def get_record(self, pos: int, n: int) -> bytes:
        return self._spill.read(pos, n)

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None


class _Nodes:
    """The nodes of one run (``Linker.run``) as two numbers each in memory — the edit's event id,
    and where its record lies in the run's spill file (``_Texts``): the record holds the rest (its
    offset, tape, where its texts lie in the same file, time, file, ranges: pickled) — each made
    into a ``Node`` when asked for (``nodes[i]``, a slice, iteration) and let go by its user. A big
    session's edits then hold ~20 bytes each through the run (eight numbers an edit held in
    arrays grew with the session: ~0.8 MB more at 1.5 GB of log than at 400 MB), where each once
    held a ``Node`` of ~660 bytes in small objects. A node without texts, or whose texts cannot be
    spilled (no spill file), is held as its ``Node``."""

    def __init__(self, texts: _Texts | None):
        self._texts = texts
        self._tapes: list[queries.TapeRow] = []
        self._tape_at: dict[int, int] = {}
        # per node: event id, and its record's place in the spill file (-1: held, ``_held``)
        self.eid, self._rpos, self._rn = array("q"), array("q"), array("I")
        self._held: dict[int, Node] = {}

    def add(self, eid: int, tape: queries.TapeRow, ofs: int, ev: dict) -> None:
        n = Node(eid, tape, ofs, ev)   # (what a node keeps of the event, its texts held for now)
        i = len(self.eid)
        at = self._tape_at.get(tape.id)
        if at is None:
            at = self._tape_at[tape.id] = len(self._tapes)
            self._tapes.append(tape)
        # (a node without texts is held as it is, as before: no spill file made for it alone)
        texts = n.before or n.after
        where = self._texts.put(n.before, n.after) if self._texts is not None and texts else None
        if where is None:
            self._held[i] = n
            rpos, rn = -1, 0
        else:
            rec = pickle.dumps((ofs, at, where, n.t, n.file, n.rel, n.b_range, n.a_range),
                               pickle.HIGHEST_PROTOCOL)
            rpos, rn = self._texts.put_record(rec), len(rec)
        self.eid.append(eid)
        self._rpos.append(rpos)
        self._rn.append(rn)

    def __len__(self) -> int:
        return len(self.eid)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._node(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._node(i)

    def __iter__(self):
        for i in range(len(self)):
            yield self._node(i)

    def _node(self, i: int) -> Node:
        held = self._held.get(i)
        if held is not None:
            return held
        ofs, at, where, t, file, rel, b_range, a_range = pickle.loads(
            self._texts.get_record(self._rpos[i], self._rn[i]))
        tape = self._tapes[at]
        n = Node.__new__(Node)
        n.eid, n.tape, n.tape_id, n.ofs, n.session = self.eid[i], tape.id, tape.tape_id, ofs, tape.session
        n.t = t
        n.file = sys.intern(file) if file is not None else None
        n.rel = sys.intern(rel) if rel is not None else None
        n._store, n._txt = self._texts, where
        n.has_before = where[1] > 0
        n.b_range, n.a_range = b_range, a_range
        n.qa = n.qb = None
        n.tomb = False
        n.cont = None
        return n


def _edit_ids(conn: apsw.Connection, tape: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, event ids) of the tape's edits and span links, in offset order (int64)."""
    rows = np.fromiter(itertools.chain.from_iterable(conn.execute(
        "SELECT ofs, id FROM events WHERE tape=? AND kind IN (?,?)", (tape, _EDIT, _LINK))), np.int64)
    rows = rows.reshape(-1, 2)
    o = np.argsort(rows[:, 0], kind="stable")
    return rows[o, 0], rows[o, 1]


class _Touched:
    """The events whose edges ``_cardinality`` recomputes: added as they come (``add``, into an
    int64 array: a big session's run touches tens of thousands — a set held an int object for
    each, made among a pass's short-lived rows, through all the passes), given back distinct
    and sorted (iteration)."""

    def __init__(self, ids=()):
        self._ids = array("q", ids)
        self._distinct = len(self._ids)   # (their number when last made distinct)

    def add(self, eid: int) -> None:
        self._ids.append(eid)
        if len(self._ids) >= max(TOUCHED_DISTINCT_AT, 2 * self._distinct):
            # an event is added once per edge to it: made distinct as the array doubles, it
            # holds about as many as the run's distinct targets, not every edge's
            self._ids = array("q", self.ids().tobytes())
            self._distinct = len(self._ids)

    def __iter__(self):
        return iter(self.ids().tolist())

    def ids(self) -> np.ndarray:
        """The events, distinct and sorted (int64)."""
        return uniq(np.frombuffer(self._ids, np.int64)) if self._ids else np.zeros(0, np.int64)


class Postings:
    """The index postings of a set of hashes as sorted arrays, matched against many queries at
    once (``match_all``)."""

    def __init__(self, conn: apsw.Connection, hashes: np.ndarray, skip: set[int],
                 cache: IngestCache | None = None, linkable_only: bool = False,
                 max_rows: int | None = None):
        """``linkable_only``: keep only the postings in blocks that an edit or a read holds (the
        only ones that can link, or count for a location-only edge) — after the popular hashes
        are found, which counts postings in every block. The skipped hashes' postings are not
        fetched (``_unskipped``); every other hash's come in one chunk of ``FETCH_HASHES`` hashes
        (``_key_chunks``), so each chunk is filtered as it comes. ``max_rows``: stop once more than
        that many postings are kept (``complete`` is then False, and the arrays empty)."""
        # Each chunk's rows are sorted as they come and kept as three narrow columns (a chunk's
        # hashes all sort above the previous chunk's, and every row maps back to a hash of its
        # own chunk: the chunks' sorted rows one after the other are the whole sort, the same
        # rows in the same order as one stable sort of them all), then joined a column at a time:
        # 16 bytes a row held, where one (n, 3) array sorted at once held ~56-80 at its peak.
        hs, bs, ls = [], [], []
        kept, self.complete = 0, True
        skipped = uniq(np.fromiter(skip, np.int64, len(skip)))
        hashes = _unskipped(hashes, skipped)
        held = _HeldBlocks(conn) if linkable_only else None
        for i, j in _key_chunks(hashes, FETCH_HASHES):
            arr = _filtered(postings(conn, hashes[i:j], cache), skipped, held)
            kept += len(arr)
            if max_rows is not None and kept > max_rows:
                self.complete, hs, bs, ls = False, [], [], []
                break
            if len(arr):
                o = np.lexsort((arr[:, 1], arr[:, 0]))
                hs.append(arr[o, 0])
                bs.append(_narrow(arr[o, 1]))
                ls.append(_narrow(arr[o, 2]))
            del arr
        self.H = _joined(hs, np.int64)
        self.B = _joined(bs, np.int32)
        self.L = _joined(ls, np.int32)

    def rows_of(self, q: tuple[np.ndarray, int] | None) -> int:
        """How many postings ``match_all`` gathers for query ``q``."""
        if q is None:
            return 0
        return int((np.searchsorted(self.H, q[0], "right") - np.searchsorted(self.H, q[0], "left")).sum())

    def match_all(self, queries: list[tuple[np.ndarray, int] | None]) -> list[Match | None]:
        """For each query ``(distinct hashes, denominator)``: per block of the postings, the
        number of its hashes found, the lowest and highest line they are on."""
        live = [i for i, q in enumerate(queries) if q is not None]
        out: list[Match | None] = [None] * len(queries)
        if not live:
            return out
        H = self.H
        qs = [queries[i][0] for i in live]
        qlen = np.fromiter((len(q) for q in qs), np.int64, len(qs))
        qcat = np.concatenate(qs) if qs else np.zeros(0, np.int64)
        lo = np.searchsorted(H, qcat, "left")
        lens = np.searchsorted(H, qcat, "right") - lo
        tot = int(lens.sum())
        pq = np.repeat(np.repeat(np.arange(len(live)), qlen), lens)     # query of each posting
        idx = np.repeat(lo - (np.cumsum(lens) - lens), lens) + np.arange(tot)
        b = self.B[idx].astype(np.int64)
        # order by (query, block, hash): postings come ordered by (query, hash), so a stable
        # sort by (query, block) suffices — on one int64 key when block ids fit in 32 bits, which
        # then sorted gives query and block back without gathering them again
        gnew = np.ones(tot, dtype=bool)
        if tot and int(b.max()) < (1 << 32) and int(b.min()) >= 0:
            key = (pq << 32) | b
            o = np.argsort(key, kind="stable")
            key = key[o]
            pq, b = key >> 32, key & 0xFFFFFFFF
            gnew[1:] = key[1:] != key[:-1]
        else:
            o = np.lexsort((H[idx], b, pq))
            pq, b = pq[o], b[o]
            if tot:
                gnew[1:] = (pq[1:] != pq[:-1]) | (b[1:] != b[:-1])
        idx = idx[o]
        h, ln = H[idx], self.L[idx].astype(np.int64)
        hnew = gnew.copy()
        if tot:
            hnew[1:] |= h[1:] != h[:-1]
        gs = np.flatnonzero(gnew)
        if len(gs):
            counts = np.add.reduceat(hnew.astype(np.int64), gs)
            lmin = np.minimum.reduceat(ln, gs)
            lmax = np.maximum.reduceat(ln, gs)
        else:
            counts = lmin = lmax = np.zeros(0, np.int64)
        gq, gb = pq[gs], b[gs]
        ge = np.append(gs[1:], tot)
        qn = np.fromiter((queries[i][1] for i in live), np.float64, len(live))
        passing = counts / qn[gq] >= LINK_THRESHOLD if len(gs) else np.zeros(0, bool)
        bounds = np.searchsorted(gq, np.arange(len(live) + 1))
        shared = _Groups(h, gs, ge)
        for j, i in enumerate(live):
            a, z = bounds[j], bounds[j + 1]
            out[i] = Match(shared, a, gb[a:z], counts[a:z], lmin[a:z], lmax[a:z], passing[a:z])
        return out


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` (int64) as int32 when every value fits, else itself."""
    if len(a) and (int(a.min()) < -(1 << 31) or int(a.max()) >= 1 << 31):
        return a
    return a.astype(np.int32)


def _joined(parts: list[np.ndarray], dtype) -> np.ndarray:
    """The parts one after the other (int64 if any part is; ``dtype`` when there are none); the
    parts' list is emptied as it goes, so the parts and the whole are not held twice over."""
    if not parts:
        return np.zeros(0, dtype)
    wide = np.int64 if any(p.dtype == np.int64 for p in parts) else parts[0].dtype
    out = np.empty(sum(len(p) for p in parts), wide)
    at = 0
    while parts:
        p = parts.pop(0)
        out[at:at + len(p)] = p
        at += len(p)
    return out


def _unskipped(hashes: np.ndarray, skipped: np.ndarray) -> np.ndarray:
    """``hashes`` (sorted, distinct) less every hash whose index key stands for a skipped hash
    (the largest of ``hashes`` with that key, as ``postings`` maps rows back): all of that key's
    postings would be dropped once fetched, so they are not fetched. The skipped hashes are the
    boilerplate ones (in at least ``BOILERPLATE_MIN`` blocks): what is left has fewer postings
    each, which bounds a fetch of ``FETCH_HASHES`` of them."""
    if not len(skipped) or not len(hashes):
        return hashes
    ukeys, ufull = _keyed(hashes)
    drop = ukeys[member(ufull, skipped)]
    return hashes[~member(queries.index_keys(hashes), drop)] if len(drop) else hashes


def _key_chunks(hashes: np.ndarray, n: int):
    """``(start, end)`` of consecutive runs of about ``n`` of the sorted ``hashes``, never
    between two hashes of one index key (a key's postings are fetched, counted and mapped back
    in one call)."""
    keys = queries.index_keys(hashes)
    i = 0
    while i < len(hashes):
        j = min(i + n, len(hashes))
        while j < len(hashes) and keys[j] == keys[j - 1]:
            j += 1
        yield i, j
        i = j


_NONE = np.zeros(0, np.int64)


def _filtered(arr: np.ndarray, skip: np.ndarray, held: _HeldBlocks | None) -> np.ndarray:
    """``arr``'s postings less the hashes with more than ``POPULAR_POSTINGS`` of them and the
    skipped ones (``skip``: sorted, distinct), and, given ``held``, less those in blocks no edit
    or read holds."""
    if not len(arr):
        return arr
    hs = np.sort(arr[:, 0])
    run = np.flatnonzero(np.r_[True, hs[1:] != hs[:-1]])
    cnt = np.diff(np.r_[run, len(hs)])
    drop = hs[run[cnt > POPULAR_POSTINGS]]
    del hs
    keep = ~member(arr[:, 0], drop)
    if len(skip):   # (sorted: searched, not merged with ``drop`` again for every chunk)
        keep &= ~member(arr[:, 0], skip)
    if held is not None:
        keep &= member(arr[:, 1], held(uniq(arr[keep, 1])))
    return arr[keep]


class _HeldBlocks:
    """``_held_blocks`` for the chunks of one ``Postings``: a block is looked up once (a file's
    versions have postings in nearly every chunk; the refs do not change meanwhile)."""

    def __init__(self, conn: apsw.Connection):
        self.conn = conn
        self.asked = self.held = _NONE   # sorted

    def __call__(self, blocks: np.ndarray) -> np.ndarray:
        """The held blocks among those asked so far (``blocks``, sorted, distinct, included)."""
        new = blocks[~member(blocks, self.asked)]
        if len(new):
            found = _held_blocks(self.conn, new)
            if len(found):
                self.held = uniq(np.concatenate([self.held, found]))
            self.asked = uniq(np.concatenate([self.asked, new]))
        return self.held


def _held_blocks(conn: apsw.Connection, blocks: np.ndarray) -> np.ndarray:
    """The blocks among ``blocks`` that an edit (either side) or a read refers to, sorted."""
    out = []
    for ch in _chunks(blocks.tolist()):
        out.extend(itertools.chain.from_iterable(conn.execute(
            "SELECT DISTINCT block FROM refs WHERE block IN carray(?) AND role IN (?,?,?)",
            (apsw.carray(queries._i64(ch)), schema.ROLE_EDIT_AFTER, schema.ROLE_EDIT_BEFORE, schema.ROLE_READ))))
    return uniq(np.asarray(out, dtype=np.int64))


class _Groups:
    """The matched hashes of every (query, block) group of one ``match_all``."""

    __slots__ = ("ge", "gs", "h")

    def __init__(self, h: np.ndarray, gs: np.ndarray, ge: np.ndarray):
        self.h, self.gs, self.ge = h, gs, ge

    def hashes(self, g: int) -> set[int]:
        return set(self.h[self.gs[g]:self.ge[g]].tolist())


class Match:
    """One query's matches: blocks (ascending) with hash counts and line ranges."""

    __slots__ = ("blocks", "counts", "first", "groups", "lmax", "lmin", "passing")

    def __init__(self, groups: _Groups, first: int, blocks, counts, lmin, lmax, passing):
        self.groups, self.first = groups, first
        self.blocks, self.counts, self.lmin, self.lmax = blocks, counts, lmin, lmax
        self.passing = passing

    def linkable(self, among: np.ndarray | None = None, first: np.ndarray | None = None,
                 before: int | None = None) -> list[tuple[int, int, int, int, int]]:
        """``(group, block, min line, max line, count)`` of the blocks holding at least
        ``LINK_THRESHOLD`` of the query (and in the sorted ``among``, when given; and, given
        ``first`` — a number per block of ``among`` — and ``before``, only the blocks whose
        number is below ``before``), in block order."""
        keep = self.passing
        if among is not None:
            if len(among):
                at = np.minimum(np.searchsorted(among, self.blocks), len(among) - 1)
                keep = keep & (among[at] == self.blocks)
                if first is not None:
                    keep &= first[at] < before
            else:
                keep = np.zeros(len(self.blocks), bool)
        sel = np.flatnonzero(keep)
        return list(zip((sel + self.first).tolist(), self.blocks[sel].tolist(),
                        self.lmin[sel].tolist(), self.lmax[sel].tolist(), self.counts[sel].tolist()))

    def count(self, block: int) -> int | None:
        i = int(np.searchsorted(self.blocks, block))
        if i < len(self.blocks) and self.blocks[i] == block:
            return int(self.counts[i])
        return None


def _ref_rows(conn: apsw.Connection, blocks: list[int]):
    """The refs that may link of ``blocks`` (sorted, distinct): an edit's (either side) or a
    read's, of a known event and tape, each with what ``_candidates`` asks of its event.
    ``(refs, ref_blocks, first, order)``: block → ``(ranks, rows)``, its refs ordered by time
    (``_order`` of their events; the rank of each in ``order``, ascending) — a row ``(event,
    role, line0, t, ofs, place, tape, session)`` —, the sorted blocks that have any, the lowest
    rank of each of them (``np.int64``), and every distinct time order key, sorted. An event is
    earlier than a key ``k`` when its rank is below ``bisect_left(order, k)``."""
    got: dict[int, list] = {}
    # a tape's id and session, and a place, are one string each for all of its rows (a pass reads
    # tens of thousands of rows of a few tapes and files: a string of each a row, made only to be
    # compared, set the high-water mark of the pass's small objects)
    tapes: dict[int, tuple] = {}
    places: dict[str | None, str | None] = {}
    for ch in _chunks(blocks):
        for b, eid, role, line0, t, ofs, file, rel, tape in conn.execute(
                "SELECT r.block, r.event, r.role, r.line0, e.t, e.ofs, e.file, e.rel, e.tape"
                " FROM refs r JOIN events e ON e.id=r.event JOIN tapes t ON t.id=e.tape"
                " WHERE r.block IN carray(?) AND r.role IN (?,?,?) ORDER BY r.block, r.event, r.role",
                (apsw.carray(queries._i64(ch)), schema.ROLE_EDIT_AFTER, schema.ROLE_EDIT_BEFORE,
                 schema.ROLE_READ)):
            ts = tapes.get(tape)
            if ts is None:
                ts = tapes[tape] = conn.execute("SELECT tape_id, session FROM tapes WHERE id=?",
                                                (tape,)).fetchone()
            place = _place(file, rel)
            place = places.setdefault(place, place)
            got.setdefault(b, []).append((_order(t, ts[0], ofs),
                                          (eid, role, line0, t, ofs, place, tape, ts[1])))
    order = sorted({k for rs in got.values() for k, _ in rs})
    rank = {k: i for i, k in enumerate(order)}
    refs: dict[int, tuple[list[int], list[tuple]]] = {}
    for b, rs in got.items():
        rs.sort(key=lambda r: rank[r[0]])   # (stable: one event's refs stay in role order)
        refs[b] = ([rank[k] for k, _ in rs], [r for _, r in rs])

    ref_blocks = np.fromiter(sorted(refs), np.int64, len(refs))
    first = np.fromiter((refs[b][0][0] for b in ref_blocks.tolist()), np.int64, len(refs))
    return refs, ref_blocks, first, order


_I64 = (-(1 << 63), 1 << 63)


def _key_bytes(key: tuple) -> bytes | None:
    """An ``_order`` key ``(t, tape id, offset)`` as bytes that compare as the tuples do: each
    string's UTF-8 (lone surrogates kept: ``surrogatepass`` orders as the code points do) with
    NUL written as ``00 01`` and ended by ``00 00`` (so no string's bytes are a prefix of another
    string's: a shorter string sorts first, as it does among tuples), then the offset biased to
    an unsigned 8-byte big-endian number. None when a part is not of those types (a time that is
    not a string, an offset past int64)."""
    t, tape_id, ofs = key
    if type(t) is not str or type(tape_id) is not str or type(ofs) is not int or not _I64[0] <= ofs < _I64[1]:
        return None
    return b"".join((t.encode("utf-8", "surrogatepass").replace(b"\0", b"\0\1"), b"\0\0",
                     tape_id.encode("utf-8", "surrogatepass").replace(b"\0", b"\0\1"), b"\0\0",
                     (ofs - _I64[0]).to_bytes(8, "big")))


class _KeyOrder:
    """The run's node keys (``Node.key``), distinct and sorted, searched as ``bisect`` searches
    their sorted list (``left``, ``right``) — as their ``_key_bytes``, in groups of
    ``KEY_GROUP`` kept in the run's spill file (``_Texts``; held where there is none), with only
    each group's first key in memory: a search bisects the first keys, then reads one group
    (the last group read is kept: searches come in time order). A big session's edits held a
    tuple, a time string and an int each through the whole ``_link`` (~180 bytes an edit), then
    their bytes in one string (~80 bytes an edit, still growing with the session: ~1 MB more at
    1.5 GB of log than at 400 MB); now ~2 bytes an edit. A key that has no bytes form is
    compared as a tuple (the held keys made back: the same answer, or the same ``TypeError``)."""

    __slots__ = ("_firsts", "_groups", "_last", "_n", "_texts")

    def __init__(self, encoded: list[bytes], texts: _Texts | None = None):
        """``encoded``: the keys' ``_key_bytes``, sorted and distinct."""
        self._n = len(encoded)
        self._texts = texts
        self._firsts: list[bytes] = []
        self._groups: list = []   # per group: its packed bytes (held), or (offset, length)
        for g in range(0, len(encoded), KEY_GROUP):
            chunk = encoded[g:g + KEY_GROUP]
            self._firsts.append(chunk[0])
            at = np.zeros(len(chunk) + 1, "<i4")
            np.cumsum(np.fromiter((len(e) for e in chunk), np.int64, len(chunk)), out=at[1:])
            packed = at.tobytes() + b"".join(chunk)
            pos = texts.put_record(packed) if texts is not None else None
            self._groups.append(packed if pos is None else (pos, len(packed)))
        self._last: tuple[int, list[bytes]] | None = None

    def __len__(self) -> int:
        return self._n

    def _group(self, g: int) -> list[bytes]:
        """The keys' bytes of group ``g``."""
        if self._last is not None and self._last[0] == g:
            return self._last[1]
        packed = self._groups[g]
        if isinstance(packed, tuple):
            packed = self._texts.get_record(*packed)
        n = min(KEY_GROUP, self._n - g * KEY_GROUP)
        at = np.frombuffer(packed, "<i4", n + 1).tolist()
        base = 4 * (n + 1)
        keys = [packed[base + at[i]:base + at[i + 1]] for i in range(n)]
        self._last = (g, keys)
        return keys

    def _bytes(self, i: int) -> bytes:
        return self._group(i // KEY_GROUP)[i % KEY_GROUP]

    def __getitem__(self, i: int) -> tuple:
        """The ``i``-th key as its tuple."""
        b = self._bytes(i)
        t_end = _end(b, 0)
        id_end = _end(b, t_end + 2)
        return (_unescaped(b[:t_end]), _unescaped(b[t_end + 2:id_end]),
                int.from_bytes(b[id_end + 2:], "big") + _I64[0])

    def left(self, key: tuple) -> int:
        return self._search(key, False)

    def right(self, key: tuple) -> int:
        return self._search(key, True)

    def _search(self, key: tuple, right: bool) -> int:
        enc = _key_bytes(key)
        if enc is not None:
            # the last group whose first key is at or before (``right``) / before ``enc``: every
            # key of the groups before it counts, none of those after
            cut = bisect.bisect_right if right else bisect.bisect_left
            g = cut(self._firsts, enc) - 1
            return 0 if g < 0 else g * KEY_GROUP + cut(self._group(g), enc)
        lo, hi = 0, len(self)
        while lo < hi:
            mid = (lo + hi) // 2
            if (key < self[mid]) if right else not (self[mid] < key):
                hi = mid
            else:
                lo = mid + 1
        return lo

    @classmethod
    def of(cls, nodes, texts: _Texts | None = None) -> _KeyOrder | list[tuple]:
        """The keys of ``nodes``; their sorted list (as before) where one has no bytes form."""
        encoded = set()
        for n in nodes:
            e = _key_bytes(n.key)
            if e is None:
                return sorted({n.key for n in nodes})
            encoded.add(e)
        return cls(sorted(encoded), texts)


def _end(b: bytes, i: int) -> int:
    """Where the escaped string starting at ``i`` ends (its ``00 00``)."""
    while True:
        j = b.index(b"\0", i)
        if b[j + 1] == 0:
            return j
        i = j + 2


def _unescaped(b: bytes) -> str:
    return b.replace(b"\0\1", b"\0").decode("utf-8", "surrogatepass")


def _left(order, key) -> int:
    """``bisect_left`` of ``key`` in ``order`` (a ``_KeyOrder`` or a sorted list)."""
    return order.left(key) if isinstance(order, _KeyOrder) else bisect.bisect_left(order, key)


def _right(order, key) -> int:
    return order.right(key) if isinstance(order, _KeyOrder) else bisect.bisect_right(order, key)


class _PlaceRows:
    """The earlier-edit or tombstone rows at one place (``Linker._place_rows``, latest first) as
    a few numbers a row — not a tuple of six objects (with the row's time and tape strings) a
    row, kept for the whole ``_link``: event, start, end, the larger of start and end, and
    ``after``: how many of the run's node keys (``node_order``, sorted, distinct) are at or
    before the row's time order (``_order``). A row is at or after the node of key
    ``node_order[j]`` exactly when its ``after`` exceeds ``j``."""

    __slots__ = ("after", "eid", "end", "hi", "start")

    def __init__(self, rows, node_order: _KeyOrder | list[tuple]):
        eid, start, end, after = [], [], [], []
        for r in rows:
            eid.append(r[0])
            start.append(r[2])
            end.append(r[3])
            after.append(_right(node_order, _order(r[1], r[4], r[5])))
        self.eid = np.array(eid, np.int64)
        self.start, self.end = _ints(start), _ints(end)
        self.hi = np.maximum(self.start, self.end)
        self.after = np.array(after, np.int64)

    def nbytes(self) -> int:
        """Bytes of its columns (Python objects' own not counted: a column of them is rare)."""
        return self.eid.nbytes + self.start.nbytes + self.end.nbytes + self.hi.nbytes + self.after.nbytes

    def earlier(self, eid: int, lo, hi, j: int):
        """``(event, start, end)`` of the rows, latest first, but ``eid``'s, that start at or
        before ``hi`` and end at or after ``lo`` and are before the node ``node_order[j]``."""
        start, top = self.start, self.hi
        if start.dtype != object and not (_small(lo) and _small(hi)):
            start, top = start.astype(object), top.astype(object)   # (compared as Python does)
        sel = np.flatnonzero((self.eid != eid) & (start <= hi) & (top >= lo) & (self.after <= j))
        if not len(sel):
            return ()
        return zip(self.eid[sel].tolist(), self.start[sel].tolist(), self.end[sel].tolist())


class _PlaceCache:
    """The ``_PlaceRows`` of one ``_link`` by place (``Linker._place_rows``): those used last held,
    up to ``PLACE_ROWS_HELD`` bytes with ``PLACE_ENTRY_BYTES`` each (always the one in use); of
    the others, those of ``PLACE_SPILL_ROWS`` rows or more pickled into the run's spill file once
    and read back when asked for again, the smaller ones let go (read again from the index:
    neither table changes during a ``_link``). Where there is no spill file, all but the small
    ones held. A big session's places, all held, grew with its edits (every earlier edit and
    tombstone of each file it edits: ~1 MB more at 1.5 GB of log than at 400 MB; a session that
    edits a new file each time: one place's objects, ~0.8 KB, an edit)."""

    def __init__(self, texts: _Texts | None):
        self._texts = texts
        self._held: OrderedDict[tuple, _PlaceRows] = OrderedDict()
        self._bytes = 0
        self._spilled: dict[tuple, tuple[int, int]] = {}
        self._keep_all = texts is None

    def get(self, key: tuple) -> _PlaceRows | None:
        rows = self._held.get(key)
        if rows is not None:
            self._held.move_to_end(key)
            return rows
        at = self._spilled.get(key)
        if at is None:
            return None
        rows = pickle.loads(self._texts.get_record(*at))
        self.put(key, rows)
        return rows

    def put(self, key: tuple, rows: _PlaceRows) -> None:
        self._held[key] = rows
        self._bytes += rows.nbytes() + PLACE_ENTRY_BYTES
        while self._bytes > PLACE_ROWS_HELD and len(self._held) > 1 and not self._keep_all:
            old, held = next(iter(self._held.items()))
            if old not in self._spilled and len(held.eid) >= PLACE_SPILL_ROWS:
                data = pickle.dumps(held, pickle.HIGHEST_PROTOCOL)
                pos = self._texts.put_record(data)
                if pos is None:   # (no spill file: all held, as before)
                    self._keep_all = True
                    return
                self._spilled[old] = (pos, len(data))
            del self._held[old]
            self._bytes -= held.nbytes() + PLACE_ENTRY_BYTES


def _place_key(n: Node) -> tuple[bool, str]:
    """A sort key of ``n``'s place (``_place``; none last)."""
    p = _place(n.file, n.rel)
    return (p is None, p if isinstance(p, str) else "")


def _small(v) -> bool:
    return type(v) is int and _I64[0] <= v < _I64[1]


def _ints(values: list) -> np.ndarray:
    """``values`` as int64, or as Python objects where any is not an int64 (compared, and given
    back, as they are)."""
    if all(_small(v) for v in values):
        return np.array(values, np.int64)
    out = np.empty(len(values), object)
    out[:] = values
    return out


class Linker:
    def __init__(self, conn: apsw.Connection, stats: dict, cache: IngestCache | None = None):
        self.conn = conn
        self.stats = stats
        self.cache = cache if cache is not None else IngestCache()
        self.cache.bind(conn)
        self.access = CachedAccess(conn, self.cache)
        self.tape_cache: dict[int, queries.TapeRow] = {}
        self._texts: _Texts | None = None   # the nodes' texts during ``run``
        self._density = 0.0   # the last pass's postings per query hash (``_pass_hashes``)

    # -- reading -------------------------------------------------------------------------------
    def _events_of(self, tape: queries.TapeRow, offsets: set[int]) -> list[tuple[int, dict]]:
        """The events at ``offsets`` of ``tape``, in offset order."""
        try:
            if tape.live:
                return [(o, e) for o, e in self.access.read(tape, range(tape.n_events))
                        if o in offsets]
            return self.access.read(tape, sorted(offsets))
        except (CorruptTape, OSError):  # an unreadable tape has no lineage; ingest reported it
            log.warning("lineage: cannot read tape %s", tape.tape_id, exc_info=True)
            return []

    def run(self, new_tapes: list[queries.TapeRow]) -> None:
        self._texts = _Texts()
        try:
            self._run(new_tapes)
        finally:
            self._texts.close()
            self._texts = None

    def _run(self, new_tapes: list[queries.TapeRow]) -> None:
        conn = self.conn
        nodes = _Nodes(self._texts)
        links: list[tuple[queries.TapeRow, int, dict]] = []
        for t in new_tapes:
            # the tape's edits and links (offsets sorted, their event ids) as two arrays, read
            # one tape at a time and let go once its nodes are made: a dict of them all held two
            # int objects an edit through the passes (~130 bytes an edit)
            wanted, wanted_ids = _edit_ids(conn, t.id)
            if not len(wanted):
                continue
            # a sealed tape's events parsed a chunk at a time: a node keeps only its texts, the
            # events' dicts of a big session all at once would be as big again for a moment
            parts = ([wanted] if t.live else
                     (wanted[i:i + READ_EVENTS] for i in range(0, len(wanted), READ_EVENTS)))
            for part in parts:
                for ofs, ev in self._events_of(t, set(part.tolist())):
                    i = int(np.searchsorted(wanted, ofs)) if _small(ofs) else len(wanted)
                    if i >= len(wanted) or wanted[i] != ofs:
                        continue
                    if ev.get("k") == "code.edit":
                        nodes.add(int(wanted_ids[i]), t, ofs, ev)
                    elif ev.get("k") == "span.link":
                        links.append((t, ofs, ev))
            del wanted, wanted_ids
        # edits indexed earlier but later in time may continue text of the new tapes
        self._later_edits(new_tapes, set(nodes.eid), nodes)
        ids = np.array(nodes.eid, np.int64)   # (a copy: ``nodes.eid`` stays resizable)
        for i in range(0, len(ids), 20_000):
            ch = ids[i:i + 20_000]
            arr = apsw.carray(queries._i64(ch))
            conn.execute("DELETE FROM edges WHERE from_event IN carray(?) AND agent_link=0", (arr,))
            conn.execute("DELETE FROM tombstones WHERE event IN carray(?)",
                         (apsw.carray(queries._i64(ch)),))
        self.stats["edits"] = len(nodes)
        touched_from, touched_to = _Touched(ids), _Touched()
        del ids
        self._link(nodes, touched_to)
        for t, ofs, ev in links:
            self._agent_link(t, ofs, ev, touched_from, touched_to)
        self._cardinality(touched_from, touched_to)

    def _later_edits(self, new_tapes: list[queries.TapeRow], have: set[int], nodes: _Nodes) -> None:
        """Already-indexed edits, later than the new tapes' start, of the files the new tapes
        edited or read (out-of-order ingest, or a live session re-indexed): their before-text may
        continue text the new tapes hold. A move *into another file* from a late tape is only
        linked when that file's edits are re-linked for another reason (a known gap). They join
        ``nodes``."""
        conn = self.conn
        new_ids = {t.id for t in new_tapes}
        first = min((t.first_t or "") for t in new_tapes)
        places: set[str] = set()
        for ch in _chunks(sorted(new_ids)):
            for rel, file in conn.execute(
                    "SELECT DISTINCT rel, file FROM events WHERE tape IN carray(?) AND kind IN (?,?)",
                    (apsw.carray(queries._i64(ch)), _EDIT, schema.kind_code("code.read"))):
                places.add(rel or file)
        places.discard(None)
        if not places:
            return
        rows = list(conn.execute(
            "SELECT e.id, e.tape, e.ofs, coalesce(e.rel, e.file) FROM events e"
            " JOIN tapes t ON t.id=e.tape"
            " WHERE e.kind=? AND e.t > ? AND t.tape_id IN (SELECT tape_id FROM lineage_done)"
            " ORDER BY e.t, e.id", (_EDIT, first)))
        rows = [r[:3] for r in rows if r[3] in places and r[1] not in new_ids and r[0] not in have]
        rows = rows[:MAX_RELINK]
        if not rows:
            return
        by_tape: dict[int, dict[int, int]] = defaultdict(dict)
        for eid, tid, ofs in rows:
            by_tape[tid][ofs] = eid
        trows = queries.tapes(conn, by_tape)
        for tid in sorted(by_tape):
            t = trows[tid]
            try:
                evs = self.access.read(t, sorted(by_tape[tid])) if not t.live else [
                    (o, e) for o, e in self.access.read(t, range(t.n_events)) if o in by_tape[tid]]
            except (CorruptTape, OSError):
                log.warning("lineage: cannot read tape %s", t.tape_id)
                continue
            for ofs, ev in evs:
                nodes.add(by_tape[tid][ofs], t, ofs, ev)

    # -- fingerprint linking -------------------------------------------------------------------
    def _queries(self, n: Node, prints: tuple | None = None) -> None:
        """``n``'s containment, tombstone flag and queries (distinct k-grams of its before-text,
        and of its after-text when that is mostly new), with their denominators. ``prints``:
        ``text_prints`` of its before- and after-text, when already made (``_queried``)."""
        if prints is None:
            prints = (self.cache.text_prints(n.before), self.cache.text_prints(n.after))
        (bw, bk), (aw, ak) = prints
        if len(bw):
            n.qa = (bk, len(bw))
            n.cont = round(float(member(bw, ak).sum() / len(bw)), ROUND)
            n.tomb = n.cont < LINK_THRESHOLD
        if len(aw) and member(aw, bk).sum() / len(aw) < NEW_TEXT_MAX:
            n.qb = (ak, len(aw))

    def _queried(self, nodes: list[Node]):
        """Each node after ``_queries``, the texts of up to ``QUERY_BATCH`` nodes (and
        ``QUERY_BATCH_CHARS`` characters) fingerprinted in one batch."""
        i = 0
        while i < len(nodes):
            j, size, texts, part = i, 0, [], []
            while j < len(nodes) and j - i < QUERY_BATCH and (size < QUERY_BATCH_CHARS or j == i):
                part.append(nodes[j])   # (a ``_Nodes`` makes a node each time it is asked)
                texts += (part[-1].before, part[-1].after)
                size += len(texts[-2]) + len(texts[-1])
                j += 1
            prints = self.cache.texts_prints(texts)
            del texts
            for k, n in enumerate(part):
                self._queries(n, (prints[2 * k], prints[2 * k + 1]))
                yield n
            del prints
            i = j

    def _link(self, nodes: _Nodes | list[Node], touched_to: _Touched) -> None:
        """Tombstones of every node first (the location-only rule reads them), then the edges,
        a pass of ``LINK_PASS_HASHES`` query hashes at a time: what one pass holds (postings,
        matches) stays bounded however many edits the run indexed. A node's edges depend only on
        the index, never on the other nodes of its pass, so the rows are those of one pass."""
        if not nodes:
            return
        conn = self.conn
        tomb_rows = []
        for n in self._queried(nodes):
            if n.tomb:
                blk = conn.execute("SELECT block FROM refs WHERE event=? AND role=?",
                                   (n.eid, schema.ROLE_EDIT_BEFORE)).fetchone()
                br = n.b_range or [None, None]
                tomb_rows.append((n.eid, blk[0] if blk else None, n.file, n.rel, _int(br[0]),
                                  _int(br[1] if len(br) > 1 else None), n.t))
            n.qa = n.qb = None  # made again in its pass (kept, they would hold every k-gram)
        conn.executemany("INSERT INTO tombstones(event, block, file, rel, start, end, t)"
                         " VALUES (?,?,?,?,?,?,?)", tomb_rows)
        self.stats["tombstones"] += len(tomb_rows)
        del tomb_rows   # (a tuple and its numbers an edit: not held through the passes)
        self._loc_cache = _PlaceCache(self._texts)
        self._node_order = _KeyOrder.of(nodes, self._texts)   # (``_PlaceRows``' ``after``)
        part: list[Node] = []
        size = 0
        self._density = 0.0
        for n in self._queried(nodes):
            part.append(n)
            size += sum(len(q[0]) for q in (n.qa, n.qb) if q is not None)
            if size >= self._pass_hashes():
                self._link_pass(part, touched_to)
                part, size = [], 0
        if part:
            self._link_pass(part, touched_to)

    def _pass_hashes(self) -> float:
        """The query hashes of the next pass: ``LINK_PASS_HASHES``, or fewer where the last
        pass's postings per query hash would fill more than ``LINK_PASS_FILL`` of
        ``LINK_PASS_POSTINGS`` with them."""
        if self._density <= 0:
            return LINK_PASS_HASHES
        return min(LINK_PASS_HASHES, max(1.0, LINK_PASS_FILL * LINK_PASS_POSTINGS / self._density))

    def _link_pass(self, nodes: list[Node], touched_to: _Touched) -> None:
        """The edges of ``nodes`` (their queries made): vectorised matches over the postings of
        all their hashes. A pass whose postings pass ``LINK_PASS_POSTINGS`` is split in two
        (never one edit's queries); its edits are matched ``LINK_MATCH_ROWS`` gathered postings
        at a time. Edges are inserted in the order of ``nodes`` either way."""
        conn = self.conn
        allh = [q[0] for n in nodes for q in (n.qa, n.qb) if q is not None]
        asked = sum(len(h) for h in allh)
        if allh:
            uh = uniq(np.concatenate(allh))
            bp = boilerplate(conn, uh)
        else:
            uh, bp = np.zeros(0, np.int64), set()
        del allh
        post = Postings(conn, uh, bp, self.cache, linkable_only=True,
                        max_rows=LINK_PASS_POSTINGS if len(nodes) > 1 else None)
        del uh, bp
        if not post.complete:
            del post
            half = len(nodes) // 2
            self._link_pass(nodes[:half], touched_to)
            self._link_pass(nodes[half:], touched_to)
            return
        if asked:
            self._density = len(post.H) / asked
        part: list[Node] = []
        size = 0
        for n in nodes:
            rows = post.rows_of(n.qa) + post.rows_of(n.qb)
            if part and size + rows > LINK_MATCH_ROWS:
                self._link_matched(post, part, touched_to)
                part, size = [], 0
            part.append(n)
            size += rows
        if part:
            self._link_matched(post, part, touched_to)
        for n in nodes:
            n.qa = n.qb = None

    def _link_matched(self, post: Postings, nodes: list[Node], touched_to: _Touched) -> None:
        """The edges of ``nodes`` from one ``match_all`` over ``post``: the refs of the blocks
        their queries may link to read ``LINK_REF_BLOCKS`` blocks at a time (a group of nodes,
        grouped by place; a node's edges depend only on its own blocks' refs), inserted at once
        in the nodes' order."""
        conn = self.conn
        # per query: the blocks it matched (hash counts, line ranges); those that may link
        matches = post.match_all([q for n in nodes for q in (n.qa, n.qb)])
        per_node = list(zip(matches[0::2], matches[1::2]))
        del matches
        # the nodes grouped by place (a file's edits match mostly the same earlier versions: a
        # block's refs are then read in few groups), their edges inserted in the nodes' order
        out: list[list[tuple] | None] = [None] * len(nodes)
        group: list[int] = []
        blocks: set[int] = set()
        for i in sorted(range(len(nodes)), key=lambda i: (_place_key(nodes[i]), i)):
            ma, mb = per_node[i]
            mine = set(itertools.chain.from_iterable(m.blocks[m.passing].tolist() for m in (ma, mb)
                                                     if m is not None))
            if group and len(blocks) + len(mine - blocks) > LINK_REF_BLOCKS:
                self._link_group(nodes, per_node, group, blocks, touched_to, out)
                group, blocks = [], set()
            group.append(i)
            blocks |= mine
        if group:
            self._link_group(nodes, per_node, group, blocks, touched_to, out)
        del per_node
        edge_rows = list(itertools.chain.from_iterable(out))
        del out
        conn.executemany(
            "INSERT INTO edges(from_event, to_event, confidence, location_delta, cardinality,"
            " agent_link, location_only, kind, to_start, to_end, from_side, to_role, span_sim)"
            " VALUES (?,?,?,?,'1:1',0,?,?,?,?,?,?,?)",
            [(e[0], e[1], e[2], e[3], e[6], e[4], e[5][0], e[5][1], e[7], e[8], e[9])
             for e in edge_rows])

    def _link_group(self, nodes: list[Node], per_node: list, group: list[int], blocks: set[int],
                    touched_to: _Touched, out: list) -> None:
        """(``_link_matched``) the edge rows of the nodes at ``group`` (indices into ``nodes`` and
        their matches ``per_node``) into ``out`` at the same indices, from the refs of ``blocks``
        (all those their queries may link to)."""
        refs, ref_blocks, first, order = _ref_rows(self.conn, sorted(blocks))
        for i in group:
            n, (ma, mb) = nodes[i], per_node[i]
            edges = self._candidates(n, ma, mb, refs, ref_blocks, first, bisect.bisect_left(order, n.key))
            linked = {e[1] for e in edges}
            edges.extend(self._location_only(n, ma, mb, linked))
            rows = out[i] = []
            for e in edges:
                touched_to.add(e[1])
                rows.append(e + ((n.cont if e[7] == 0 else None),))
                self.stats["location_only" if e[6] else "edges"] += 1

    def _candidates(self, n: Node, ma: Match | None, mb: Match | None, refs: dict,
                    ref_blocks: np.ndarray, first: np.ndarray, before: int) -> list[tuple]:
        """Linking edges of one edit: (from, to, conf, delta, kind, (to_start, to_end), 0).
        ``refs``, ``ref_blocks``, ``first``: ``_ref_rows``; ``before``: the rank of ``n``'s time
        order among the refs' (a ref is earlier than ``n`` when its rank is lower)."""
        found: dict[tuple, list] = {}   # (to_event, query) → best
        groups = None
        my_place = _place(n.file, n.rel)
        n_eid, n_session, n_ofs, n_t = n.eid, n.session, n.ofs, n.t
        for qi, (m, q) in enumerate(((ma, n.qa), (mb, n.qb))):
            if q is None:
                continue
            groups = m.groups
            my_range = n.b_range if qi == 0 else n.a_range
            for hs, b, lo, hi, cnt in m.linkable(ref_blocks, first, before):
                sim = min(1.0, cnt / q[1])
                ranks, rows = refs[b]
                for i in range(bisect.bisect_left(ranks, before)):   # the refs earlier than ``n``
                    eid, role, line0, rt, rofs, rplace, tape, session = rows[i]
                    if eid == n_eid:
                        continue
                    if session == n_session and rofs == n_ofs and rt == n_t:
                        continue  # the same event in another copy of the session (live/sealed)
                    if qi == 1 and role == schema.ROLE_READ:
                        continue
                    span = (line0 + lo, line0 + hi)
                    delta = location_delta(my_place, my_range, rplace, span)
                    if qi == 1:
                        if delta in ("same", "adjacent"):
                            if sim < REINSERT_THRESHOLD:
                                continue
                            kind = "reinsert"
                        else:
                            kind = "move"
                    else:
                        kind = "read" if role == schema.ROLE_READ else "edit"
                    key = (eid, qi)
                    cur = found.get(key)
                    if cur is None or sim > cur[2]:
                        found[key] = [n_eid, eid, round(sim, ROUND), delta, kind, span, 0, hs, rt, rofs,
                                      role, qi, tape]
        # per earlier tape: the latest read, and edits that add coverage (best first)
        by_tape: dict[tuple[int, int], list] = defaultdict(list)
        for (_eid, qi), c in found.items():
            by_tape[(c[12], qi)].append(c)
        out = []
        for (_tid, _qi), cs in sorted(by_tape.items()):
            reads = [c for c in cs if c[10] == schema.ROLE_READ]
            edits = [c for c in cs if c[10] != schema.ROLE_READ]
            if reads:   # (the first of the sorted reads; no two have one key: one event each)
                out.append(reads[0] if len(reads) == 1 else min(reads, key=lambda c: (-c[2], _neg(c[8]), c[9])))
            if len(edits) > 1:
                edits.sort(key=lambda c: (-c[2], c[10], _neg(c[8]), -c[9]))
            covered: set[int] = set()
            kept = 0
            for c in edits:
                if kept >= MAX_EDIT_CANDIDATES_PER_TAPE:
                    break
                hs = groups.hashes(c[7])   # the hashes the candidate matched
                if hs <= covered:
                    continue
                covered |= hs
                out.append(c)
                kept += 1
        out.sort(key=lambda c: (c[1], c[4]))
        # one edge per (from, to): the stronger query wins
        best: dict[int, list] = {}
        for c in out:
            if c[1] not in best or c[2] > best[c[1]][2]:
                best[c[1]] = c
        return [tuple(c[:7]) + (c[11], c[10]) for c in sorted(best.values(), key=lambda c: c[1])]

    def _location_only(self, n: Node, ma: Match | None, mb: Match | None,
                       linked: set[int]) -> list[tuple]:
        """Earlier edits / tombstones at the same place whose text does not match."""
        place = _place(n.file, n.rel)
        if not place:
            return []
        col = "rel" if n.rel else "file"
        out = []
        j = _left(self._node_order, n.key)
        if n.has_before and n.b_range and n.b_range[0] is not None:
            b0, b1 = n.b_range[0], max(n.b_range[0], n.b_range[1])
            rows = self._place_rows("edits", col, place).earlier(n.eid, b0, b1, j)
            out += self._loc_rows(n, rows, ma, n.qa, schema.ROLE_EDIT_AFTER, linked, 0)
        if n.qb is not None and n.a_range and n.a_range[0] is not None:
            a0, a1 = n.a_range[0], max(n.a_range[0], n.a_range[1])
            rows = self._place_rows("tombstones", col, place).earlier(n.eid, a0, a1, j)
            out += self._loc_rows(n, rows, mb, n.qb, schema.ROLE_EDIT_BEFORE, linked, 1)
        return out

    def _place_rows(self, what: str, col: str, place: str) -> _PlaceRows:
        """The earlier-edit (``edits``) or tombstone rows at a place that have a line range,
        latest first; read once per place in a ``_link`` (neither table changes meanwhile), and
        held as a few numbers a row (``_PlaceRows``)."""
        key = (what, col, place)
        rows = self._loc_cache.get(key)
        if rows is None:
            if what == "edits":
                sql = (f"SELECT e.id, e.t, e.a_start, e.a_end, t.tape_id, e.ofs FROM events e"
                       f" JOIN tapes t ON t.id=e.tape WHERE e.{col}=? AND e.kind=?"
                       f" AND e.a_start IS NOT NULL AND e.a_end IS NOT NULL"
                       f" ORDER BY e.t DESC, e.id DESC")
                args = (place, _EDIT)
            else:
                sql = (f"SELECT s.event, s.t, s.start, s.end, t.tape_id, e.ofs FROM tombstones s"
                       f" JOIN events e ON e.id=s.event JOIN tapes t ON t.id=e.tape"
                       f" WHERE s.{col}=? AND s.start IS NOT NULL AND s.end IS NOT NULL"
                       f" ORDER BY s.t DESC, s.event DESC")
                args = (place,)
            rows = _PlaceRows(self.conn.execute(sql, args), self._node_order)
            self._loc_cache.put(key, rows)
        return rows

    def _loc_rows(self, n, rows, m, q, role, linked, side) -> list[tuple]:
        """``rows``: ``(event, start, end)`` of the earlier rows at ``n``'s place whose range
        meets it, latest first."""
        out = []
        for eid, s, e in rows:
            if eid in linked:
                continue
            sim = 0.0
            if q is not None:
                for (blk,) in self.conn.execute("SELECT block FROM refs WHERE event=? AND role=?",
                                                (eid, role)):
                    c = m.count(blk)
                    if c is not None:
                        sim = max(sim, min(1.0, c / q[1]))
            out.append((n.eid, eid, round(sim, ROUND), "same", "location", (s, e), 1, side, role))
            linked.add(eid)
            if len(out) >= MAX_LOCATION_CANDIDATES:
                break
        return out

    # -- agent links ---------------------------------------------------------------------------
    def _agent_link(self, tape: queries.TapeRow, ofs: int, ev: dict, touched_from: _Touched,
                    touched_to: _Touched) -> None:
        conn = self.conn
        t = ev.get("t")
        to_file, from_file = ev.get("to_file"), ev.get("from_file")
        if not isinstance(to_file, str) or not isinstance(from_file, str):
            return
        to_rel, from_rel = rel_path(to_file, tape.cwd), rel_path(from_file, tape.cwd)
        to_r, from_r = _rng(ev.get("to_range")), _rng(ev.get("from_range"))
        # the edit that produced the link's `to` span: in this tape (nearest before, else after)
        rows = list(conn.execute(
            "SELECT id, ofs, a_start, a_end FROM events WHERE tape=? AND kind=? AND (file=? OR rel=?)"
            " ORDER BY ofs", (tape.id, _EDIT, to_file, to_rel)))
        rows = [r for r in rows if _overlap((r[2], r[3]), to_r)] or rows
        if not rows:
            return
        before = [r for r in rows if r[1] < ofs]
        src = before[-1] if before else rows[0]
        # the latest earlier event holding the `from` span (an edit's after side, else a read)
        cands = list(conn.execute(
            "SELECT e.id, e.kind, e.a_start, e.a_end, e.t, t.tape_id, e.ofs FROM events e"
            " JOIN tapes t ON t.id=e.tape WHERE (e.file=? OR e.rel=?) AND e.kind IN (?,?)"
            " AND e.id<>?", (from_file, from_rel, _EDIT, schema.kind_code("code.read"), src[0])))
        key = _order(t, tape.tape_id, ofs)
        cands = [c for c in cands if _order(c[4], c[5], c[6]) < key and _overlap((c[2], c[3]), from_r)]
        if not cands:
            return
        cands.sort(key=lambda c: (c[1] != _EDIT, _neg(c[4]), -c[6]))
        dst = cands[0]
        sim = self._block_similarity(src[0], schema.ROLE_EDIT_AFTER, dst[0])
        delta = location_delta(to_rel or to_file, to_r, from_rel or from_file, (dst[2], dst[3]))
        conn.execute("DELETE FROM edges WHERE from_event=? AND to_event=? AND agent_link=1",
                     (src[0], dst[0]))
        conn.execute(
            "INSERT INTO edges(from_event, to_event, confidence, location_delta, cardinality,"
            " agent_link, location_only, kind, to_start, to_end, from_side, to_role)"
            " VALUES (?,?,?,?,'1:1',1,0,'agent',?,?,1,?)",
            (src[0], dst[0], round(sim, ROUND), delta, dst[2], dst[3],
             schema.ROLE_EDIT_AFTER if dst[1] == _EDIT else schema.ROLE_READ))
        touched_from.add(src[0])
        touched_to.add(dst[0])
        self.stats["agent_links"] += 1

    def _block_similarity(self, eid: int, role: int, other: int) -> float:
        """Containment of event ``eid``'s block (``role``) in any block of event ``other``."""
        conn = self.conn
        row = conn.execute("SELECT r.event, e.tape, e.ofs FROM refs r JOIN events e ON e.id=r.event"
                           " WHERE r.event=? AND r.role=?", (eid, role)).fetchone()
        if not row:
            return 0.0
        tape = queries.tapes(conn, [row[1]])[row[1]]
        evs = self.access.read(tape, [row[2]]) if not tape.live else list(
            self.access.read(tape, range(row[2], row[2] + 1)))
        if not evs:
            return 0.0
        texts = [tx for tx, rl, _ in event_blocks(evs[0][1]) if rl == role]
        if not texts:
            return 0.0
        w, q = self.cache.text_prints(texts[0])
        nq = len(w)
        if not nq:
            return 0.0
        blocks = {b for (b,) in conn.execute("SELECT block FROM refs WHERE event=?", (other,))}
        hit: dict[int, set] = defaultdict(set)
        for h, b, _ln in queries.postings(conn, q):
            if b in blocks:
                hit[b].add(h)
        return max((min(1.0, len(v) / nq) for v in hit.values()), default=0.0)

    # -- cardinality ---------------------------------------------------------------------------
    def _cardinality(self, touched_from: _Touched, touched_to: _Touched) -> None:
        """The cardinality of every edge from or to a touched event, ``CARDINALITY_EVENTS``
        touched events' edges at a time (an edge's cardinality depends only on the edges of its
        source and of its target, which the run no longer changes: the same values as all at
        once), from the columns it reads. A big session's run touches tens of thousands of
        edges: all of their rows and what is read for them at once made the end of the pass its
        peak, and left pymalloc arenas of their objects behind."""
        conn = self.conn
        # (id, from, to, to_start, to_end, cardinality)
        cols = "id, from_event, to_event, to_start, to_end, cardinality"
        froms = touched_from.ids()
        for ids, col in ((froms, "from_event"), (touched_to.ids(), "to_event")):
            for i in range(0, len(ids), CARDINALITY_EVENTS):
                rows = conn.execute(f"SELECT {cols} FROM edges WHERE {col} IN carray(?)",
                                    (apsw.carray(queries._i64(ids[i:i + CARDINALITY_EVENTS])),)).fetchall()
                if col == "to_event" and rows:   # (an edge from a touched event: done above)
                    done = member(np.fromiter((r[1] for r in rows), np.int64, len(rows)), froms)
                    rows = [r for r, d in zip(rows, done.tolist()) if not d]
                if rows:
                    self._cardinality_of(rows)

    def _cardinality_of(self, rows: list[tuple]) -> None:
        """``_cardinality`` of the edges ``rows`` (distinct edges, ``(id, from, to, to_start,
        to_end, cardinality)``)."""
        conn = self.conn
        froms = {r[1] for r in rows}
        tos = {r[2] for r in rows}
        linking = " AND location_only=0 AND kind IN ('edit','move','reinsert')"
        out_n: dict[int, list] = {}   # source → [its linking edges, their highest confidence]
        for ch in _chunks(sorted(froms)):
            for f, conf in conn.execute("SELECT from_event, confidence FROM edges WHERE from_event"
                                        f" IN carray(?){linking}", (apsw.carray(queries._i64(ch)),)):
                o = out_n.get(f)
                if o is None:
                    out_n[f] = [1, conf]
                else:
                    o[0] += 1
                    o[1] = max(o[1], conf)
        in_e: dict[int, list] = defaultdict(list)   # target → (source, to_start, to_end) of each
        for ch in _chunks(sorted(tos)):
            for f, to, s0, s1 in conn.execute("SELECT from_event, to_event, to_start, to_end FROM edges"
                                              f" WHERE to_event IN carray(?){linking}",
                                              (apsw.carray(queries._i64(ch)),)):
                in_e[to].append((f, s0, s1))
        tape_of: dict[int, int] = {}
        wanted = {i[0] for v in in_e.values() for i in v} | froms
        for ch in _chunks(sorted(wanted)):
            tape_of.update(conn.execute("SELECT id, tape FROM events WHERE id IN carray(?)",
                                        (apsw.carray(queries._i64(ch)),)))
        del wanted
        # (target, tape of the source) → {span continued: the sources that continued it}
        spans_in: dict[tuple, dict[tuple, set[int]]] = defaultdict(lambda: defaultdict(set))
        for to, ins in in_e.items():
            for f, s0, s1 in ins:
                spans_in[(to, tape_of.get(f))][(s0, s1)].add(f)
        del in_e
        # a merge: several earlier texts continued in one edit, none of them covering it
        merged = {f for f, (n, top) in out_n.items() if n > 1 and top < MERGE_COVER}
        del out_n
        updates = []
        for r in rows:
            card = "1:1"
            if r[1] in merged:
                card = "N:1"
            else:
                # a split: other edits of the same session continued other lines of the same span
                spans = spans_in.get((r[2], tape_of.get(r[1])), {})
                mine = (r[3], r[4])
                if any((len(fs) > 1 or r[1] not in fs) and not _overlap(s, mine)
                       for s, fs in spans.items()):
                    card = "1:N"
            if card != r[5]:  # (most edges keep the '1:1' they were written with)
                updates.append((card, r[0]))
        conn.executemany("UPDATE edges SET cardinality=? WHERE id=?", updates)
