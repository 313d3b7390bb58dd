"""Hybrid retrieval: semantic hits for ``engram search`` and ``via: "semantic"`` sessions for explain.

Both entry points check the cheap things first (config, ``available()``, a vector cache with rows:
file stats and one SQLite read) and never load the model when there is nothing to score; the model
is loaded once per process (``run.get_embedder``) on the first query that needs it.

Hybrid explain (``semantic_sessions``), after the fingerprint/lineage pass:

1. a query from the span — the names it defines, its docstrings and comments (``span_query``) —
   and, separately, from the reasoning of the sessions already found (the ``msg.in``/``msg.out``
   text and requests of their windows, ``context_query``); the two unit vectors are mixed
   ``span + CONTEXT_WEIGHT * context`` and normalised (the calibrated weight is 0: span only);
2. the ``POOL`` nearest chunks, minus chunks shared by more than ``BOILERPLATE_TAPES`` tapes
   (template sentences such as "Done, the tests pass" say nothing about this span), grouped per
   tape (best chunk score, its event offset). A keyword signal can be added: ``KEYWORD_WEIGHT ×
   keyword``, ``keyword`` being the FTS5 bm25 of the span's docstring/comment words (OR-ed, stop
   words dropped, the name left out) against the events whose chunks the model matched, relative
   to the pool's best (0..1). It ships at weight 0 (not computed): calibrated on half of the
   held-out prose it failed the other half (see ``KEYWORD_WEIGHT``);
3. the whole pool — sessions the fingerprints found included — goes through the no-spread rule
   (all scores equal → nothing added), then ``select`` keeps tapes not found otherwise with
   ``score >= THRESHOLD`` that stand out from the other candidates (``MARGIN`` above the
   ``REF_RANK``-th best), at most ``MAX_ADDITIONS``, best first, ties by tape id;
4. each addition becomes a session dict of the explain shape with ``via: "semantic"``,
   ``signals: {"fingerprint": None, "semantic": score, "cosine": cosine}`` (and ``keyword`` when
   its weight is not 0), ``confidence`` = the semantic score and one
   window around the best-matching event. ``explain_text`` appends them after every fingerprint
   session, so semantic evidence never displaces hard evidence.

``THRESHOLD``, ``MARGIN``, ``REF_RANK`` and ``CONTEXT_WEIGHT`` are calibrated by
``bench/accuracy.py --embed`` on a calibration half of the benchmark's scenario-(e) spans; the
other half is reported (``docs/benchmarks.md``, "Semantic recall (scenario e)").
``bench/bench_prose.py`` replays the same rule, ``KEYWORD_WEIGHT`` included, on hand-written
held-out discussions ("Semantic matching on held-out prose").
"""

from __future__ import annotations

import logging
import re

import numpy as np

from engram.embed import run
from engram.embed.chunk import chunk_text
from engram.embed.search import NO_SPREAD_EPS, calibrated_additions, query_vector

log = logging.getLogger(__name__)

# Calibrated on the benchmark's calibration half (bench/accuracy.py --embed; docs/benchmarks.md,
# "Semantic recall (scenario e)"), for all-MiniLM-L6-v2:
#: absolute floor for a semantic addition's score.
THRESHOLD = 0.58
#: ... and it must stand out from the crowd: score - (score of the REF_RANK-th best candidate not
#: found otherwise) >= MARGIN. Pools smaller than REF_RANK are judged by THRESHOLD alone.
MARGIN = 0.06
REF_RANK = 3
#: weight of the keyword signal (FTS5 bm25 of the span's docstring words against the matched
#: events, relative to the pool's best, 0..1) added to the cosine. 0: not computed, the score is
#: the cosine. On the held-out prose (bench/bench_prose.py) the calibration half chose 0.6 (found
#: 0.85-0.90 with <= 0.06 wrong there) and the report half then fell to 0.40 found with 0.53
#: wrong (docs/benchmarks.md, "Semantic matching on held-out prose"): bm25 of paraphrases is
#: noise that 20 spans could fit, so it stays off.
KEYWORD_WEIGHT = 0.0
#: at most this many distinct words in the keyword query.
KEYWORD_WORDS = 40
_STOP = frozenset(
    "the a an of to in is are be for and or if it its on by with as at from that this which when "
    "not no only all any each into than then so such can will would should may their there these "
    "those you your we our was were has have had do does done return returns yield yields true "
    "false none".split())
