"""Lineage edges, tombstones and continuations (``shared/DESIGN.md`` "Lineage, tombstones,
continuations"): computed at ingest by ``after_ingest``, walked at query time by ``walk``.

**Edges** (table ``edges``) point *backwards in time*: ``from_event`` is a later ``code.edit``,
``to_event`` an earlier event whose text it continued. For every edit X:

* its before-text is looked up by fingerprint among earlier edit-after, edit-before and read blocks
  (containment of X's before-text in the candidate block = ``confidence``); ``kind`` ``edit`` or
  ``read``;
* when X introduces new text (its after-text is mostly not in its before-text: a paste, a Write, a
  re-insertion), the after-text is looked up among earlier edit blocks: in another file (or far
  away in the same one) at ≥ ``LINK_THRESHOLD`` (``kind`` ``move``, ``location_delta`` ``moved``),
  at the same place only when verbatim, ≥ ``REINSERT_THRESHOLD`` (``kind`` ``reinsert``);
* earlier edits and tombstones at the same place whose text does *not* match are stored
  ``location_only`` (shown only with ``--all``): location alone never links.

``location_delta``: ``same`` (same file, overlapping lines), ``adjacent`` (same file, within
``ADJACENT_LINES``), ``moved`` (another file, or further away), ``absent`` (a side has no file).
``cardinality``: ``N:1`` when X's before-text is assembled from several earlier spans (no single
one holds ``MERGE_COVER`` of it), ``1:N`` when one earlier span was continued by several edits of
one later session over different lines of it (a split), else ``1:1``. ``span.link`` events give ``agent_link``
edges (the edit that produced the link's ``to`` span → the event that held its ``from`` span),
traversed whatever their confidence.

**Tombstones**: an edit whose before-text is gone from its after-text (a deletion, or a
replacement by unrelated text) records the removed block, file, range and time.

**Continuations** (table ``continuations``, ``from_tape`` earlier → ``to_tape`` later): a tape's
head is compared with the tails of the tapes of the same harness that started before it. Hashes
that say nothing about *this* session are excluded: events the adapter marked ``boilerplate`` or
``meta`` (injected context), the input the earlier tape was given before it first acted (its
preamble: system prompt, AGENTS.md/CLAUDE.md, environment, the first request), hashes of the
input at the head of ``BOILERPLATE_TAPES`` or more tapes of the harness, and the index's global
boilerplate. The share of
the head found in the tail is the base score; harness markers add to it (a compaction summary or
"This session is being continued…" in the head, the same session id, ``meta.continues``). An
orchestrator-tier tape whose text holds an agent tape's first request gets a ``dispatch`` row.

**Walk**: BFS backwards from the events that match today's span, depth ≤ ``MAX_DEPTH``, at most
``MAX_FANOUT`` edges per node (best first), ``MAX_EDGES`` overall; edges below ``min_confidence``
are skipped unless ``agent_link`` (``--all`` keeps them and the location-only ones). Every tape the
walk touches crosses its continuation (``via: "continuation"``) and dispatch (``via: "lineage"``)
rows to the earlier tape.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict

import apsw
import numpy as np

from engram import fingerprint
from engram.adapters.base import rel_path
from engram.index import queries as Q
from engram.index import schema as S
from engram.index.store import event_blocks
from engram.query import window as W

log = logging.getLogger(__name__)

LINK_THRESHOLD = 0.30
REINSERT_THRESHOLD = 0.90
NEW_TEXT_MAX = 0.5          # after-text contained less than this in the before-text: new text
MERGE_COVER = 0.8
ADJACENT_LINES = 20
MAX_LOCATION_CANDIDATES = 3
MAX_EDIT_CANDIDATES_PER_TAPE = 3
MAX_RELINK = 2000          # already-linked later edits re-linked per ingest (out-of-order tapes)
POPULAR_POSTINGS = 2000     # a hash in more blocks than this is ignored for linking

MAX_DEPTH = 10
MAX_FANOUT = 50
MAX_EDGES = 500

HEAD_EVENTS = 12
TAIL_EVENTS = 60
BOILERPLATE_TAPES = 4
CONT_MIN_MATCH = 6
CONT_MIN_BASE = 0.2
CONT_THRESHOLD = 0.5
MAX_SUCCESSORS = 5          # later tapes re-scored when an earlier tape arrives late
MAX_PREDECESSORS = 30       # latest earlier tapes of the same harness and cwd compared
MARKER_BOOST = {"summary": 0.3, "resumed": 0.4}
CONTINUED_TEXT = "This session is being continued from a previous conversation"
DISPATCH_THRESHOLD = 0.6
DISPATCH_MAX_HOURS = 24     # an orchestrator dispatches shortly before the agent starts

_EDIT = S.kind_code("code.edit")
_LINK = S.kind_code("span.link")
ROUND = 4


# ---------------------------------------------------------------------------------------------
# ingest side


def after_ingest(conn: apsw.Connection) -> dict:
    """Compute edges, tombstones and continuations for tapes not processed yet (incremental)."""
    t0 = time.perf_counter()
    stats = {"tapes": 0, "edits": 0, "edges": 0, "location_only": 0, "agent_links": 0,
             "tombstones": 0, "continuations": 0, "dispatch": 0}
    with conn:
        tapes = {r[0]: r for r in conn.execute(
            "SELECT tape_id, id, (SELECT min(id) FROM events WHERE tape=tapes.id), n_events"
            " FROM tapes")}
        done = dict(conn.execute("SELECT tape_id, sig FROM lineage_done"))
        gone = [t for t in done if t not in tapes]
        for t in gone:
            conn.execute("DELETE FROM lineage_done WHERE tape_id=?", (t,))
        new_rows = []
        for tid, (_, rowid, first, n) in sorted(tapes.items()):
            sig = f"{rowid}:{first}:{n}"
            if done.get(tid) != sig:
                new_rows.append((tid, rowid, sig))
        if not new_rows:
            return stats
        trows = Q.tapes(conn, [r[1] for r in new_rows])
        linker = _Linker(conn, stats)
        linker.run([trows[r[1]] for r in new_rows])
        _continuations(conn, [trows[r[1]] for r in new_rows], linker.access, stats)
        conn.executemany("INSERT OR REPLACE INTO lineage_done VALUES (?,?)",
                         [(tid, sig) for tid, _, sig in new_rows])
        stats["tapes"] = len(new_rows)
    stats["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return stats


def _order(t: str | None, tape_id: str, ofs: int) -> tuple:
    return (t or "", tape_id, ofs)


def _place(file: str | None, rel: str | None) -> str | None:
    return rel or file


def location_delta(p1: str | None, r1, p2: str | None, r2) -> str:
    """``same``/``adjacent``/``moved``/``absent`` for two (file, [start, end]) locations."""
    if not p1 or not p2:
        return "absent"
    if p1 != p2:
        return "moved"
    if not r1 or not r2 or r1[0] is None or r2[0] is None:
        return "absent"
    a0, a1 = r1[0], max(r1[0], r1[1] if r1[1] is not None else r1[0])
    b0, b1 = r2[0], max(r2[0], r2[1] if r2[1] is not None else r2[0])
    if a0 <= b1 and b0 <= a1:
        return "same"
    gap = max(a0 - b1, b0 - a1)
    return "adjacent" if gap <= ADJACENT_LINES else "moved"


class _Node:
    """A code.edit being linked (its texts come from the tape)."""

    __slots__ = ("eid", "tape", "tape_id", "session", "ofs", "t", "file", "rel", "before", "after",
                 "b_range", "a_range", "qa", "qb", "tomb", "cont")

    def __init__(self, eid, tape: Q.TapeRow, ofs: int, ev: dict):
        self.eid, self.tape, self.tape_id, self.ofs = eid, tape.id, tape.tape_id, ofs
        self.session = tape.session
        self.t = ev.get("t")
        self.file = ev.get("file") if isinstance(ev.get("file"), str) else None
        self.rel = ev.get("rel") if isinstance(ev.get("rel"), str) else None
        self.before = ev.get("before_text") if isinstance(ev.get("before_text"), str) else ""
        self.after = ev.get("after_text") if isinstance(ev.get("after_text"), str) else ""
        self.b_range = ev.get("before_range")
        self.a_range = ev.get("after_range")
        self.qa = self.qb = None
        self.tomb = False
        self.cont = None

    @property
    def key(self):
        return _order(self.t, self.tape_id, self.ofs)


class _Postings:
    """The index postings of a set of hashes as sorted arrays, matched per query vectorised."""

    def __init__(self, conn: apsw.Connection, hashes: np.ndarray, skip: set[int]):
        rows = []
        for ch in _chunks(hashes.tolist(), 20000):
            rows.extend(Q.postings(conn, np.asarray(ch, dtype=np.int64)))
        arr = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
        o = np.lexsort((arr[:, 1], arr[:, 0]))
        H, B, L = arr[o, 0], arr[o, 1], arr[o, 2]
        if len(H):
            uh, start, cnt = np.unique(H, return_index=True, return_counts=True)
            drop = uh[cnt > POPULAR_POSTINGS]
            if skip:
                drop = np.union1d(drop, np.fromiter(skip, np.int64, len(skip)))
            keep = ~np.isin(H, drop)
            H, B, L = H[keep], B[keep], L[keep]
        self.H, self.B, self.L = H, B, L

    def match(self, q: np.ndarray, qn: int) -> dict[int, list]:
        """{block: [hashes matched (only when the block may link), min line, max line, count]}."""
        H = self.H
        lo = np.searchsorted(H, q, "left")
        hi = np.searchsorted(H, q, "right")
        lens = hi - lo
        tot = int(lens.sum())
        if tot == 0:
            return {}
        idx = np.repeat(lo - (np.cumsum(lens) - lens), lens) + np.arange(tot)
        b, h, ln = self.B[idx], H[idx], self.L[idx]
        o = np.lexsort((h, b))
        b, h, ln = b[o], h[o], ln[o]
        new = np.ones(len(b), dtype=bool)
        new[1:] = (b[1:] != b[:-1]) | (h[1:] != h[:-1])
        ub, bstart = np.unique(b, return_index=True)
        counts = np.add.reduceat(new.astype(np.int64), bstart)
        lmin = np.minimum.reduceat(ln, bstart)
        lmax = np.maximum.reduceat(ln, bstart)
        bend = np.append(bstart[1:], len(b))
        out = {}
        for i, blk in enumerate(ub.tolist()):
            c = int(counts[i])
            hs = set(h[bstart[i]:bend[i]].tolist()) if c / qn >= LINK_THRESHOLD else None
            out[blk] = [hs, int(lmin[i]), int(lmax[i]), c]
        return out


class _Linker:
    def __init__(self, conn: apsw.Connection, stats: dict):
        self.conn = conn
        self.stats = stats
        self.access = W.TapeAccess(conn)
        self.tape_cache: dict[int, Q.TapeRow] = {}

    # -- reading -------------------------------------------------------------------------------
    def _events_of(self, tape: Q.TapeRow) -> list[tuple[int, dict]]:
        try:
            return self.access.read(tape, range(0, tape.n_events))
        except Exception:  # an unreadable tape has no lineage; ingest reported it already
            log.warning("lineage: cannot read tape %s", tape.tape_id, exc_info=True)
            return []

    def run(self, new_tapes: list[Q.TapeRow]) -> None:
        conn = self.conn
        nodes: list[_Node] = []
        links: list[tuple[Q.TapeRow, int, dict]] = []
        new_ids = [t.id for t in new_tapes]
        ev_ids: dict[tuple[int, int], int] = {}
        for tid in new_ids:
            for eid, ofs in conn.execute("SELECT id, ofs FROM events WHERE tape=? AND kind IN (?,?)",
                                         (tid, _EDIT, _LINK)):
                ev_ids[(tid, ofs)] = eid
        for t in new_tapes:
            wanted = {ofs for (tid, ofs) in ev_ids if tid == t.id}
            if not wanted:
                continue
            for ofs, ev in self._events_of(t):
                if ofs not in wanted:
                    continue
                if ev.get("k") == "code.edit":
                    nodes.append(_Node(ev_ids[(t.id, ofs)], t, ofs, ev))
                elif ev.get("k") == "span.link":
                    links.append((t, ofs, ev))
        # edits indexed earlier but later in time may continue text of the new tapes
        nodes.extend(self._later_edits(new_tapes, {n.eid for n in nodes}))
        ids = [n.eid for n in nodes]
        if ids:
            for ch in _chunks(ids):
                arr = apsw.carray(Q._i64(ch))
                conn.execute("DELETE FROM edges WHERE from_event IN carray(?) AND agent_link=0", (arr,))
                conn.execute("DELETE FROM tombstones WHERE event IN carray(?)",
                             (apsw.carray(Q._i64(ch)),))
        self.stats["edits"] = len(nodes)
        touched_from, touched_to = set(ids), set()
        self._link(nodes, touched_to)
        for t, ofs, ev in links:
            self._agent_link(t, ofs, ev, touched_from, touched_to)
        self._cardinality(touched_from, touched_to)

    def _later_edits(self, new_tapes: list[Q.TapeRow], have: set[int]) -> list[_Node]:
        """Already-indexed edits later than the new tapes' start (out-of-order ingest)."""
        conn = self.conn
        new_ids = {t.id for t in new_tapes}
        first = min((t.first_t or "") for t in new_tapes)
        rows = list(conn.execute(
            "SELECT e.id, e.tape, e.ofs FROM events e JOIN tapes t ON t.id=e.tape"
            " WHERE e.kind=? AND e.t > ? AND t.tape_id IN (SELECT tape_id FROM lineage_done)"
            " ORDER BY e.t, e.id LIMIT ?", (_EDIT, first, MAX_RELINK)))
        rows = [r for r in rows if r[1] not in new_ids and r[0] not in have]
        if not rows:
            return []
        by_tape: dict[int, dict[int, int]] = defaultdict(dict)
        for eid, tid, ofs in rows:
            by_tape[tid][ofs] = eid
        trows = Q.tapes(conn, by_tape)
        out = []
        for tid in sorted(by_tape):
            t = trows[tid]
            try:
                evs = self.access.read(t, sorted(by_tape[tid])) if not t.live else [
                    (o, e) for o, e in self.access.read(t, range(0, t.n_events)) if o in by_tape[tid]]
            except Exception:
                continue
            for ofs, ev in evs:
                out.append(_Node(by_tape[tid][ofs], t, ofs, ev))
        return out

    # -- fingerprint linking -------------------------------------------------------------------
    def _link(self, nodes: list[_Node], touched_to: set[int]) -> None:
        if not nodes:
            return
        conn = self.conn
        texts = []
        for n in nodes:
            texts.append(n.before)
            texts.append(n.after)
        fps = fingerprint.fingerprint_batch(texts)
        allh = []
        for i, n in enumerate(nodes):
            bw = np.unique(fps[2 * i].hashes)
            aw = np.unique(fps[2 * i + 1].hashes)
            bk = _allk(n.before) if len(bw) else bw
            ak = _allk(n.after) if len(aw) else aw
            if len(bw):
                n.qa = (bk, len(bw))
                n.cont = round(float(np.isin(bw, ak).sum() / len(bw)), ROUND)
                n.tomb = n.cont < LINK_THRESHOLD
            if len(aw) and np.isin(aw, bk).sum() / len(aw) < NEW_TEXT_MAX:
                n.qb = (ak, len(aw))
            for q in (n.qa, n.qb):
                if q is not None:
                    allh.append(q[0])
        if allh:
            uh = np.unique(np.concatenate(allh))
            bp = Q.boilerplate(conn, uh)
        else:
            uh, bp = np.zeros(0, np.int64), set()
        post = _Postings(conn, uh, bp)
        # per query: block → [matched hashes (when it may link), min line, max line, count]
        per_node: list[tuple[dict, dict]] = []
        cand_blocks: set[int] = set()
        for n in nodes:
            res = []
            for q in (n.qa, n.qb):
                m = post.match(q[0], q[1]) if q is not None else {}
                cand_blocks.update(b for b, e in m.items() if e[0] is not None)
                res.append(m)
            per_node.append((res[0], res[1]))
        refs = defaultdict(list)
        for b, eid, role, line0 in Q.refs_for_blocks(conn, cand_blocks):
            if role in (S.ROLE_EDIT_AFTER, S.ROLE_EDIT_BEFORE, S.ROLE_READ):
                refs[b].append((eid, role, line0))
        erows = Q.events(conn, {eid for v in refs.values() for eid, _, _ in v})
        trows = Q.tapes(conn, {r.tape for r in erows.values()})
        tomb_rows, edge_rows = [], []
        for n in nodes:
            if n.tomb:
                blk = conn.execute("SELECT block FROM refs WHERE event=? AND role=?",
                                   (n.eid, S.ROLE_EDIT_BEFORE)).fetchone()
                br = n.b_range or [None, None]
                tomb_rows.append((n.eid, blk[0] if blk else None, n.file, n.rel, _int(br[0]),
                                  _int(br[1] if len(br) > 1 else None), n.t))
        conn.executemany("INSERT INTO tombstones(event, block, file, rel, start, end, t)"
                         " VALUES (?,?,?,?,?,?,?)", tomb_rows)
        self.stats["tombstones"] += len(tomb_rows)
        for n, (ma, mb) in zip(nodes, per_node):
            edges = self._candidates(n, ma, mb, refs, erows, trows)
            linked = {e[1] for e in edges}
            edges.extend(self._location_only(n, ma, mb, linked))
            for e in edges:
                touched_to.add(e[1])
                edge_rows.append(e + ((n.cont if e[7] == 0 else None),))
                self.stats["location_only" if e[6] else "edges"] += 1
        conn.executemany(
            "INSERT INTO edges(from_event, to_event, confidence, location_delta, cardinality,"
            " agent_link, location_only, kind, to_start, to_end, from_side, to_role, span_sim)"
            " VALUES (?,?,?,?,'1:1',0,?,?,?,?,?,?,?)",
            [(e[0], e[1], e[2], e[3], e[6], e[4], e[5][0], e[5][1], e[7], e[8], e[9])
             for e in edge_rows])

    def _candidates(self, n: _Node, ma: dict, mb: dict, refs, erows, trows) -> list[tuple]:
        """Linking edges of one edit: (from, to, conf, delta, kind, (to_start, to_end), 0)."""
        found: dict[tuple, list] = {}   # (to_event, query) → best
        for qi, (m, q) in enumerate(((ma, n.qa), (mb, n.qb))):
            if q is None:
                continue
            my_range = n.b_range if qi == 0 else n.a_range
            for b, (hs, lo, hi, cnt) in m.items():
                if hs is None:
                    continue
                sim = min(1.0, cnt / q[1])
                for eid, role, line0 in refs.get(b, ()):
                    if eid == n.eid:
                        continue
                    r = erows.get(eid)
                    if r is None:
                        continue
                    t = trows[r.tape]
                    if _order(r.t, t.tape_id, r.ofs) >= n.key:
                        continue
                    if t.session == n.session and r.ofs == n.ofs and r.t == n.t:
                        continue  # the same event in another copy of the session (live/sealed)
                    if qi == 1 and role == S.ROLE_READ:
                        continue
                    span = (line0 + lo, line0 + hi)
                    delta = location_delta(_place(n.file, n.rel), my_range,
                                           _place(r.file, r.rel), span)
                    if qi == 1:
                        if delta in ("same", "adjacent"):
                            if sim < REINSERT_THRESHOLD:
                                continue
                            kind = "reinsert"
                        else:
                            kind = "move"
                    else:
                        kind = "read" if role == S.ROLE_READ else "edit"
                    key = (eid, qi)
                    cur = found.get(key)
                    cand = [n.eid, eid, round(sim, ROUND), delta, kind, span, 0, hs, r, t, role, qi]
                    if cur is None or sim > cur[2]:
                        found[key] = cand
        # per earlier tape: the latest read, and edits that add coverage (best first)
        by_tape: dict[tuple[int, int], list] = defaultdict(list)
        for (eid, qi), c in found.items():
            by_tape[(c[9].id, qi)].append(c)
        out = []
        for (_tid, _qi), cs in sorted(by_tape.items()):
            reads = [c for c in cs if c[10] == S.ROLE_READ]
            edits = [c for c in cs if c[10] != S.ROLE_READ]
            if reads:
                reads.sort(key=lambda c: (-c[2], _neg(c[8].t), c[8].ofs))
                out.append(reads[0])
            edits.sort(key=lambda c: (-c[2], c[10], _neg(c[8].t), -c[8].ofs))
            covered: set[int] = set()
            kept = 0
            for c in edits:
                if kept >= MAX_EDIT_CANDIDATES_PER_TAPE:
                    break
                if c[7] <= covered:
                    continue
                covered |= c[7]
                out.append(c)
                kept += 1
        out.sort(key=lambda c: (c[1], c[4]))
        # one edge per (from, to): the stronger query wins
        best: dict[int, list] = {}
        for c in out:
            if c[1] not in best or c[2] > best[c[1]][2]:
                best[c[1]] = c
        return [tuple(c[:7]) + (c[11], c[10]) for c in sorted(best.values(), key=lambda c: c[1])]

    def _location_only(self, n: _Node, ma: dict, mb: dict, linked: set[int]) -> list[tuple]:
        """Earlier edits / tombstones at the same place whose text does not match."""
        conn = self.conn
        place = _place(n.file, n.rel)
        if not place:
            return []
        col = "rel" if n.rel else "file"
        out = []
        if n.before and n.b_range and n.b_range[0] is not None:
            b0, b1 = n.b_range[0], max(n.b_range[0], n.b_range[1])
            rows = list(conn.execute(
                f"SELECT e.id, e.t, e.a_start, e.a_end, t.tape_id, e.ofs FROM events e"
                f" JOIN tapes t ON t.id=e.tape WHERE e.{col}=? AND e.kind=? AND e.id<>?"
                f" AND e.a_start<=? AND max(e.a_start, e.a_end)>=? ORDER BY e.t DESC, e.id DESC",
                (place, _EDIT, n.eid, b1, b0)))
            out += self._loc_rows(n, rows, ma, n.qa, S.ROLE_EDIT_AFTER, linked, 0)
        if n.qb is not None and n.a_range and n.a_range[0] is not None:
            a0, a1 = n.a_range[0], max(n.a_range[0], n.a_range[1])
            rows = list(conn.execute(
                f"SELECT s.event, s.t, s.start, s.end, t.tape_id, e.ofs FROM tombstones s"
                f" JOIN events e ON e.id=s.event JOIN tapes t ON t.id=e.tape"
                f" WHERE s.{col}=? AND s.event<>? AND s.start<=? AND max(s.start, s.end)>=?"
                f" ORDER BY s.t DESC, s.event DESC", (place, n.eid, a1, a0)))
            out += self._loc_rows(n, rows, mb, n.qb, S.ROLE_EDIT_BEFORE, linked, 1)
        return out

    def _loc_rows(self, n, rows, m, q, role, linked, side) -> list[tuple]:
        out = []
        for eid, t, s, e, tape_id, ofs in rows:
            if eid in linked or _order(t, tape_id, ofs) >= n.key:
                continue
            sim = 0.0
            if q is not None:
                for (blk,) in self.conn.execute("SELECT block FROM refs WHERE event=? AND role=?",
                                                (eid, role)):
                    if blk in m:
                        sim = max(sim, min(1.0, m[blk][3] / q[1]))
            out.append((n.eid, eid, round(sim, ROUND), "same", "location", (s, e), 1, side, role))
            linked.add(eid)
            if len(out) >= MAX_LOCATION_CANDIDATES:
                break
        return out

    # -- agent links ---------------------------------------------------------------------------
    def _agent_link(self, tape: Q.TapeRow, ofs: int, ev: dict, touched_from: set,
                    touched_to: set) -> None:
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
            " AND e.id<>?", (from_file, from_rel, _EDIT, S.kind_code("code.read"), src[0])))
        key = _order(t, tape.tape_id, ofs)
        cands = [c for c in cands if _order(c[4], c[5], c[6]) < key and _overlap((c[2], c[3]), from_r)]
        if not cands:
            return
        cands.sort(key=lambda c: (c[1] != _EDIT, _neg(c[4]), -c[6]))
        dst = cands[0]
        sim = self._block_similarity(src[0], S.ROLE_EDIT_AFTER, dst[0])
        delta = location_delta(to_rel or to_file, to_r, from_rel or from_file, (dst[2], dst[3]))
        conn.execute("DELETE FROM edges WHERE from_event=? AND to_event=? AND agent_link=1",
                     (src[0], dst[0]))
        conn.execute(
            "INSERT INTO edges(from_event, to_event, confidence, location_delta, cardinality,"
            " agent_link, location_only, kind, to_start, to_end, from_side, to_role)"
            " VALUES (?,?,?,?,'1:1',1,0,'agent',?,?,1,?)",
            (src[0], dst[0], round(sim, ROUND), delta, dst[2], dst[3],
             S.ROLE_EDIT_AFTER if dst[1] == _EDIT else S.ROLE_READ))
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
        tape = Q.tapes(conn, [row[1]])[row[1]]
        evs = self.access.read(tape, [row[2]]) if not tape.live else [
            x for x in self.access.read(tape, range(row[2], row[2] + 1))]
        if not evs:
            return 0.0
        texts = [tx for tx, rl, _ in event_blocks(evs[0][1]) if rl == role]
        if not texts:
            return 0.0
        nq = len(np.unique(fingerprint.fingerprint(texts[0]).hashes))
        if not nq:
            return 0.0
        q = _allk(texts[0])
        blocks = {b for (b,) in conn.execute("SELECT block FROM refs WHERE event=?", (other,))}
        hit: dict[int, set] = defaultdict(set)
        for h, b, _ln in Q.postings(conn, q):
            if b in blocks:
                hit[b].add(h)
        return max((min(1.0, len(v) / nq) for v in hit.values()), default=0.0)

    # -- cardinality ---------------------------------------------------------------------------
    def _cardinality(self, touched_from: set[int], touched_to: set[int]) -> None:
        conn = self.conn
        cols = "id, from_event, to_event, confidence, to_start, to_end, location_only, kind"
        rows: dict[int, tuple] = {}
        for ids, col in ((touched_from, "from_event"), (touched_to, "to_event")):
            for ch in _chunks(sorted(ids)):
                for r in conn.execute(f"SELECT {cols} FROM edges WHERE {col} IN carray(?)",
                                      (apsw.carray(Q._i64(ch)),)):
                    rows[r[0]] = r
        froms = {r[1] for r in rows.values()}
        tos = {r[2] for r in rows.values()}
        out_e: dict[int, list] = defaultdict(list)
        in_e: dict[int, list] = defaultdict(list)
        for ids, col, dst in ((froms, "from_event", out_e), (tos, "to_event", in_e)):
            for ch in _chunks(sorted(ids)):
                for r in conn.execute(f"SELECT {cols} FROM edges WHERE {col} IN carray(?)"
                                      " AND location_only=0 AND kind IN ('edit','move','reinsert')",
                                      (apsw.carray(Q._i64(ch)),)):
                    dst[r[1] if col == "from_event" else r[2]].append(r)
        tape_of = {e.id: e.tape for e in Q.events(
            conn, {i[1] for v in in_e.values() for i in v} | {r[1] for r in rows.values()}).values()}
        updates = []
        for r in rows.values():
            card = "1:1"
            outs = out_e.get(r[1], [])
            if len(outs) > 1 and max(o[3] for o in outs) < MERGE_COVER:
                card = "N:1"
            else:
                # a split: other edits of the same session continued other lines of the same span
                ins = in_e.get(r[2], [])
                spans = {(i[4], i[5]) for i in ins
                         if i[1] != r[1] and tape_of.get(i[1]) == tape_of.get(r[1])}
                mine = (r[4], r[5])
                if any(not _overlap(s, mine) for s in spans):
                    card = "1:N"
            updates.append((card, r[0]))
        conn.executemany("UPDATE edges SET cardinality=? WHERE id=?", updates)


