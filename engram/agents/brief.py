"""``engram brief [PATHS]``: what an agent (or a person) should know before touching these paths.

In this order, until the token budget is spent:

1. **Notes** on the paths (``engram.agents.notes``): warnings, then decisions, discoveries, todos;
   newest first within a kind. A note whose code changed since it was written is flagged
   ``[POSSIBLY STALE]`` (with what changed); one whose code is gone is a tombstone.
2. **The latest work's causal chain**: the most recent session that edited the paths — its
   request → the files it edited → the outcome (the commands it ran after its first edit, with
   their exit codes).
3. **Recent changes**: one line per session and file — "3 edits, 14:00–14:15", the harness, the
   request — newest first.

No paths: notes anywhere and the sessions whose working directory is inside the repository.
A path matches a logged edit by its path relative to the repository, by its absolute path, or
by a tail of two or more components (a session that ran in a subdirectory, or in another
checkout of the repository).

**Tokens** are counted by ``estimate_tokens``, a deliberately conservative count (each run of
letters is one token per 3 letters, each run of digits one per 2, each other character one per
UTF-8 byte, each line break one): ``bench/bench_agents.py`` checks it against the o200k and
cl100k BPE tokenizers on real briefs (it must never count fewer). Markdown is cut to the budget
item by item; the JSON lists what was left out.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections import defaultdict
from pathlib import Path

from engram.agents import notes as notes_mod
from engram.files import read_text_file
from engram.index import queries, schema

MAX_EDIT_ITEMS = 40
MAX_OUTCOMES = 6
TEXT_MAX = 160
_EDIT = schema.kind_code("code.edit")
_PIECE = re.compile(r"[A-Za-z]+|[0-9]+|\n|[ \t]+|.", re.S)


def estimate_tokens(text: str) -> int:
    """A conservative token count of ``text`` (module docstring)."""
    n = 0
    for m in _PIECE.finditer(text):
        s = m.group()
        c = s[0]
        if c.isascii() and c.isalpha():
            n += math.ceil(len(s) / 3)
        elif c.isascii() and c.isdigit():
            n += math.ceil(len(s) / 2)
        elif c == "\n":
            n += 1
        elif c in " \t":
            n += 0 if len(s) == 1 else 1
        else:
            n += len(s.encode("utf-8"))
    return n


# ---------------------------------------------------------------------------------------------
# scope


def _scope(root: Path, given: list[str]) -> list[tuple[str, bool]]:
    """``(path relative to root, is_dir)`` for each path given (absolute, relative to the current
    directory, or to the root)."""
    out = []
    for g in given:
        p = Path(g)
        if not p.is_absolute():
            p = Path.cwd() / p if (Path.cwd() / p).exists() else root / p
        try:
            rel = str(p.resolve().relative_to(root))
        except ValueError:
            rel = str(p.resolve())
        rel = "" if rel == "." else rel
        item = (rel, p.is_dir() or rel == "")
        if item not in out:
            out.append(item)
    return out


def _tails(rel: str) -> list[str]:
    """``a/b/c.py`` → ``a/b/c.py``, ``b/c.py`` (tails of two or more components)."""
    parts = rel.split("/")
    return ["/".join(parts[i:]) for i in range(len(parts)) if i == 0 or len(parts) - i >= 2]


def _edit_rows(conn, root: Path, scope: list[tuple[str, bool]]):
    """``(tape, rel or file, edits, first t, last t)`` of the logged edits in scope."""
    conds, args = [], []
    for rel, is_dir in scope:
        absolute = str(root / rel) if not os.path.isabs(rel) else rel
        if is_dir and rel == "":
            continue
        for tail in _tails(rel):
            if is_dir:
                conds.append("(rel >= ? AND rel < ?)")
                args += [tail + "/", tail + "0"]
            else:
                conds.append("rel = ?")
                args.append(tail)
        if is_dir:
            conds.append("(file >= ? AND file < ?)")
            args += [absolute + "/", absolute + "0"]
        else:
            conds.append("file = ?")
            args.append(absolute)
    if any(rel == "" for rel, _d in scope) or not scope:
        tapes = _repo_tapes(conn, root)
        if not tapes:
            return []
        conds = [f"tape IN ({','.join('?' * len(tapes))})"]
        args = list(tapes)
    sql = (f"SELECT tape, coalesce(rel, file), count(*), min(t), max(t) FROM events "
           f"WHERE kind = ? AND ({' OR '.join(conds)}) GROUP BY tape, coalesce(rel, file)")
    return list(conn.execute(sql, (_EDIT, *args)))


def _repo_tapes(conn, root: Path) -> list[int]:
    r = str(root)
    return [t for (t,) in conn.execute(
        "SELECT id FROM tapes WHERE (cwd = ? OR (cwd >= ? AND cwd < ?)) AND harness != ?",
        (r, r + "/", r + "0", notes_mod.HARNESS))]


def _in_scope(file: str | None, scope: list[tuple[str, bool]]) -> bool:
    if not scope:
        return True
    f = file or ""
    for rel, is_dir in scope:
        if rel == "" or f == rel or (is_dir and f.startswith(rel.rstrip("/") + "/")):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# items


def _note_items(engine, conn, scope: list[tuple[str, bool]]) -> list[dict]:
    from engram.index.access import TapeAccess

    access = TapeAccess(conn)
    items = []
    texts: dict[str, str | None] = {}
    for tape_id, t, meta in notes_mod.all_notes(conn):
        n = meta["note"]
        if not _in_scope(n.get("file"), scope):
            continue
        f = n.get("file") or ""
        if f not in texts:
            p = Path(f) if os.path.isabs(f) else engine.root / f
            try:
                texts[f] = read_text_file(p, shown=f)
            except (FileNotFoundError, OSError):
                texts[f] = None
        obj = notes_mod.note_object(meta, notes_mod.stored_text(access, conn, tape_id), texts[f], t)
        items.append({"kind": obj["kind"], "session": meta.get("session"), "tape_id": tape_id,
                      "text": obj["text"], "stale": bool(obj["stale"]),
                      "tombstone": obj["tombstone"], "file": obj["file"], "range": obj["range"],
                      "at": obj["at"], "changed": obj["changed"], "written": t,
                      "tier": meta.get("tier"), "related": obj["related"]})
    items.sort(key=lambda i: (notes_mod.KIND_RANK.get(i["kind"], 9), _neg(i["written"]),
                              i["tape_id"]))
    return items


def _neg(t: str | None) -> tuple:
    """Sort key putting later ISO times first."""
    return tuple(-ord(c) for c in (t or ""))


def _edit_items(conn, rows) -> list[dict]:
    trows = queries.tapes(conn, {r[0] for r in rows})
    items = []
    for tape, file, n, first, last in rows:
        t = trows.get(tape)
        if t is None or t.harness == notes_mod.HARNESS:
            continue
        items.append({"kind": "edit", "session": t.session, "tape_id": t.tape_id,
                      "harness": t.harness, "model": t.model, "file": file, "edits": n,
                      "first_t": first, "last_t": last, "text": _short(t.label or ""),
                      "stale": False, "live": bool(t.live)})
    items.sort(key=lambda i: (_neg(i["last_t"]), i["tape_id"], i["file"]))
    return items[:MAX_EDIT_ITEMS]


def _short(text: str, n: int = TEXT_MAX) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[:n - 1].rstrip() + "…"


def _command(args) -> str:
    if isinstance(args, dict):
        for key in ("command", "cmd", "argv"):
            v = args.get(key)
            if isinstance(v, list):
                return shlex.join(str(x) for x in v)
            if isinstance(v, str):
                return v
    return ""


def _chain(conn, item: dict) -> dict | None:
    """Request → edits → outcome of the session of ``item`` (read from its tape)."""
    from engram.index.access import TapeAccess

    t = queries.tape_by_id(conn, item["tape_id"])
    if t is None:
        return None
    try:
        evs = TapeAccess(conn).read(t, range(t.n_events))
    except Exception:  # an unreadable tape: no chain, the rest of the brief stands
        return None
    request, first_edit, files = None, None, defaultdict(int)
    calls: dict[str, str] = {}
    outcomes = []
    for o, ev in evs:
        k = ev.get("k")
        if k == "msg.in" and first_edit is None and isinstance(ev.get("text"), str) and not (
                ev.get("compaction") or ev.get("boilerplate") or ev.get("meta")):
            request = ev["text"]
        elif k == "code.edit":
            first_edit = o if first_edit is None else first_edit
            files[ev.get("rel") or ev.get("file") or "?"] += 1
        elif k == "tool.call":
            calls[str(ev.get("call_id"))] = _command(ev.get("args"))
        elif k == "tool.result" and first_edit is not None and ev.get("exit") is not None:
            cmd = calls.get(str(ev.get("call_id"))) or str(ev.get("tool") or "")
            outcomes.append({"command": _short(cmd, 100), "exit": ev.get("exit"), "event": o})
    if first_edit is None:
        return None
    return {"kind": "chain", "session": t.session, "tape_id": t.tape_id, "harness": t.harness,
            "text": _short(request or t.label or ""), "edits": dict(sorted(files.items())),
            "outcomes": outcomes[-MAX_OUTCOMES:], "stale": False, "last_t": t.last_t}


# ---------------------------------------------------------------------------------------------
# rendering


def _hm(t: str | None) -> str:
    return (t or "")[11:16]


def _note_line(i: dict) -> str:
    where = f"`{i['file']}:{i['range'][0]}-{i['range'][1]}`" if i.get("range") else f"`{i['file']}`"
    line = f"- **{i['kind'].upper()}** {where} — {_short(i['text'], 400)}"
    if i["tombstone"]:
        line += " **[CODE GONE]**"
    elif i["stale"]:
        ch = i.get("changed") or {}
        line += (f" **[POSSIBLY STALE]** ({ch.get('lines_kept', 0)} of {ch.get('lines_then', 0)} "
                 f"lines unchanged; now lines {i['at'][0]}-{i['at'][1]})") if i.get("at") else \
            " **[POSSIBLY STALE]**"
    elif i.get("at") and i.get("range") and i["at"] != i["range"]:
        line += f" (now lines {i['at'][0]}-{i['at'][1]})"
    return line + f" _(note {i['tape_id'][:12]}, {(i['written'] or '')[:10]})_"


def _edit_line(i: dict) -> str:
    day = (i["first_t"] or "")[:10]
    span = f"{_hm(i['first_t'])}–{_hm(i['last_t'])}" if _hm(i["first_t"]) != _hm(i["last_t"]) \
        else _hm(i["first_t"])
    n = i["edits"]
    return (f"- `{i['file']}` — {n} edit{'s' if n != 1 else ''}, {day} {span} · {i['harness']} · "
            f"“{i['text']}” _(tape {i['tape_id'][:12]})_")


def _chain_lines(c: dict) -> list[str]:
    edits = ", ".join(f"`{f}` ({n})" for f, n in c["edits"].items())
    outs = "; ".join(f"`{o['command']}` → exit {o['exit']}" for o in c["outcomes"]) or \
        "no command run after the edits"
    return [f"- request: “{c['text']}”", f"- edits: {edits}", f"- outcome: {outs}",
            f"- tape {c['tape_id'][:12]} ({c['harness']}, {(c['last_t'] or '')[:16]})"]


def _render(shown_paths: list[str], notes: list[dict], chain: dict | None, edits: list[dict],
            budget: int) -> tuple[str, dict]:
    """The Markdown within ``budget`` tokens and how many items of each part it holds."""
    title = ", ".join(shown_paths) if shown_paths else "this repository"
    head = f"# Engram brief: {title}\n"
    if estimate_tokens(head) > budget // 4:  # many paths: their count, not their names
        head = f"# Engram brief: {len(shown_paths)} paths\n"
    parts: list[tuple[str, list[str]]] = []
    if notes:
        parts.append(("## Notes (warnings first)", [_note_line(i) for i in notes]))
    if chain:
        parts.append(("## Latest work: request → edits → outcome", ["\n".join(_chain_lines(chain))]))
    if edits:
        parts.append(("## Recent changes", [_edit_line(i) for i in edits]))
    if not parts:
        parts.append(("", ["No notes and no logged sessions touched these paths."]))
    text, used = head, estimate_tokens(head)
    kept = {}
    full = True
    tail = "\n_(more left out: over the token budget)_\n"
    room = budget - estimate_tokens(tail)  # the "more" line always fits after the last item
    for title_, lines in parts:
        sec = ("\n" + title_ + "\n") if title_ else "\n"
        cost = estimate_tokens(sec)
        n = 0
        for ln in lines:
            c = estimate_tokens(ln + "\n")
            if used + cost + c > room:
                full = False
                break
            if n == 0:
                text += sec
                used += cost
                cost = 0
            text += ln + "\n"
            used += c
            n += 1
        kept[title_] = n
        if not full:
            break
    if not full:
        text += tail
    return text, {"notes": kept.get("## Notes (warnings first)", 0),
                  "chain": kept.get("## Latest work: request → edits → outcome", 0),
                  "edits": kept.get("## Recent changes", 0)}


def brief(engine, given: list[str], budget: int = 1500) -> dict:
    """The brief of ``given`` paths (module docstring): ``{paths, items, tokens, budget,
    markdown, left_out}``."""
    conn = engine.conn()
    root = engine.root
    scope = _scope(root, given)
    notes = _note_items(engine, conn, scope)
    edits = _edit_items(conn, _edit_rows(conn, root, scope))
    chain = _chain(conn, edits[0]) if edits else None
    shown = [rel or "." for rel, _d in scope]
    md, kept = _render(shown, notes, chain, edits, budget)
    items = notes[:kept["notes"]] + ([chain] if chain and kept["chain"] else []) + \
        edits[:kept["edits"]]
    return {"paths": shown, "root": str(root), "items": items, "tokens": estimate_tokens(md),
            "budget": budget, "counted": "conservative estimate (engram.agents.brief)",
            "left_out": {"notes": len(notes) - kept["notes"],
                         "chain": int(bool(chain)) - kept["chain"],
                         "edits": len(edits) - kept["edits"]},
            "markdown": md}
