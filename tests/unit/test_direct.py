"""The code lens counts without numpy (``engram.query.direct``) are exactly ``explain_blocks``'.

Real files (modules of the running Python's standard library, as in ``test_blocks_one``)
written, read, partly copied and edited by hand-built Claude Code sessions, ingested through the
CLI; then every top-level block of every file (what a code lens asks for), every line's enclosing
block, and ranges past the text's edges are counted both ways: over SQLite, and again with
boilerplate keys and with postings too wide to pack. Also: it loads no numpy, it keeps the rules'
numbers where explain and blocks read them, and it answers nothing for an index it cannot read
exactly (missing, or other fingerprint parameters).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import apsw
import numpy as np
import pytest
from claude_log import World
from test_blocks_one import FILES, REPO, _blocks  # the same files and blocks

from engram import fingerprint
from engram.cli import main
from engram.engine import Engine
from engram.index import db, packed, queries
from engram.query import blocks as B
from engram.query import direct, explain

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    return w


def _sessions(w: World, texts: dict[str, str]) -> None:
    """Writers, readers, partial copies and edits: blocks above and below the floor, several
    sessions per block, sessions that only read."""
    s = w.session(session_id="aaaa0202-0000-0000-0000-000000000001").user("write the helpers")
    for rel in ("utils.py", "parser.py", "formatting.py"):
        s.write(rel, texts[rel])
    s.save()
    w.session(session_id="bbbb0202-0000-0000-0000-000000000002").user("look at them") \
        .read("utils.py").read("formatting.py").read("parser.py").save()
    parser = texts["parser.py"].split("\n")
    w.session(session_id="cccc0202-0000-0000-0000-000000000003").user("half the parser") \
        .write("copy/parser_half.py", "\n".join(parser[: len(parser) // 2]) + "\n").save()
    s = w.session(session_id="dddd0202-0000-0000-0000-000000000004").user("the recipes")
    s.write("recipes.py", texts["recipes.py"]).write("exceptions.py", texts["exceptions.py"]).save()
    recipes = texts["recipes.py"].split("\n")
    w.session(session_id="eeee0202-0000-0000-0000-000000000005").user("some recipes again") \
        .write("copy/recipes_tail.py", "\n".join(recipes[len(recipes) // 3:]) + "\n") \
        .read("exceptions.py").save()
    fmt = texts["formatting.py"]
    line = next(x for x in fmt.split("\n") if x.strip().startswith("def ") and fmt.count(x) == 1)
    w.session(session_id="ffff0202-0000-0000-0000-000000000006").user("rename a helper") \
        .edit("formatting.py", line, line.replace("def ", "def _", 1)).save()
    w.checkout()


def _compare(eng: Engine, texts: dict[str, str], w: World) -> tuple[int, int]:
    """Both ways on every block: (blocks compared, blocks with sessions)."""
    compared = with_sessions = 0
    for rel, text in texts.items():
        path = str(w.root / rel)
        # what a code lens asks: the file's top-level blocks, all in one call
        lens = direct.lens_counts(eng.index_path, text, path)
        tops = [(s, e) for s, e, _n in eng.top_level_blocks(text, path)]
        full = eng.explain_blocks(path, text, tops, events=True)
        assert lens == [{"range": r["range"], "sessions": r["sessions"]} for r in full], rel
        # every other block, all in one call and each alone
        blocks = _blocks(eng, text, path)
        full = [r["sessions"] for r in eng.explain_blocks(path, text, blocks, windows=False)]
        conn = apsw.Connection(str(eng.index_path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            with direct._read(conn):
                assert direct.block_sessions(conn, text, blocks) == full, rel
                for block, n in list(zip(blocks, full, strict=True))[::7]:
                    assert direct.block_sessions(conn, text, [block]) == [n], (rel, block)
        finally:
            conn.close()
        compared += len(blocks) + len(tops)
        with_sessions += sum(map(bool, full))
    return compared, with_sessions


def _write(eng: Engine, fn) -> None:
    conn = apsw.Connection(str(eng.index_path))
    try:
        conn.execute("BEGIN IMMEDIATE")
        fn(conn)
        conn.execute("COMMIT")
    finally:
        conn.close()


def _add_boilerplate(eng: Engine, text: str) -> int:
    """Mark every third winnowed key of ``text`` as boilerplate."""
    keys = np.unique(queries.index_keys(fingerprint.fingerprint(text).hashes))[::3].tolist()
    _write(eng, lambda c: c.executemany(
        "INSERT OR IGNORE INTO boilerplate(hash, n) VALUES (?, 1000)", [(k,) for k in keys]))
    return len(keys)


def _unpack_some(eng: Engine) -> int:
    """Move every fifth packed key's rows to the wide table (as rows too long to pack are)."""
    def move(c):
        K, Bl, L = packed.key_range(c)
        keys = np.unique(K)[::5]
        sel = np.isin(K, keys)
        c.executemany("INSERT OR IGNORE INTO fingerprints VALUES (?,?,?)",
                      zip(K[sel].tolist(), Bl[sel].tolist(), L[sel].tolist()))
        c.executemany("DELETE FROM packed WHERE key = ?", [(k + packed.OFS,) for k in keys.tolist()])
        moved.append(int(sel.sum()))
    moved: list[int] = []
    _write(eng, move)
    return moved[0]