# ---------------------------------------------------------------------------------------------
# continuations and dispatch


def _flagged(ev: dict) -> bool:
    return bool(ev.get("boilerplate") or ev.get("meta") is True)


def _hashes(texts: list[str]) -> np.ndarray:
    if not texts:
        return np.zeros(0, np.int64)
    fps = fingerprint.fingerprint_batch(texts)
    hs = [f.hashes for f in fps if len(f.hashes)]
    return np.unique(np.concatenate(hs)) if hs else np.zeros(0, np.int64)


def _allk(text: str) -> np.ndarray:
    """Every k-gram hash of ``text`` (unique): the query side of a containment, whose
    denominator is the text's winnowed count (as ``explain`` does)."""
    k, _ = fingerprint.all_kgrams(text, fingerprint.DEFAULT_K)
    return np.unique(np.asarray(k, dtype=np.int64))


def _allk_many(texts: list[str]) -> np.ndarray:
    parts = [_allk(t) for t in texts]
    parts = [p for p in parts if len(p)]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def _texts(evs: list[tuple[int, dict]]) -> list[str]:
    return [tx for _o, ev in evs for tx, _r, _l in event_blocks(ev)]


class _TapeText:
    """What a tape was given at its start (head input, harness markers, first request), read back
    from the tape's first events and cached per run. Tails are looked up in the index instead."""

    def __init__(self, access: W.TapeAccess):
        self.access = access
        self.cache: dict[int, dict] = {}
        self.bp: dict = {}

    def get(self, t: Q.TapeRow) -> dict:
        c = self.cache.get(t.id)
        if c is not None:
            return c
        try:
            head = self.access.read(t, range(0, min(t.n_events, HEAD_EVENTS + 1)))
        except Exception:
            head = []
        markers = set()
        task = None
        for _o, ev in head:
            if ev.get("k") != "msg.in":
                continue
            text = ev.get("text") if isinstance(ev.get("text"), str) else ""
            if ev.get("compaction") or CONTINUED_TEXT in text:
                markers.add("summary")
            elif task is None and not _flagged(ev) and text.strip():
                task = text
        given = [(o, e) for o, e in head if o > 0 and not _flagged(e) and e.get("k") == "msg.in"]
        texts = _texts(given or [(o, e) for o, e in head if o > 0 and not _flagged(e)])
        c = {"head": _hashes(texts), "head_k": _allk_many(texts), "markers": markers, "task": task}
        self.cache[t.id] = c
        return c


