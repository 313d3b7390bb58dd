"""``engram export agent-trace A..B``: one Agent Trace record (v0.1) per commit of a range.

Each record names the commit (``vcs.revision``), and per file one conversation per session with
the ranges of added lines Engram gives it (``contributor.type`` ``ai``, ``model_id`` the session's
model); lines no session wrote are one ``human`` conversation. Engram's own facts go under
``metadata["dev.engram"]``: the sessions (harness session id, tape id, harness, lines, ``via``,
``confidence``: the share of their lines whose text their logged edits hold). The record id is
derived from the commit, so an export is byte-for-byte the same every time.
"""

from __future__ import annotations

import uuid

from engram import __version__
from engram.commits import attribute
from engram.commits.git import Git, GitError

NAMESPACE = uuid.UUID("5b0f0a7e-9e3b-4c55-8f0e-6e6772616d21")


def _ranges(spec: str) -> list[dict]:
    out = []
    for part in filter(None, spec.split(",")):
        a, _, b = part.partition("-")
        out.append({"start_line": int(a), "end_line": int(b or a)})
    return out


def export(engine, range_: str) -> list[dict]:
    if ".." not in range_:
        raise GitError(f"a range is A..B (e.g. origin/main..HEAD), not {range_!r}")
    git = Git(engine.root)
    commits = attribute.commits(engine, git, git.rev_list([range_]))
    out = []
    for c in reversed(commits):  # oldest first, as the commits were made
        by_tape = {s["tape_id"]: s for s in c["sessions"] if s.get("tape_id")}
        files = []
        for f in c["files"]:
            convs = []
            for tid, spec in sorted((f.get("line_ranges") or {}).items()):
                s = by_tape.get(tid, {})
                contributor = {"type": "ai"}
                if s.get("model"):
                    contributor["model_id"] = s["model"]
                convs.append({"contributor": contributor, "ranges": _ranges(spec),
                              "related": [{"type": "session", "url": f"engram:session/{s.get('session') or tid}"}]})
            if f["added_lines"] > f["agent_lines"]:
                agent = {n for spec in (f.get("line_ranges") or {}).values() for r in _ranges(spec)
                         for n in range(r["start_line"], r["end_line"] + 1)}
                human = [n for r in _ranges(f.get("added_ranges") or "") for n in
                         range(r["start_line"], r["end_line"] + 1) if n not in agent]
                convs.append({"contributor": {"type": "human"},
                              "ranges": _ranges(attribute._ranges(human)) if human else []})
            if convs:
                files.append({"path": f["path"], "conversations": convs})
        out.append({
            "version": "0.1.0", "id": str(uuid.uuid5(NAMESPACE, c["sha"])), "timestamp": c["committed"],
            "vcs": {"type": "git", "revision": c["sha"]},
            "tool": {"name": "engram", "version": __version__},
            "files": files,
            "metadata": {"dev.engram": {
                "sessions": [{k: s.get(k) for k in ("session", "tape_id", "harness", "model", "lines",
                                                    "via", "confidence")} for s in c["sessions"]],
                "added_lines": c["added_lines"], "agent_lines": c["agent_lines"]}}})
    return out