def test_lens_counts_are_explain_blocks_counts(world, capsys):
    w = world
    texts = {rel: (REPO / src).read_text() for rel, src in FILES.items()}
    _sessions(w, texts)
    assert main(["ingest", "--seal"]) == 0
    json.loads(capsys.readouterr().out)
    eng = Engine(w.root)
    try:
        n, hit = _compare(eng, texts, w)
        assert n > 400 and hit > n // 4, (n, hit)
        # both branches of the key choice: short blocks (every k-gram), long ones (a sample)
        sizes = [len(np.unique(queries.index_keys(fingerprint.fingerprint(
            "\n".join(texts["recipes.py"].split("\n")[s - 1:e])).hashes)))
            for s, e in _blocks(eng, texts["recipes.py"], "recipes.py") if 1 <= s <= e]
        assert min(sizes) <= direct.ALL_KGRAMS_MAX < direct.SAMPLE < max(sizes)
        # boilerplate keys: neither looked up nor counted (the counts change, both ways alike)
        assert _add_boilerplate(eng, texts["utils.py"]) > 10
        eng.close()
        eng = Engine(w.root)
        _n2, hit2 = _compare(eng, texts, w)
        assert 0 < hit2
        # rows in the wide table are read too
        assert _unpack_some(eng) > 100
        eng.close()
        eng = Engine(w.root)
        _n3, hit3 = _compare(eng, texts, w)
        assert hit3 == hit2
    finally:
        eng.close()


def test_nothing_for_an_index_it_cannot_read_exactly(world, capsys, monkeypatch):
    w = world
    w.session().user("one").write("a.py", "def f(x):\n    return x + 1\n").save()
    w.checkout()
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()
    index = Engine(w.root).index_path
    text = "def f(x):\n    return x + 1\n"
    assert direct.lens_counts(index, text, "a.py") == [{"range": [1, 2], "sessions": 1}]
    assert direct.lens_counts(index.parent / "missing.sqlite", text, "a.py") is None
    monkeypatch.setenv("ENGRAM_CALIBRATE_K", "7")  # a calibration run: the engine's way
    assert direct.lens_counts(index, text, "a.py") is None
    monkeypatch.delenv("ENGRAM_CALIBRATE_K")
    conn = apsw.Connection(str(index))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'fingerprint'",
                 (json.dumps({**direct.FINGERPRINT, "k": 6}, sort_keys=True),))
    conn.close()
    assert direct.lens_counts(index, text, "a.py") is None


def test_the_rules_are_the_ones_explain_and_blocks_use():
    assert direct.SCHEMA == db.SCHEMA_VERSION
    assert direct.FINGERPRINT == db.fingerprint_params()
    assert (explain.DIRECT_FLOOR, explain.ALL_KGRAMS_MAX, B.SAMPLE) == \
        (direct.DIRECT_FLOOR, direct.ALL_KGRAMS_MAX, direct.SAMPLE)
    assert direct.BOILERPLATE_MAX == B._RowCache.MAX_BOILERPLATE
    assert direct.MMAP_BYTES == db.MMAP_BYTES
    for denom in range(1, 2 * direct.SAMPLE * direct.ALL_KGRAMS_MAX):
        least = direct.least_hits(denom)
        assert min(1.0, least / denom) > explain.DIRECT_FLOOR
        assert least == 1 or not min(1.0, (least - 1) / denom) > explain.DIRECT_FLOOR
    h = [int(x) for x in np.random.default_rng(3).integers(0, 2**63, 50, dtype=np.uint64)]
    assert direct.kgram_hashes(h, 5) == \
        B._kgram_hashes(np.array(h, dtype=np.uint64), 5).tolist()


def test_the_kgram_fold_and_the_window_minima_are_numpys():
    """The k-gram hashes (one big-integer product for all of them) and the winnowing windows'
    minima (pairwise ``min`` maps), against numpy's and a plain loop, over the full 64-bit range,
    its edge values and lengths around k and w."""
    rng = np.random.default_rng(7)
    edges = [0, 1, 2**63 - 1, 2**63, 2**64 - 1]
    for n in [*range(20), 257, 4099]:
        h = [int(x) for x in rng.integers(0, 2**64, n, dtype=np.uint64)]
        h[:len(edges)] = edges[:n]
        for k in (1, 2, 5, 7):
            assert direct.kgram_hashes(h, k) == \
                B._kgram_hashes(np.array(h, dtype=np.uint64), k).tolist(), (n, k)
        v = direct.kgram_hashes(h, 5)
        for w in (1, 2, 3, 8, 9):
            assert direct.window_minima(v, w) == \
                [min(v[i:i + w]) for i in range(len(v) - w + 1)], (n, w)


def test_it_loads_no_numpy(world, capsys):
    w = world
    w.session().user("one").write("a.py", "def f(x):\n    return x + 1\n").save()
    w.checkout()
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()
    code = (
        "import sys\n"
        "from engram.query import direct\n"
        "direct.warm()\n"
        "print(direct.lens_counts(sys.argv[1], 'def f(x):\\n    return x + 1\\n', 'a.py'))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy'))\n")
    out = subprocess.run([sys.executable, "-c", code, str(Engine(w.root).index_path)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.split("\n")[:2] == ["[{'range': [1, 2], 'sessions': 1}]", "[]"]
