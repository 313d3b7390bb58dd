"""``engram stats``: sessions, tokens, cost and the lines agents wrote that still stand at HEAD.

Scope: sessions whose ``cwd`` lies inside this repository (default), every indexed session with
``all_``; ``since`` keeps sessions that began on or after a date. Rows are grouped ``by`` harness,
model, ISO week, session or file. Tokens come from ``engram.commits.usage`` (per harness, repeated
streaming records counted once), cost from ``engram.commits.prices`` (``None`` for a model the
table does not name, and the row's and total's ``unpriced_sessions`` say how many). Lines at HEAD:
every tracked text file at HEAD (at most ``MAX_FILES``) blamed like ``engram blame`` (cached per
blob and path), lines produced by a session counted for it, per directory too.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict

from engram.commits import cache, prices, usage
from engram.commits.git import Git, GitError

MAX_FILES = 3000
MAX_BYTES = 1 << 20
BLAME_VERSION = 1
KEYS = ("sessions", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
        "reasoning_tokens", "cost_usd", "unpriced_sessions", "lines_at_head")


def _sessions(engine, all_: bool, since: str | None) -> list[dict]:
    conn = engine.conn()
    root = str(engine.root)
    out = []
    for tape_id, session, harness, model, cwd, first_t in conn.execute(
            "SELECT tape_id, session, harness, model, cwd, first_t FROM tapes"
            " ORDER BY first_t, tape_id"):
        if harness == "engram":
            continue
        if not all_ and not (cwd == root or (cwd or "").startswith(root.rstrip("/") + "/")):
            continue
        if since and (first_t or "") < since:
            continue
        out.append({"tape_id": tape_id, "session": session, "harness": harness, "model": model,
                    "first_t": first_t})
    return out


def _week(t: str | None) -> str:
    try:
        d = dt.datetime.fromisoformat((t or "").replace("Z", "+00:00"))
    except ValueError:
        return "unknown"
    y, w, _ = d.isocalendar()
    return f"{y}-W{w:02d}"


def lines_at_head(engine, git: Git) -> tuple[dict[str, Counter], dict]:
    """``({file: Counter(tape_id → lines)}, {"files": n, "lines": n, "skipped": [...]})``."""
    from engram.query import history

    conn = engine.conn()
    out: dict[str, Counter] = {}
    info = {"files": 0, "lines": 0, "skipped": []}
    try:
        listing = git.run_bytes(["ls-tree", "-r", "-z", "--full-tree", "-l", "HEAD"])
    except GitError:
        return out, info
    entries = []
    for rec in listing.split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        mode, typ, sha, size = meta.split()
        if typ != b"blob" or mode.startswith((b"12", b"16")):
            continue
        p = path.decode("utf-8", "replace")
        if size == b"-" or int(size) > MAX_BYTES:
            info["skipped"].append(p)
            continue
        entries.append((p, sha.decode()))
    if len(entries) > MAX_FILES:
        info["skipped"] += [p for p, _ in entries[MAX_FILES:]]
        entries = entries[:MAX_FILES]
    keys = {f"blame:{sha}:{p}": (p, sha) for p, sha in entries}
    have = cache.load(conn, str(git.root), list(keys), BLAME_VERSION)
    todo = [k for k in keys if k not in have]
    blobs = git.cat_files([keys[k][1] for k in todo]) if todo else {}
    tmax = cache.tapes_max(conn)
    rows = []
    for k in todo:
        p, sha = keys[k]
        raw = blobs.get(sha)
        if raw is None or b"\0" in raw[:8192]:
            have[k] = {"lines": 0, "owners": {}}
        else:
            text = raw.decode("utf-8", "replace")
            b = history.blame(engine, str(git.root / p), text=text, earlier=False)
            owners: Counter = Counter()
            lines = text.split("\n")
            n = 0
            for ln in b["lines"]:
                i = ln["line"] - 1
                if i < len(lines) and lines[i].strip():
                    n += 1
                    if ln.get("tape_id") and (ln.get("via") == "log" or ln.get("produced")):
                        owners[ln["tape_id"]] += 1
            have[k] = {"lines": n, "owners": dict(sorted(owners.items()))}
        rows.append((k, "9999", have[k]))
    cache.store(conn, str(git.root), rows, BLAME_VERSION, tmax)
    for k, (p, _sha) in keys.items():
        out[p] = Counter(have[k]["owners"])
        info["files"] += 1
        info["lines"] += have[k]["lines"]
        info.setdefault("_lines", {})[p] = have[k]["lines"]
    return out, info


def stats(engine, by: str = "model", since: str | None = None, all_: bool = False,
          head: bool = True) -> dict:
    if by not in ("harness", "model", "week", "file", "session"):
        from engram.errors import EngramError
        raise EngramError(f"--by must be harness, model, week, file or session, not {by!r}")
    sess = _sessions(engine, all_, since)
    per_tape = {s["tape_id"]: s for s in sess}
    for s in sess:
        s["usage"] = usage.of_tape(engine, s["tape_id"])
        s["cost"] = prices.cost(s["model"], s["usage"])
    head_lines: dict[str, Counter] = {}
    info: dict = {}
    warnings: list[str] = []
    if head:
        try:
            git = Git(engine.root)
            head_lines, info = lines_at_head(engine, git)
        except GitError as e:
            warnings.append(f"lines at HEAD not counted: {e.message}")
    rows: dict[str, dict] = defaultdict(lambda: dict.fromkeys(KEYS, 0) | {"cost_usd": None})
    total = dict.fromkeys(KEYS, 0) | {"cost_usd": None}

    def key_of(s: dict) -> str:
        return {"harness": s["harness"] or "unknown", "model": s["model"] or "unknown",
                "week": _week(s["first_t"]), "session": s["session"] or s["tape_id"]}.get(by, "")

    if by != "file":
        for s in sess:
            _add(rows[key_of(s)], s)
            _add(total, s)
        for _f, owners in head_lines.items():
            for tid, n in owners.items():
                if tid in per_tape:
                    rows[key_of(per_tape[tid])]["lines_at_head"] += n
                    total["lines_at_head"] += n
    else:
        for s in sess:
            _add(total, s)
        for f, owners in head_lines.items():
            mine = {t: n for t, n in owners.items() if t in per_tape}
            if not mine:
                continue
            r = rows[f]
            r["sessions"] = len(mine)
            r["lines_at_head"] = sum(mine.values())
            total["lines_at_head"] += r["lines_at_head"]
    all_lines = info.get("lines", 0)
    # the repository's lines at HEAD written by any indexed session (wherever it ran): the rows
    # above count only the sessions in scope
    dirs: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for f, owners in head_lines.items():
        d = f.rsplit("/", 1)[0] if "/" in f else "."
        dirs[d][0] += info.get("_lines", {}).get(f, 0)
        dirs[d][1] += sum(owners.values())
    head_agent = sum(v[1] for v in dirs.values())
    return {"by": by, "scope": "all" if all_ else str(engine.root), "since": since,
            "rows": [{"key": k, **v} for k, v in sorted(rows.items())], "total": total,
            "head": {"files": info.get("files", 0), "lines": all_lines,
                     "agent_lines": head_agent,
                     "agent_share": round(head_agent / all_lines, 4) if all_lines else None,
                     "skipped_files": len(info.get("skipped", [])),
                     "directories": [{"dir": d, "lines": v[0], "agent_lines": v[1],
                                      "agent_share": round(v[1] / v[0], 4) if v[0] else None}
                                     for d, v in sorted(dirs.items())]},
            "prices": prices.describe(), "warnings": warnings}


def _add(row: dict, s: dict) -> None:
    row["sessions"] += 1
    u = s["usage"]
    if u:
        for k in usage.KEYS:
            row[k] += u.get(k, 0)
    if s["cost"] is None:
        row["unpriced_sessions"] += 1
    else:
        row["cost_usd"] = round((row["cost_usd"] or 0) + s["cost"], 6)
