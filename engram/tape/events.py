"""The events of a tape, as types (``docs/tape-format.md`` is the specification).

Events stay plain dicts at run time (they are read and written as JSON lines by the million); these
``TypedDict``s only tell a reader and a type checker which keys each kind carries. Every event has
``t`` (ISO 8601 UTC from the harness log, or ``None``) and ``k`` (its kind); an adapter may add keys
of its own, and readers and writers keep unknown keys.
"""

# (no ``from __future__ import annotations``: NotRequired must be seen at run time)
from typing import Literal, NotRequired, TypedDict

#: ``[start, end]``, 1-based inclusive; an empty side of an edit is ``[s, s - 1]``.
LineRange = list[int]


class Coverage(TypedDict):
    grade: Literal["full", "degraded", "text-only"]
    reasons: list[str]
    redactions: int


class MetaEvent(TypedDict):
    """Line 0 of every tape: which harness wrote the session, where and how it was read."""
    t: str | None
    k: Literal["meta"]
    harness: str
    harness_version: str | None
    session: str | None
    model: str | None
    cwd: str | None
    repo_head: NotRequired[str | None]
    tier: Literal["agent", "orchestrator"]
    label: str | None
    adapter: str
    adapter_version: str
    source_path: str | None
    continues: NotRequired[str | None]   # the tape id of the earlier part of a live session
    coverage: Coverage


class MessageIn(TypedDict):
    """What the user (or the harness on its behalf) said to the agent."""
    t: str | None
    k: Literal["msg.in"]
    text: str
    compaction: NotRequired[bool]
    boilerplate: NotRequired[bool]
    queued: NotRequired[bool]
    meta: NotRequired[bool]


class MessageOut(TypedDict):
    """What the agent said; ``reasoning`` for thinking / reasoning summaries."""
    t: str | None
    k: Literal["msg.out"]
    text: str
    reasoning: NotRequired[bool]


class ToolCall(TypedDict):
    t: str | None
    k: Literal["tool.call"]
    tool: str
    call_id: str | None
    args: object


class ToolResult(TypedDict):
    t: str | None
    k: Literal["tool.result"]
    tool: str | None
    call_id: str | None
    stdout: str | None
    stderr: NotRequired[str | None]
    exit: NotRequired[int | None]
    truncated: NotRequired[bool]


class CodeRead(TypedDict):
    """Code the agent read (gutters stripped)."""
    t: str | None
    k: Literal["code.read"]
    file: str | None
    rel: str | None
    range: LineRange | None
    text: str


class CodeEdit(TypedDict):
    """One change the agent made to a file: the text before and after, where, and their hashes
    (``engram.digest.text_hash``)."""
    t: str | None
    k: Literal["code.edit"]
    file: str | None
    rel: str | None
    before_range: LineRange | None
    after_range: LineRange | None
    before_text: str
    after_text: str
    before_hash: str
    after_hash: str
    range_known: NotRequired[bool]


class SpanLink(TypedDict):
    """The agent said that one span continues another (a move, a copy)."""
    t: str | None
    k: Literal["span.link"]
    from_file: str | None
    from_range: LineRange | None
    to_file: str | None
    to_range: LineRange | None
    note: NotRequired[str]


Event = MetaEvent | MessageIn | MessageOut | ToolCall | ToolResult | CodeRead | CodeEdit | SpanLink
