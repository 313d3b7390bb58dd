"""The explain result, as types: what ``Engine.explain`` returns, the CLI prints as JSON and the
language server sends for ``engram/explain`` (``docs/architecture.md``, "The explain result").

Results stay plain dicts at run time; these ``TypedDict``s name their keys for readers and type
checkers. Keys marked ``NotRequired`` appear only in some answers.
"""

# (no ``from __future__ import annotations``: NotRequired must be seen at run time)
from typing import Literal, NotRequired, TypedDict

Via = Literal["direct", "lineage", "continuation", "semantic"]


class Span(TypedDict):
    file: str | None        # None when raw text was explained (``--stdin``)
    start: int              # 1-based inclusive lines
    end: int
    requested: NotRequired[list[int]]


class Request(TypedDict):
    """The user's request nearest before an anchor."""
    offset: int
    t: str | None
    text: str


class Window(TypedDict):
    """An anchor event of a session and the transcript around it."""
    anchor: int                       # event offset in the tape
    kind: str                         # the anchor's event kind (``code.edit``, ``code.read``, ...)
    confidence: float
    file: str | None
    lines: NotRequired[list[int]]     # span lines this anchor produced or matched
    produced: NotRequired[float]      # share of the span this edit produced
    events: NotRequired[list[dict]]   # rendered events; absent for sessions ranked below the cut
    request: NotRequired[Request]
    source: NotRequired[str]          # "enrichment": a sidecar anchor
    enrichment: NotRequired[dict]


class Signals(TypedDict):
    fingerprint: float
    semantic: float | None


class LineageRef(TypedDict):
    tape_id: str
    offset: int


class LineageEdge(TypedDict):
    """One step of the walk back through lineage: ``from`` (later) continued ``to`` (earlier)."""
    # ``from`` and ``to`` are LineageRef-shaped dicts (``from`` is a Python keyword)
    confidence: float
    location_delta: Literal["same", "adjacent", "moved", "absent"]
    cardinality: Literal["1:1", "N:1", "1:N"]
    agent_link: bool
    kind: str
    location_only: NotRequired[bool]
    markers: NotRequired[list[str]]


class Session(TypedDict):
    """One session behind the span, ranked: producers first, then their history, then readers."""
    tape_id: str
    harness: str
    session: str | None
    tier: Literal["agent", "orchestrator"]
    label: str | None
    model: str | None
    cwd: str | None
    first_t: str | None
    last_t: str | None
    confidence: float
    touches: int                       # events of this session that match the span
    via: Via
    signals: Signals
    live: bool                         # indexed from a live log, not sealed into a tape yet
    windows: list[Window]
    lineage: NotRequired[list[LineageEdge]]   # how a non-direct session was reached
    unreadable: NotRequired[str]       # its tape could not be read (corrupt, missing): no events


class Tombstone(TypedDict):
    """Code removed by an edit in the span's history."""
    tape_id: str
    offset: int
    file: str | None
    rel: str | None
    range: list[int]
    t: str | None


class Stats(TypedDict):
    fingerprints: int
    matched: int
    sessions_total: int
    sampled: NotRequired[int]
    boilerplate: NotRequired[int]
    semantic_added: NotRequired[int]
    elapsed_ms: NotRequired[float]


class ExplainResult(TypedDict):
    span: Span
    sessions: list[Session]
    lineage: list[LineageEdge]
    tombstones: list[Tombstone]
    truncated: dict[str, bool]        # ``fanout`` / ``edges`` / ``depth``: the walk hit a bound
    stats: Stats
