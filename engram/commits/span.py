"""The commits that brought a span of a file in (``git blame -L``), with their sessions: what the
editor's hover names beside the sessions of the span."""

from __future__ import annotations

from pathlib import Path

from engram.commits import attribute
from engram.commits.git import Git, GitError


def span_commits(engine, file: str, start: int, end: int) -> dict:
    git = Git(engine.root)
    p = Path(file)
    if not p.is_absolute():
        p = (Path.cwd() / p) if (Path.cwd() / p).exists() else git.root / p
    try:
        rel = str(p.resolve().relative_to(git.root.resolve()))
    except ValueError:
        raise GitError(f"{file} is not inside the repository {git.root}") from None
    start, end = max(1, int(start)), max(int(start), int(end))
    try:
        out = git.run_bytes(["blame", "--porcelain", "-L", f"{start},{end}", "--", rel]).decode(
            "utf-8", "replace")
    except GitError as e:
        return {"file": rel, "start": start, "end": end, "commits": [], "warnings": [e.message]}
    counts: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and len(parts[0]) == 40 and all(c in "0123456789abcdef" for c in parts[0]):
            if parts[0] != "0" * 40:
                counts[parts[0]] = counts.get(parts[0], 0) + (int(parts[3]) if len(parts) > 3 else 0)
    shas = list(counts)
    objs = {c["sha"]: c for c in attribute.commits(engine, git, shas)}
    commits = []
    for sha in shas:
        c = objs.get(sha)
        if c is None:
            continue
        commits.append({k: c[k] for k in ("sha", "subject", "author", "t", "added_lines",
                                          "agent_lines", "agent_share", "sessions")}
                       | {"span_lines": counts[sha]})
    commits.sort(key=lambda c: (c["t"], c["sha"]), reverse=True)
    return {"file": rel, "start": start, "end": end, "commits": commits, "warnings": []}
