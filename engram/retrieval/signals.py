"""Named scoring signals for ``engram search`` and the non-fingerprint tiers of explain.

    score = similarity × salience^w_sal × authority × confidence × type_intent + keyword_boost

* **similarity** — the better of the event's cosine to the query (embeddings, when on) and its
  FTS5 bm25 score normalised to the best hit of the query (``(0, 1]``). A candidate whose
  similarity is below ``SIMILARITY_FLOOR`` is dropped.
* **salience** — per session: 1.0 at its last activity, minus ``DECAY_PER_WEEK`` (2.5 %) a week,
  compounded, since its last activity or use; each use of an answer that contained it adds
  ``USE_BONUS``; floor ``SALIENCE_FLOOR``, cap 1.0 (``salience``). Its exponent ``w_sal`` depends on
  the intent (``W_SAL``). "Now" is the index's own clock (its newest event or use), never the wall
  clock: the same index gives the same ranking tomorrow.
* **authority** — by tier (``AUTHORITY``: human note > orchestrator > agent), off by default
  (``retrieval.authority`` in config); off means 1.0 for everyone.
* **confidence** — from feedback (``engram.retrieval.feedback``): 0.5 with none.
* **type_intent** — the role of the matched event against the query's intent (``TYPE_INTENT``).
* **keyword_boost** — ``KEYWORD_BOOST`` when the event is an FTS5 hit, added after the product.

**Adaptive dampening**: authority, confidence and type × intent enter the product as
``effective = d × raw + (1 − d) × 1``, ``d`` the normalised entropy of the signal's raw values over
the candidate set (``normalised_entropy``: entropy over ``log`` of the number of distinct values).
A signal that does not vary has ``d = 0`` and no influence; one spread evenly has ``d = 1``; one
outlier among many candidates gets a small ``d``.

Everything here is pure and deterministic: values are rounded (``ROUND``) before they are compared.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime

ROUND = 6
INTENTS = ("general", "planning", "design", "debugging", "review", "history")
ROLES = ("edit", "read", "request", "reply", "tool", "note")

#: role of the matched event × the query's intent. Rows: intents; columns: ``ROLES``.
#: ``edit``: a code edit, or a message of a turn that made an edit (the session built something);
#: ``read``: a code read, or a message of a turn that only read code; ``request``/``reply``: user /
#: assistant words of a turn with neither; ``tool``: tool calls and output; ``note``: a note or
#: sidecar enrichment. Debugging, review and history want the session that changed the code, so
#: discussion and reads weigh little there; planning and design want the discussion. Calibrated
#: on half of the bench corpus's questions and reported on the other half
#: (``bench/bench_retrieval.py``, ``docs/benchmarks.md``, "Retrieval").
TYPE_INTENT: dict[str, dict[str, float]] = {
    "general":   {"edit": 1.0, "read": 0.9, "request": 0.9, "reply": 0.9, "tool": 0.8, "note": 1.0},
    "planning":  {"edit": 0.7, "read": 0.6, "request": 1.0, "reply": 1.0, "tool": 0.5, "note": 1.0},
    "design":    {"edit": 0.8, "read": 0.6, "request": 0.9, "reply": 1.0, "tool": 0.5, "note": 1.0},
    "debugging": {"edit": 1.0, "read": 0.1, "request": 0.1, "reply": 0.1, "tool": 0.6, "note": 0.8},
    "review":    {"edit": 1.0, "read": 0.2, "request": 0.2, "reply": 0.3, "tool": 0.4, "note": 0.8},
    "history":   {"edit": 1.0, "read": 0.1, "request": 0.1, "reply": 0.1, "tool": 0.4, "note": 0.8},
}
#: salience exponent per intent (1.0 for the others).
W_SAL = {"debugging": 1.5, "planning": 0.8}
KEYWORD_BOOST = 0.04
SIMILARITY_FLOOR = -0.3
DECAY_PER_WEEK = 0.025
USE_BONUS = 0.1
SALIENCE_FLOOR = 0.1
SALIENCE_CAP = 1.0
#: authority by tier, when ``retrieval.authority`` is on.
AUTHORITY = {"human": 1.0, "orchestrator": 0.9, "agent": 0.8}
DAMPENED = ("authority", "confidence", "type_intent")
NEUTRAL_CONFIDENCE = 0.5
WEEK_S = 7 * 24 * 3600.0


def epoch(t: str | None) -> float | None:
    """An ISO-8601 time (``...Z``) as seconds since the epoch; None when absent or unreadable."""
    if not t or not isinstance(t, str):
        return None
    try:
        return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def normalised_entropy(values: Sequence[float]) -> float:
    """Shannon entropy of the distribution of (rounded) values over the candidates divided by
    ``log(k)``, ``k`` the number of distinct values (Pielou's evenness): 0 when every candidate
    has the same value (or there is at most one), 1 when the candidates are spread evenly over
    the values they take (e.g. all different, or half and half)."""
    n = len(values)
    if n < 2:
        return 0.0
    counts = Counter(round(float(v), ROUND) for v in values)
    if len(counts) < 2:
        return 0.0
    h = -sum((c / n) * math.log(c / n) for c in counts.values())
    return round(min(1.0, h / math.log(len(counts))), ROUND)


def dampen(raw: float, d: float) -> float:
    """``d × raw + (1 − d) × 1``."""
    return round(d * raw + (1.0 - d), ROUND)


def salience(last_active: str | None, uses: Iterable[str], now: str | None) -> float:
    """A session's salience at ``now``: 1.0 at ``last_active``; each week without activity or use
    multiplies it by ``1 - DECAY_PER_WEEK``; each use (an ISO time, replayed in time order) adds
    ``USE_BONUS`` after the decay up to it; clamped to [``SALIENCE_FLOOR``, ``SALIENCE_CAP``]
    (the cap applies after each use). A use before the last activity counts as a bonus only."""
    t0 = epoch(last_active)
    s, clock = 1.0, t0
    for u in sorted(x for x in (epoch(u) for u in uses) if x is not None):
        if clock is not None and u > clock:
            s *= (1.0 - DECAY_PER_WEEK) ** ((u - clock) / WEEK_S)
            clock = u
        elif clock is None:
            clock = u
        s = min(SALIENCE_CAP, max(SALIENCE_FLOOR, s) + USE_BONUS)
    tn = epoch(now)
    if clock is not None and tn is not None and tn > clock:
        s *= (1.0 - DECAY_PER_WEEK) ** ((tn - clock) / WEEK_S)
    return round(min(SALIENCE_CAP, max(SALIENCE_FLOOR, s)), ROUND)


def authority(tier: str | None, enabled: bool) -> float:
    """The tier's authority (``AUTHORITY``) when enabled, else 1.0."""
    if not enabled:
        return 1.0
    return AUTHORITY.get(tier or "agent", AUTHORITY["agent"])


def type_intent(role: str, intent: str | None) -> float:
    """``TYPE_INTENT[intent][role]`` (general for an unknown intent, 1.0 for an unknown role)."""
    return TYPE_INTENT.get(intent or "general", TYPE_INTENT["general"]).get(role, 1.0)


def w_sal(intent: str | None) -> float:
    return W_SAL.get(intent or "general", 1.0)


def score(cands: list[dict], intent: str | None = None) -> list[dict]:
    """Score candidates: each a dict with ``similarity`` (float), ``keyword`` (bool: an FTS5 hit),
    ``salience``, ``authority``, ``confidence`` and ``type_intent`` (raw values). Returns the kept
    candidates (similarity ≥ ``SIMILARITY_FLOOR``) in input order, each with ``score`` and
    ``signals`` added: ``{name: {"raw": r, "effective": e}}`` for every signal (similarity and
    salience: effective = the factor that entered the product, ``salience^w_sal``;
    keyword_boost: the amount added) and ``dampening``: ``{name: d}``."""
    kept = [c for c in cands if c["similarity"] >= SIMILARITY_FLOOR]
    d = {name: normalised_entropy([c[name] for c in kept]) for name in DAMPENED}
    ws = w_sal(intent)
    for c in kept:
        sal = round(max(c["salience"], 0.0) ** ws, ROUND)
        eff = {name: dampen(c[name], d[name]) for name in DAMPENED}
        boost = KEYWORD_BOOST if c.get("keyword") else 0.0
        product = c["similarity"] * sal * eff["authority"] * eff["confidence"] * eff["type_intent"]
        c["score"] = round(product + boost, ROUND)
        c["signals"] = {
            "similarity": {"raw": round(c["similarity"], ROUND), "effective": round(c["similarity"], ROUND)},
            "salience": {"raw": round(c["salience"], ROUND), "effective": sal},
            **{name: {"raw": round(c[name], ROUND), "effective": eff[name]} for name in DAMPENED},
            "keyword_boost": {"raw": bool(c.get("keyword")), "effective": boost},
            "dampening": d,
        }
    return kept