def _head_boilerplate(conn: apsw.Connection, harness: str | None, hashes: np.ndarray,
                      cache: dict | None = None) -> set[int]:
    """Hashes of ``hashes`` found in the user/harness input (``msg.in``) at the head of ≥
    ``BOILERPLATE_TAPES`` tapes of a harness: system prompts, AGENTS.md, environment preambles.
    Code read early in many sessions is not boilerplate, only what is *given* to every session."""
    if not len(hashes):
        return set()
    if cache is not None:  # decisions are per run: hashes at the head of many tapes repeat a lot
        known = cache.setdefault(harness, {})
        todo = np.asarray([h for h in hashes.tolist() if h not in known], dtype=np.int64)
        fresh = _head_boilerplate(conn, harness, todo) if len(todo) else set()
        for h in todo.tolist():
            known[h] = h in fresh
        return {h for h in hashes.tolist() if known[h]}
    by_block: dict[int, set[int]] = defaultdict(set)
    popular = set()
    counts: dict[int, int] = defaultdict(int)
    for h, b, _ln in Q.postings(conn, hashes):
        counts[h] += 1
        by_block[b].add(h)
    popular = {h for h, c in counts.items() if c > POPULAR_POSTINGS}
    tapes_of: dict[int, set[int]] = defaultdict(set)
    refs = Q.refs_for_blocks(conn, by_block)
    ev = Q.events(conn, {r[1] for r in refs})
    trows = Q.tapes(conn, {e.tape for e in ev.values()})
    for b, eid, role, _l in refs:
        e = ev.get(eid)
        if (e is None or role != S.ROLE_MSG_IN or e.ofs > HEAD_EVENTS
                or trows[e.tape].harness != harness):
            continue
        for h in by_block[b]:
            tapes_of[h].add(e.tape)
    return popular | {h for h, ts in tapes_of.items() if len(ts) >= BOILERPLATE_TAPES}


