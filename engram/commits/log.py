"""``engram log`` and ``engram show COMMIT``: the sessions behind commits.

``log(engine, revs, limit, agent)`` lists commits as ``git log`` would (the same revision syntax,
``HEAD`` by default, newest first), each with the sessions that wrote its added lines
(``engram.commits.attribute``), the share written by agents and by hand. ``show`` adds, for one
commit, its files and, per session, the request, the reasoning nearest its edits and its tokens.
"""

from __future__ import annotations

from engram.commits.git import Git

CHUNK = 200   # commits attributed at a time while --agent filters


def repo(engine) -> Git:
    return Git(engine.root)


def warnings(git: Git) -> list[str]:
    out = []
    if git.is_shallow():
        out.append("shallow clone: commits before the shallow boundary are missing "
                   "(`git fetch --unshallow` to see them)")
    st = git.head_state()
    if st["head"] and st["branch"] is None:
        out.append("detached HEAD")
    return out


def _brief(c: dict) -> dict:
    return {k: v for k, v in c.items() if k != "files"}


def log(engine, revs: list[str], limit: int | None = None, agent: str | None = None,
        files: bool = False, commits=None) -> dict:
    """``commits(engine, git, shas)``: the attributions (``attribute.commits`` unless given:
    ``engram.commits.quick`` passes its cache-only reader)."""
    if commits is None:
        from engram.commits.attribute import commits
    git = repo(engine)
    shas = git.rev_list(revs, None if agent else limit)
    if agent is None:
        got = commits(engine, git, shas)
    else:
        got = []
        for i in range(0, len(shas), CHUNK):
            for c in commits(engine, git, shas[i:i + CHUNK]):
                if any(_matches(s, agent) for s in c["sessions"]):
                    got.append(c)
            if limit is not None and len(got) >= limit:
                got = got[:limit]
                break
    from engram.commits import peers

    peers.annotate(git, got)
    return {"repo": str(git.root), "revs": revs or ["HEAD"],
            "commits": got if files else [_brief(c) for c in got], "warnings": warnings(git)}


def _matches(s: dict, agent: str) -> bool:
    a = agent.lower()
    return any(a in (s.get(k) or "").lower() for k in ("harness", "model", "session", "tape_id"))


def looks_like_commit(engine, spec: str) -> str | None:
    """The commit ``spec`` names in the repository, or None (not a repository, no such commit)."""
    from engram.commits.git import GitError

    try:
        return repo(engine).resolve(spec)
    except GitError:
        return None


def show(engine, rev: str, windows: bool = True) -> dict:
    """One commit with its files and, per session, the request, the reasoning nearest its edits
    of the commit's files, and the session's tokens."""
    from engram.commits import attribute, reasoning, usage

    git = repo(engine)
    sha = git.resolve(rev)
    c = attribute.commits(engine, git, [sha])[0]
    from engram.commits import peers

    peers.annotate(git, [c])
    files = [f["path"] for f in c["files"]]
    for s in c["sessions"]:
        if not s.get("tape_id"):
            continue
        if windows:
            s["reasoning"] = reasoning.nearest(engine, s["tape_id"], files)
        s["tokens"] = usage.of_tape(engine, s["tape_id"])
    return {"commit": c, "warnings": warnings(git)}
