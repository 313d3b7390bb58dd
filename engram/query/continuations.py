"""Continuation and dispatch rows between tapes (``engram/query/lineage.py`` explains the
rules): a tape's head input (read back from the tape) against the tails of earlier tapes of the
same harness and directory (looked up in the index), boilerplate excluded, harness markers added;
and an agent tape's first request against orchestrator-tier text.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict

import apsw
import numpy as np

from engram import fingerprint
from engram.errors import CorruptTape
from engram.index import queries as Q
from engram.index import schema as S
from engram.query import window as W
from engram.query.lineage import (
    BOILERPLATE_SHARE,
    BOILERPLATE_TAPES,
    CONT_MIN_BASE,
    CONT_MIN_BASE_SUMMARY,
    CONT_MIN_MATCH,
    CONT_THRESHOLD,
    CONTINUED_TEXT,
    DISPATCH_MAX_HOURS,
    DISPATCH_THRESHOLD,
    HEAD_EVENTS,
    IMMEDIATE_MINUTES,
    MARKER_BOOST,
    MAX_PREDECESSORS,
    MAX_SUCCESSORS,
    POPULAR_POSTINGS,
    ROUND,
    SOON_MINUTES,
    TAIL_EVENTS,
    _allk,
    _allk_many,
    _flagged,
    _hashes,
    _hours,
    _texts,
)

log = logging.getLogger(__name__)


class TapeText:
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
            head = self.access.read(t, range(min(t.n_events, HEAD_EVENTS + 1)))
        except (CorruptTape, OSError):
            log.warning("lineage: cannot read tape %s", t.tape_id)
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
    ``BOILERPLATE_TAPES`` tapes of a harness (or ``BOILERPLATE_SHARE`` of them, when more): system
    prompts, AGENTS.md, environment preambles — not code that a few summaries quote.
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
    n = conn.execute("SELECT count(*) FROM tapes WHERE harness IS ?", (harness,)).fetchone()[0]
    need = max(BOILERPLATE_TAPES, int(BOILERPLATE_SHARE * n))
    return popular | {h for h, ts in tapes_of.items() if len(ts) >= need}


def compute(conn: apsw.Connection, new_tapes: list[Q.TapeRow], access: W.TapeAccess,
                   stats: dict) -> None:
    text = TapeText(access)
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


def _sidechains(conn: apsw.Connection, tape_rows: set[int]) -> set[int]:
    """The tapes among ``tape_rows`` whose meta marks a subagent transcript (sidechain)."""
    out = set()
    for tid, meta in conn.execute("SELECT id, meta_json FROM tapes WHERE id IN carray(?)",
                                  (apsw.carray(Q._i64(sorted(tape_rows))),)):
        if meta and '"sidechain":true' in meta.replace(" ", ""):
            out.add(tid)
    return out


def _continuation_of(conn: apsw.Connection, b: Q.TapeRow, text: TapeText, stats: dict) -> None:
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
    # a subagent transcript (sidechain) shares its parent's session id but never continues it,
    # nor does the parent continue it
    side = _sidechains(conn, set(preds) | {b.id})
    preds = {k: v for k, v in preds.items() if (k in side) == (b.id in side)}
    if not preds:
        return
    hb = text.get(b)
    head, head_k = hb["head"], hb["head_k"]
    bp = _head_boilerplate(conn, b.harness, head_k, text.bp) | Q.boilerplate(conn, head_k)
    if bp:
        bpa = np.fromiter(bp, np.int64, len(bp))
        head, head_k = head[~np.isin(head, bpa)], head_k[~np.isin(head_k, bpa)]
    # a compaction summary restates the earlier session's request: with that marker the earlier
    # tape's preamble counts too; without it, the preamble (often shared scaffolding) does not
    found = _tail_hits(conn, preds, head_k, "summary" in hb["markers"]) if len(head) else {}
    best = None
    for a in preds.values():
        hits = found.get(a.id, {})
        matched = set().union(*hits.values()) if hits else set()
        base = min(1.0, len(matched) / len(head)) if len(head) else 0.0
        if len(matched) < CONT_MIN_MATCH:
            base = 0.0
        markers = sorted(hb["markers"])
        if b.session and a.session == b.session and (a.last_t or "") <= (b.first_t or "~"):
            markers.append("resumed")  # same session, picked up after the earlier part ended
        explicit = b.continues == a.tape_id
        if explicit:
            markers.append("continues")
        floor = CONT_MIN_BASE_SUMMARY if "summary" in markers else CONT_MIN_BASE
        if not explicit and "resumed" not in markers and base < floor:
            continue
        gap = _hours(a.last_t, b.first_t) * 60 if a.last_t and b.first_t else None
        if gap is not None and gap <= IMMEDIATE_MINUTES:
            markers.append("immediate")   # a continued session starts as the earlier one ends
        elif gap is not None and gap <= SOON_MINUTES:
            markers.append("soon")
        # ranked on the uncapped sum (two candidates at 1.0 still differ), stored capped
        score = 2.0 if explicit else base + sum(MARKER_BOOST.get(m, 0) for m in markers)
        if score < CONT_THRESHOLD:
            continue
        cand = (round(score, ROUND), round(base, ROUND), a.last_t or "", a.tape_id, a, markers, hits)
        if best is None or cand[:4] > best[:4]:
            best = cand
    if best is None:
        return
    score, _base, _, _, a, markers, hits = best
    score = min(1.0, score)
    if hits:
        anchor = max(hits, key=lambda e: (len(hits[e]), e))
    else:
        r = conn.execute("SELECT id FROM events WHERE tape=? ORDER BY ofs DESC LIMIT 1",
                         (a.id,)).fetchone()
        anchor = r[0] if r else None
    conn.execute("INSERT OR REPLACE INTO continuations(from_tape, to_tape, score, markers, anchor)"
                 " VALUES (?,?,?,?,?)", (a.id, b.id, score, json.dumps(markers), anchor))
    stats["continuations"] += 1


def _tail_hits(conn: apsw.Connection, preds: dict[int, Q.TapeRow], hashes: np.ndarray,
               with_preamble: bool = False) -> dict[int, dict[int, set[int]]]:
    """{tape: {event: head hashes found}} over the tails of ``preds`` (the last ``TAIL_EVENTS``
    events), leaving out each tape's preamble (the input before it first acted) unless
    ``with_preamble``."""
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
        if role == S.ROLE_MSG_IN and not with_preamble:
            if e.tape not in acted:
                r = conn.execute("SELECT min(ofs) FROM events WHERE tape=? AND kind IN (?,?)",
                                 (e.tape, S.kind_code("msg.out"), S.kind_code("tool.call"))).fetchone()
                acted[e.tape] = r[0] if r and r[0] is not None else 1 << 30
            if e.ofs < acted[e.tape]:
                continue
        out[e.tape][eid] |= by_block[blk]
    return out


def _dispatch_of(conn: apsw.Connection, a: Q.TapeRow, text: TapeText, stats: dict) -> None:
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
