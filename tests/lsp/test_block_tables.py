"""Block tables kept on disk (``engram_lsp.blocks``): a hover of a text whose table is kept reads
its block from it without a tree-sitter parse, the same block as the parse gives; the workspace's
files get theirs in the pass that keeps lens counts ahead; what cannot be read is a miss."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import orjson
from lsp_helpers import hover, open_doc, request, wait_indexed
from waiting import wait_until

from engram.engine import Engine
from engram.query import symbols
from engram_lsp import blocks
from engram_lsp.backend import Backend
from engram_lsp.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_a_kept_table_answers_every_line_as_the_parse_does_without_parsing(tmp_path):
    text = (REPO / "engram_lsp" / "backend.py").read_text()
    path = tmp_path / "copy.py"
    table = Engine.block_table(text, path)
    assert table is not None and len(table) > 10
    assert blocks.valid(table)
    lines = len(text.splitlines())

    backend = Backend(tmp_path, Settings())
    (tmp_path / ".engram-cache").mkdir()
    backend.settings = Settings(index_path=str(tmp_path / ".engram-cache" / "index.sqlite"))
    store = backend.block_store()
    store.put_many({blocks.key(path, text): table})
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    edited = text + "\n# one more line\n"  # a text never parsed here
    table2 = Engine.block_table(edited, path)
    store.put_many({blocks.key(path, edited): table2})
    with symbols._lock:
        symbols._trees.pop(("python", edited), None)
    got = [backend.enclosing_block(Engine, path, edited, n) for n in range(lines + 5)]
    with symbols._lock:
        assert ("python", edited) not in symbols._trees  # answered from the table: no parse
    assert got == [symbols.enclosing_block(edited, path, n) for n in range(lines + 5)]
    # what is kept is what answers (a table changed on disk is what the next lookup gives)
    data = orjson.loads(store.path.read_bytes())
    data["entries"][blocks.key(path, edited)][0][2:] = [1, 1]
    store.path.write_bytes(orjson.dumps(data))
    assert backend.enclosing_block(Engine, path, edited, 1) == (1, 1)


def test_the_block_store_misses_rather_than_guesses(tmp_path):
    store = blocks.BlockStore(tmp_path / "index.sqlite")
    text = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    table = Engine.block_table(text, "a.py")
    assert [Engine.table_block(table, n) for n in range(1, 7)] == [
        symbols.enclosing_block(text, "a.py", n) for n in range(1, 7)] == [
        (1, 2), (1, 2), (3, 3), (4, 4), (5, 6), (5, 6)]
    key = blocks.key(tmp_path / "a.py", text)
    assert key == blocks.key("elsewhere/b.py", text)     # the same text and language: one entry
    assert key != blocks.key("a.js", text) and key != blocks.key("a.py", text + "\n")
    assert store.get(key) is None                        # no file
    store.put_many({key: table})
    assert store.get(key) == table
    for bad in ([[1, 2, 1, 2], [5, 6, 5, 6]],            # a gap
                [[1, 2, 1, 2], [3, 6, 5, 9]],            # an answer past the last line
                [[1, 3, 0, 2]], [["1", 3, 1, 2]], [], {"a": 1}):
        store.put_many({key: bad})
        assert store.get(key) is None, bad
    store.path.write_bytes(b"{not json")
    assert store.get(key) is None
    store.put_many({key: table})                         # a broken file is replaced
    assert orjson.loads(store.path.read_bytes())["entries"] == {key: table}
    assert Engine.block_table("no grammar here\n", "notes.unknownsuffix") is None
    assert Engine.block_table("", "a.py") is None
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_store_keeps_the_most_recent_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(blocks, "MAX_ENTRIES", 3)
    store = blocks.BlockStore(tmp_path / "index.sqlite")
    for i in range(5):
        store.put_many({f"k{i}": [[1, 1, 1, 1]]})
    assert list(orjson.loads(store.path.read_bytes())["entries"]) == ["k2", "k3", "k4"]


async def test_the_workspace_files_tables_are_kept_ahead_and_hover_the_same(lsp, ws):
    """The pass that keeps lens counts ahead keeps each workspace file's block table; a new
    server's first hover of the file (no parse) shows what a server with nothing kept shows."""
    text = ws.files["hello.py"] + "\n\nclass Mine:\n    def mine(self, a, b):\n        return a * b\n"
    (ws.root / "mixed.py").write_text(text)
    shutil.rmtree(ws.root / ".git")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"]):
        subprocess.run(cmd, cwd=ws.root, check=True, capture_output=True)
    client = await lsp(ws)
    await wait_indexed(client)
    store = ws.engram_home / "index" / ("index.sqlite" + blocks.SUFFIX)
    key = blocks.key(ws.root / "mixed.py", text)

    def kept() -> bool:
        try:
            return key in orjson.loads(store.read_bytes())["entries"]
        except (OSError, ValueError):
            return False

    wait_until(kept, 30, message="the block table of a file never opened kept ahead")
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    await client.shutdown_session()
    lines = len(text.splitlines())

    async def cards() -> list:
        client = await lsp(ws)
        await wait_indexed(client)
        uri = open_doc(client, ws, "mixed.py")
        out = []
        for line in range(lines):
            result = await hover(client, uri, line)
            out.append(None if result is None else (result.contents.value, result.range))
        await client.shutdown_session()
        return out

    kept_cards = await cards()
    assert any(kept_cards)
    data = orjson.loads(store.read_bytes())
    store.unlink()
    assert await cards() == kept_cards

    # the kept table is what the hover used: a table changed on disk is what the next server shows
    data["entries"][key] = [[1, lines, 1, lines]]
    store.write_bytes(orjson.dumps(data))
    client = await lsp(ws)
    await wait_indexed(client)
    result = await hover(client, open_doc(client, ws, "mixed.py"), lines - 1)
    assert (result.range.start.line, result.range.end.line) == (0, lines)  # (end: exclusive)
    await client.shutdown_session()


