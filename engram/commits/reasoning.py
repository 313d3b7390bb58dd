"""The reasoning nearest a session's edits of some files (``engram show``, ``engram review``).

Per edit of one of the files (its logged path ending with the repository path), the agent's
last message before the edit and the user's last request before it, cut to ``EXCERPT`` characters
— read back from the tape, as explain's transcript windows are. At most ``MAX_EDITS`` per session.
"""

from __future__ import annotations

from engram.index import queries
from engram.index.access import TapeAccess

EXCERPT = 400
MAX_EDITS = 5


def _cut(text: str | None) -> str | None:
    if not text:
        return None
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT else text[:EXCERPT - 1] + "…"


def _ends_with(path: str | None, files: list[str]) -> str | None:
    if not path:
        return None
    p = path.replace("\\", "/")
    for f in files:
        if p == f or p.endswith("/" + f):
            return f
    return None


def edits(engine, tape_id: str, files: list[str]) -> list[tuple[int, dict, str]]:
    """``(offset, event, repository path)`` of the tape's edits of ``files``."""
    conn = engine.conn()
    t = queries.tape_by_id(conn, tape_id)
    if t is None:
        return []
    evs = TapeAccess(conn).read(t, range(t.n_events))
    out = []
    for o, e in evs:
        if e.get("k") == "code.edit":
            f = _ends_with(e.get("file"), files)
            if f:
                out.append((o, e, f))
    return out


def nearest(engine, tape_id: str, files: list[str]) -> list[dict]:
    conn = engine.conn()
    t = queries.tape_by_id(conn, tape_id)
    if t is None:
        return []
    evs = TapeAccess(conn).read(t, range(t.n_events))
    out: list[dict] = []
    said = asked = None
    seen: set[tuple] = set()
    for o, e in evs:
        k = e.get("k")
        if k == "msg.out" and e.get("text"):
            said = (o, e.get("text"))
        elif k == "msg.in" and e.get("text") and not e.get("compaction"):
            asked = (o, e.get("text"))
        elif k == "code.edit":
            f = _ends_with(e.get("file"), files)
            if not f:
                continue
            key = (f, said[0] if said else None)
            if key in seen:
                continue
            seen.add(key)
            out.append({"file": f, "offset": o, "t": e.get("t"),
                        "request": _cut(asked[1]) if asked else None,
                        "reasoning": _cut(said[1]) if said else None,
                        "reasoning_offset": said[0] if said else None})
            if len(out) >= MAX_EDITS:
                break
    return out
