"""The git ``prepare-commit-msg`` hook that writes ``Engram-Session:`` trailers.

``install(root)`` writes the hook (where ``git rev-parse --git-path hooks`` says hooks live, so
``core.hooksPath`` is honoured); ``uninstall(root)`` removes it. A hook file that is not Engram's
is never overwritten: installing says so and what line to add to it. The hook runs
``python -m engram.commits.hooks MSGFILE [SOURCE [SHA]]``: it attributes the *staged* diff like a
commit (``engram.commits.attribute``) and adds one ``Engram-Session: <session id>`` trailer per
session (``git interpret-trailers``, into the message file only). It never blocks a commit: any
error, or ``TIMEOUT_S`` seconds passing, and it writes nothing and exits 0. Merges, squashes and
amends (``SOURCE`` merge/squash/commit) are left alone.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from engram.commits.git import Git
from engram.errors import EngramError

TIMEOUT_S = 2.0
MARK = "# engram: prepare-commit-msg hook (Engram-Session trailers); `engram hooks uninstall git` removes it"


def _hook_path(root) -> Path:
    git = Git(root)
    p = Path(git._run(["rev-parse", "--git-path", "hooks"]).strip())
    return (p if p.is_absolute() else git.root / p) / "prepare-commit-msg"


def _script() -> str:
    py = sys.executable
    return ("#!/bin/sh\n" + MARK + "\n"
            f"'{py}' -m engram.commits.hooks \"$@\" </dev/null >/dev/null 2>&1\n"
            "exit 0\n")


def install(root) -> dict:
    """Write the hook; ``{"hook": path, "installed": True}``. A foreign hook is an error."""
    p = _hook_path(root)
    if p.exists() and MARK not in p.read_text(errors="replace"):
        raise EngramError(f"{p} exists and is not Engram's; add this line to it to get trailers: "
                          f"'{sys.executable}' -m engram.commits.hooks \"$@\" || true")
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".engram-tmp")
    tmp.write_text(_script())
    tmp.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    os.replace(tmp, p)
    return {"hook": str(p), "installed": True}


def uninstall(root) -> dict:
    """Remove the hook if it is Engram's; ``{"hook": path, "removed": bool}``."""
    p = _hook_path(root)
    if p.exists() and MARK in p.read_text(errors="replace"):
        p.unlink()
        return {"hook": str(p), "removed": True}
    return {"hook": str(p), "removed": False}


def trailers_for_staged(root) -> list[str]:
    """Session ids of the staged diff's sessions (most lines first)."""
    from collections import Counter

    from engram import config as config_mod
    from engram.commits import attribute, diff
    from engram.index import db
    from engram.timestamps import utc_iso

    git = Git(root)
    index = config_mod.load(git.root).index_file()
    if not index.exists():
        return []
    conn = db.connect(index)
    try:
        d = diff.staged_diff(git, utc_iso())
        tapes = attribute._TapeInfo(conn)
        owners = attribute._line_owners(conn, [d], tapes).get("STAGED", {})
        count = Counter(t for lines in owners.values() for t, _rule in lines.values())
        out = []
        for tid, _n in sorted(count.items(), key=lambda kv: (-kv[1], kv[0])):
            info = tapes.tape(tid)
            if info and info.get("session"):
                out.append(info["session"])
        return out
    finally:
        conn.close()


def run(argv: list[str]) -> int:
    """The hook itself: always exits 0; writes trailers or nothing."""
    import signal
    import subprocess

    if not argv or (len(argv) > 1 and argv[1] in ("merge", "squash", "commit")):
        return 0
    msg = Path(argv[0])

    def give_up(*_a):
        raise TimeoutError

    try:
        signal.signal(signal.SIGALRM, give_up)
        signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
        sessions = trailers_for_staged(os.getcwd())
        if not sessions:
            return 0
        text = msg.read_text(encoding="utf-8", errors="replace")
        if "Engram-Session:" in text:
            return 0
        args = ["git", "interpret-trailers", "--in-place", "--if-exists", "addIfDifferent"]
        for s in sessions:
            args += ["--trailer", f"Engram-Session: {s}"]
        signal.setitimer(signal.ITIMER_REAL, 0)
        subprocess.run([*args, str(msg)], check=True, capture_output=True, timeout=TIMEOUT_S)
    except BaseException:  # never block a commit: an error or the time limit writes nothing
        return 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
