"""What gets embedded: the reasoning text of a tape, cut into model-sized, content-addressed chunks.

Selected (``reasoning_texts``), per event offset:

* ``meta.label`` (the session title);
* ``msg.in`` / ``msg.out`` ``text`` — user requests, assistant messages, compaction summaries (the
  adapters emit those as messages), fenced code blocks replaced by ``[code]`` — plus string
  ``reasoning`` / ``thinking`` / ``summary`` fields when an adapter keeps reasoning beside the text;
* ``tool.call``: a short rendering ``"<tool>: <description>"`` built from the whitelisted argument
  keys in ``TOOL_ARG_KEYS`` (``description``, a sub-agent ``prompt``, a plan ``explanation``, a
  search ``query``/``pattern``, a shell ``command``), each capped at ``TOOL_ARG_MAX_CHARS``;
  never file contents (``content``, ``old_string``, ``new_string``, patches);
* ``span.link`` ``note``;
* sidecar notes: any event with ``source: "enrichment"`` (``text`` / ``note`` / ``summary``), and
  events of kinds this version does not know whose kind names a summary, compaction or note.

Never selected: ``code.edit``, ``code.read`` and ``tool.result`` bodies (fingerprints cover those).

Chunking works on whitespace-separated words with a cheap token estimate (``estimate_tokens``,
calibrated against the MiniLM WordPiece tokenizer: it under-counts by at most ~10%, so the budget
keeps a 15% margin; a rare overflow is truncated by the model and falls in the next chunk's
overlap). A chunk's text is its words joined by single spaces, so whitespace-only differences give
the same chunk; its ``hash`` is the hex xxh3_128 of that text (UTF-8), so identical text in any
number of tapes is embedded once. Consecutive chunks of one text overlap by ``overlap`` tokens.
"""

from __future__ import annotations

import dataclasses
import re

from engram.digest import text_hash

