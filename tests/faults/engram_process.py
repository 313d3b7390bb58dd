"""The fault-injection suite's way to run Engram: ``engram ARGV`` as a real process (the CLI's
error boundary, exit codes and stderr are what is under test), and a repository whose config
points Claude Code at copies of the real fixture logs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "harness" / "claude_code"
BIG_LOG = "codemie__session-624a4a58__compaction.jsonl"  # 2.6 MB: left out of many-copy corpora
DEADLINE_S = 60.0  # a command of the suite, on a loaded machine
OTHER_HARNESSES = ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider")


def engram(*argv: str, cwd: Path, env: dict | None = None, preexec=None, stdin: str | None = None,
           check: bool = False, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess:
    """Run ``engram ARGV``; fail the test (the process killed) when it outlives ``timeout``."""
    try:
        run = subprocess.run([sys.executable, "-m", "engram.cli", *argv], cwd=cwd, text=True,
                             input=stdin, capture_output=True, timeout=timeout, preexec_fn=preexec,
                             env={**os.environ, "ENGRAM_NO_PROGRESS": "1",
                                  "PYTHONDONTWRITEBYTECODE": "1", **(env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"engram {' '.join(argv)} did not return within {timeout} s")
    if check:
        assert run.returncode == 0, run.stderr
    return run


def engram_json(*argv: str, cwd: Path, **kw):
    return json.loads(engram(*argv, cwd=cwd, check=True, **kw).stdout)


def assert_one_line_error(run: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 1 and one ``Error:`` line on stderr naming each of ``needles``, no traceback."""
    assert run.returncode == 1, (run.returncode, run.stderr)
    assert run.stderr.startswith("Error: ") and run.stderr.count("\n") == 1, run.stderr
    assert "Traceback" not in run.stderr
    for n in needles:
        assert n in run.stderr, run.stderr
    return run.stderr


def make_repo(tmp: Path, copies: int = 1) -> Path:
    """A repo whose config points Claude Code (and nothing else) at copies of the fixture logs."""
    logs = tmp / "logs"
    logs.mkdir()
    for i in range(copies):
        for log in sorted(DATA.glob("*.jsonl")):
            if copies > 1 and log.name == BIG_LOG:
                continue
            shutil.copy(log, logs / (f"c{i}__{log.name}" if copies > 1 else log.name))
    root = tmp / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    cfg = f"harnesses:\n  claude_code:\n    paths: [{logs}]\n"
    cfg += "".join(f"  {h}: false\n" for h in OTHER_HARNESSES)
    (root / ".engram" / "config.yml").write_text(cfg)
    return root
