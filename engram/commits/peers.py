"""The peers' records as extra evidence: git-ai authorship notes and Agent Trace records.

* **git-ai** (Git AI Standard v3.0.0, ``refs/notes/ai``): a note per commit; an attestation
  section (a file path, then ``  <key> <ranges>`` lines, ``1-3,7``) and, after ``---``, JSON
  metadata whose ``prompts`` / ``sessions`` name each key's ``agent_id`` (``tool``, ``id``,
  ``model``); keys ``h_…`` are people.
* **Agent Trace** (v0.1, ``.agent-trace/*.jsonl`` in the working tree): one JSON record per line,
  ``vcs.revision`` the commit, ``files[].conversations[]`` with ``contributor.type``
  (``ai``/``human``/``mixed``), ``contributor.model_id`` and ``ranges`` (``start_line``,
  ``end_line``).

Neither is trusted as it is: each claim is labelled by its source (``via``) and checked against
the transcript evidence of the same commit — ``"agrees"`` when at least half of the lines it gives
an agent are lines Engram gives a session too, ``"conflicts"`` otherwise (and for a human claim on
lines Engram gives a session), ``"unchecked"`` when the commit added none of those lines.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from engram.commits.git import Git

log = logging.getLogger(__name__)

MAX_TRACE_BYTES = 32 << 20


def _lines(spec: str) -> set[int]:
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        if a.strip().isdigit():
            lo = int(a)
            hi = int(b) if b.strip().isdigit() else lo
            out.update(range(lo, min(hi, lo + 100_000) + 1))
    return out


def parse_git_ai(text: str) -> list[dict]:
    """Claims of one git-ai note: ``{"file", "lines", "kind": agent|human, "tool", "model",
    "session"}``."""
    attest, _sep, meta_s = text.partition("\n---\n")
    try:
        meta = json.loads(meta_s) if meta_s.strip() else {}
    except ValueError:
        meta = {}
    if not isinstance(meta, dict):
        meta = {}
    out, file = [], None
    for line in attest.split("\n"):
        if not line.strip():
            continue
        if not line.startswith("  "):
            file = line.strip()
            if len(file) >= 2 and file[0] == file[-1] == '"':
                file = file[1:-1]
            continue
        key, _, spec = line.strip().partition(" ")
        if file is None:
            continue
        if key.startswith("h_"):
            out.append({"file": file, "lines": _lines(spec), "kind": "human", "tool": None,
                        "model": None, "session": None})
            continue
        rec = ((meta.get("sessions") or {}).get(key.split("::")[0]) if key.startswith("s_")
               else (meta.get("prompts") or {}).get(key)) or {}
        agent = rec.get("agent_id") if isinstance(rec, dict) else None
        agent = agent if isinstance(agent, dict) else {}
        out.append({"file": file, "lines": _lines(spec), "kind": "agent", "tool": agent.get("tool"),
                    "model": agent.get("model"), "session": agent.get("id")})
    return out


def git_ai_notes(git: Git, shas: set[str]) -> dict[str, list[dict]]:
    if getattr(git, "has_ai_notes", None) is False:  # no refs/notes/ai (asked with HEAD)
        return {}
    raw = git._run(["notes", "--ref=ai", "list"], ok_codes=(0, 1, 128))
    pairs = [ln.split() for ln in raw.splitlines() if len(ln.split()) == 2]
    want = {c: n for n, c in pairs if c in shas}
    if not want:
        return {}
    blobs = git.cat_files(sorted(set(want.values())), max_bytes=8 << 20)
    out = {}
    for c, n in want.items():
        b = blobs.get(n)
        if b:
            out[c] = parse_git_ai(b.decode("utf-8", "replace"))
    return out


def agent_trace(git: Git, shas: set[str]) -> dict[str, list[dict]]:
    d = Path(git.root) / ".agent-trace"
    out: dict[str, list[dict]] = {}
    if not d.is_dir():
        return out
    for p in sorted(d.glob("*.jsonl")):
        try:
            if p.stat().st_size > MAX_TRACE_BYTES:
                log.info("%s: larger than %d MB, not read", p, MAX_TRACE_BYTES >> 20)
                continue
            lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            rev = ((r.get("vcs") or {}).get("revision") if isinstance(r, dict) else None)
            if rev not in shas:
                continue
            for f in r.get("files") or []:
                for conv in (f.get("conversations") or []) if isinstance(f, dict) else []:
                    c = conv.get("contributor") or {}
                    lines_ = set()
                    for rg in conv.get("ranges") or []:
                        try:
                            lines_.update(range(int(rg["start_line"]), int(rg["end_line"]) + 1))
                        except (KeyError, TypeError, ValueError):
                            continue
                    kind = {"ai": "agent", "human": "human"}.get(c.get("type"), c.get("type") or "unknown")
                    out.setdefault(rev, []).append({
                        "file": f.get("path"), "lines": lines_, "kind": kind, "tool": (r.get("tool") or {}).get("name"),
                        "model": c.get("model_id"), "session": (conv.get("url") or conv.get("id"))})
    return out


def annotate(git: Git, commits: list[dict]) -> None:
    """Add ``peers`` (each claim, its source and its check) to the commits that have records,
    and list a claimed agent session Engram did not find as a session with that ``via``."""
    shas = {c["sha"] for c in commits}
    try:
        sources = {"git-ai": git_ai_notes(git, shas), "agent-trace": agent_trace(git, shas)}
    except Exception as e:  # a peer's record must never break the answer
        log.info("peer records not read: %s", type(e).__name__)
        return
    for c in commits:
        found = []
        for via, by_sha in sources.items():
            for claim in by_sha.get(c["sha"], []):
                found.append(_check(c, claim, via))
        if not found:
            continue
        c["peers"] = found
        known = {s.get("session") for s in c["sessions"]}
        for p in found:
            if p["kind"] == "agent" and p["session"] and p["session"] not in known:
                c["sessions"].append({"session": p["session"], "tape_id": None, "harness": p["tool"],
                                      "model": p["model"], "label": None, "tier": "agent",
                                      "lines": 0, "via": p["via"], "check": p["check"]})
                known.add(p["session"])


def _check(c: dict, claim: dict, via: str) -> dict:
    ours: set[int] = set()
    for f in c.get("files", []):
        if f["path"] == claim["file"]:
            for spec in (f.get("line_ranges") or {}).values():
                ours |= _lines(spec)
    lines = claim["lines"]
    both = len(lines & ours)
    if not lines:
        check = "unchecked"
    elif claim["kind"] == "agent":
        check = ("agrees" if both and both * 2 >= len(lines)
                 else "conflicts" if ours or c["added_lines"] else "unchecked")
    else:
        check = "conflicts" if both else "agrees"
    return {"via": via, "file": claim["file"], "kind": claim["kind"], "tool": claim["tool"],
            "model": claim["model"], "session": claim["session"], "lines": len(lines),
            "lines_engram_agrees": both, "check": check}
