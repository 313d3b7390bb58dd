"""What every command shares (``emit``, ``_engine``), and the commands that live outside
``engram.cli``: each module of ``FEATURES`` has ``register(sub, common)``, which adds its
subcommands to the parser. A command module imports only ``argparse``-level things at load time
(the CLI starts in well under 150 ms); its handlers import the engine and their feature inside.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import orjson

from engram.render import json_printable, printable

FEATURES = (
    "engram.commands.commits",    # log, show COMMIT, review, stats, graph, export (git)
    "engram.commands.share",      # push, pull, share
    "engram.commands.agents",     # mcp, brief, note, hooks
    "engram.commands.retrieval",  # feedback, used
)


def register_all(sub, common) -> None:
    for name in FEATURES:
        importlib.import_module(name).register(sub, common)


def emit(obj, pretty: bool, render=None) -> None:
    """Write a result: ``render(obj)`` for ``--pretty`` when given, else JSON. Neither carries a
    terminal control or bidi character from a log as it is (``engram.render.printable``)."""
    if pretty and render is not None:
        text = printable(render(obj))
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    elif pretty:
        text = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
        sys.stdout.write(json_printable(text) + "\n")
    else:
        sys.stdout.write(json_printable(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()) + "\n")
    sys.stdout.flush()



#: ``engram serve`` (``engram.commands.serve``) keeps engines open between the commands it runs:
#: (repository, index, semantic) -> engine; None in any other process
kept_engines: dict | None = None


def _engine(args):
    from engram.engine import Engine

    root = Path(args.root) if getattr(args, "root", None) else None
    index = Path(args.index) if getattr(args, "index", None) else None
    semantic = bool(getattr(args, "semantic", False)) or os.environ.get("ENGRAM_SEMANTIC") == "1"
    if kept_engines is not None:
        return _kept(root, index, semantic)
    eng = Engine(root, index_path=index, semantic=semantic)
    eng.client = "cli"  # the retrieval log's client
    return eng


class _Kept:
    """An engine ``engram serve`` keeps: a command's ``close()`` leaves it open."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def close(self) -> None:
        pass


def _kept(root: Path | None, index: Path | None, semantic: bool) -> _Kept:
    """The kept engine for this repository and index, opened again when a config file or the
    index file changed since (a new engine reads them as a fresh process would)."""
    from engram import paths
    from engram.engine import Engine

    where = root.resolve() if root is not None else paths.find_root()
    key = (str(where), str(index.absolute()) if index else None, semantic)
    stamp = config_stamp(where)
    held = kept_engines.get(key)
    if held is not None and (held[1] != stamp or held[2] != _file_id(held[0].index_path)):
        held[0].close()
        held = None
    if held is None:
        eng = Engine(root, index_path=index, semantic=semantic)
        eng.client = "cli"
        held = kept_engines[key] = (eng, stamp, _file_id(eng.index_path))
    held[0]._display.clear()  # memoised from the file system: as fresh as a new process's
    held[0].refresh()  # its row cache as of now, not as of the last command's reads
    return _Kept(held[0])


def config_stamp(root: Path) -> tuple:
    """What an engine's config was read from: the user's and the repository's config files."""
    from engram import paths

    out = []
    for p in (paths.user_dir() / "config.yml", root / ".engram" / "config.yml"):
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def _file_id(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
