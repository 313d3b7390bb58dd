"""Git, run as a program: the plumbing commands sharing needs, and their failures as one-line
``ShareError``s.

Every call runs ``git -C <repo>`` with ``GIT_TERMINAL_PROMPT=0`` (a remote that wants a password
fails instead of waiting on a prompt nobody sees) and ``LC_ALL=C`` (git's messages are parsed).
Nothing here touches the user's HEAD, index, working tree or branches: objects are written with
``hash-object -w``/``mktree``/``commit-tree``, and refs only under ``refs/engram/``.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from engram.errors import EngramError

REF = "refs/engram/tapes"
"""The ref that holds a team's tapes, on every remote."""
LOCAL_PREFIX = "refs/engram/remotes/"
"""``<prefix><remote key>/tapes``: this clone's copy of a remote's ``REF``."""


class ShareError(EngramError):
    """Push, pull or share could not be done: not a git repository, an unknown or unreachable
    remote, a push the remote refused (its hook's message is quoted), a git failure."""

    code = "share-failed"


class GitFailed(ShareError):
    """A git command exited non-zero; ``stderr`` holds what it said."""

    def __init__(self, message: str, stderr: str = "", stdout: str = ""):
        super().__init__(message)
        self.stderr = stderr
        self.stdout = stdout


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"})
    env.pop("GIT_DIR", None)  # the repository is the one ``-C`` names
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    if extra:
        env.update(extra)
    return env


class Git:
    """One repository's git: ``run`` (text in, text out) and the few batch commands."""

    def __init__(self, repo: Path):
        self.repo = Path(repo)
        self.extra_env: dict[str, str] = {}

    def _argv(self, args) -> list[str]:
        return ["git", "-C", str(self.repo), *args]

    def run(self, *args: str, input: str | None = None, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        try:
            p = subprocess.run(self._argv(args), input=input, capture_output=True, text=True,
                               env=_env({**self.extra_env, **(env or {})}))
        except FileNotFoundError:
            raise ShareError("git is not installed (or not on PATH)") from None
        if check and p.returncode != 0:
            raise GitFailed(f"git {args[0]} failed: {last_line(p.stderr) or p.returncode}",
                            p.stderr, p.stdout)
        return p

    def out(self, *args: str, input: str | None = None) -> str:
        return self.run(*args, input=input).stdout

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(self._argv(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=_env(self.extra_env))

    def rev(self, ref: str) -> str | None:
        """The commit ``ref`` names here, or None."""
        p = self.run("rev-parse", "--verify", "--quiet", ref + "^{commit}", check=False)
        return p.stdout.strip() or None


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def open_repo(start: Path) -> Git:
    """The git repository that holds ``start`` (its top level); ``ShareError`` when there is none."""
    g = Git(start)
    p = g.run("rev-parse", "--show-toplevel", check=False)
    if p.returncode != 0 or not p.stdout.strip():
        raise ShareError(f"{start} is not inside a git repository; sharing needs one "
                         "(tapes travel on a ref of a git remote)")
    return Git(Path(p.stdout.strip()))


_REMOTE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


def check_remote(remote: str) -> str:
    """``remote`` (a remote's name or a URL) as given, refused if git would read it as an option
    or it holds a control character."""
    if not remote or remote.startswith("-") or any(ord(c) < 32 for c in remote):
        raise ShareError(f"not a git remote: {remote!r}")
    return remote


def remote_key(remote: str) -> str:
    """The part of a local ref that stands for ``remote``: its name when it is a plain remote
    name, else ``url-<xxh3_64 of the URL>``."""
    if _REMOTE_NAME.match(remote) and ".." not in remote and "//" not in remote \
            and not remote.endswith((".", "/", ".lock")):
        return remote
    import xxhash

    return "url-" + xxhash.xxh3_64_hexdigest(remote.encode())


def local_ref(remote: str) -> str:
    return f"{LOCAL_PREFIX}{remote_key(remote)}/tapes"


def remote_messages(stderr: str) -> list[str]:
    """What the remote's hooks printed (git shows it as ``remote: ...`` lines)."""
    out = []
    for ln in (stderr or "").splitlines():
        if ln.startswith("remote:"):
            text = ln[len("remote:"):].strip()
            if text:
                out.append(text)
    return out


def fetch_ref(git: Git, remote: str) -> str | None:
    """Fetch the remote's ``REF`` into this clone's copy of it (``local_ref``); the commit, or
    None when the remote has no such ref yet. Only that ref is fetched (no tags, no branches)."""
    dst = local_ref(remote)
    p = git.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", remote,
                f"+{REF}:{dst}", check=False)
    if p.returncode != 0:
        err = p.stderr.lower()
        if "couldn't find remote ref" in err or "could not find remote ref" in err:
            return None
        raise ShareError(f"cannot fetch {REF} from {remote}: "
                         f"{last_line(p.stderr) or 'git fetch failed'}")
    return git.rev(dst)
