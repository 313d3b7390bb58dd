"""Fault injection on the CLI: files that are not files, and logs that carry terminal escapes.

The commands run as real processes (``python -m engram.cli``) with a deadline: a command that
hangs on a FIFO or grows on ``/dev/zero`` fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram.files import MAX_FILE_BYTES

DEADLINE_S = 20.0  # generous for a loaded machine; the commands answer in well under a second


def engram(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``engram ARGV`` as a process; fail (and kill it) when it outlives the deadline."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.cli", *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "ENGRAM_NO_PROGRESS": "1", **(env or {})},
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"engram {' '.join(argv)} did not return within {DEADLINE_S} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    os.mkfifo(root / "pipe.py")
    (root / "adir").mkdir()
    (root / "ok.py").write_text("def f():\n    return 1\n")
    with open(root / "huge.py", "wb") as f:  # sparse: 20 MiB + 1 without using the disk
        f.truncate(20 * 1024 * 1024 + 1)
    return root


@pytest.mark.parametrize("command", ["explain", "blame", "trace"])
@pytest.mark.parametrize(
    "target, needle",
    [
        ("pipe.py", "FIFO"),
        ("/dev/zero", "character device"),
        ("adir", "directory"),
        ("huge.py", "too large"),
    ],
)
def test_not_a_regular_file_is_a_one_line_error(repo, command, target, needle):
    argv = [command, f"{target}:1-3" if command == "explain" else target]
    res = engram(*argv, cwd=repo)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {target}: "), res.stderr
    assert needle in lines[0]
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("target", ["pipe.py", "/dev/zero", "adir"])
def test_explain_whole_file_form_refuses_too(repo, target):
    """``engram explain FILE`` (no range) counts the file's lines: the same reader, no hang."""
    res = engram("explain", target, cwd=repo)
    assert res.returncode == 1 and res.stderr.startswith(f"Error: {target}: "), res.stderr
    assert "Traceback" not in res.stderr


def test_size_limit_is_a_setting(repo):
    assert (repo / "huge.py").stat().st_size > MAX_FILE_BYTES
    res = engram("blame", "ok.py", cwd=repo, env={"ENGRAM_MAX_FILE_BYTES": "8"})
    assert res.returncode == 1 and "too large" in res.stderr and "ENGRAM_MAX_FILE_BYTES" in res.stderr
    # the default still reads an ordinary file (no index yet: that is the error, not the file)
    res = engram("explain", "ok.py:1-2", cwd=repo)
    assert "too large" not in res.stderr and "regular file" not in res.stderr, res.stderr