#: bump when the selection or the chunking changes (the worker re-chunks tapes done earlier).
CHUNKER_VERSION = 2
DEFAULT_WINDOW = 256
DEFAULT_OVERLAP = 32
#: texts with fewer words than this ("ok", "continue") carry no meaning worth a vector.
MIN_WORDS = 3
TOOL_ARG_KEYS = ("description", "prompt", "explanation", "query", "pattern", "command")
TOOL_ARG_MAX_CHARS = 600
_MSG_EXTRA_KEYS = ("reasoning", "thinking", "summary")
_NOTE_KEYS = ("text", "note", "summary")
_CODE_KINDS = frozenset({"code.edit", "code.read", "tool.result"})
_NOTE_KIND = re.compile(r"summary|compact|note", re.I)
#: fenced code blocks inside messages (```lang ... ```): fingerprints cover code; embedding it
#: makes every message that quotes code look alike. An unclosed fence runs to the end.
_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_PIECE = re.compile(r"[A-Za-z]{1,6}|\d{1,2}|[^\w\s]|_")
#: the estimate is within -1%..+10% of WordPiece counts on docs, code and code-laden prose.
_SAFETY = 1.15


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One embeddable piece of reasoning text.

    ``hash``: hex xxh3_128 of ``text`` (the content address the vector store is keyed by);
    ``tape_id``/``offset``: the event it came from (offset = line number in the tape);
    ``kind``: that event's ``k``; ``part``: index of this chunk within the event's texts.
    """

    hash: str
    text: str
    tape_id: str
    offset: int
    kind: str
    part: int = 0


def estimate_tokens(word: str) -> int:
    """Approximate WordPiece tokens of one whitespace-free word (≥ 1)."""
    return max(1, len(_PIECE.findall(word)))


def chunk_text(text: str, window: int = DEFAULT_WINDOW, overlap: int = DEFAULT_OVERLAP,
               min_words: int = MIN_WORDS) -> list[str]:
    """Cut ``text`` into chunks of at most ~``window`` model tokens (2 reserved for [CLS]/[SEP]),
    consecutive chunks sharing ~``overlap`` tokens. Texts under ``min_words`` words give []."""
    words = text.split()
    if len(words) < min_words:
        return []
    budget = max(8, int((window - 2) / _SAFETY))
    ov_budget = max(0, min(int(overlap / _SAFETY), budget // 2))
    costs = [estimate_tokens(w) for w in words]
    if sum(costs) <= budget:
        return [" ".join(words)]
    out: list[str] = []
    start = 0
    n = len(words)
    while start < n:
        end, used = start, 0
        while end < n and (used + costs[end] <= budget or end == start):
            used += costs[end]
            end += 1
        out.append(" ".join(words[start:end]))
        if end >= n:
            break
        # step back over ~overlap tokens, always making progress
        back, nxt = 0, end
        while nxt - 1 > start and back + costs[nxt - 1] <= ov_budget:
            nxt -= 1
            back += costs[nxt]
        start = nxt
    return out


def _short(value: object) -> str | None:
    if isinstance(value, str):
        s = value.strip()
        return s[:TOOL_ARG_MAX_CHARS] if s else None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return _short(" ".join(value))  # argv-style commands
    return None


def tool_call_text(ev: dict) -> str | None:
    """``"<tool>: <description>; <prompt>; ..."`` from whitelisted args, or None."""
    args = ev.get("args")
    if not isinstance(args, dict):
        return None
    parts = []
    for key in TOOL_ARG_KEYS:
        s = _short(args.get(key))
        if s:
            parts.append(s)
    plan = args.get("plan")
    if isinstance(plan, list):  # Codex update_plan: [{"step": ..., "status": ...}]
        steps = [p.get("step") for p in plan if isinstance(p, dict)]
        s = _short("; ".join(x for x in steps if isinstance(x, str)))
        if s:
            parts.append(s)
    if not parts:
        return None
    tool = ev.get("tool") or "tool"
    return f"{tool}: " + "; ".join(parts)


def strip_code(text: object) -> object:
    """``text`` without its fenced code blocks (each becomes ``[code]``); non-strings unchanged."""
    if not isinstance(text, str) or "```" not in text and "~~~" not in text:
        return text
    return _FENCE.sub("[code]", text)


def reasoning_texts(ev: dict) -> list[str]:
    """The reasoning texts of one event (possibly none), in a fixed order."""
    k = ev.get("k")
    if not isinstance(k, str) or k in _CODE_KINDS:
        return []
    out: list[str] = []

    def take(v: object) -> None:
        if isinstance(v, str) and v.strip():
            out.append(v)

    if ev.get("source") == "enrichment":
        for key in _NOTE_KEYS:
            take(ev.get(key))
        if k == "tool.call":
            take(tool_call_text(ev))
        return out
    if k == "meta":
        take(ev.get("label"))
    elif k in ("msg.in", "msg.out"):
        take(strip_code(ev.get("text")))
        for key in _MSG_EXTRA_KEYS:
            take(ev.get(key))
    elif k == "tool.call":
        take(tool_call_text(ev))
    elif k == "span.link":
        take(ev.get("note"))
    elif _NOTE_KIND.search(k):
        for key in _NOTE_KEYS:
            take(ev.get(key))
    return out


def reasoning_chunks(events: list[dict], tape_id: str, *, window: int = DEFAULT_WINDOW,
                     overlap: int = DEFAULT_OVERLAP) -> list[Chunk]:
    """Chunks of the reasoning text of a tape's events (event offset = list index), in tape order.

    Duplicates are kept (each chunk is one reference); dedupe by ``Chunk.hash`` before embedding.
    """
    out: list[Chunk] = []
    for offset, ev in enumerate(events):
        if not isinstance(ev, dict):
            continue
        part = 0
        for text in reasoning_texts(ev):
            for piece in chunk_text(text, window, overlap):
                out.append(Chunk(text_hash(piece), piece, tape_id, offset, ev.get("k", ""), part))
                part += 1
    return out


def chunker_key(window: int = DEFAULT_WINDOW, overlap: int = DEFAULT_OVERLAP) -> str:
    """Identifies selection + chunking parameters (stored with each tape the worker finished)."""
    return f"v{CHUNKER_VERSION}:w{window}:o{overlap}"
