"""``engram log`` from the per-commit cache alone, without opening the engine.

A cached ``engram log`` reads one cache row per commit (``engram.commits.cache``); a fresh
process spent most of its time importing what it did not run: the engine, the index's modules
and numpy (the fingerprinting) — ~0.35 s of a 0.56 s run. ``log(args)`` answers from the cache
with the standard library, ``apsw``, ``orjson`` and the configuration only, through the very code
of the full path (``engram.commits.log.log`` with a cache-only ``commits``), so the answer is the
same bytes. It gives ``None`` — and the command then runs the full path, which computes and
caches what is missing — on any doubt: a commit not cached (or stale: a session ingested since
that began before it), no index file, an index that cannot be opened or read as it is (busy,
corrupt, without the cache's table), ``ENGRAM_NO_QUICK`` set.

It never writes: the index is opened without creating it and without migrations. What the full
path would do first and this path does not: migrate an index written by an older Engram (no
migration changes what a cached row says: rows are versioned by ``cache.ATTRIBUTION_VERSION``)
and compare the index's fingerprint parameters with this Engram's (a mismatch makes the full path
ask for ``engram ingest --rebuild``; a cached row, computed from that index, is answered as it
was cached).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_OFF = "ENGRAM_NO_QUICK"   # set (to anything): always the full path


class _Miss(Exception):
    """The cache cannot give this answer: run the full path."""


class _CacheOnly:
    """What ``engram.commits.log.log`` asks of an engine: ``root`` and ``conn()`` (opened on
    first use, never created)."""

    def __init__(self, root: Path, index_path: Path):
        self.root = root
        self.index_path = index_path
        self._conn = None

    def conn(self):
        if self._conn is None:
            import apsw

            if not self.index_path.is_file():
                raise _Miss("no index")
            c = apsw.Connection(str(self.index_path), flags=apsw.SQLITE_OPEN_READWRITE)
            c.set_busy_timeout(2000)
            self._conn = c
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _cached_commits(engine, git, shas: list[str]) -> list[dict]:
    from engram.commits import cache

    have = cache.load(engine.conn(), str(git.root), shas, cache.ATTRIBUTION_VERSION)
    if any(s not in have for s in shas):
        raise _Miss("not cached")
    return [have[s] for s in shas]


def where(cfg, args) -> tuple[Path, Path]:
    """The repository root and index file the full path's engine would use (``Engine.__init__``
    with the command's ``--root`` / ``--index`` and the configuration ``cfg`` loaded for them)."""
    root = Path(args.root).resolve() if getattr(args, "root", None) else cfg.root
    cfg.root = root
    index = Path(args.index) if getattr(args, "index", None) else cfg.index_file()
    return root, index


def log(args, cfg) -> dict | None:
    """``engram log``'s result from the cache, or ``None`` (run the full path). ``cfg``: the
    configuration loaded for ``args.root`` (the full path's engine is then given the same one:
    its warnings are logged once). Errors the full path would give first (not a repository, no
    such revision) are raised as it raises them."""
    if os.environ.get(ENV_OFF):
        return None
    import apsw

    from engram.commits import log as log_mod

    root, index = where(cfg, args)
    eng = _CacheOnly(root, index)
    try:
        return log_mod.log(eng, args.revs, limit=args.limit, agent=args.agent,
                           commits=_cached_commits)
    except (_Miss, apsw.Error):
        return None
    finally:
        try:
            eng.close()
        except apsw.Error:
            pass
