"""``engram search``: full-text (SQLite FTS5) over reasoning text, merged with semantic neighbours
when the embedding scorer is enabled and has vectors, ranked by named signals
(``engram.retrieval.signals``: similarity × salience^w × authority × confidence × type × intent +
keyword boost, with adaptive dampening). One result per session (tape): its best-scoring event.
Each result carries ``score`` and ``signals`` (raw and effective value of each signal, plus the
``keyword`` and ``semantic`` similarities it came from); a result whose tape cannot be read carries
``unreadable`` (its window has no events).

Filters (applied to candidates before scoring, so dampening sees only what can be returned):
``agent`` (harness name, or a substring of the model), ``since`` (the session's last activity on
or after this ISO date/time), ``file`` (the event's file, or a file the session edited or read,
ends with it), ``kind`` (the matched event's role: edit, read, request, reply, tool, note; or
``message`` for request and reply), ``min_confidence`` (feedback confidence).
"""

from __future__ import annotations

import re
import time

from engram.index import queries, schema
from engram.index.access import TapeAccess
from engram.query import window
from engram.retrieval import feedback, signals
from engram.retrieval import log as rlog

#: candidate events gathered per requested result (before grouping by session).
POOL_PER_RESULT = 5
KINDS = signals.ROLES + ("message",)
_EDIT = schema.KIND_CODE["code.edit"]
_READ = schema.KIND_CODE["code.read"]
_MSG_IN = schema.KIND_CODE["msg.in"]
_MSG_OUT = schema.KIND_CODE["msg.out"]
_TOOL = {schema.KIND_CODE["tool.call"], schema.KIND_CODE["tool.result"]}


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


def event_roles(conn, erows: dict, trows: dict) -> dict[int, str]:
    """Each candidate event's role (``signals.ROLES``): edits, reads and tool traffic by kind; a
    message by its turn (from one ``msg.in`` to the next): ``edit`` when the turn edited code,
    ``read`` when it only read code, else ``request``/``reply``; sidecar notes and tapes of
    harness ``engram`` (notes) are ``note``."""
    out: dict[int, str] = {}
    turns: dict[int, list[tuple[int, int]]] = {}
    for eid, r in erows.items():
        t = trows.get(r.tape)
        if r.ofs < 0 or (t is not None and t.harness == "engram"):
            out[eid] = "note"
        elif r.kind == _EDIT:
            out[eid] = "edit"
        elif r.kind == _READ:
            out[eid] = "read"
        elif r.kind in _TOOL:
            out[eid] = "tool"
        elif r.kind in (_MSG_IN, _MSG_OUT):
            if r.tape not in turns:
                turns[r.tape] = list(conn.execute(
                    "SELECT ofs, kind FROM events WHERE tape=? AND kind IN (?, ?, ?) ORDER BY ofs",
                    (r.tape, _MSG_IN, _EDIT, _READ)))
            out[eid] = _turn_role(turns[r.tape], r.ofs, r.kind)
        else:
            out[eid] = "reply"
    return out


def _turn_role(rows: list[tuple[int, int]], ofs: int, kind: int) -> str:
    start = max((o for o, k in rows if k == _MSG_IN and o <= ofs), default=-1)
    end = min((o for o, k in rows if k == _MSG_IN and o > start), default=1 << 62)
    kinds = {k for o, k in rows if start <= o < end}
    if _EDIT in kinds:
        return "edit"
    if _READ in kinds:
        return "read"
    return "request" if kind == _MSG_IN else "reply"


def _session_files(conn, tape: int) -> list[str]:
    return [r[0] for r in conn.execute("SELECT DISTINCT file FROM events WHERE tape=? AND file IS"
                                       " NOT NULL", (tape,))]


def _passes(conn, t, r, role: str, conf: float, f: dict) -> bool:
    agent = f.get("agent")
    if agent and not (t.harness == agent or (t.model and agent.lower() in t.model.lower())):
        return False
    since = f.get("since")
    if since and (t.last_t or "") < since:
        return False
    kind = f.get("kind")
    if kind and not (role == kind or (kind == "message" and role in ("request", "reply"))):
        return False
    mc = f.get("min_confidence")
    if mc is not None and conf < mc - 1e-9:
        return False
    file = f.get("file")
    if file:
        files = [r.file] if r.file else []
        files += _session_files(conn, t.id)
        if not any(x == file or x.endswith("/" + file.lstrip("./")) for x in files if x):
            return False
    return True