def _continuations(conn: apsw.Connection, new_tapes: list[Q.TapeRow], access: W.TapeAccess,
                   stats: dict) -> None:
    text = _TapeText(access)
    todo: dict[int, Q.TapeRow] = {t.id: t for t in new_tapes}
    # a new tape may be the predecessor of tapes that started after it
    for t in new_tapes:
        for r in conn.execute(f"SELECT {Q.TAPE_COLS} FROM tapes WHERE harness IS ? AND first_t > ?"
                              " AND id<>? AND (cwd IS ? OR ? IS NULL) ORDER BY first_t, tape_id"
                              " LIMIT ?", (t.harness, t.first_t or "", t.id, t.cwd, t.cwd,
                                           MAX_SUCCESSORS)):
            todo.setdefault(r[0], Q.TapeRow(*r))
    for b in sorted(todo.values(), key=lambda t: (t.first_t or "", t.tape_id)):
        _continuation_of(conn, b, text, stats)
    # dispatch: orchestrator tapes holding an agent tape's first request
    orch_new = [t for t in new_tapes if t.tier == "orchestrator"]
    agents: dict[int, Q.TapeRow] = {t.id: t for t in new_tapes if t.tier != "orchestrator"}
    for o in orch_new:
        for r in conn.execute(f"SELECT {Q.TAPE_COLS} FROM tapes WHERE tier IS NOT 'orchestrator'"
                              " AND first_t >= ? ORDER BY first_t, tape_id LIMIT 200",
                              (o.first_t or "",)):
            agents.setdefault(r[0], Q.TapeRow(*r))
    for a in sorted(agents.values(), key=lambda t: (t.first_t or "", t.tape_id)):
        _dispatch_of(conn, a, text, stats)


