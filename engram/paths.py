"""Where things live: ``user_dir()`` honours ``ENGRAM_HOME``; a repo root holds ``.engram/``.

Everything Engram writes there is private to its owner, whatever the umask: directories 0700
(``private_dir``), files 0600 (``private_file``, ``create_private``). Tapes, the index and its
WAL, the vector cache and lock files hold labels, transcripts and code (docs/security.md).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def user_dir() -> Path:
    """``$ENGRAM_HOME``, default ``~/.engram``."""
    env = os.environ.get("ENGRAM_HOME")
    return Path(env).expanduser() if env else Path.home() / ".engram"


def find_root(start: Path | None = None) -> Path:
    """The nearest ancestor of ``start`` holding ``.engram/`` or ``.git``; else ``start`` itself."""
    start = Path(start or os.getcwd()).resolve()
    for p in (start, *start.parents):
        if (p / ".engram").is_dir() or (p / ".git").exists():
            return p
    return start


def index_dir() -> Path:
    """``$ENGRAM_HOME/index``: the one index of this machine, shared by every repository and
    every ``engram`` / ``engram-lsp`` process (docs/architecture.md, "One index per machine")."""
    return user_dir() / "index"


def default_index_path() -> Path:
    return index_dir() / "index.sqlite"


READAHEAD_MAX_BYTES = 1 << 30  # an index this big or smaller is read ahead whole (``readahead``)
READAHEAD_PIECE = 4 << 20  # bytes asked for by one ``posix_fadvise`` call


def readahead(index: Path, limit: int = READAHEAD_MAX_BYTES) -> int:
    """Ask the kernel to read the index at ``index`` (and its WAL) into the page cache now, in the
    background: ``posix_fadvise(WILLNEED)``, ``READAHEAD_PIECE`` bytes a call (the calls only
    queue the reads: ~30 ms of them for 135 MB, ~3 ms for an index already cached). Returns the bytes asked
    for; 0 when nothing was (no such files, more than ``limit`` bytes, or no ``posix_fadvise``).

    For a process about to answer from the index for the first time (a language server at its
    start): after a reboot, or once other files pushed the index out of the page cache, its first
    answer reads a few hundred pages scattered over the file, one disk read each (a first code
    lens took 165-250 ms so on this project's test VM, against 10-40 ms from the cache); the
    whole file read in order takes 0.25 s for 135 MB there, done before the editor's first
    request comes (the same lens: 35-49 ms). Nothing is read into the process: page cache only,
    which the kernel lets go under memory pressure. An index over ``limit`` is left to SQLite's
    own reads. (Here, not in ``engram.index``: a server calls it first thing, before numpy and
    apsw are imported.)"""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return 0
    index = Path(index)
    files = [f for f in (index, Path(f"{index}-wal")) if f.is_file()]
    try:
        total = sum(f.stat().st_size for f in files)
    except OSError:
        return 0
    if not files or total > limit:
        return 0
    asked = 0
    for f in files:
        try:  # (non-blocking: a FIFO put there meanwhile is not waited on)
            fd = os.open(f, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            size = st.st_size
            # a piece at a time: Linux reads ahead a few MB of one call and drops the rest
            for at in range(0, size, READAHEAD_PIECE):
                advise(fd, at, READAHEAD_PIECE, os.POSIX_FADV_WILLNEED)
            asked += size
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked


def old_cache_dir(root: Path) -> Path:
    """``<root>/.engram-cache``: where an older Engram kept a per-repository index. Nothing reads
    it; ``engram status`` reports it and ``engram gc --old-caches`` removes it."""
    return Path(root) / ".engram-cache"


def repo_tapes_dir(root: Path) -> Path:
    return Path(root) / ".engram" / "tapes"


def user_tapes_dir() -> Path:
    return user_dir() / "tapes"


def is_within(path: str | os.PathLike | None, root: Path) -> bool:
    """Lexical check that ``path`` lies inside ``root`` (no symlink resolution, no disk access)."""
    if not path:
        return False
    p = os.path.normpath(os.path.join(str(root), os.fspath(path)))
    r = os.path.normpath(str(root))
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def private_dir(path: str | os.PathLike) -> Path:
    """``path`` as a directory only its owner can enter: created, with any missing parents, 0700
    whatever the umask; an existing one of ours that others may read or enter loses those bits
    (an index or tape directory left 0755 by an older Engram)."""
    path = Path(path)
    missing = []
    p = path
    while not os.path.isdir(p) and p.parent != p:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
            continue  # made meanwhile by another process
        os.chmod(d, DIR_MODE)  # mkdir's mode went through the umask
    _narrow(path)
    return path


def private_file(path: str | os.PathLike) -> None:
    """Take group and other bits off an existing file of ours (no-op when absent)."""
    _narrow(Path(path))


def create_private(path: str | os.PathLike) -> bool:
    """Create ``path`` as an empty 0600 file unless it exists (then narrow it); True if created.
    SQLite gives a database's ``-wal`` and ``-shm`` files the mode of the database file, so an
    index created this way keeps all three private."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        _narrow(Path(path))
        return False
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True


def _narrow(path: Path) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 and st.st_uid == os.geteuid():
        os.chmod(path, mode & 0o700)
