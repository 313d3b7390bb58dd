"""``explain_blocks`` of a single block (a hover) takes its own path (``_explain_one``: plain
Python where the arrays are tiny); it must give exactly the general path's answer.

Real files (modules of the running Python's standard library, present on every machine)
written, read, partly copied and edited by hand-built Claude Code sessions, ingested through the
CLI; then every block a hover can ask for (each line's enclosing block), every top-level block and
a few ranges past the text's edges are looked up both ways — in the file's text and, as a hover
asks, in the block's own text — through SQLite alone, with the postings and rows held in memory (the
language server's way), and with boilerplate keys.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import apsw
import numpy as np
import pytest
from claude_log import World
from waiting import wait_until

from engram import fingerprint
from engram.cli import main
from engram.engine import Engine
from engram.index import postings, queries
from engram.query import blocks as B
from engram.query import explain

REPO = Path(sysconfig.get_paths()["stdlib"])
FILES = {  # name in the sessions' repository: the standard library's module
    "utils.py": "textwrap.py",
    "parser.py": "shlex.py",
    "formatting.py": "calendar.py",
    "exceptions.py": "string.py",
    "recipes.py": "heapq.py",
}


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    return w


def _sessions(w: World, texts: dict[str, str]) -> None:
    """Writers, readers, partial copies and edits: ties on confidence, edits beside reads, blocks
    above and below the floor, several sessions per block."""
    s = w.session(session_id="aaaa0101-0000-0000-0000-000000000001").user("write the helpers")
    for rel in ("utils.py", "parser.py", "formatting.py"):
        s.write(rel, texts[rel])
    s.save()
    w.session(session_id="bbbb0101-0000-0000-0000-000000000002").user("look at them") \
        .read("utils.py").read("formatting.py").save()
    parser = texts["parser.py"].split("\n")
    half = "\n".join(parser[: len(parser) // 2]) + "\n"
    utils = texts["utils.py"]
    line = next(x for x in utils.split("\n") if x.strip().startswith("return ") and
                utils.count(x) == 1)
    w.session(session_id="cccc0101-0000-0000-0000-000000000003").user("half the parser") \
        .write("copy/parser_half.py", half).edit("utils.py", line, line + "  # checked").save()
    s = w.session(session_id="dddd0101-0000-0000-0000-000000000004").user("the recipes")
    s.write("recipes.py", texts["recipes.py"]).write("exceptions.py", texts["exceptions.py"]).save()
    recipes = texts["recipes.py"].split("\n")
    tail = "\n".join(recipes[len(recipes) // 3:]) + "\n"
    w.session(session_id="eeee0101-0000-0000-0000-000000000005").user("some recipes again") \
        .write("copy/recipes_tail.py", tail).read("exceptions.py").save()
    fmt = texts["formatting.py"]
    line = next(x for x in fmt.split("\n") if x.strip().startswith("def ") and fmt.count(x) == 1)
    w.session(session_id="ffff0101-0000-0000-0000-000000000006").user("rename a helper") \
        .edit("formatting.py", line, line.replace("def ", "def _", 1)).save()
    # two sessions ending at the same moment with the same code: ranked by tape id
    for sid in ("1111", "2222"):
        s = w.session(session_id=f"{sid}0101-0000-0000-0000-000000000007").user("again")
        s.write(f"twin/{sid}.py", texts["exceptions.py"])
        for rec in s.records:
            rec["timestamp"] = "2026-01-05T12:00:00.000Z"
        s.save()
    w.checkout()


def _blocks(eng: Engine, text: str, path: str) -> list[tuple[int, int]]:
    """Every line's enclosing block, every top-level block, and ranges past the edges."""
    n = text.count("\n") + 1
    table = eng.block_table(text, path) or []
    found = {(start, end) for _f, _l, start, end in table}
    found |= {(s, e) for s, e, _name in eng.top_level_blocks(text, path)}
    found |= {(0, 4), (-3, 2), (n - 3, n + 5), (n + 2, n + 9), (7, 5), (1, n), (3, 3)}
    return sorted(found)


