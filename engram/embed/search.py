"""Semantic neighbours, hybrid merging, and the no-spread rule.

Semantic evidence is an additive, labelled signal (DESIGN invariant 7). Two rules keep it honest:

* **No spread → no influence.** When every candidate of a pool has (nearly) the same semantic score
  (``max - min < eps``), the signal cannot discriminate: it adds no candidate and reorders nothing.
  Measure the spread over the *whole* scored pool (all neighbours, including sessions the
  fingerprint pass already found), not over the ones above the threshold.
* **Below hard evidence.** ``calibrated_additions`` only returns candidates the caller did not find
  otherwise (``exclude``), cut by a calibrated threshold; the caller ranks them after every
  fingerprint/lineage session. An empty list is a normal answer.

All functions here except ``semantic_neighbours`` are pure and deterministic (ties break by key).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import numpy as np

from engram.embed.chunk import chunk_text

#: scores closer than this count as "the same" for the no-spread rule.
NO_SPREAD_EPS = 1e-4
#: placeholder cosine cut for semantic additions to explain, until the accuracy benchmark
#: calibrates it (MiniLM: paraphrases of one topic typically score 0.5-0.8, unrelated text < 0.2).
DEFAULT_SEMANTIC_THRESHOLD = 0.45
#: Reciprocal Rank Fusion constant (Cormack et al. 2009).
RRF_K = 60
_ROUND = 6


def query_vector(embedder, text: str) -> np.ndarray | None:
    """One unit vector for ``text``: the normalised mean of its chunks' vectors (long queries such
    as a whole function are chunked like tape text). None for blank text."""
    pieces = chunk_text(text, window=min(int(embedder.max_tokens), 256), min_words=1)
    if not pieces:
        return None
    v = embedder.embed(pieces).mean(axis=0)
    norm = float(np.linalg.norm(v))
    return (v / norm).astype(np.float32) if norm > 0 else None


def semantic_neighbours(store, embedder, query_text: str, top_k: int = 20) -> list[dict]:
    """The ``top_k`` stored chunks nearest to ``query_text``, best first:
    ``[{"hash", "score", "refs": [{"tape_id", "offset"}, ...]}, ...]`` (score = cosine, rounded to
    6 decimals). Empty for blank text or an empty store."""
    q = query_vector(embedder, query_text)
    if q is None:
        return []
    return [{"hash": h, "score": round(score, _ROUND),
             "refs": [{"tape_id": t, "offset": o} for t, o in refs]}
            for score, h, refs in store.search(q, top_k)]


def group_by_tape(hits: Iterable[dict]) -> list[dict]:
    """Neighbour hits → one entry per tape: ``{"tape_id", "score" (best), "offsets" (best first,
    deduplicated)}``, ordered by score then tape id."""
    best: dict[str, float] = {}
    offsets: dict[str, list[tuple[float, int]]] = {}
    for hit in hits:
        for ref in hit["refs"]:
            t = ref["tape_id"]
            best[t] = max(best.get(t, -2.0), hit["score"])
            offsets.setdefault(t, []).append((hit["score"], ref["offset"]))
    out = []
    for t, s in best.items():
        seen: dict[int, None] = {}
        for _, o in sorted(offsets[t], key=lambda x: (-x[0], x[1])):
            seen.setdefault(o, None)
        out.append({"tape_id": t, "score": s, "offsets": list(seen)})
    out.sort(key=lambda d: (-d["score"], d["tape_id"]))
    return out


def no_spread(scores: Sequence[float], eps: float = NO_SPREAD_EPS, min_candidates: int = 2) -> bool:
    """True when a pool of at least ``min_candidates`` scores has spread ``max - min < eps``
    (or the pool is empty): such a signal carries no ranking information."""
    if len(scores) == 0:
        return True
    if len(scores) < min_candidates:
        return False
    return float(max(scores)) - float(min(scores)) < eps


def calibrated_additions(candidates: Sequence[tuple[Hashable, float]],
                         threshold: float = DEFAULT_SEMANTIC_THRESHOLD, *,
                         exclude: Iterable[Hashable] = (), eps: float = NO_SPREAD_EPS,
                         min_candidates: int = 2) -> list[tuple[Hashable, float]]:
    """Semantic additions: ``[(key, score), ...]`` with ``score >= threshold`` and key not in
    ``exclude``, best first (ties by key). ``candidates`` is the whole scored pool (keys found by
    fingerprints included, listed in ``exclude``); if it has no spread (``no_spread``) the result
    is empty whatever the threshold. A single candidate is judged by the threshold alone."""
    if no_spread([s for _, s in candidates], eps, min_candidates):
        return []
    skip = set(exclude)
    best: dict[Hashable, float] = {}
    for key, score in candidates:
        if key in skip or score < threshold:
            continue
        best[key] = max(best.get(key, float("-inf")), float(score))
    return sorted(best.items(), key=lambda kv: (-kv[1], _sort_key(kv[0])))


def _ranks(hits: Sequence[tuple[Hashable, float]]) -> dict[Hashable, tuple[int, float]]:
    """``key → (rank, score)``, rank 1 = best; equal scores share a rank (competition ranking),
    so ties never depend on input order. A key listed twice keeps its best score."""
    best: dict[Hashable, float] = {}
    for key, score in hits:
        best[key] = max(best.get(key, float("-inf")), float(score))
    ordered = sorted(best.values(), reverse=True)
    first_rank: dict[float, int] = {}
    for i, s in enumerate(ordered):
        first_rank.setdefault(s, i + 1)
    return {k: (first_rank[s], s) for k, s in best.items()}


def merge_signals(keyword_hits: Sequence[tuple[Hashable, float]],
                  semantic_hits: Sequence[tuple[Hashable, float]], *, rrf_k: int = RRF_K,
                  eps: float = NO_SPREAD_EPS) -> list[dict]:
    """Hybrid retrieval: merge keyword and semantic hits (each ``(key, score)``, higher = better;
    convert FTS5 ``bm25()`` with ``-bm25``) by Reciprocal Rank Fusion.

    Returns ``[{"key", "score", "signals": {"keyword": s | None, "semantic": s | None}}, ...]``
    ordered by fused ``score`` (rounded to 6 decimals), ties by key. A signal is ``None`` where it
    did not count: the key was not among that signal's hits, or the semantic pool has no spread —
    then semantic hits add no keys and change no order (the result is the keyword ranking).
    Keys must be mutually orderable (strings, or tuples such as ``(tape_id, offset)``).
    """
    kw = _ranks(keyword_hits)
    sem = {} if no_spread([s for _, s in semantic_hits], eps) else _ranks(semantic_hits)
    out = []
    for key in set(kw) | set(sem):
        fused = 0.0
        signals: dict[str, float | None] = {"keyword": None, "semantic": None}
        if key in kw:
            rank, s = kw[key]
            fused += 1.0 / (rrf_k + rank)
            signals["keyword"] = round(s, _ROUND)
        if key in sem:
            rank, s = sem[key]
            fused += 1.0 / (rrf_k + rank)
            signals["semantic"] = round(s, _ROUND)
        out.append({"key": key, "score": round(fused, _ROUND), "signals": signals})
    out.sort(key=lambda d: (-d["score"], _sort_key(d["key"])))
    return out


def _sort_key(key: Hashable):
    return key if isinstance(key, (str, int, float, tuple)) else repr(key)
