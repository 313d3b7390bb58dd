"""Explain: span text → the sessions that produced it, with the reasoning around each anchor.

Steps (``shared/DESIGN.md`` "Explain"): fingerprint the span → look every k-gram hash up (minus
boilerplate) → group matches by block and event → confidence per event = the share of the span's
fingerprints found in that event's text (containment) → lineage/continuation walk (when the
lineage module is present) → rank → windows read back from tapes.

Ranking puts the session whose edit *produced* the span first: sessions are ordered by the
containment of the span in their edit-after texts ("produced"), then by overall confidence
(reads and quotes), then most recent first, then tape id — a total, deterministic order.
"""

from __future__ import annotations

import time
from collections import defaultdict

import apsw
import numpy as np

from engram import fingerprint
from engram.index import queries as Q
from engram.index import schema as S
from engram.query import window as W

DIRECT_FLOOR = 0.25       # direct evidence below this is noise unless --all
PRODUCED_FLOOR = 0.10     # edit-after containment below this does not count as producing
MAX_WINDOWS = 3
ROUND = 4


def span_fingerprints(text: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(query hashes = all k-grams, their lines (0-based), number of winnowed fingerprints)."""
    allk, lines = fingerprint.all_kgrams(text, fingerprint.DEFAULT_K)
    win = fingerprint.fingerprint(text)
    return np.asarray(allk, dtype=np.int64), np.asarray(lines), int(len(np.unique(win.hashes)))


class Evidence:
    """Per-event evidence: best confidence per role, and the file lines matched."""

    __slots__ = ("event", "produced", "quoted", "lines", "roles")

    def __init__(self, event: int):
        self.event = event
        self.produced = 0.0
        self.quoted = 0.0
        self.lines: list[int] = []
        self.roles: set[int] = set()

    @property
    def confidence(self) -> float:
        return max(self.produced, self.quoted)


def direct_evidence(conn: apsw.Connection, text: str) -> tuple[dict[int, Evidence], dict]:
    qh, _qlines, n_win = span_fingerprints(text)
    stats = {"fingerprints": n_win, "matched": 0}
    if len(qh) == 0 or n_win == 0:
        return {}, stats
    uq = np.unique(qh)
    bp = Q.boilerplate(conn, uq)
    if bp:
        uq = uq[~np.isin(uq, np.fromiter(bp, dtype=np.int64, count=len(bp)))]
        # boilerplate fingerprints are removed from the denominator too
        win = fingerprint.fingerprint(text)
        wh = np.unique(win.hashes)
        n_win = int(len(wh) - np.isin(wh, np.fromiter(bp, dtype=np.int64, count=len(bp))).sum())
        stats["boilerplate"] = len(bp)
    if n_win <= 0 or len(uq) == 0:
        return {}, stats
    rows = Q.postings(conn, uq)
    by_block: dict[int, set[int]] = defaultdict(set)
    block_lines: dict[int, list[int]] = defaultdict(list)
    matched_any: set[int] = set()
    for h, b, ln in rows:
        by_block[b].add(h)
        block_lines[b].append(ln)
        matched_any.add(h)
    stats["matched"] = min(len(matched_any), n_win)
    ev: dict[int, Evidence] = {}
    for b, eid, role, line0 in Q.refs_for_blocks(conn, by_block.keys()):
        conf = min(1.0, len(by_block[b]) / n_win)
        e = ev.get(eid)
        if e is None:
            e = ev[eid] = Evidence(eid)
        e.roles.add(role)
        if role == S.ROLE_EDIT_AFTER:
            e.produced = max(e.produced, conf)
            ls = block_lines[b]
            e.lines = [line0 + min(ls), line0 + max(ls)]
        else:
            e.quoted = max(e.quoted, conf)
            if not e.lines and role in (S.ROLE_READ, S.ROLE_EDIT_BEFORE):
                ls = block_lines[b]
                e.lines = [line0 + min(ls), line0 + max(ls)]
    return ev, stats


def explain_text(conn: apsw.Connection, text: str, *, span: dict, before: int = 3, after: int = 3,
                 min_confidence: float = 0.5, all: bool = False, expand_until: int | None = None,
                 brief: bool = False, max_sessions: int | None = None,
                 semantic=None) -> dict:
    """The explain result object of ``shared/DESIGN.md``.

    ``semantic``: a callable ``(conn, text, sessions, before, after, brief) -> list[dict]`` that
    returns extra ``via: "semantic"`` sessions (appended after all fingerprint evidence), or None.
    """
    t0 = time.perf_counter()
    evidence, stats = direct_evidence(conn, text)
    floor = 0.0 if all else DIRECT_FLOOR
    evidence = {k: v for k, v in evidence.items() if v.confidence > floor or (all and v.confidence > 0)}
    erows = Q.events(conn, evidence.keys())
    lineage_part: list[dict] = []
    tombstones: list[dict] = []
    truncated = {"fanout": False, "edges": False}
    via: dict[int, str] = {}
    extra_conf: dict[int, float] = {}
    paths_by_event: dict[int, list[dict]] = {}
    try:
        from engram.query import lineage
    except ImportError:
        lineage = None
    if lineage is not None and hasattr(lineage, "walk"):
        walk = lineage.walk(conn, {eid: e.confidence for eid, e in evidence.items()},
                            min_confidence=min_confidence, all=all)
        lineage_part = walk.get("lineage", [])
        tombstones = walk.get("tombstones", [])
        truncated = walk.get("truncated", truncated)
        for eid, info in walk.get("reached", {}).items():
            if eid in evidence:
                continue
            via[eid] = info["via"]
            extra_conf[eid] = info["confidence"]
            paths_by_event[eid] = info.get("path", [])
        erows.update(Q.events(conn, [e for e in via if e not in erows]))
    trows = Q.tapes(conn, {r.tape for r in erows.values()})

    # group per tape (a session, or one sealed part of one)
    per_tape: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for eid, e in evidence.items():
        r = erows.get(eid)
        if r is not None:
            per_tape[r.tape].append((eid, e.produced, e.confidence))
    lineage_tapes: dict[int, list[int]] = defaultdict(list)
    for eid in via:
        r = erows.get(eid)
        if r is not None and r.tape not in per_tape:
            lineage_tapes[r.tape].append(eid)

    sessions = []
    for tid, items in per_tape.items():
        produced = max(p for _, p, _ in items)
        conf = max(c for _, _, c in items)
        sessions.append((tid, "direct", produced if produced >= PRODUCED_FLOOR else 0.0, conf, items))
    for tid, eids in lineage_tapes.items():
        conf = max(extra_conf[e] for e in eids)
        if conf < min_confidence and not all and not any(
                any(p.get("agent_link") for p in paths_by_event.get(e, [])) for e in eids):
            continue
        items = [(e, 0.0, extra_conf[e]) for e in eids]
        sessions.append((tid, via[eids[0]], 0.0, conf, items))

    def key(s):
        tid, v, produced, conf, _ = s
        t = trows[tid]
        return (0 if v == "direct" else 1, -round(produced, 2), -round(conf, 2),
                _neg_time(t.last_t), t.tape_id)

    sessions.sort(key=key)
    if max_sessions is not None:
        sessions = sessions[:max_sessions]
    access = W.TapeAccess(conn)
    out_sessions = []
    for tid, v, produced, conf, items in sessions:
        t = trows[tid]
        items = sorted(items, key=lambda it: (-round(it[1], 4), _kind_rank(erows[it[0]].kind),
                                              -round(it[2], 4), erows[it[0]].ofs))
        windows = []
        best = max(c for _e, _p, c in items)
        covered: list[tuple[int, int]] = []
        for eid, p, c in items:
            if len(windows) >= MAX_WINDOWS:
                break
            r = erows[eid]
            if c < best * 0.5 and windows:
                continue
            if any(lo <= r.ofs <= hi for lo, hi in covered):
                continue  # already visible in an earlier window
            covered.append((r.ofs - before, r.ofs + after))
            w = {"anchor": r.ofs, "kind": S.kind_name(r.kind), "confidence": round(c, ROUND),
                 "file": r.file}
            ev = evidence.get(eid)
            if ev is not None and ev.lines:
                w["lines"] = ev.lines
            if ev is not None and ev.produced >= PRODUCED_FLOOR:
                w["produced"] = round(ev.produced, ROUND)
            w.update(W.window(access, t, r.ofs, before, after, expand_until, brief))
            windows.append(w)
        entry = {
            "tape_id": t.tape_id, "harness": t.harness, "session": t.session,
            "tier": t.tier or "agent", "label": t.label, "model": t.model, "cwd": t.cwd,
            "first_t": t.first_t, "last_t": t.last_t, "confidence": round(conf, ROUND),
            "touches": len(items), "via": v,
            "signals": {"fingerprint": round(conf, ROUND), "semantic": None},
            "live": bool(t.live),
            "windows": windows,
        }
        if v != "direct":
            entry["lineage"] = paths_by_event.get(items[0][0], [])
        out_sessions.append(entry)
    if semantic is not None:
        known = {s["tape_id"] for s in out_sessions}
        extra = [s for s in semantic(conn, text, out_sessions, before, after, brief)
                 if s["tape_id"] not in known]
        out_sessions.extend(extra)
        stats["semantic_added"] = len(extra)
    stats["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    return {"span": span, "sessions": out_sessions, "lineage": lineage_part,
            "tombstones": tombstones, "truncated": truncated, "stats": stats}


_KIND_RANK = {S.KIND_CODE["code.edit"]: 0, S.KIND_CODE["code.read"]: 1, S.KIND_CODE["msg.out"]: 2,
              S.KIND_CODE["msg.in"]: 3, S.KIND_CODE["tool.call"]: 4, S.KIND_CODE["tool.result"]: 5}


def _kind_rank(kind: int) -> int:
    """Anchors people want to see first: the edit, then a read, then words, then tool traffic."""
    return _KIND_RANK.get(kind, 6)


def _neg_time(t: str | None) -> str:
    """Sort key that puts later ISO times first (string-inverted)."""
    if not t:
        return "~"
    return "".join(chr(0x10FFFF - ord(c)) if c.isprintable() else c for c in t)