#: weight of the found sessions' reasoning in the query vector (span query has weight 1); the
#: calibration preferred 0 over 0.3 (that reasoning is mostly about *other* code in the same
#: request), so the context query is built but off by default.
CONTEXT_WEIGHT = 0.0
#: nearest chunks scored per explain.
POOL = 200
#: a chunk referenced by more tapes than this is boilerplate (templates, greetings): ignored.
BOILERPLATE_TAPES = 5
MAX_ADDITIONS = 5
#: context query: at most this many texts, each cut to this many characters.
CONTEXT_TEXTS = 8
CONTEXT_CHARS = 400
#: span query length cap (characters; about one model window).
SPAN_CHARS = 1200
#: model-window chunks embedded per query (bounds the cost of an explain: ~3 forward passes).
SPAN_CHUNKS = 2
CONTEXT_CHUNKS = 1
ROUND = 4

_DEF = re.compile(r"\b(?:def|class|function|func|fn|interface|struct|type|module|trait|impl)\s+"
                  r"([A-Za-z_$][\w$]*)")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?(?:const|let|var)?\s*([A-Za-z_$][\w$]*)\s*[:=]", re.MULTILINE)
_DOC = re.compile(r'("""|\'\'\')(.*?)(?:\1|$)', re.DOTALL)
_BLOCK_COMMENT = re.compile(r"/\*+(.*?)\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"(?:^|\s)(?:#|//|--)\s?(.*)$", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]+")


# ------------------------------------------------------------------------------- state checks

def state(engine) -> str:
    """``"on (<model_id>, <device>)"`` / ``"off: <reason>"`` / ``"no vectors yet: run engram
    embed"``. Cheap: no torch import, no model load."""
    return run.state(engine)["state"]


def active(engine) -> bool:
    """Embedding enabled, available, and vectors stored for the configured model (cheap)."""
    on, _ = run.wanted(engine.config)
    if not on:
        return False
    return run.vector_count(engine.index_path.parent, run.model_id_for(run._setting(engine.config, "model"))) > 0


def preload(engine):
    """Load the model in a daemon thread when semantic scoring is active (a server calls this at
    start so the first explain/search does not pay the ~1-2 s load); returns the thread or None."""
    import threading

    if not active(engine):
        return None

    def load():
        try:
            run.get_embedder(engine.config, threads=run.QUERY_THREADS)
        except Exception as e:  # noqa: BLE001 - reported when a query needs the scorer
            log.warning("embedding model not loaded: %s", e)

    th = threading.Thread(target=load, name="engram-embed-preload", daemon=True)
    _preloads[_model_key(engine)] = th
    th.start()
    return th


_preloads: dict[str, object] = {}  # model setting -> its preload thread (this process)


def _model_key(engine) -> str:
    return str(run._setting(engine.config, "model"))


def warming(engine) -> bool:
    """True while ``preload`` is still loading the model in the background (a server's first
    seconds): explain then answers without semantic sessions and says so, instead of waiting."""
    th = _preloads.get(_model_key(engine))
    return th is not None and th.is_alive() and run.loaded_embedder(engine.config) is None


def _scorer(engine):
    """``(embedder, store, state)`` or ``(None, None, state)`` when semantic scoring cannot run."""
    st = run.state(engine)
    if not st["active"]:
        return None, None, st["state"]
    try:
        emb = run.get_embedder(engine.config, threads=run.QUERY_THREADS)
    except Exception as e:  # noqa: BLE001 - a broken model turns the signal off, never the query
        log.warning("semantic scoring off: %s", e)
        return None, None, f"off: {e}"
    store = run.get_store(engine.index_path.parent, emb.model_id)
    return emb, store, f"on ({emb.model_id}, {emb.device})"


# ------------------------------------------------------------------------------- search

def semantic_event_hits(engine, text: str, k: int) -> tuple[list[tuple[int, float]], str]:
    """``([(event_id, score), ...], state)`` for ``engram search``: the events of the ``k`` nearest
    chunks (an event scores its best chunk), best first, ties by event id. Events of tapes no longer
    in the index are dropped. Never raises: a failure turns the signal off (said in ``state``)."""
    emb, store, st = _scorer(engine)
    if emb is None or not text or not text.strip():
        return [], st
    try:
        q = query_vector(emb, text)
        if q is None:
            return [], st
        hits = store.search(q, top_k=k)
    except Exception as e:  # noqa: BLE001
        log.warning("semantic search failed: %s", e)
        return [], f"off: {e}"
    refs = [(tape, ofs, round(score, 6)) for score, _h, rs in hits for tape, ofs in rs]
    ids = _event_ids(engine.conn(), {(t, o) for t, o, _ in refs})
    best: dict[int, float] = {}
    for tape, ofs, score in refs:
        eid = ids.get((tape, ofs))
        if eid is not None and score > best.get(eid, -2.0):
            best[eid] = score
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0])), st


