"""``engram init --agents``: a short marked section in ``AGENTS.md`` (created when absent) and in
``CLAUDE.md`` when it exists, telling agents when and how to ask Engram.

The section sits between ``BEGIN`` and ``END`` markers; running it again replaces the section in
place (nothing else in the file changes) and changes nothing when it is already current.
"""

from __future__ import annotations

from pathlib import Path

from engram.files import replace_text

BEGIN = "<!-- engram:begin (written by `engram init --agents`; edits inside are replaced) -->"
END = "<!-- engram:end -->"
_BEGIN_PREFIX = "<!-- engram:begin"

SECTION = """\
## Code provenance with Engram

This repository is indexed by Engram, which knows which agent sessions wrote each piece of code
and why. Use it through the `engram` MCP server (tools `brief`, `explain`, `note`) or the CLI:

- **Before starting a task**, read the brief for the paths you will touch:
  `engram brief src/module/` (Markdown; warnings and decisions first, `[POSSIBLY STALE]` when
  the code changed since the note).
- **Before changing code you did not write**, ask why it is the way it is:
  `engram explain path/to/file.py:40-60` (JSON: the sessions that produced it, their reasoning,
  and notes left on it).
- **When you learn something the next agent must know**, leave a note on the code:
  `engram note path/to/file.py:40-60 --kind warning "don't change X, because Y"`
  (kinds: `warning`, `decision`, `discovery`, `todo`).
"""


def block() -> str:
    return f"{BEGIN}\n{SECTION}{END}\n"


def update_text(text: str) -> str:
    """``text`` with the Engram section written in (replaced in place, else appended)."""
    lines = text.split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.startswith(_BEGIN_PREFIX)), None)
    if start is not None:
        end = next((i for i in range(start, len(lines)) if lines[i].strip() == END), None)
        if end is not None:
            before = "\n".join(lines[:start])
            after = "\n".join(lines[end + 1:])
            return (before + "\n" if start else "") + block().rstrip("\n") + (
                "\n" + after if end + 1 < len(lines) else "\n")
    if not text.strip():
        return block()
    sep = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + block()


def write(root: Path) -> dict:
    """Write or update the section in ``root/AGENTS.md`` and, when present, ``root/CLAUDE.md``:
    ``{"files": [{"path", "created", "changed"}]}``."""
    from engram.files import read_text_file

    out = []
    for name in ("AGENTS.md", "CLAUDE.md"):
        p = Path(root) / name
        exists = p.exists()
        if not exists and name != "AGENTS.md":
            continue
        old = read_text_file(p, shown=name) if exists else ""
        new = update_text(old)
        if new != old:
            replace_text(p, new)
        out.append({"path": str(p), "created": not exists, "changed": new != old})
    return {"files": out}