def _index_now(conn, uses: dict[str, list[str]]) -> str | None:
    """The index's own clock: its newest event or use (never the wall clock)."""
    row = conn.execute("SELECT max(last_t) FROM tapes").fetchone()
    times = [row[0]] if row and row[0] else []
    times += [max(v) for v in uses.values() if v]
    return max(times) if times else None


def candidates(engine, text: str, pool: int) -> tuple[dict[int, dict], str]:
    """``({event id: {"keyword": s | None, "semantic": s | None}}, semantic state)``."""
    conn = engine.conn()
    kw = keyword_hits(conn, text, pool)
    from engram.embed import hybrid

    sem, semantic_state = hybrid.semantic_event_hits(engine, text, pool * POOL_PER_RESULT)
    if sem and signals.normalised_entropy([s for _e, s in sem]) == 0 and len(sem) > 1:
        sem = []  # no spread: the semantic signal counts for nothing
    scores: dict[int, dict] = {}
    for eid, s in kw:
        scores.setdefault(eid, {"keyword": None, "semantic": None})["keyword"] = s
    for eid, s in sem:
        scores.setdefault(eid, {"keyword": None, "semantic": None})["semantic"] = s
    return scores, semantic_state


def rank(engine, text: str, *, limit: int = 20, intent: str | None = None,
         filters: dict | None = None, raw: bool = False) -> dict:
    """The ranking without windows: ``{"ranked": [(tape row, candidate)], "scores", "erows",
    "roles", "semantic", "candidates"}``, best first (``raw``: by similarity alone, the baseline
    the benchmark compares with). Ties break by tape id: the order is total."""
    conn = engine.conn()
    filters = {k: v for k, v in (filters or {}).items() if v is not None}
    scores, semantic_state = candidates(engine, text, limit * (4 if filters else 1))
    erows = queries.events(conn, scores.keys())
    trows = queries.tapes(conn, {r.tape for r in erows.values()})
    roles = event_roles(conn, erows, trows)
    fb = feedback.load(conn)
    uses = rlog.uses(engine.index_path)
    now = _index_now(conn, uses)
    auth_on = bool(getattr(engine.config, "retrieval", {}).get("authority", False))
    cands = []
    for eid in sorted(scores):
        r = erows.get(eid)
        if r is None or r.tape not in trows:
            continue
        t = trows[r.tape]
        st = fb.get(t.session or "") or fb.get(t.tape_id)
        conf = st.confidence if st else feedback.START
        if filters and not _passes(conn, t, r, roles[eid], conf, filters):
            continue
        sig = scores[eid]
        sim = max(v for v in (sig["keyword"], sig["semantic"]) if v is not None)
        cands.append({"eid": eid, "similarity": sim, "keyword": sig["keyword"] is not None,
                      "salience": signals.salience(t.last_t, uses.get(t.session or "", []), now),
                      "authority": signals.authority(t.tier, auth_on), "confidence": conf,
                      "type_intent": signals.type_intent(roles[eid], intent), "fb": st})
    kept = signals.score(cands, intent)
    rank_of = (lambda c: c["similarity"]) if raw else (lambda c: c["score"])
    per_tape: dict[int, dict] = {}
    for c in kept:
        tape = erows[c["eid"]].tape
        cur = per_tape.get(tape)
        if cur is None or (rank_of(c), -c["eid"]) > (rank_of(cur), -cur["eid"]):
            per_tape[tape] = c
    ranked = sorted(per_tape.items(), key=lambda kv: (-rank_of(kv[1]), trows[kv[0]].tape_id))[:limit]
    return {"ranked": [(trows[tid], c) for tid, c in ranked], "scores": scores, "erows": erows,
            "roles": roles, "semantic": semantic_state, "candidates": len(kept)}