def test_a_hover_remembers_an_open_buffers_kept_table(tmp_path):
    """``hover._enclosing_block``: an open buffer's kept table is found once per text (its hovers
    then skip the store), answering as the parse does; another text is looked up again."""
    from engram_lsp.documents import Doc
    from engram_lsp.features import hover as H

    text = (REPO / "engram_lsp" / "features" / "hover.py").read_text() + "\n# a copy\n"
    path = tmp_path / "h.py"
    backend = Backend(tmp_path, Settings(index_path=str(tmp_path / "index.sqlite")))
    store = backend.block_store()
    store.put_many({blocks.key(path, text): Engine.block_table(text, path)})
    doc = Doc(uri=path.as_uri(), path=path, file="h.py", text=text, version=1)
    with symbols._lock:
        symbols._trees.pop(("python", text), None)
    lines = len(text.splitlines())
    first = H._enclosing_block(Engine, backend, doc, text, 1)
    store.path.unlink()  # found once: the next hovers of the same text do not look again
    got = [first] + [H._enclosing_block(Engine, backend, doc, text, n) for n in range(2, lines + 3)]
    with symbols._lock:
        assert ("python", text) not in symbols._trees  # no parse
    assert got == [symbols.enclosing_block(text, path, n) for n in range(1, lines + 3)]
    edited = text + "def extra():\n    return 1\n"  # a new text: nothing kept, so parsed
    doc2 = Doc(uri=doc.uri, path=path, file="h.py", text=edited, version=2)
    assert H._enclosing_block(Engine, backend, doc2, edited, lines + 2) == \
        symbols.enclosing_block(edited, path, lines + 2)
    # the buffer's lines, split once per text: what the hover cuts its block from
    lines = H._lines(doc, text)
    assert lines == text.split("\n") and H._lines(doc, text) is lines
    assert H._lines(doc2, edited) == edited.split("\n")  # the buffer changed: split again
    assert H._split[doc.uri][0] is edited
    closed = Doc(uri=doc.uri, path=path, file="h.py", text=None, version=None)  # read from disk
    assert H._lines(closed, text) == lines and H._split[doc.uri][0] is edited  # not remembered


async def test_every_workspace_files_table_is_kept_after_the_startup_ingest(lsp, ws):
    """The tables pass (``engram_lsp.ahead``) keeps the block table of every workspace file right
    after the startup ingest — with code lens off, so that the lens pass (which keeps tables too)
    computes nothing — each the table the parse gives; ``tables_ahead`` counts them down to 0."""
    extra = {"deep.py": "class Outer:\n    class Inner:\n        def m(self):\n            return 1\n\n"
                        "    def n(self):\n        return 2\n\n\ndef top():\n    pass\n",
             "lib/util.py": "import os\n\n\ndef cwd():\n    return os.getcwd()\n"}
    for rel, text in extra.items():
        (ws.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / rel).write_text(text)
    shutil.rmtree(ws.root / ".git")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"]):
        subprocess.run(cmd, cwd=ws.root, check=True, capture_output=True)
    client = await lsp(ws, init_options={"codeLens": {"enabled": False}})
    status = await wait_indexed(client)
    assert status.server.tables_ahead >= 0
    store = ws.engram_home / "index" / ("index.sqlite" + blocks.SUFFIX)
    py = sorted(p for p in ws.root.rglob("*.py") if ".git" not in p.parts)
    assert len(py) >= 3
    want = {blocks.key(p, p.read_text()): Engine.block_table(p.read_text(), p) for p in py}

    def entries() -> dict:
        try:
            return orjson.loads(store.read_bytes())["entries"]
        except (OSError, ValueError):
            return {}

    wait_until(lambda: set(want) <= set(entries()), 30,
               message="every workspace file's block table kept, code lens off")
    got = entries()
    assert {k: got[k] for k in want} == want
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    status = await request(client, "engram/status", {})
    assert status.server.tables_ahead == 0 and status.server.lenses_ahead == 0
    # the lens pass stays off: no lens counts kept for files nobody opened
    assert not (ws.engram_home / "index" / "index.sqlite.lenses").exists()
    await client.shutdown_session()
