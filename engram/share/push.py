"""``engram push [REMOTE]``: publish this repository's tapes on the remote's ``refs/engram/tapes``.

The ref holds a commit whose tree is ``<first 2 hex digits>/<tape id>.jsonl.zst`` for every tape
shared so far (by anyone); each push makes one commit on top of the remote's, adding the tapes
that are new. Nothing else changes: no branch, no HEAD, no index, no working tree (the tree is
built in a temporary index file under the git directory, the tape blobs with ``hash-object -w``,
the commit with ``commit-tree``).

Tapes are content-addressed, so two clones that push at the same time never conflict: the one
the remote rejects (not a fast-forward, or the ref locked by the other) fetches the ref again,
builds the union, and retries. A push refused by a hook on the server (``pre-receive``) is not
retried: the error quotes what the hook printed.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import time
from pathlib import Path

from engram import paths
from engram.errors import CorruptTape
from engram.share import select
from engram.share.git import (
    REF,
    Git,
    GitFailed,
    ShareError,
    check_remote,
    fetch_ref,
    last_line,
    local_ref,
    open_repo,
    remote_messages,
)
from engram.share.verify import TAPE_NAME
from engram.tape.writer import SUFFIX

log = logging.getLogger(__name__)

RETRIES = 8
"""Pushes tried before giving up when other clones keep winning the race."""
_RETRYABLE = ("fetch first", "non-fast-forward", "stale info", "failed to update ref",
              "failed to lock", "cannot lock ref", "incorrect old value", "reference already exists")


def remote_of(config, remote: str | None, git: Git | None = None) -> str:
    """The remote to use: as given, else ``sharing.remote``, else ``origin``.

    ``sharing.remote`` may come from the repository's committed ``.engram/config.yml``, which
    anyone who can commit may change: so a configured value is used only when it names one of this
    clone's git remotes (or one's URL), or when the private ``$ENGRAM_HOME/config.yml`` sets it.
    Otherwise one commit could send everyone's tapes to a repository of its author's choosing."""
    if remote:
        return check_remote(remote)
    configured = getattr(config, "sharing_remote", None)
    if not configured:
        return "origin"
    check_remote(configured)
    if git is None or configured == _private_setting() or _is_remote(git, configured):
        return configured
    raise ShareError(f"sharing.remote is {configured!r}, which is not a remote of this clone; "
                     f"add it (git remote add NAME URL) and set sharing.remote to NAME, set it in "
                     f"$ENGRAM_HOME/config.yml, or name the remote on the command line")


def _is_remote(git: Git, value: str) -> bool:
    names = git.out("remote").split()
    if value in names:
        return True
    urls = git.run("config", "--get-regexp", r"^remote\..*\.(push)?url$", check=False).stdout
    return value in {ln.partition(" ")[2] for ln in urls.splitlines()}


def _private_setting() -> str | None:
    """``sharing.remote`` as the private, machine-wide config file sets it (None if it does not)."""
    import yaml

    try:
        data = yaml.safe_load((paths.user_dir() / "config.yml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    sharing = data.get("sharing") if isinstance(data, dict) else None
    value = sharing.get("remote") if isinstance(sharing, dict) else None
    return value if isinstance(value, str) else None


def tape_path(tape_id: str) -> str:
    """Where a tape lives in the ref's tree."""
    return f"{tape_id[:2]}/{tape_id}{SUFFIX}"


def tree_tapes(git: Git, commit: str | None) -> dict[str, str]:
    """``{tape_id: blob sha}`` of the tapes in ``commit``'s tree (entries that are not tapes at
    their place are left out here; pull reports them)."""
    if commit is None:
        return {}
    out: dict[str, str] = {}
    for line in git.out("ls-tree", "-r", "--full-tree", commit).splitlines():
        info, _tab, path = line.partition("\t")
        mode, kind, sha = (info.split() + ["", "", ""])[:3]
        name = path.rpartition("/")[2]
        m = TAPE_NAME.match(name)
        if kind == "blob" and mode == "100644" and m and path == tape_path(m.group(1)):
            out[m.group(1)] = sha
    return out


