"""Lineage edges, tombstones and continuations (``docs/architecture.md``, "Lineage: edges,
tombstones, continuations, dispatch"): computed at ingest by ``after_ingest`` (the work is in
``edges.py`` and ``continuations.py``), walked at query time by ``walk``. The rules and their
constants live here.

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
one later session over different lines of it (a split), else ``1:1``. ``span.link`` events give
``agent_link`` edges (the edit that produced the link's ``to`` span → the event that held its
``from`` span), traversed whatever their confidence. Each before-text edge also keeps X's own
before→after similarity (``span_sim``).

**Tombstones**: an edit whose before-text is gone from its after-text (similarity below
``LINK_THRESHOLD``: a deletion, or a replacement by unrelated text) records the removed block,
file, range and time. Such an edit does not carry its before-text's history to its after-text.

**Continuations** (table ``continuations``, ``from_tape`` earlier → ``to_tape`` later): the input a
tape was given at its head is compared with the tails of the latest ``MAX_PREDECESSORS`` tapes of
the same harness and directory that started before it. Excluded: events the adapter marked
``boilerplate`` or ``meta``; hashes of the head input of ``BOILERPLATE_TAPES`` (or
``BOILERPLATE_SHARE``) tapes of the harness — system prompts, AGENTS.md/CLAUDE.md, environment
preambles; the index's global boilerplate; and the earlier tape's own preamble (what it was given
before it first acted), unless the later head is a compaction summary, which restates it. The
share of the head found in the tail is the base score (at least ``CONT_MIN_BASE``, or
``CONT_MIN_BASE_SUMMARY`` under a summary: time or markers alone never link); harness markers add to
it: a compaction summary / "This session is being continued…" in the head, the same session id,
``meta.continues`` (certain), the later tape starting within ``IMMEDIATE_MINUTES`` or
``SOON_MINUTES`` of the earlier one's end. The best predecessor at ≥ ``CONT_THRESHOLD`` wins. An
orchestrator-tier tape whose text holds an agent tape's first request (≥ ``DISPATCH_THRESHOLD``,
within ``DISPATCH_MAX_HOURS`` before it) gets a ``dispatch`` row.

**Walk**: BFS backwards from the events that match today's span, depth ≤ ``MAX_DEPTH``, at most
``MAX_FANOUT`` edges per node (best first), ``MAX_EDGES`` overall; edges below ``min_confidence``
are skipped unless ``agent_link`` (``--all`` keeps them and the location-only ones). A node is an
event *and the side of it reached* (an edge into an edit-before block lands on that edit's
before-text): a before-text follows its before-text edges; an after-text follows its own new-text
edges, and its before-text edges too (at most ``span_sim``) unless the edit is a tombstone. The
confidence of a reached session is the lowest along its path. Every tape touched crosses its
continuation (``via: "continuation"``) and dispatch (``via: "lineage"``) rows to the earlier tape,
repeatedly (chains).
"""

from __future__ import annotations

import logging

import numpy as np

from engram import fingerprint
from engram.index import schema
from engram.index.store import event_blocks

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
MAX_PLANS = 100_000         # nodes, tapes and events whose walk steps are kept (``_Plans``)

HEAD_EVENTS = 12
TAIL_EVENTS = 60
BOILERPLATE_TAPES = 4       # head input shared by this many tapes of a harness is boilerplate
BOILERPLATE_SHARE = 0.02    # ... or by this share of them, when that is more
CONT_MIN_MATCH = 6
CONT_MIN_BASE = 0.2
CONT_MIN_BASE_SUMMARY = 0.1  # a compaction summary in the head: less overlap needed
CONT_THRESHOLD = 0.5
MAX_SUCCESSORS = 5          # later tapes re-scored when an earlier tape arrives late
MAX_PREDECESSORS = 30       # latest earlier tapes of the same harness and cwd compared
MARKER_BOOST = {"summary": 0.3, "resumed": 0.4, "immediate": 0.6, "soon": 0.3}
IMMEDIATE_MINUTES = 5
SOON_MINUTES = 30
CONTINUED_TEXT = "This session is being continued from a previous conversation"
DISPATCH_THRESHOLD = 0.6
DISPATCH_MAX_HOURS = 24     # an orchestrator dispatches shortly before the agent starts

_EDIT = schema.kind_code("code.edit")
_LINK = schema.kind_code("span.link")
ROUND = 4


# ---------------------------------------------------------------------------------------------
# helpers shared by the ingest side (derive, edges, continuations) and the walk


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


def _flagged(ev: dict) -> bool:
    return bool(ev.get("boilerplate") or ev.get("meta") is True)


def _hashes(texts: list[str]) -> np.ndarray:
    if not texts:
        return np.zeros(0, np.int64)
    fps = fingerprint.fingerprint_batch(texts)
    hs = [f.hashes for f in fps if len(f.hashes)]
    return np.unique(np.concatenate(hs)) if hs else np.zeros(0, np.int64)


def _texts(evs: list[tuple[int, dict]]) -> list[str]:
    return [tx for _o, ev in evs for tx, _r, _l in event_blocks(ev)]


def head_input(head: list[tuple[int, dict]]) -> tuple[list[str], set[str], str | None, bool]:
    """What a tape was given at its start, from its first ``HEAD_EVENTS + 1`` events ``(offset,
    event)``: (head input texts, harness markers, first request, whether the texts are of its
    ``msg.in`` events). Texts: the blocks of the ``msg.in`` events past the meta that are not
    flagged; when there is none, of every such event (the last item False: that needs them all)."""
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
    return texts, markers, task, bool(given)


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
        a = datetime.fromisoformat(t0)
        b = datetime.fromisoformat(t1)
    except ValueError:
        return 0.0
    return abs((b - a).total_seconds()) / 3600


_NEG_BYTES = bytes(255 - b for b in range(256))
# the key of no time: placed among the others' keys where ``"~"`` (the key it had when every key
# was the string of ``chr(0x10FFFF - ord(c))`` of each character) was, i.e. as U+10FF81 alone
_NEG_NONE = "\U0010FF81".encode("utf-8").translate(_NEG_BYTES)


def _neg(t: str | None) -> bytes:
    """Sort key putting later ISO times first: each byte ``b`` of the time's UTF-8 (lone
    surrogates kept) as ``255 - b``. UTF-8 orders as the code points do, so two keys compare as
    the times' ``chr(0x10FFFF - ord(c))`` strings did (the order every sort of these keys had) —
    at ~60 bytes a key and one pass in C, where those strings took 4 bytes a character and a memo
    of 65,536 of them held ~20 MB through a big session's lineage pass."""
    if not t:
        return _NEG_NONE
    return t.encode("utf-8", "surrogatepass").translate(_NEG_BYTES)
