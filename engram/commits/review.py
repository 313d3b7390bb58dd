"""``engram review A..B``: a pull request's provenance, as JSON or as a GitHub comment.

Per commit of the range (``git rev-list A..B``, newest first) its sessions and share of agent
lines; per file the sessions that wrote its added lines; per session its request and the
reasoning nearest its edits; the range's share of agent-written lines; and **dead ends**: edits a
session of the range made to the range's files whose written lines do not survive in the files
at ``B`` (tried, then undone or rewritten). Commits with no session are listed as such.

``markdown(result)`` renders it for a pull-request comment: collapsible per commit
(``<details>``), at most ``MAX_MARKDOWN`` characters with an explicit truncation line.
"""

from __future__ import annotations

from collections import Counter

from engram.commits import attribute, reasoning
from engram.commits.git import Git, GitError
from engram.commits.log import warnings as repo_warnings

MAX_MARKDOWN = 65_000
MAX_SESSIONS_DETAILED = 30
DEAD_SURVIVE = 0.5      # an edit is a dead end when less than this share of its written lines survive


def review(engine, range_: str) -> dict:
    if ".." not in range_:
        raise GitError(f"a range is A..B (e.g. origin/main..HEAD), not {range_!r}")
    git = Git(engine.root)
    shas = git.rev_list([range_])
    end = range_.split("...")[-1] if "..." in range_ else range_.split("..")[-1]
    end = end or "HEAD"
    commits = attribute.commits(engine, git, shas)
    from engram.commits import peers

    peers.annotate(git, commits)
    files: dict[str, dict] = {}
    sess: dict[str, dict] = {}
    added = agent = 0
    for c in commits:
        added += c["added_lines"]
        agent += c["agent_lines"]
        for f in c["files"]:
            e = files.setdefault(f["path"], {"path": f["path"], "added_lines": 0, "agent_lines": 0,
                                             "sessions": Counter(), "commits": []})
            e["added_lines"] += f["added_lines"]
            e["agent_lines"] += f["agent_lines"]
            e["sessions"].update(f["sessions"])
            e["commits"].append(c["sha"])
        for s in c["sessions"]:
            key = s.get("tape_id") or s.get("session")
            x = sess.setdefault(key, {k: s.get(k) for k in ("session", "tape_id", "harness",
                                                           "model", "label", "tier")}
                                | {"lines": 0, "commits": [], "via": set()})
            x["lines"] += s.get("lines", 0)
            x["commits"].append(c["sha"])
            x["via"].add(s.get("via"))
    paths = sorted(files)
    final = _final_texts(git, end, paths)
    dead: list[dict] = []
    ordered = sorted(sess.values(), key=lambda s: (-s["lines"], s["tape_id"] or s["session"] or ""))
    for i, s in enumerate(ordered):
        s["via"] = sorted(v for v in s["via"] if v)
        if not s.get("tape_id") or i >= MAX_SESSIONS_DETAILED:
            continue
        s["reasoning"] = reasoning.nearest(engine, s["tape_id"], paths)
        dead += _dead_ends(engine, s, paths, final)
    file_rows = []
    for p in paths:
        e = files[p]
        file_rows.append({**e, "sessions": dict(sorted(e["sessions"].items())),
                          "agent_share": round(e["agent_lines"] / e["added_lines"], 4)
                          if e["added_lines"] else None})
    return {"range": range_, "commits": commits, "files": file_rows, "sessions": ordered,
            "added_lines": added, "agent_lines": agent,
            "agent_share": round(agent / added, 4) if added else None,
            "no_session_commits": [c["sha"] for c in commits if not c["sessions"]],
            "dead_ends": dead, "warnings": repo_warnings(git)}


def _final_texts(git: Git, end: str, paths: list[str]) -> dict[str, set[str]]:
    blobs = git.cat_files([f"{end}:{p}" for p in paths], max_bytes=attribute.MAX_BLAME_BYTES)
    out = {}
    for p in paths:
        raw = blobs.get(f"{end}:{p}")
        out[p] = set() if raw is None else {" ".join(x.split()) for x in
                                            raw.decode("utf-8", "replace").split("\n")}
    return out