def _event_ids(conn, refs: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """``(tape_id, offset) → events.id`` for the refs that are indexed."""
    out: dict[tuple[str, int], int] = {}
    by_tape: dict[str, list[int]] = {}
    for t, o in refs:
        by_tape.setdefault(t, []).append(o)
    for tape_id, offs in sorted(by_tape.items()):
        row = conn.execute("SELECT id FROM tapes WHERE tape_id=?", (tape_id,)).fetchone()
        if row is None:
            continue
        for o in sorted(set(offs)):
            e = conn.execute("SELECT id FROM events WHERE tape=? AND ofs=?", (row[0], o)).fetchone()
            if e is not None:
                out[(tape_id, o)] = e[0]
    return out


# ------------------------------------------------------------------------------- explain

def span_query(text: str) -> str:
    """The span as prose: the name it defines first (also split into words), the summary of its
    docstrings (doctest examples dropped) and its comments; falls back to its distinct words
    when it has none of those."""
    names = list(dict.fromkeys(_DEF.findall(text)))
    if not names:
        names = list(dict.fromkeys(_ASSIGN.findall(text)))
    docs = [_doc_summary(m.group(2)) for m in _DOC.finditer(text)]
    docs += [_doc_summary(m.group(1).replace("*", " ")) for m in _BLOCK_COMMENT.finditer(text)]
    comments = [m.group(1).strip() for m in _LINE_COMMENT.finditer(_strip_strings(text))]
    head = ""
    if names:
        n = names[0]
        words = " ".join(w for w in re.split(r"_+|(?<=[a-z0-9])(?=[A-Z])", n) if w)
        head = n if words == n else f"{n} ({words})"
    prose = " ".join(p for p in docs[:2] + comments[:8] if p)
    if not prose and not head:
        prose = " ".join(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    return (f"{head}: {prose}" if head and prose else head or prose)[:SPAN_CHARS]


def _doc_summary(doc: str) -> str:
    """A docstring's prose: its first two paragraphs without doctest (``>>>``) lines and their
    output, whitespace collapsed."""
    paras, cur, in_doctest = [], [], False
    for line in doc.strip().split("\n"):
        s = line.strip()
        if s.startswith((">>>", "...")):
            in_doctest = True
            continue
        if not s:
            in_doctest = False
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        if not in_doctest:
            cur.append(s)
    if cur:
        paras.append(" ".join(cur))
    return " ".join(paras[:2])


def _strip_strings(text: str) -> str:
    return _DOC.sub(" ", text)


def context_query(sessions: list[dict]) -> str:
    """Reasoning text of the sessions already found: their windows' requests and messages."""
    texts: list[str] = []
    for s in sessions:
        for w in s.get("windows", ()):
            req = (w.get("request") or {}).get("text")
            cands = [req] + [e.get("text") for e in w.get("events", ())
                             if e.get("k") in ("msg.in", "msg.out")]
            for t in cands:
                if isinstance(t, str) and t.strip():
                    t = " ".join(t.split())[:CONTEXT_CHARS]
                    if t not in texts:
                        texts.append(t)
                if len(texts) >= CONTEXT_TEXTS:
                    return "\n".join(texts)
    return "\n".join(texts)


def query_for(emb, text: str, sessions: list[dict], context_weight: float | None = None):
    """The hybrid-explain query vector (unit), or None when the span has no usable text. The span
    query and the context query are embedded in one batch (one forward pass on CPU)."""
    if context_weight is None:
        context_weight = CONTEXT_WEIGHT
    window = min(int(emb.max_tokens), 256)
    sq = span_query(text)
    ctx = context_query(sessions) if context_weight > 0 else ""
    ps = chunk_text(sq, window=window, min_words=1)[:SPAN_CHUNKS] if sq else []
    pc = chunk_text(ctx, window=window, min_words=1)[:CONTEXT_CHUNKS] if ctx else []
    if not ps and not pc:
        return None
    vecs = emb.embed(ps + pc)
    v = np.zeros(vecs.shape[1], np.float32)
    if ps:
        v += _unit(vecs[:len(ps)].mean(axis=0))
    if pc:
        v += float(context_weight) * _unit(vecs[len(ps):].mean(axis=0))
    n = float(np.linalg.norm(v))
    return (v / n).astype(np.float32) if n > 0 else None


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def keyword_query(text: str) -> str | None:
    """The FTS5 query of a span's keyword signal: the distinct words (3+ letters, stop words
    dropped) of its docstring summary and comments, OR-ed; None when it has none. The defined
    name is left out (its parts, "split", "index", match everything)."""
    sq = span_query(text)
    head, sep, prose = sq.partition(": ")
    if not sep:
        prose = sq if not _DEF.search(text) else ""
    words = [w for w in dict.fromkeys(x.lower() for x in re.findall(r"[A-Za-z]{3,}", prose))
             if w not in _STOP][:KEYWORD_WORDS]
    return " OR ".join(f'"{w}"' for w in words) if words else None


def keyword_scores(conn, text: str, events: dict[tuple[str, int], int]) -> dict[tuple[str, int], float]:
    """``(tape_id, offset) → bm25`` (positive, higher is better) of the given events
    (``events``: ``(tape_id, offset) → events.id``, the events whose chunks the model matched)
    against ``keyword_query(text)``; events without a hit are absent."""
    q = keyword_query(text)
    if q is None or not events:
        return {}
    by_id = {eid: key for key, eid in events.items()}
    ids = sorted(by_id)
    out: dict[tuple[str, int], float] = {}
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        marks = ",".join("?" * len(part))
        for rowid, bm in conn.execute(f"SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? AND rowid IN"
                                      f" ({marks})", (q, *part)):
            out[by_id[rowid]] = -float(bm)
    return out


def candidates(engine, conn, text: str, sessions: list[dict], *,
               context_weight: float | None = None, pool: int = POOL,
               keyword_weight: float | None = None, keywords: bool | None = None) -> list[dict]:
    """The scored pool: ``[{"tape_id", "score", "cosine", "keyword", "offset", "offsets"}]`` best
    first (ties by tape id), one per indexed tape among the ``pool`` nearest non-boilerplate
    chunks; ``score = cosine + keyword_weight × keyword`` (``rescore`` recomputes it for another
    weight; ``keywords``: compute the keyword signal even at weight 0, as the calibration does;
    otherwise ``keyword`` is 0 and no FTS query runs). Empty when semantic scoring is off or has
    no vectors."""
    emb, store, _st = _scorer(engine)
    if emb is None:
        return []
    q = query_for(emb, text, sessions, context_weight)
    if q is None:
        return []
    best: dict[str, tuple[float, int]] = {}
    offs: dict[str, list[int]] = {}
    for score, _h, refs in store.search(q, top_k=pool):
        if len({t for t, _o in refs}) > BOILERPLATE_TAPES:
            continue
        score = round(score, 6)
        for tape, ofs in refs:
            cur = best.get(tape)
            if cur is None or (score, -ofs) > (cur[0], -cur[1]):
                best[tape] = (score, ofs)
            offs.setdefault(tape, []).append(ofs)
    indexed = _indexed(conn, best.keys())
    weight = KEYWORD_WEIGHT if keyword_weight is None else keyword_weight
    kw = (keyword_scores(conn, text, _event_ids(conn, {(t, o) for t in indexed for o in offs[t]}))
          if (weight > 0 if keywords is None else keywords) else {})
    top = max(kw.values(), default=0.0)
    out = []
    for t, (s, o) in best.items():
        if t not in indexed:
            continue
        k = max(kw.get((t, x), 0.0) for x in offs[t])
        out.append({"tape_id": t, "cosine": s, "keyword": round(k / top, 6) if top > 0 else 0.0,
                    "offset": o, "offsets": sorted(set(offs[t]))})
    return rescore(out, weight)


def rescore(pool: list[dict], keyword_weight: float) -> list[dict]:
    """``pool`` (``candidates()``) with ``score = cosine + keyword_weight × keyword``, best first,
    ties by tape id (a new list; the entries are copies)."""
    out = [{**c, "score": round(c["cosine"] + keyword_weight * c["keyword"], 6)} for c in pool]
    out.sort(key=lambda d: (-d["score"], d["tape_id"]))
    return out


def _indexed(conn, tape_ids) -> set[str]:
    out = set()
    for t in sorted(tape_ids):
        if conn.execute("SELECT 1 FROM tapes WHERE tape_id=?", (t,)).fetchone():
            out.add(t)
    return out


def semantic_sessions(engine, conn, text: str, sessions: list[dict], before: int, after: int,
                      brief: bool, *, threshold: float | None = None,
                      context_weight: float | None = None) -> list[dict]:
    """The ``semantic`` callable of ``engram.query.explain.explain_text`` (bind ``engine`` with
    ``functools.partial``): sessions whose reasoning is close to the span and which the
    fingerprint pass missed, as explain session dicts with ``via: "semantic"``. [] when the signal
    is off, has no vectors, no spread, or nothing clears the threshold."""
    try:
        pool = candidates(engine, conn, text, sessions, context_weight=context_weight)
    except Exception as e:  # noqa: BLE001 - the semantic signal never breaks explain
        log.warning("semantic explain failed: %s", e)
        return []
    known = {s.get("tape_id") for s in sessions}
    picked = select(pool, known, THRESHOLD if threshold is None else threshold)
    if not picked:
        return []
    by_id = {c["tape_id"]: c for c in pool}
    return [_session(conn, by_id[t], score, before, after, brief) for t, score in picked]


def select(pool: list[dict], known: set, threshold: float | None = None,
           margin: float | None = None, ref_rank: int | None = None,
           max_additions: int | None = None) -> list[tuple[str, float]]:
    """The additions among a scored ``pool`` (``candidates()``): ``[(tape_id, score)]`` best
    first. Empty when the whole pool has no spread; else tapes not in ``known`` with
    ``score >= threshold`` and ``score - ref >= margin``, ``ref`` being the score of the
    ``ref_rank``-th best tape not in ``known`` (0 when there are fewer). Pure and deterministic."""
    threshold = THRESHOLD if threshold is None else threshold
    margin = MARGIN if margin is None else margin
    ref_rank = REF_RANK if ref_rank is None else ref_rank
    cap = MAX_ADDITIONS if max_additions is None else max_additions
    above = calibrated_additions([(c["tape_id"], c["score"]) for c in pool], threshold,
                                 exclude=known, eps=NO_SPREAD_EPS)
    if not above:
        return []
    new = sorted((c["score"] for c in pool if c["tape_id"] not in known), reverse=True)
    ref = new[ref_rank - 1] if ref_rank >= 1 and len(new) >= ref_rank else 0.0
    return [(t, s) for t, s in above if s - ref >= margin - 1e-9][:cap]


def sidecar_anchor(conn, tape, event_id: int) -> dict:
    """Window fields for a sidecar note (negative offset), as explain renders them: anchored at
    the note's ``at`` (else event 1), ``kind: "sidecar"``, ``source: "enrichment"``, the note."""
    from engram.index import sidecar

    body = sidecar.body(conn, event_id)
    at = body.get("at") if isinstance(body.get("at"), int) else 1
    at = max(1, min(at, max(tape.n_events - 1, 1)))
    return {"anchor": at, "kind": "sidecar", "source": "enrichment", "enrichment": body}


def _session(conn, cand: dict, score: float, before: int, after: int, brief: bool) -> dict:
    from engram.index import queries, schema
    from engram.index.access import TapeAccess
    from engram.query import window
    t = queries.tape_by_id(conn, cand["tape_id"])
    ofs = cand["offset"]
    ev = conn.execute("SELECT id, kind FROM events WHERE tape=? AND ofs=?", (t.id, ofs)).fetchone()
    w = {"anchor": ofs, "kind": schema.kind_name(ev[1]) if ev else "other",
         "confidence": round(score, ROUND), "file": None}
    if ofs < 0 and ev is not None:  # a sidecar note: shown with the tape window around its ``at``
        w.update(sidecar_anchor(conn, t, ev[0]))
        ofs = w["anchor"]
    w.update(window.window(TapeAccess(conn), t, ofs, before, after, None, brief))
    return {"tape_id": t.tape_id, "harness": t.harness, "session": t.session,
            "tier": t.tier or "agent", "label": t.label, "model": t.model, "cwd": t.cwd,
            "first_t": t.first_t, "last_t": t.last_t, "confidence": round(score, ROUND),
            "touches": len(cand["offsets"]), "via": "semantic",
            "signals": {"fingerprint": None, "semantic": round(score, ROUND),
                        "cosine": round(cand["cosine"], ROUND),
                        **({"keyword": round(cand["keyword"], ROUND)} if KEYWORD_WEIGHT > 0 else {})},
            "live": bool(t.live), "windows": [w]}
