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



def _engine(args):
    from engram.engine import Engine

    root = Path(args.root) if getattr(args, "root", None) else None
    index = Path(args.index) if getattr(args, "index", None) else None
    semantic = bool(getattr(args, "semantic", False)) or os.environ.get("ENGRAM_SEMANTIC") == "1"
    eng = Engine(root, index_path=index, semantic=semantic)
    eng.client = "cli"  # the retrieval log's client
    return eng