def _compare(eng: Engine, texts: dict[str, str], w: World, hover_text: bool) -> tuple[int, int]:
    """Both paths on every block: (blocks compared, blocks with sessions)."""
    conn = eng.conn()
    compared = with_sessions = 0
    for rel, text in texts.items():
        path = str(w.root / rel)
        lines = text.split("\n")
        for s, e in _blocks(eng, text, path):
            asks = [(text, (s, e), False, True)]  # as a code lens asks (``events``)
            if hover_text and 1 <= s <= e:  # as a hover asks: the block's text, with its window
                alone = lines[s - 1:e]
                asks.append(("\n".join(alone) + "\n", (1, len(alone)), True, True))
            else:
                asks.append((text, (s, e), True, False))
            for t, block, windows, events in asks:
                with B._reading(conn) as cache:
                    general = B._explain_blocks(cache, conn, t, [block], windows, events,
                                                _empty(block))
                with B._reading(conn) as cache:
                    one = B._explain_one(cache, conn, t, block, windows, events, _empty(block))
                assert one == general, (rel, block, windows)
                compared += 1
                with_sessions += bool(one[0]["sessions"])
    # the public call takes the single-block path and answers the same
    text = texts["utils.py"]
    s, e = _blocks(eng, text, str(w.root / "utils.py"))[5]
    with B._reading(conn) as cache:
        general = B._explain_blocks(cache, conn, text, [(s, e)], True, True, _empty((s, e)))
    assert eng.explain_blocks(str(w.root / "utils.py"), text, [(s, e)], events=True) == general
    return compared, with_sessions


def _empty(block: tuple[int, int]) -> list[dict]:
    return [{"range": list(block), "sessions": 0, "best": 0.0, "latest": None, "top": None}]


def _add_boilerplate(eng: Engine, text: str) -> int:
    """Mark every third winnowed key of ``text`` as boilerplate (as an ingest would a key found in
    very many sessions)."""
    keys = np.unique(queries.index_keys(fingerprint.fingerprint(text).hashes))[::3].tolist()
    conn = apsw.Connection(str(eng.index_path))
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT OR IGNORE INTO boilerplate(hash, n) VALUES (?, 1000)",
                         [(k,) for k in keys])
        conn.execute("COMMIT")
    finally:
        conn.close()
    return len(keys)


def test_the_single_block_path_answers_as_the_general_one(world, capsys):
    w = world
    texts = {rel: (REPO / src).read_text() for rel, src in FILES.items()}
    _sessions(w, texts)
    assert main(["ingest", "--seal"]) == 0
    json.loads(capsys.readouterr().out)
    eng = Engine(w.root)
    try:
        # SQLite alone
        n, hit = _compare(eng, texts, w, hover_text=True)
        assert n > 800 and hit > n // 3, (n, hit)
        # both branches of the key choice were taken: short blocks (every k-gram) and long ones
        # (a bounded sample of their winnowed keys)
        sizes = [len(np.unique(queries.index_keys(fingerprint.fingerprint(
            "\n".join(texts["recipes.py"].split("\n")[s - 1:e])).hashes)))
            for s, e in _blocks(eng, texts["recipes.py"], "recipes.py") if 1 <= s <= e]
        assert min(sizes) <= explain.ALL_KGRAMS_MAX < B.SAMPLE < max(sizes)
        # the language server's way: postings and rows held in memory
        conn = eng.conn()
        postings.keep_postings(conn)
        wait_until(lambda: postings.held_postings_status(conn.filename)["postings"] is not None,
                   10, message="the held postings to be read")
        assert postings.prefill(conn)
        n2, hit2 = _compare(eng, texts, w, hover_text=True)
        assert (n2, hit2) == (n, hit)
        cache = postings._cache(conn)
        assert cache.full and cache.snap_use is not None
        # boilerplate keys: neither looked up nor counted
        assert _add_boilerplate(eng, texts["utils.py"]) > 10
        _n3, hit3 = _compare(eng, texts, w, hover_text=False)
        assert B._boilerplate(postings._cache(conn), conn)
        assert hit3 > 0
    finally:
        postings._held.pop(eng.conn().filename, None)
        eng.close()
