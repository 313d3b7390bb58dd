"""Real git for the sharing tests: a bare remote and clones, each clone with its own ``HOME`` and
``ENGRAM_HOME`` (a teammate's machine), sessions written as real Claude Code logs whose ``cwd``
is the clone, and ``engram`` run as a real process in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from claude_log import World

DEADLINE_S = 120.0
OTHERS = ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider")


def git(*args: str, cwd: Path, env: dict | None = None, input: bytes | str | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    text = not isinstance(input, bytes)
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, input=input, text=text,
                       env={**os.environ, **(env or {})}, timeout=DEADLINE_S)
    if check:
        assert p.returncode == 0, (args, p.stderr)
    return p


def bare_remote(tmp: Path) -> Path:
    remote = tmp / "remote.git"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(remote), cwd=tmp)
    return remote


class Clone:
    """One teammate: ``<base>/repo`` cloned from ``remote``, logs in ``<base>/logs``, ``HOME``
    and ``ENGRAM_HOME`` of its own; ``extra_logs``: more Claude Code log folders it reads."""

    def __init__(self, tmp: Path, name: str, remote: Path, extra_logs: list[Path] = ()):
        self.base = tmp / name
        self.base.mkdir()
        self.home = self.base / "home"
        self.engram_home = self.base / "engram-home"
        self.home.mkdir()
        self.engram_home.mkdir()
        self.root = self.base / "repo"
        self.logs = self.base / "logs"
        git("clone", "--quiet", "--no-local", str(remote), str(self.root), cwd=self.base,
            env=self.env())
        git("config", "user.name", name, cwd=self.root)
        git("config", "user.email", f"{name}@example.com", cwd=self.root)
        if git("rev-parse", "--verify", "--quiet", "HEAD", cwd=self.root, check=False).returncode:
            git("checkout", "--quiet", "-b", "main", cwd=self.root)
        logs = [str(self.logs), *map(str, extra_logs)]
        cfg = "harnesses:\n  claude_code:\n    paths: [" + ", ".join(logs) + "]\n"
        cfg += "".join(f"  {h}: false\n" for h in OTHERS)
        (self.engram_home / "config.yml").write_text(cfg)
        self.world = _CloneWorld(self)

    def env(self) -> dict:
        return {**os.environ, "HOME": str(self.home), "ENGRAM_HOME": str(self.engram_home),
                "ENGRAM_NO_PROGRESS": "1", "PYTHONDONTWRITEBYTECODE": "1"}

    def engram(self, *argv: str, check: bool = True, timeout: float = DEADLINE_S,
               input: str | None = None) -> subprocess.CompletedProcess:
        p = subprocess.run([sys.executable, "-m", "engram.cli", *argv], cwd=self.root, text=True,
                           capture_output=True, env=self.env(), timeout=timeout, input=input)
        if check:
            assert p.returncode == 0, (argv, p.stderr)
        return p

    def popen(self, *argv: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "engram.cli", *argv], cwd=self.root,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env())

    def json(self, *argv: str, input: str | None = None):
        return json.loads(self.engram(*argv, input=input).stdout)

    def git(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return git(*args, cwd=self.root, env=self.env(), **kw)

    def commit_code(self, message: str) -> None:
        """Commit the world's files and push main (after taking the others' main)."""
        self.world.checkout()
        self.git("add", "--", *sorted(self.world.files))
        self.git("commit", "--quiet", "-m", message)
        if self.git("ls-remote", "--heads", "origin", "main").stdout.strip():
            self.git("pull", "--quiet", "--rebase", "origin", "main")
        self.git("push", "--quiet", "origin", "HEAD:refs/heads/main")


class _CloneWorld(World):
    """A ``claude_log.World`` whose repository is the clone and whose logs are the clone's (the
    harness config lives in the clone's ``ENGRAM_HOME``, never in the repository)."""

    def __init__(self, clone: Clone):
        self._clone = clone
        super().__init__(clone.base)

    def write_config(self) -> None:
        pass


def remote_tapes(remote: Path) -> list[str]:
    """The tape ids on the remote's ``refs/engram/tapes`` (real ``git ls-tree``)."""
    p = git("ls-tree", "-r", "--name-only", "refs/engram/tapes", cwd=remote, check=False)
    if p.returncode:
        return []
    return sorted(Path(x).name.split(".")[0] for x in p.stdout.split())
