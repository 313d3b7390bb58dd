"""Hand-built sessions written as real Claude Code JSONL logs (the record shapes of
``tests/data/harness/claude_code/*.jsonl``): user/assistant text, ``Read``, ``Edit`` with
``toolUseResult.originalFile`` + ``structuredPatch``, ``Write`` create/update; plus OpenClaw
orchestrator logs and repo/config setup. Used by the lineage and trace/blame tests.

A ``World`` holds the repository's files and one clock, so sessions written one after another
edit the same code, as real agents do.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import uuid as uuid_mod
from pathlib import Path

VERSION = "2.0.64"
MODEL = "claude-sonnet-4-5-20250929"


def write_record(cwd: str, session: str, rel: str, content: str, *, text: str | None = None,
                 timestamp: str = "2025-12-10T19:40:00.000Z", model: str = MODEL,
                 msg_id: str = "msg_live") -> dict:
    """One assistant record, as Claude Code logs it, whose ``tool_use`` writes ``content`` to
    ``<cwd>/<rel>`` (optionally after a text block): what a live session appends when it writes a
    file. The one writer of such records for the tests and the benchmarks."""
    return {
        "parentUuid": None, "isSidechain": False, "userType": "external", "cwd": cwd,
        "sessionId": session, "version": VERSION, "type": "assistant",
        "uuid": str(uuid_mod.uuid4()), "timestamp": timestamp,
        "message": {
            "model": model, "id": msg_id, "type": "message", "role": "assistant",
            "content": ([{"type": "text", "text": text}] if text else []) + [{
                "type": "tool_use", "id": f"toolu_{uuid_mod.uuid4().hex[:20]}", "name": "Write",
                "input": {"file_path": f"{cwd}/{rel}", "content": content}}],
            "stop_reason": None,
        },
    }


class World:
    def __init__(self, tmp: Path, start: str = "2026-01-05T09:00:00"):
        self.tmp = Path(tmp)
        self.root = self.tmp / "repo"
        (self.root / ".git").mkdir(parents=True, exist_ok=True)
        (self.root / ".engram").mkdir(exist_ok=True)
        self.logs = self.tmp / "logs"
        self.project = self.logs / "-repo"
        self.project.mkdir(parents=True, exist_ok=True)
        self.claw = self.tmp / "openclaw"
        self.clock = dt.datetime.fromisoformat(start)
        self.files: dict[str, str] = {}
        self.n = 0
        self.write_config()

    def write_config(self) -> None:
        cfg = (f"harnesses:\n  claude_code:\n    paths: [{self.logs}]\n"
               f"  openclaw:\n    paths: [{self.claw}]\n")
        for name in ("codex", "gemini_cli", "opencode", "cursor", "aider"):
            cfg += f"  {name}: false\n"
        (self.root / ".engram" / "config.yml").write_text(cfg)

    def tick(self, seconds: int = 5) -> str:
        self.clock += dt.timedelta(seconds=seconds)
        return self.clock.strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def path(self, rel: str) -> str:
        return str(self.root / rel)

    def session(self, **kw) -> Session:
        self.n += 1
        return Session(self, **kw)

    def orchestrator(self, **kw) -> Orchestrator:
        self.n += 1
        return Orchestrator(self, **kw)

    def checkout(self) -> None:
        """Write the world's current files into the repo (today's code)."""
        for rel, text in self.files.items():
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)


def _patch(before: str, after: str) -> list[dict]:
    a, b = before.splitlines(), after.splitlines()
    hunks = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        lines = []
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                lines += [" " + ln for ln in a[x1:x2]]
            else:
                lines += ["-" + ln for ln in a[x1:x2]]
                lines += ["+" + ln for ln in b[y1:y2]]
        hunks.append({"oldStart": i1 + 1, "oldLines": i2 - i1, "newStart": j1 + 1,
                      "newLines": j2 - j1, "lines": lines})
    return hunks


class Session:
    """One Claude Code session log (``<logs>/-repo/<session>.jsonl``)."""

    def __init__(self, world: World, session_id: str | None = None, name: str | None = None):
        self.w = world
        self.sid = session_id or str(uuid_mod.UUID(int=world.n * 7919 + 1))
        self.name = name or self.sid
        self.records: list[dict] = []
        self.parent: str | None = None
        self.k = 0

    def _uuid(self) -> str:
        self.k += 1
        return str(uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, f"{self.sid}/{self.k}"))

    def _rec(self, typ: str, message: dict, **extra) -> dict:
        u = self._uuid()
        rec = {"parentUuid": self.parent, "isSidechain": False, "userType": "external",
               "cwd": str(self.w.root), "sessionId": self.sid, "version": VERSION,
               "gitBranch": "main", "type": typ, "message": message, "uuid": u,
               "timestamp": self.w.tick()}
        rec.update(extra)
        self.parent = u
        self.records.append(rec)
        return rec

    # -- conversation -------------------------------------------------------------------------
    def user(self, text: str, *, meta: bool = False, compact_summary: bool = False) -> Session:
        extra = {}
        if meta:
            extra["isMeta"] = True
        if compact_summary:
            extra["isCompactSummary"] = True
        self._rec("user", {"role": "user", "content": text}, **extra)
        return self

    def say(self, text: str) -> Session:
        self._rec("assistant", {"model": MODEL, "id": "msg_" + self._uuid()[:12], "type": "message",
                                "role": "assistant", "content": [{"type": "text", "text": text}]})
        return self

    def _tool(self, name: str, args: dict, result_text: str, tur: dict) -> None:
        tid = "toolu_" + self._uuid().replace("-", "")[:20]
        self._rec("assistant", {"model": MODEL, "id": "msg_" + self._uuid()[:12], "type": "message",
                                "role": "assistant",
                                "content": [{"type": "tool_use", "id": tid, "name": name,
                                             "input": args}]})
        self._rec("user", {"role": "user", "content": [
            {"tool_use_id": tid, "type": "tool_result", "content": result_text}]},
            toolUseResult=tur)

    # -- tools --------------------------------------------------------------------------------
    def write(self, rel: str, content: str) -> Session:
        path = self.w.path(rel)
        old = self.w.files.get(rel)
        if old is None:
            tur = {"type": "create", "filePath": path, "content": content, "structuredPatch": [],
                   "originalFile": None}
            msg = f"File created successfully at: {path}"
        else:
            tur = {"type": "update", "filePath": path, "content": content,
                   "structuredPatch": _patch(old, content), "originalFile": old}
            msg = f"The file {path} has been updated."
        self._tool("Write", {"file_path": path, "content": content}, msg, tur)
        self.w.files[rel] = content
        return self

    def edit(self, rel: str, old: str, new: str) -> Session:
        path = self.w.path(rel)
        before = self.w.files[rel]
        assert before.count(old) == 1, f"old_string not unique in {rel}: {old!r}"
        after = before.replace(old, new, 1)
        tur = {"filePath": path, "oldString": old, "newString": new, "originalFile": before,
               "structuredPatch": _patch(before, after), "userModified": False,
               "replaceAll": False}
        self._tool("Edit", {"file_path": path, "old_string": old, "new_string": new},
                   f"The file {path} has been updated.", tur)
        self.w.files[rel] = after
        return self

    def read(self, rel: str) -> Session:
        path = self.w.path(rel)
        content = self.w.files[rel]
        n = len(content.splitlines())
        gutter = "\n".join(f"{i + 1:>6}→{ln}" for i, ln in enumerate(content.splitlines()))
        tur = {"type": "text", "file": {"filePath": path, "content": content, "numLines": n,
                                        "startLine": 1, "totalLines": n}}
        self._tool("Read", {"file_path": path}, gutter, tur)
        return self

    def save(self) -> Path:
        p = self.w.project / f"{self.name}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in self.records))
        return p


class Orchestrator:
    """An OpenClaw (orchestrator tier) session log: ``agents/main/sessions/<id>.jsonl``."""

    def __init__(self, world: World, session_id: str | None = None):
        self.w = world
        self.sid = session_id or f"orch-{world.n}"
        self.lines = [{"type": "session", "id": self.sid, "version": 3,
                       "timestamp": world.tick(), "cwd": str(world.root)}]
        self.parent = self.sid
        self.k = 0

    def _msg(self, role: str, content: list) -> None:
        self.k += 1
        mid = f"{self.sid}-m{self.k}"
        msg = {"role": role, "content": content}
        if role == "assistant":
            msg["model"] = "openclaw-model"
        self.lines.append({"type": "message", "id": mid, "parentId": self.parent,
                           "timestamp": self.w.tick(), "message": msg})
        self.parent = mid

    def user(self, text: str) -> Orchestrator:
        self._msg("user", [{"type": "text", "text": text}])
        return self

    def say(self, text: str) -> Orchestrator:
        self._msg("assistant", [{"type": "text", "text": text}])
        return self

    def save(self) -> Path:
        d = self.w.claw / "agents" / "main" / "sessions"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{self.sid}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in self.lines))
        return p


def run_json(capsys, *argv):
    """Run the real CLI (``engram ARGV...``) in-process; its JSON output, asserting exit 0."""
    from engram.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)