def _continuation_of(conn: apsw.Connection, b: Q.TapeRow, text: _TapeText, stats: dict) -> None:
    conn.execute("DELETE FROM continuations WHERE to_tape=? AND coalesce(markers,'') NOT LIKE"
                 " '%dispatch%'", (b.id,))
    preds: dict[int, Q.TapeRow] = {}
    for r in conn.execute(f"SELECT {Q.TAPE_COLS} FROM tapes WHERE harness IS ? AND id<>?"
                          " AND first_t < ? AND (cwd IS ? OR ? IS NULL)"
                          " ORDER BY last_t DESC, tape_id LIMIT ?",
                          (b.harness, b.id, b.first_t or "", b.cwd, b.cwd, MAX_PREDECESSORS)):
        preds[r[0]] = Q.TapeRow(*r)
    if b.session:
        for r in conn.execute(f"SELECT {Q.TAPE_COLS} FROM tapes WHERE session=? AND id<>?"
                              " AND first_t <= ?", (b.session, b.id, b.first_t or "")):
            preds.setdefault(r[0], Q.TapeRow(*r))
    if b.continues:
        r = Q.tape_by_id(conn, b.continues)
        if r is not None and r.id != b.id:
            preds.setdefault(r.id, r)
    preds = {k: v for k, v in preds.items()
             if not (v.first_t and b.first_t and v.first_t > b.first_t)}
    if not preds:
        return
    hb = text.get(b)
    head, head_k = hb["head"], hb["head_k"]
    bp = _head_boilerplate(conn, b.harness, head_k, text.bp) | Q.boilerplate(conn, head_k)
    if bp:
        bpa = np.fromiter(bp, np.int64, len(bp))
        head, head_k = head[~np.isin(head, bpa)], head_k[~np.isin(head_k, bpa)]
    found = _tail_hits(conn, preds, head_k) if len(head) else {}
    best = None
    for a in preds.values():
        hits = found.get(a.id, {})
        matched = set().union(*hits.values()) if hits else set()
        base = min(1.0, len(matched) / len(head)) if len(head) else 0.0
        if len(matched) < CONT_MIN_MATCH:
            base = 0.0
        markers = sorted(hb["markers"])
        if b.session and a.session == b.session:
            markers.append("resumed")
        explicit = b.continues == a.tape_id
        if explicit:
            markers.append("continues")
        score = 1.0 if explicit else min(1.0, base + sum(MARKER_BOOST.get(m, 0) for m in markers))
        if not explicit and "resumed" not in markers and base < CONT_MIN_BASE:
            continue
        if score < CONT_THRESHOLD:
            continue
        cand = (round(score, ROUND), round(base, ROUND), a.last_t or "", a.tape_id, a, markers, hits)
        if best is None or cand[:4] > best[:4]:
            best = cand
    if best is None:
        return
    score, _base, _, _, a, markers, hits = best
    if hits:
        anchor = max(hits, key=lambda e: (len(hits[e]), e))
    else:
        r = conn.execute("SELECT id FROM events WHERE tape=? ORDER BY ofs DESC LIMIT 1",
                         (a.id,)).fetchone()
        anchor = r[0] if r else None
    conn.execute("INSERT OR REPLACE INTO continuations(from_tape, to_tape, score, markers, anchor)"
                 " VALUES (?,?,?,?,?)", (a.id, b.id, score, json.dumps(markers), anchor))
    stats["continuations"] += 1