def _dead_ends(engine, s: dict, paths: list[str], final: dict[str, set[str]]) -> list[dict]:
    out = []
    for o, e, f in reasoning.edits(engine, s["tape_id"], paths):
        before = Counter(" ".join(x.split()) for x in (e.get("before_text") or "").split("\n"))
        wrote = [w for w in (" ".join(x.split()) for x in (e.get("after_text") or "").split("\n"))
                 if w and not before.get(w)]
        if len(wrote) < 2:
            continue
        kept = sum(1 for w in wrote if w in final.get(f, ()))
        if kept / len(wrote) < DEAD_SURVIVE:
            out.append({"session": s["session"], "tape_id": s["tape_id"], "file": f, "offset": o,
                        "t": e.get("t"), "lines_written": len(wrote), "lines_surviving": kept})
    return out


# ---------------------------------------------------------------------------------------------
# Markdown


def _esc(text: str | None) -> str:
    if not text:
        return ""
    t = " ".join(str(text).split())
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("`", "'")):
        t = t.replace(a, b)
    return t


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{round(100 * x)}%"


def markdown(r: dict) -> str:
    head = [f"## Engram provenance for `{_esc(r['range'])}`", "",
            f"**{_pct(r['agent_share'])}** of {r['added_lines']} added lines written by agent "
            f"sessions ({r['agent_lines']}), {r['added_lines'] - r['agent_lines']} by hand; "
            f"{len(r['commits'])} commits, {len(r['no_session_commits'])} with no session.", ""]
    for w in r.get("warnings", []):
        head.append(f"> ⚠️ {_esc(w)}")
    if r["sessions"]:
        head += ["| session | harness · model | lines | request |", "|---|---|---:|---|"]
        for s in r["sessions"]:
            head.append(f"| `{_esc((s['session'] or s['tape_id'] or '')[:12])}` | "
                        f"{_esc(s['harness'])} · {_esc(s['model'])} | {s['lines']} | "
                        f"{_esc((s['label'] or '')[:140])} |")
        head.append("")
    if r["dead_ends"]:
        head.append(f"<details><summary>Dead ends ({len(r['dead_ends'])})</summary>\n")
        for d in r["dead_ends"][:50]:
            head.append(f"- `{_esc(d['file'])}`: {d['lines_written']} lines written by "
                        f"`{_esc((d['session'] or '')[:12])}`, {d['lines_surviving']} survive")
        head.append("\n</details>\n")
    by_tape = {s.get("tape_id"): s for s in r["sessions"]}
    body = []
    for c in r["commits"]:
        mark = "◆" if c["sessions"] else "○"
        part = [f"<details><summary>{mark} <code>{c['sha'][:10]}</code> {_esc(c['subject'])} — "
                f"{_pct(c['agent_share'])} agent</summary>\n"]
        if not c["sessions"]:
            part.append("No agent session wrote these lines (hand-written, or the session is not "
                        "indexed).\n")
        for s in c["sessions"]:
            part.append(f"- **{_esc(s['harness'])}** · {_esc(s['model'])} · {s['lines']} lines "
                        f"({_esc(s['via'])}) — {_esc((s.get('label') or '')[:200])}")
            for x in (by_tape.get(s.get("tape_id")) or {}).get("reasoning", [])[:2]:
                if x.get("reasoning"):
                    part.append(f"  > `{_esc(x['file'])}`: {_esc(x['reasoning'][:300])}")
        files = [f for f in c["files"] if f["added_lines"]]
        if files:
            part += ["", "| file | added | agent |", "|---|---:|---:|"]
            part += [f"| `{_esc(f['path'])}` | {f['added_lines']} | {f['agent_lines']} |" for f in files]
        part.append("\n</details>")
        body.append("\n".join(part))
    out = "\n".join(head)
    for i, part in enumerate(body):
        if len(out) + len(part) + 200 > MAX_MARKDOWN:
            out += f"\n\n… truncated: {len(body) - i} more commits not shown (see `engram review --json`)."
            break
        out += "\n" + part
    return out + "\n"