def search(engine, text: str, *, limit: int = 20, before: int = 2, after: int = 2,
           intent: str | None = None, agent: str | None = None, since: str | None = None,
           file: str | None = None, kind: str | None = None,
           min_confidence: float | None = None, raw: bool = False) -> dict:
    """Search: one result per session, ranked by ``score`` (``rank``), each with a transcript
    window around its best event."""
    t0 = time.perf_counter()
    conn = engine.conn()
    filters = {"agent": agent, "since": since, "file": file, "kind": kind,
               "min_confidence": min_confidence}
    r = rank(engine, text, limit=limit, intent=intent, filters=filters, raw=raw)
    scores = r["scores"]
    ranked = merge_notes(engine, r["ranked"], r["semantic"])
    access = TapeAccess(conn)
    results = []
    for t, c in ranked:
        res = _result(conn, access, t, r["erows"][c["eid"]], c, scores[c["eid"]], r["roles"],
                      before, after)
        if c.get("merged"):
            res["merged"] = c["merged"]
            res["confidence"] = c["confidence"]
        results.append(res)
    return {"query": text, "intent": intent or "general", "results": results,
            "semantic": r["semantic"],
            "filters": {k: v for k, v in filters.items() if v is not None},
            "stats": {"keyword_hits": sum(1 for s in scores.values() if s["keyword"] is not None),
                      "semantic_hits": sum(1 for s in scores.values() if s["semantic"] is not None),
                      "candidates": r["candidates"],
                      "elapsed_ms": round((time.perf_counter() - t0) * 1000, 2)}}


#: two notes of one category whose texts' embeddings are at least this similar are one lore item
NOTE_MERGE_COSINE = 0.92
NOTE_MERGE_BONUS = 0.10


def _note_of(conn, tape_id: int) -> tuple[str, str] | None:
    row = conn.execute("SELECT json_extract(meta_json, '$.note.kind'), json_extract(meta_json,"
                       " '$.note.text') FROM tapes WHERE id=? AND harness='engram'", (tape_id,)).fetchone()
    return (row[0], row[1]) if row and row[0] and isinstance(row[1], str) else None


def merge_notes(engine, ranked: list, semantic_state: str) -> list:
    """Lore: notes of the same category (kind) whose texts embed ≥ ``NOTE_MERGE_COSINE`` alike
    are recalled as one: the better-ranked note stays, with the other's session and tape under
    ``merged`` (both sources kept) and its confidence raised by ``NOTE_MERGE_BONUS`` (capped at
    1); the other leaves the list. Only when semantic scoring is on (the model is loaded for the
    query anyway); otherwise the list is returned as it is."""
    if not semantic_state.startswith("on") or len(ranked) < 2:
        return ranked
    conn = engine.conn()
    notes = [(i, _note_of(conn, t.id)) for i, (t, _c) in enumerate(ranked)]
    notes = [(i, n) for i, n in notes if n is not None]
    if len(notes) < 2:
        return ranked
    from engram.embed import run

    try:
        emb = run.get_embedder(engine.config, threads=run.QUERY_THREADS)
        vecs = emb.embed([n[1] for _i, n in notes])
    except Exception:  # noqa: BLE001 - the optional signal never breaks search
        return ranked
    gone: set[int] = set()
    for a in range(len(notes)):
        ia, (kind_a, _ta) = notes[a]
        if ia in gone:
            continue
        for b in range(a + 1, len(notes)):
            ib, (kind_b, _tb) = notes[b]
            if ib in gone or kind_a != kind_b:
                continue
            if float(vecs[a] @ vecs[b]) >= NOTE_MERGE_COSINE:
                keep, other = ranked[ia], ranked[ib]
                keep[1].setdefault("merged", []).append(
                    {"session": other[0].session, "tape_id": other[0].tape_id})
                keep[1]["confidence"] = round(min(1.0, keep[1]["confidence"] + NOTE_MERGE_BONUS),
                                              signals.ROUND)
                gone.add(ib)
    return [x for i, x in enumerate(ranked) if i not in gone]


def _result(conn, access, t, r, c: dict, sig: dict, roles, before: int, after: int) -> dict:
    w = {"anchor": r.ofs, "kind": schema.kind_name(r.kind), "role": roles[c["eid"]]}
    if r.ofs < 0:  # a sidecar note (engram/index/sidecar.py): the window around its ``at``
        from engram.embed.hybrid import sidecar_anchor

        w.update(sidecar_anchor(conn, t, c["eid"]))
    w.update(window.window(access, t, w["anchor"], before, after))
    out = {"tape_id": t.tape_id, "harness": t.harness, "session": t.session,
           "tier": t.tier or "agent", "label": t.label, "model": t.model,
           "first_t": t.first_t, "last_t": t.last_t, "score": c["score"],
           "confidence": round(c["confidence"], signals.ROUND),
           "validations": c["fb"].validations if c["fb"] else 0,
           "signals": {"keyword": sig["keyword"], "semantic": sig["semantic"], **c["signals"]},
           "windows": [w]}
    return window.lift_unreadable(out)  # a tape that cannot be read: marked
