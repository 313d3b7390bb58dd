"""``engram pull [REMOTE]``: fetch the remote's ``refs/engram/tapes`` and make its tapes a source.

The ref is fetched into this clone's private copy (``refs/engram/remotes/<remote>/tapes``), and
each tape not already here is *verified* (``engram.share.verify``: name = xxh3-128 of the
content, streamed, capped, in bounded memory) and unpacked into ``$ENGRAM_HOME/pulled/`` (0700,
files 0600), which ingest reads like any tape directory. Only a verified tape id becomes a file
name there: no path in the ref's tree, and nothing in a tape, decides where anything is written.
Nothing from the remote is executed.

Unpacked rather than read from git objects: measured in ``bench/bench_share.py``
(docs/benchmarks.md, "Sharing"), unpacking costs once per new tape at pull time, while reading
windows through git would cost a ``git cat-file`` round trip on every hover and explain.

A tree entry that is not a tape at its place, or a tape that fails verification, is reported
(``rejected``, naming it) and skipped; the rest of the pull goes on.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from pathlib import Path

from engram import paths
from engram.errors import CorruptTape
from engram.files import fsync_dir
from engram.share.git import REF, Git, ShareError, fetch_ref, open_repo
from engram.share.push import _locked, remote_of, tape_path
from engram.share.verify import MAX_TAPE_BYTES, verify_stream
from engram.tape.writer import SUFFIX, sweep_temp

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"^(\d{6}) (\w+) ([0-9a-f]{40,64}) +(-|\d+)\t(.*)$")
_TAPE_PATH = re.compile(r"^[0-9a-f]{2}/([0-9a-f]{32})" + re.escape(SUFFIX) + "$")


def pulled_dir() -> Path:
    """Where pulled tapes are unpacked: ``$ENGRAM_HOME/pulled``."""
    fn = getattr(paths, "pulled_tapes_dir", None)
    return fn() if fn is not None else paths.user_dir() / "pulled"


def max_tape_bytes(config) -> int:
    return int(getattr(config, "sharing_max_tape_bytes", None) or MAX_TAPE_BYTES)


def pull(root: Path, config, *, remote: str | None = None, dest: Path | None = None) -> dict:
    """Fetch the remote's tapes and unpack the new, verified ones into ``dest`` (default
    ``pulled_dir()``). Returns ``{"remote", "ref", "commit", "tapes", "new", "present",
    "rejected": [{"path", "error"}], "dir", "elapsed_s"}`` (``elapsed_s``: the one timing)."""
    t0 = time.perf_counter()
    git = open_repo(root)
    remote = remote_of(config, remote, git)
    dest = paths.private_dir(dest or pulled_dir())
    with _locked(git, "pull.lock"):
        tip = fetch_ref(git, remote)
        result = {"remote": remote, "ref": REF, "commit": tip, "tapes": 0, "new": 0,
                  "present": 0, "rejected": [], "dir": str(dest)}
        if tip is None:
            result["note"] = f"{remote} has no {REF} yet (nobody pushed)"
            result["elapsed_s"] = round(time.perf_counter() - t0, 3)
            return result
        todo = _plan(git, tip, dest, max_tape_bytes(config), result)
        if todo:
            sweep_temp(dest)
            result["new"] = _unpack(git, remote, todo, dest, max_tape_bytes(config), result)
    for r in result["rejected"]:
        log.warning("pull %s: %s: %s", remote, r["path"], r["error"])
    result["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return result


def _plan(git: Git, tip: str, dest: Path, cap: int, result: dict) -> list[tuple[str, str, int, str]]:
    """The tree's tapes that are not here yet: ``[(tape_id, blob sha, size, path)]``; entries
    that are not tapes at their place go to ``result["rejected"]``."""
    todo = []
    largest = max(cap, 1) + (max(cap, 1) >> 7) + 4096  # zstd's worst case over incompressible data
    for line in git.out("ls-tree", "-r", "-l", "--full-tree", tip).splitlines():
        m = _ENTRY.match(line)
        if m is None:
            result["rejected"].append({"path": line[:200], "error": "unreadable tree entry"})
            continue
        mode, kind, sha, size, path = m.groups()
        t = _TAPE_PATH.match(path)
        if kind != "blob" or mode != "100644" or t is None or path != tape_path(t.group(1)):
            result["rejected"].append({"path": path, "error": "not a tape at its place "
                                       f"(<2 hex>/<32 hex>{SUFFIX}, a plain file); ignored"})
            continue
        result["tapes"] += 1
        tid, size = t.group(1), int(size)
        if size > largest:
            result["rejected"].append({"path": path, "error": f"{size}-byte file, more than a "
                                       f"tape of at most {cap} bytes can be"})
            continue
        if (dest / f"{tid}{SUFFIX}").exists():  # verified when it was written (then renamed)
            result["present"] += 1
            continue
        todo.append((tid, sha, size, path))
    return todo


def _unpack(git: Git, remote: str, todo: list, dest: Path, cap: int, result: dict) -> int:
    """Verify each blob while copying it to a temp file of ``dest``; then one sync, and the
    verified ones are renamed to ``<tape id>.jsonl.zst``. The number unpacked."""
    done: list[tuple[str, Path]] = []
    proc = git.popen("cat-file", "--batch")
    try:
        for tid, sha, size, path in todo:
            proc.stdin.write(f"{sha}\n".encode())
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob" or int(header[2]) != size:
                raise ShareError(f"git cat-file gave no blob {sha} for {path}")
            tmp = _verified_copy(proc.stdout, size, tid, f"{remote}:{REF}:{path}", dest, cap,
                                 result)
            if proc.stdout.read(1) != b"\n":
                raise ShareError("git cat-file --batch lost step")
            if tmp is not None:
                done.append((tid, tmp))
        proc.stdin.close()
        proc.wait()
        if done:
            os.sync()  # the tapes are durable before their names appear
        for tid, tmp in done:
            os.replace(tmp, dest / f"{tid}{SUFFIX}")
        fsync_dir(dest)
        return len(done)
    except BaseException:
        for _tid, tmp in done:
            tmp.unlink(missing_ok=True)
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _verified_copy(src, size: int, tid: str, name: str, dest: Path, cap: int,
                   result: dict) -> Path | None:
    fd, tmp = tempfile.mkstemp(prefix=f".{tid}.{os.getpid()}-pull.", suffix=".tmp", dir=dest)
    os.fchmod(fd, paths.FILE_MODE)
    ok = False
    try:
        with os.fdopen(fd, "wb") as sink:
            verify_stream(src, size, tid, name=name, sink=sink, max_tape_bytes=cap)
        ok = True
        return Path(tmp)
    except CorruptTape as e:
        result["rejected"].append({"path": name, "error": e.message})
        return None
    finally:
        if not ok:
            Path(tmp).unlink(missing_ok=True)