def _tail_hits(conn: apsw.Connection, preds: dict[int, Q.TapeRow],
               hashes: np.ndarray) -> dict[int, dict[int, set[int]]]:
    """{tape: {event: head hashes found}} over the tails of ``preds`` (the last ``TAIL_EVENTS``
    events), leaving out each tape's preamble (the input before it first acted)."""
    by_block: dict[int, set[int]] = defaultdict(set)
    counts: dict[int, int] = defaultdict(int)
    rows = Q.postings(conn, hashes)
    for h, _b, _ln in rows:
        counts[h] += 1
    for h, blk, _ln in rows:
        if counts[h] <= POPULAR_POSTINGS:
            by_block[blk].add(h)
    if not by_block:
        return {}
    refs = Q.refs_for_blocks(conn, by_block)
    ev = Q.events(conn, {r[1] for r in refs})
    acted: dict[int, int] = {}
    out: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for blk, eid, role, _l in refs:
        e = ev.get(eid)
        if e is None or e.tape not in preds:
            continue
        a = preds[e.tape]
        if e.ofs < a.n_events - TAIL_EVENTS:
            continue
        if role == S.ROLE_MSG_IN:
            if e.tape not in acted:
                r = conn.execute("SELECT min(ofs) FROM events WHERE tape=? AND kind IN (?,?)",
                                 (e.tape, S.kind_code("msg.out"), S.kind_code("tool.call"))).fetchone()
                acted[e.tape] = r[0] if r and r[0] is not None else 1 << 30
            if e.ofs < acted[e.tape]:
                continue
        out[e.tape][eid] |= by_block[blk]
    return out


