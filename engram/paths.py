"""Where things live: ``user_dir()`` honours ``ENGRAM_HOME``; a repo root holds ``.engram/``."""

from __future__ import annotations

import os
from pathlib import Path


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


def cache_dir(root: Path) -> Path:
    return Path(root) / ".engram-cache"


def default_index_path(root: Path) -> Path:
    return cache_dir(root) / "index.sqlite"


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
