"""Team sharing over git (``engram push``, ``engram pull``, ``engram share``; docs/sharing.md).

Tapes travel on one ref of a git remote, ``refs/engram/tapes``: a commit whose tree holds them,
on no branch. ``push`` publishes this repository's tapes (private by default: ``select``),
``pull`` fetches a remote's and unpacks the ones that pass verification (``verify``) into a
directory ingest reads. ``share_tapes`` adds tapes to what ``push`` may publish.
"""

from __future__ import annotations

from pathlib import Path

from engram.errors import CorruptTape
from engram.share import select
from engram.share.git import ShareError, open_repo
from engram.share.pull import pull, pulled_dir
from engram.share.push import push
from engram.tape import reader

__all__ = ["ShareError", "pull", "pulled_dir", "push", "share_tapes"]


def share_tapes(root: Path, config, conn, specs: list[str]) -> dict:
    """Add tapes (files, ids or unique id prefixes) to this clone's share list; with no
    ``specs``, list it. Each tape is verified first: a corrupt one is refused."""
    git = open_repo(root)
    current = select.read_share_list(git)
    added = []
    for spec in specs:
        tid, path = select.resolve(spec, git.repo, config, conn)
        try:
            reader.check_raw(path)   # (as a stream: a big tape is never held whole)
        except CorruptTape as e:
            raise ShareError(f"{path}: {e.message}; not shared") from None
        if tid not in current and tid not in added:
            added.append(tid)
    listed = sorted(set(current) | set(added))
    where = select.write_share_list(git, listed) if added else select.share_list_path(git)
    return {"added": sorted(added), "shared": listed, "list": str(where)}