def _dispatch_of(conn: apsw.Connection, a: Q.TapeRow, text: _TapeText, stats: dict) -> None:
    conn.execute("DELETE FROM continuations WHERE to_tape=? AND markers LIKE '%dispatch%'", (a.id,))
    task = text.get(a)["task"]
    if not task:
        return
    win = np.unique(fingerprint.fingerprint(task).hashes)
    q = _allk(task)
    bp = Q.boilerplate(conn, q)
    if bp:
        bpa = np.fromiter(bp, np.int64, len(bp))
        q, win = q[~np.isin(q, bpa)], win[~np.isin(win, bpa)]
    nq = len(win)
    if nq < 2:
        return
    by_block: dict[int, set] = defaultdict(set)
    for h, b, _ln in Q.postings(conn, q):
        by_block[b].add(h)
    blocks = [b for b, hs in by_block.items() if len(hs) / nq >= DISPATCH_THRESHOLD]
    if not blocks:
        return
    refs = Q.refs_for_blocks(conn, blocks)
    ev = Q.events(conn, {r[1] for r in refs})
    trows = Q.tapes(conn, {e.tape for e in ev.values()})
    best = None
    for b, eid, role, _l in refs:
        e = ev.get(eid)
        if e is None or e.tape == a.id:
            continue
        o = trows[e.tape]
        if o.tier != "orchestrator" or role not in (S.ROLE_MSG_OUT, S.ROLE_TOOL_CALL, S.ROLE_MSG_IN):
            continue
        if a.first_t and e.t and (e.t > a.first_t or _hours(e.t, a.first_t) > DISPATCH_MAX_HOURS):
            continue
        sim = round(min(1.0, len(by_block[b]) / nq), ROUND)
        cand = (sim, e.t or "", -eid, o, eid)
        if best is None or cand[:3] > best[:3]:
            best = cand
    if best is None:
        return
    sim, _, _, o, eid = best
    conn.execute("INSERT OR REPLACE INTO continuations(from_tape, to_tape, score, markers, anchor)"
                 " VALUES (?,?,?,?,?)", (o.id, a.id, sim, json.dumps(["dispatch"]), eid))
    stats["dispatch"] += 1


# ---------------------------------------------------------------------------------------------
# query side


def continuation_neighbours(conn: apsw.Connection, tape_rowid: int) -> tuple[str | None, str | None]:
    """(tape id this tape continues, tape id that continues this one) — best scored, not dispatch."""
    prev = conn.execute(
        "SELECT t.tape_id FROM continuations c JOIN tapes t ON t.id=c.from_tape WHERE c.to_tape=?"
        " AND coalesce(c.markers,'') NOT LIKE '%dispatch%' ORDER BY c.score DESC, t.tape_id LIMIT 1",
        (tape_rowid,)).fetchone()
    nxt = conn.execute(
        "SELECT t.tape_id FROM continuations c JOIN tapes t ON t.id=c.to_tape WHERE c.from_tape=?"
        " AND coalesce(c.markers,'') NOT LIKE '%dispatch%' ORDER BY c.score DESC, t.tape_id LIMIT 1",
        (tape_rowid,)).fetchone()
    return (prev[0] if prev else None, nxt[0] if nxt else None)


def walk(conn: apsw.Connection, seeds: dict[int, float], *, min_confidence: float = 0.5,
         all: bool = False, max_depth: int = MAX_DEPTH, max_fanout: int = MAX_FANOUT,
         max_edges: int = MAX_EDGES) -> dict:
    """BFS backwards from ``seeds`` ({event id: confidence}) through lineage edges, then across
    continuation and dispatch rows of every tape reached. See the module docstring."""
    truncated = {"fanout": False, "edges": False}
    lineage: list[dict] = []
    reached: dict[int, dict] = {}
    if not seeds:
        return {"lineage": [], "tombstones": [], "truncated": truncated, "reached": {}}
    ev_cache: dict[int, Q.EventRow] = {}
    tape_cache: dict[int, Q.TapeRow] = {}

    def ref(eid: int) -> dict:
        r = ev_cache[eid]
        return {"tape_id": tape_cache[r.tape].tape_id, "offset": r.ofs}

    def load(ids):
        missing = [i for i in ids if i not in ev_cache]
        if missing:
            ev_cache.update(Q.events(conn, missing))
            tids = {ev_cache[i].tape for i in missing if i in ev_cache}
            tape_cache.update(Q.tapes(conn, [t for t in tids if t not in tape_cache]))

    state: dict[int, tuple[float, list, bool]] = {e: (c, [], False) for e, c in seeds.items()}
    load(seeds)
    tomb = _tomb_events(conn, seeds)
    # which text of a seed edit matched: its after-text, unless it deleted outright (empty after)
    frontier = sorted(((e, _AFTER if not (e in tomb and _empty_after(ev_cache.get(e))) else _BEFORE)
                       for e in seeds), key=lambda n: (-seeds[n[0]], n[0]))
    visited = set(frontier)
    depth = 0
    budget_hit = False
    while frontier and depth < max_depth and not budget_hit:
        depth += 1
        out: dict[int, list] = defaultdict(list)
        for ch in _chunks(sorted({n[0] for n in frontier})):
            for r in conn.execute(
                    "SELECT from_event, to_event, confidence, location_delta, cardinality, agent_link,"
                    " location_only, kind, coalesce(from_side, 0), to_role, span_sim FROM edges"
                    " WHERE from_event IN carray(?)", (apsw.carray(Q._i64(ch)),)):
                out[r[0]].append(r)
        tomb |= _tomb_events(conn, [n[0] for n in frontier if n[0] not in tomb])
        nxt = []
        for node, side in frontier:
            edges = [_effective(e, side) for e in out.get(node, []) if _follows(e, side, node in tomb)]
            ok = [e for e in edges if all or e[5] or (not e[6] and e[2] >= min_confidence)]
            ok.sort(key=lambda e: (-e[5], -e[2], e[1]))
            if len(ok) > max_fanout:
                truncated["fanout"] = True
                ok = ok[:max_fanout]
            load([e[1] for e in ok])
            conf, path, agent = state[node]
            for e in ok:
                if len(lineage) >= max_edges:
                    truncated["edges"] = True
                    budget_hit = True
                    break
                if e[1] not in ev_cache:
                    continue
                d = {"from": ref(e[0]), "to": ref(e[1]), "confidence": round(e[2], ROUND),
                     "location_delta": e[3], "cardinality": e[4], "agent_link": bool(e[5]),
                     "kind": e[7]}
                if e[6]:
                    d["location_only"] = True
                lineage.append(d)
                land = (e[1], _BEFORE if e[9] == S.ROLE_EDIT_BEFORE else _AFTER)
                if land in visited:
                    continue
                visited.add(land)
                nxt.append(land)
                if e[1] in state:
                    continue
                c = min(conf, e[2])
                state[e[1]] = (c, path + [d], agent or bool(e[5]))
                reached[e[1]] = {"via": "lineage", "confidence": round(c, ROUND), "path": path + [d]}
            if budget_hit:
                break
        frontier = nxt
    if frontier and depth >= max_depth:
        truncated["depth"] = True
    _cross_tapes(conn, state, reached, lineage, truncated, min_confidence, all, load, ev_cache,
                 tape_cache, max_edges)
    tombs = _tombstones(conn, set(state), ev_cache, tape_cache, load)
    return {"lineage": lineage, "tombstones": tombs, "truncated": truncated, "reached": reached}


