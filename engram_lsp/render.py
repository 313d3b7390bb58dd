"""Markdown for people: the hover card (and the lens title).

The hover shows, for the block under the cursor: how many sessions, the best confidence, the most
recent time, the user's request and the assistant's words nearest the anchor (trimmed), harness
and model of the best session, and an *Explain* link (``command:engram.explain?<args>``, which
VS Code runs; other clients show it as a link). Control characters from the logs are escaped
(``printable``).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

MAX_QUOTE = 280

# Terminal/bidi controls a log may carry (C0 but newline and tab, DEL, C1, Unicode Bidi_Control):
# shown as visible escapes (``\x1b``, ``\u202e``), never passed to the editor. The twin of
# ``engram.render.printable`` (``engram_lsp`` reaches ``engram`` only through the engine).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
        text,
    )


def plural(n: int, word: str = "session") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def lens_title(n: int) -> str:
    return plural(n)


def when(t: str | None) -> str:
    """``2026-02-15T18:02:11Z`` → ``2026-02-15 18:02 UTC``."""
    if not t or not isinstance(t, str):
        return "unknown time"
    m = re.match(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)", t)
    return f"{m.group(1)} {m.group(2)} UTC" if m else t


def trim(text: str | None, limit: int = MAX_QUOTE) -> str:
    text = re.sub(r"\s+", " ", text or "").strip()
    if len(text) > limit:
        cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
        text = cut.rstrip(" ,;:.") + " …"
    return _NO_MARKUP.sub(r"\\\g<0>", text.replace("`", "'"))


# Markdown a log's text must not carry into the hover: links and images (``[..](..)``, ``![..]``:
# a ``command:`` link would run in an editor that trusts our hover for its Explain link, an image
# would load a remote URL), autolinks and raw HTML (``<...>``). Escaped, they show as typed.
_NO_MARKUP = re.compile(r"[\[\]<>]")


def _text(event: dict) -> str:
    t = event.get("text")
    if isinstance(t, str):
        return t
    return ""


def nearest_words(session: dict) -> tuple[str, str]:
    """(user request, assistant words) nearest the first window's anchor."""
    windows = session.get("windows") or []
    window = windows[0] if windows else {}
    events = [e for e in (window.get("events") or []) if isinstance(e, dict)]
    anchor = window.get("anchor")
    offsets = [e.get("offset") for e in events if isinstance(e.get("offset"), int)]
    if not isinstance(anchor, int) or (offsets and anchor not in offsets):
        anchor_ev = next((e for e in events if e.get("k") == window.get("kind")), None)
        anchor = (
            anchor_ev.get("offset") if anchor_ev else (offsets[len(offsets) // 2] if offsets else 0)
        )
    requests = [e for e in events if e.get("k") == "msg.in" and _text(e).strip()]
    before = [e for e in requests if (e.get("offset") or 0) <= anchor]
    request = _text(window.get("request") or {}) if isinstance(window.get("request"), dict) else ""
    if not request:
        request = _text(before[-1]) if before else (_text(requests[0]) if requests else "")
    if not request:
        request = session.get("label") or ""
    replies = [e for e in events if e.get("k") == "msg.out" and _text(e).strip()]
    reply = ""
    if replies:
        best = min(
            replies,
            key=lambda e: (abs((e.get("offset") or 0) - anchor), (e.get("offset") or 0) > anchor),
        )
        reply = _text(best)
    return trim(request), trim(reply)


def command_link(title: str, command: str, args: list) -> str:
    return f"[{title}](command:{command}?{quote(json.dumps(args, separators=(',', ':')))})"


MAX_COMMITS = 3


def note_line(note: dict) -> str:
    """``**Warning** note: <text>`` (with ``possibly stale`` when its code changed since)."""
    kind = str(note.get("kind") or "note").capitalize()
    stale = " (possibly stale: the code changed since)" if note.get("stale") else ""
    return f"**{kind}** note{stale}: {trim(note.get('text'))}"


def commits_line(commits: list[dict]) -> str:
    """``Commits: `abc1234` subject (2026-01-05, 80% agent) · ...`` (newest first)."""
    parts = []
    for c in commits[:MAX_COMMITS]:
        share = c.get("agent_share")
        facts = [when(c.get("t")).split(" ")[0]]
        if isinstance(share, (int, float)):
            facts.append(f"{share:.0%} agent")
        parts.append(f"`{str(c['sha'])[:7]}` {trim(c.get('subject'), 60)} ({', '.join(facts)})")
    more = f" · and {len(commits) - MAX_COMMITS} more" if len(commits) > MAX_COMMITS else ""
    return f"{'Commit' if len(commits) == 1 else 'Commits'}: " + " · ".join(parts) + more


def hover_markdown(block: dict, uri: str, start: int, end: int) -> str:
    """The hover card for one ``explain_blocks`` entry."""
    n = int(block.get("sessions") or 0)
    best = block.get("best")
    top = block.get("top") or {}
    head = [f"**Engram** · {plural(n)}"]
    if isinstance(best, (int, float)):
        head.append(f"best {best:.0%}")
    head.append(f"latest {when(block.get('latest') or top.get('last_t'))}")
    notes = [n for n in block.get("notes") or [] if isinstance(n, dict)]
    warnings = [n for n in notes if n.get("kind") == "warning"]
    out = [f"> ⚠ {note_line(n)}" for n in warnings] + ([""] if warnings else [])
    out += [" · ".join(head), ""]
    request, reply = nearest_words(top)
    if request:
        out += [f"> **Request:** {request}", ">"] if reply else [f"> **Request:** {request}"]
    if reply:
        out.append(f"> **Assistant:** {reply}")
    if request or reply:
        out.append("")
    facts = [x for x in (top.get("harness"), top.get("model")) if x]
    session = top.get("session") or top.get("tape_id")
    if session:
        facts.append(f"session `{str(session)[:8]}`")
    if isinstance(top.get("confidence"), (int, float)):
        facts.append(f"{top['confidence']:.0%} match")
    if facts:
        out += [" · ".join(facts), ""]
    others = [n for n in notes if n.get("kind") != "warning"]
    if others:
        out += [f"- {note_line(n)}" for n in others] + [""]
    commits = [c for c in block.get("commits") or [] if isinstance(c, dict) and c.get("sha")]
    if commits:
        out += [commits_line(commits), ""]
    rng = {"start": {"line": start - 1, "character": 0}, "end": {"line": end, "character": 0}}
    out.append(f"{command_link('Explain', 'engram.explain', [uri, rng])} lines {start}–{end}")
    return printable("\n".join(out))
