"""``engram search``: full-text (SQLite FTS5) over reasoning text, merged with semantic neighbours
when the embedding scorer is enabled and has vectors. Each result carries per-signal scores; a
result whose tape cannot be read carries ``unreadable`` (its window has no events)."""

from __future__ import annotations

import re
import time

from engram.index import queries, schema
from engram.index.access import TapeAccess
from engram.query import window


def fts_query(text: str) -> str | None:
    """User text → a safe FTS5 query: every word quoted, implicitly AND-ed."""
    words = re.findall(r"\w+", text, flags=re.UNICODE)
    if not words:
        return None
    return " ".join('"' + w.replace('"', '""') + '"' for w in words[:32])


def keyword_hits(conn, text: str, limit: int) -> list[tuple[int, float]]:
    """``(event_id, score)`` best first; score in (0, 1], higher is better."""
    q = fts_query(text)
    if q is None:
        return []
    rows = list(conn.execute("SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts),"
                             " rowid LIMIT ?", (q, limit * 5)))
    if not rows and len(q.split()) > 1:  # fall back to OR when no event has every word
        rows = list(conn.execute("SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY"
                                 " bm25(fts), rowid LIMIT ?", (" OR ".join(q.split()), limit * 5)))
    if not rows:
        return []
    best = min(r[1] for r in rows)  # bm25 is negative; more negative is better
    return [(eid, round(s / best, 4) if best else 1.0) for eid, s in rows]


def search(engine, text: str, *, limit: int = 20, before: int = 2, after: int = 2) -> dict:
    """Hybrid search: one result per session (its best event), each with per-signal scores.

    Without semantic hits (scorer off, no vectors, or a semantic pool with no spread) results are
    ranked by keyword score alone and ``score`` is that score. With them, keyword and semantic
    event rankings are fused by Reciprocal Rank Fusion (``engram.embed.search.merge_signals``) and
    ``score`` is the fused score. Ties break by event id, then tape id: the order is total."""
    t0 = time.perf_counter()
    conn = engine.conn()
    kw = keyword_hits(conn, text, limit)
    from engram.embed import hybrid

    sem, semantic_state = hybrid.semantic_event_hits(engine, text, limit * 5)
    fused: dict[int, float] | None = None
    if sem:
        from engram.embed.search import merge_signals

        merged = merge_signals(kw, sem)
        if any(m["signals"]["semantic"] is not None for m in merged):
            fused = {m["key"]: m["score"] for m in merged}
        else:  # no spread: the semantic signal counts for nothing
            sem = []
    scores: dict[int, dict] = {}
    for eid, s in kw:
        scores.setdefault(eid, {"keyword": None, "semantic": None})["keyword"] = s
    for eid, s in sem:
        scores.setdefault(eid, {"keyword": None, "semantic": None})["semantic"] = s
    erows = queries.events(conn, scores.keys())
    trows = queries.tapes(conn, {r.tape for r in erows.values()})
    # one result per session (tape): its best event
    per_tape: dict[int, tuple[float, int]] = {}
    for eid, sig in scores.items():
        r = erows.get(eid)
        if r is None:
            continue
        combined = fused[eid] if fused is not None else max(sig["keyword"] or 0.0,
                                                             sig["semantic"] or 0.0)
        cur = per_tape.get(r.tape)
        if cur is None or (combined, -eid) > (cur[0], -cur[1]):
            per_tape[r.tape] = (combined, eid)
    ranked = sorted(per_tape.items(), key=lambda kv: (-kv[1][0], trows[kv[0]].tape_id))[:limit]
    access = TapeAccess(conn)
    results = []
    for tid, (score, eid) in ranked:
        t, r = trows[tid], erows[eid]
        w = {"anchor": r.ofs, "kind": schema.kind_name(r.kind)}
        if r.ofs < 0:  # a sidecar note (engram/index/sidecar.py): the window around its ``at``
            from engram.embed.hybrid import sidecar_anchor

            w.update(sidecar_anchor(conn, t, eid))
        w.update(window.window(access, t, w["anchor"], before, after))
        results.append(window.lift_unreadable({
            "tape_id": t.tape_id, "harness": t.harness, "session": t.session,
            "tier": t.tier or "agent", "label": t.label, "model": t.model,
            "first_t": t.first_t, "last_t": t.last_t,
            "score": round(score, 6 if fused is not None else 4),
            "signals": scores[eid], "windows": [w]}))  # a tape that cannot be read: marked
    return {"query": text, "results": results, "semantic": semantic_state,
            "stats": {"keyword_hits": len(kw), "semantic_hits": len(sem),
                      "elapsed_ms": round((time.perf_counter() - t0) * 1000, 2)}}