_AFTER, _BEFORE = 1, 0


def _follows(e, side: int, is_tomb: bool) -> bool:
    """Does edge ``e`` explain the ``side`` of its edit? The before-text's edges explain the
    before-text; they explain the after-text too unless the edit replaced its text by unrelated
    text (a tombstone), whose after-text is explained only by its own (move/re-insertion) edges."""
    if e[5]:
        return side == _AFTER
    if side == _BEFORE:
        return e[8] == 0
    return e[8] == 1 or not is_tomb


def _effective(e, side: int):
    """Crossing an edit from its after-text to its before-text's history costs its own
    before→after similarity: the edge's confidence is the lower of the two."""
    if side == _AFTER and e[8] == 0 and e[10] is not None and not e[5]:
        return e[:2] + (min(e[2], e[10]),) + e[3:]
    return e


def _empty_after(r: Q.EventRow | None) -> bool:
    return r is not None and r.a_start is not None and r.a_end is not None and r.a_end < r.a_start


def _tomb_events(conn: apsw.Connection, ids) -> set[int]:
    out: set[int] = set()
    for ch in _chunks(sorted(set(ids))):
        out.update(r[0] for r in conn.execute("SELECT event FROM tombstones WHERE event IN carray(?)",
                                              (apsw.carray(Q._i64(ch)),)))
    return out


def _cross_tapes(conn, state, reached, lineage, truncated, min_confidence, all, load, ev_cache,
                 tape_cache, max_edges) -> None:
    """Cross continuation / dispatch rows from every tape reached (repeatedly: chains)."""
    best_in_tape: dict[int, tuple[float, int]] = {}
    for eid, (c, _p, _a) in state.items():
        r = ev_cache.get(eid)
        if r is None:
            continue
        cur = best_in_tape.get(r.tape)
        if cur is None or c > cur[0]:
            best_in_tape[r.tape] = (c, eid)
    todo = sorted(best_in_tape, key=lambda t: (-best_in_tape[t][0], t))
    seen = set(todo)
    steps = 0
    while todo and steps < MAX_DEPTH * 8:
        steps += 1
        tid = todo.pop(0)
        conf, eid = best_in_tape[tid]
        rows = list(conn.execute(
            "SELECT from_tape, score, markers, anchor FROM continuations WHERE to_tape=?"
            " ORDER BY score DESC, from_tape", (tid,)))
        for from_tape, score, markers, anchor in rows:
            if anchor is None or (score < min_confidence and not all):
                continue
            if len(lineage) >= max_edges:
                truncated["edges"] = True
                return
            load([anchor])
            if anchor not in ev_cache:
                continue
            ms = json.loads(markers) if markers else []
            kind = "dispatch" if "dispatch" in ms else "continuation"
            first = conn.execute("SELECT id FROM events WHERE tape=? ORDER BY ofs LIMIT 1",
                                 (tid,)).fetchone()
            start = first[0] if first else eid
            load([start])
            d = {"from": {"tape_id": tape_cache[tid].tape_id, "offset": ev_cache[start].ofs},
                 "to": {"tape_id": tape_cache[from_tape].tape_id, "offset": ev_cache[anchor].ofs},
                 "confidence": round(score, ROUND), "location_delta": "absent",
                 "cardinality": "1:1", "agent_link": False, "kind": kind, "markers": ms}
            lineage.append(d)
            if anchor in state or from_tape in seen:
                continue
            c = min(conf, score)
            path = state[eid][1] + [d]
            state[anchor] = (c, path, state[eid][2])
            reached[anchor] = {"via": "lineage" if kind == "dispatch" else "continuation",
                               "confidence": round(c, ROUND), "path": path}
            best_in_tape[from_tape] = (c, anchor)
            seen.add(from_tape)
            todo.append(from_tape)


def _tombstones(conn, events: set[int], ev_cache, tape_cache, load) -> list[dict]:
    out = []
    ids = sorted(events)
    for ch in _chunks(ids):
        for eid, file, rel, s, e, t in conn.execute(
                "SELECT event, file, rel, start, end, t FROM tombstones WHERE event IN carray(?)",
                (apsw.carray(Q._i64(ch)),)):
            load([eid])
            r = ev_cache[eid]
            out.append({"tape_id": tape_cache[r.tape].tape_id, "offset": r.ofs, "file": file,
                        "rel": rel, "range": [s, e], "t": t})
    out.sort(key=lambda d: (d["t"] or "", d["tape_id"], d["offset"]))
    return out


# ---------------------------------------------------------------------------------------------


def _chunks(values, n: int = 20000):
    values = list(values)
    for i in range(0, len(values), n):
        yield values[i:i + n]


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _rng(v):
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return (v[0], v[1])
    return None


def _overlap(a, b) -> bool:
    if not a or not b or a[0] is None or b[0] is None:
        return True
    a1 = a[1] if a[1] is not None else a[0]
    b1 = b[1] if b[1] is not None else b[0]
    return a[0] <= max(b1, b[0]) and b[0] <= max(a1, a[0])


def _hours(t0: str, t1: str) -> float:
    from datetime import datetime

    try:
        a = datetime.fromisoformat(t0.replace("Z", "+00:00"))
        b = datetime.fromisoformat(t1.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return abs((b - a).total_seconds()) / 3600


def _neg(t: str | None) -> str:
    if not t:
        return "~"
    return "".join(chr(0x10FFFF - ord(c)) for c in t)