@contextlib.contextmanager
def _locked(git: Git, name: str):
    """One push (or pull) at a time in this clone."""
    d = paths.private_dir(select.share_list_path(git).parent)
    with open(d / name, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield d
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def push(root: Path, config, conn=None, *, remote: str | None = None, dry_run: bool = False,
         retries: int = RETRIES) -> dict:
    """Push the shareable tapes of the repository at ``root`` that the remote lacks. ``conn``:
    the index (optional: it finds this repository's sessions whose tapes live elsewhere)."""
    t0 = time.perf_counter()
    git = open_repo(root)
    root = git.repo
    remote = remote_of(config, remote, git)
    with _locked(git, "push.lock") as work:
        result = _push_locked(git, root, config, conn, remote, dry_run, retries, work)
    result["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return result


def _push_locked(git: Git, root: Path, config, conn, remote: str, dry_run: bool, retries: int,
                 work: Path) -> dict:
    tip = fetch_ref(git, remote)
    on_remote = tree_tapes(git, tip)
    new, errors = _new_tapes(root, config, conn, git, on_remote)
    result = {"remote": remote, "ref": REF, "dry_run": dry_run, "on_remote": len(on_remote),
              "tapes": [select.describe(t, meta, why) for t, _p, meta, why in new],
              "pushed": 0, "commit": tip, "errors": errors, "retries": 0}
    if dry_run or not new:
        return result
    blobs = _hash_objects(git, [(t, p) for t, p, _m, _w in new])
    for attempt in range(retries):
        todo = {t: s for t, s in blobs.items() if t not in on_remote}
        if not todo:  # others pushed them meanwhile
            break
        commit = _commit(git, work, tip, todo)
        refused = _push_commit(git, remote, commit)
        if refused is None:
            git.run("update-ref", local_ref(remote), commit)
            result.update(pushed=len(todo), commit=commit, on_remote=len(on_remote) + len(todo))
            break
        log.info("push to %s refused (%s); fetching and retrying", remote, refused)
        time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))
        tip = fetch_ref(git, remote)
        on_remote = tree_tapes(git, tip)
        result.update(commit=tip, on_remote=len(on_remote))
    else:
        raise ShareError(f"push to {remote} was refused {retries} times (other clones kept "
                         "pushing first); try again")
    result["retries"] = attempt
    return result


def _new_tapes(root: Path, config, conn, git: Git, on_remote: dict[str, str]):
    """``([(tape_id, path, meta, reason)], errors)``: the shareable tapes the remote lacks."""
    new, errors = [], []
    for tid, (path, forced) in sorted(select.candidates(root, config, conn, git).items()):
        if tid in on_remote:
            continue
        try:
            why, meta = select.judge(path, root, forced)
        except (CorruptTape, select.Unredacted) as e:
            errors.append({"tape_id": tid, "path": str(path), "error": e.message})
            continue
        if why is not None:
            new.append((tid, path, meta, why))
    return new, errors


def _hash_objects(git: Git, tapes: list[tuple[str, Path]]) -> dict[str, str]:
    """Write the tape files as blobs (one ``git hash-object`` for all); ``{tape_id: sha}``."""
    listing = "".join(f"{p}\n" for _t, p in tapes)
    shas = git.out("hash-object", "-w", "--no-filters", "--stdin-paths", input=listing).split()
    if len(shas) != len(tapes):
        raise ShareError("git hash-object did not hash every tape")
    return {t: s for (t, _p), s in zip(tapes, shas, strict=True)}


def _identity(git: Git) -> dict[str, str]:
    """Git's identity when one is configured; else Engram's (a commit needs one)."""
    if git.run("var", "GIT_COMMITTER_IDENT", check=False).returncode == 0:
        return {}
    return {"GIT_AUTHOR_NAME": "engram", "GIT_AUTHOR_EMAIL": "engram@localhost",
            "GIT_COMMITTER_NAME": "engram", "GIT_COMMITTER_EMAIL": "engram@localhost"}


def _commit(git: Git, work: Path, parent: str | None, blobs: dict[str, str]) -> str:
    """A commit on ``parent`` whose tree is ``parent``'s plus ``blobs``; built in a temporary
    index file, never the user's."""
    index = work / f"push-index.{os.getpid()}"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        if parent is not None:
            git.run("read-tree", parent, env=env)
        else:
            git.run("read-tree", "--empty", env=env)
        info = "".join(f"100644 {sha}\t{tape_path(t)}\n" for t, sha in sorted(blobs.items()))
        git.run("update-index", "--add", "--index-info", input=info, env=env)
        tree = git.run("write-tree", env=env).stdout.strip()
    finally:
        index.unlink(missing_ok=True)
    n = len(blobs)
    msg = f"engram: {n} tape{'s' if n != 1 else ''}\n"
    args = ["commit-tree", tree, "-m", msg]
    if parent is not None:
        args[2:2] = ["-p", parent]
    return git.run(*args, env=_identity(git)).stdout.strip()


def _push_commit(git: Git, remote: str, commit: str) -> str | None:
    """Push ``commit`` to the remote's ref (never forced). None when it went in; the reason when
    the remote refused in a way a retry can fix; ``ShareError`` otherwise."""
    p = git.run("push", "--porcelain", "--", remote, f"{commit}:{REF}", check=False)
    if p.returncode == 0:
        return None
    status = [ln for ln in p.stdout.splitlines() if ln.startswith("!")]
    text = (" ".join(status) + " " + p.stderr).lower()
    if "hook declined" in text:
        said = "; ".join(remote_messages(p.stderr)) or "no message"
        raise ShareError(f"{remote} refused the push of {REF}: its hook said: {said}")
    if any(r in text for r in _RETRYABLE):
        return last_line(status[0] if status else p.stderr)
    said = "; ".join(remote_messages(p.stderr))
    raise GitFailed(f"push of {REF} to {remote} failed: "
                    f"{said or last_line(p.stderr) or last_line(p.stdout) or p.returncode}",
                    p.stderr, p.stdout)
