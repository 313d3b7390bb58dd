"""Temp workspaces built from real Claude Code logs (``tests/data/harness/claude_code``).

A workspace has a fake ``HOME`` whose ``.claude/projects/<encoded cwd>/<session>.jsonl`` holds the
copied log, a repo directory with the files the session wrote reconstructed from its Write/Edit/
MultiEdit tool calls (paths made relative to the session's ``cwd``), and an ``ENGRAM_HOME``.
Also used by ``tests/nvim`` and ``bench/bench_lsp.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from claude_log import write_record

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "harness" / "claude_code"

HELLO_LOG = "codemie__4c2ddfdc__v2.0.64.jsonl"

# code no fixture session wrote: appended to a log by the live tests
NEW_CODE = '''def fibonacci_memo(n, cache=None):
    """Return the n-th Fibonacci number, memoised."""
    cache = {} if cache is None else cache
    if n in cache:
        return cache[n]
    value = n if n < 2 else fibonacci_memo(n - 1, cache) + fibonacci_memo(n - 2, cache)
    cache[n] = value
    return value
'''


@dataclasses.dataclass
class Workspace:
    base: Path
    home: Path
    engram_home: Path
    root: Path
    log: Path
    files: dict[str, str]
    cwd: str
    session: str

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {"HOME": str(self.home), "ENGRAM_HOME": str(self.engram_home), "PYTHONUNBUFFERED": "1"}
        )
        for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
            env.pop(var, None)
        return env

    def uri(self, rel: str) -> str:
        return (self.root / rel).as_uri()

    def append_write(self, rel: str, content: str, *, text: str | None = None) -> None:
        """Append one assistant record to the log: a Write of ``rel`` (as Claude Code logs it)."""
        record = write_record(self.cwd, self.session, rel, content, text=text)
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


def reconstruct(log: Path) -> tuple[dict[str, str], str, str]:
    """Replay Write/Edit/MultiEdit tool calls: ({path relative to cwd: text}, cwd, session id)."""
    files: dict[str, str] = {}
    cwd = session = ""
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        cwd = cwd or rec.get("cwd") or ""
        session = session or rec.get("sessionId") or ""
        content = (rec.get("message") or {}).get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            inp = block.get("input") or {}
            path = inp.get("file_path")
            if not path:
                continue
            name = block.get("name")
            if name == "Write":
                files[path] = inp.get("content", "")
            elif name == "Edit" and path in files:
                files[path] = files[path].replace(
                    inp["old_string"], inp["new_string"], -1 if inp.get("replace_all") else 1
                )
            elif name == "MultiEdit" and path in files:
                for e in inp.get("edits") or []:
                    files[path] = files[path].replace(
                        e["old_string"], e["new_string"], -1 if e.get("replace_all") else 1
                    )
    prefix = cwd.rstrip("/") + "/"
    rel = {p[len(prefix) :] if p.startswith(prefix) else Path(p).name: t for p, t in files.items()}
    return rel, cwd, session


def make_workspace(base: Path, log_name: str = HELLO_LOG) -> Workspace:
    """Build a workspace for one fixture log under ``base``."""
    base = Path(base)
    src = FIXTURES / log_name
    files, cwd, session = reconstruct(src)
    home = base / "home"
    project = home / ".claude" / "projects" / cwd.replace("/", "-").replace(".", "-")
    project.mkdir(parents=True)
    log = project / f"{session or 'session'}.jsonl"
    log.write_bytes(src.read_bytes())
    root = base / "repo"
    (root / ".git").mkdir(parents=True)
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    engram_home = base / "engram-home"
    engram_home.mkdir()
    return Workspace(
        base=base,
        home=home,
        engram_home=engram_home,
        root=root,
        log=log,
        files=files,
        cwd=cwd,
        session=session,
    )
