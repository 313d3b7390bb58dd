"""Code lens counts kept on disk (``engram_lsp.lenses``): a restarted server answers the lenses of
a saved file from them before its engine is loaded, only while the file's text and the index's
generation are those they were computed for; the same titles as a computed lens."""

from __future__ import annotations

import os
import stat

import orjson
from lsp_helpers import lenses, open_doc, wait_indexed
from waiting import wait_until

from engram_lsp import lenses as lens_store

FROM_DISK = "code lens from the kept counts: "


def _store_path(ws):
    return ws.engram_home / "index" / ("index.sqlite" + lens_store.SUFFIX)


def _titles(result) -> list[str]:
    return [lens.command.title for lens in result]


async def test_a_restarted_server_answers_from_the_kept_counts(lsp, ws):
    text = ws.files["hello.py"] + "\n\ndef mine(a, b):\n    return a * b + 42\n"
    (ws.root / "mixed.py").write_text(text)
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "mixed.py")
    first = _titles(await lenses(client, uri))
    assert first == ["1 session"]
    store = _store_path(ws)
    wait_until(store.exists, 10, message="the lens counts written to disk")
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    data = orjson.loads(store.read_bytes())
    assert data["generation"] and len(data["entries"]) == 1
    assert FROM_DISK not in (ws.base / "server.log").read_text()
    await client.shutdown_session()

    # a new server: the same lens, from the kept counts (logged), before its own ingest is done
    client = await lsp(ws)
    uri = open_doc(client, ws, "mixed.py")
    assert _titles(await lenses(client, uri)) == first
    assert FROM_DISK + uri in (ws.base / "server.log").read_text()

    # what is kept is what is shown: a count changed on disk is what the next server shows
    (key, blocks), = data["entries"].items()
    blocks[0][2] = 7
    store.write_bytes(orjson.dumps(data))
    await client.shutdown_session()
    client = await lsp(ws)
    uri = open_doc(client, ws, "mixed.py")
    assert _titles(await lenses(client, uri)) == ["7 sessions"]
    await client.shutdown_session()


async def test_kept_counts_of_another_text_or_generation_are_not_used(lsp, ws):
    (ws.root / "mixed.py").write_text(ws.files["hello.py"])
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "mixed.py")
    assert _titles(await lenses(client, uri)) == ["1 session"]
    store = _store_path(ws)
    wait_until(store.exists, 10, message="the lens counts written to disk")
    await client.shutdown_session()
    data = orjson.loads(store.read_bytes())
    for blocks in data["entries"].values():
        blocks[0][2] = 7
    data["generation"] = "an-older-generation"
    store.write_bytes(orjson.dumps(data))
    client = await lsp(ws)
    uri = open_doc(client, ws, "mixed.py")
    assert _titles(await lenses(client, uri)) == ["1 session"]  # computed, not the kept 7
    # an edited buffer (another text) is never answered from them either
    edited = open_doc(client, ws, "edited.py", text=ws.files["hello.py"] + "\n# edited\n")
    assert _titles(await lenses(client, edited)) == ["1 session"]
    assert FROM_DISK not in (ws.base / "server.log").read_text()


def test_the_store_misses_rather_than_guesses(tmp_path):
    index = tmp_path / "index.sqlite"
    store = lens_store.LensStore(index)
    key = lens_store.key(tmp_path / "a.py", "def f():\n    pass\n")
    assert store.get(key) is None                      # no file, no index
    store.put(key, "g1", [[1, 2, 3]])
    assert store.get(key) is None                      # no index to say which generation is current
    assert key != lens_store.key(tmp_path / "a.py", "def f():\n    pass\n\n")
    assert key != lens_store.key(tmp_path / "b.py", "def f():\n    pass\n")
    store.path.write_bytes(b"{not json")
    assert store.get(key) is None
    store.put(key, "g1", [[1, 2, 3]])                  # a broken file is replaced, not merged
    assert orjson.loads(store.path.read_bytes())["entries"] == {key: [[1, 2, 3]]}
    store.put("other", "g2", [[4, 5, 1]])               # a new generation drops the old entries
    assert orjson.loads(store.path.read_bytes())["entries"] == {"other": [[4, 5, 1]]}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _git_init(root) -> None:
    import shutil
    import subprocess

    shutil.rmtree(root / ".git")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"]):
        subprocess.run(cmd, cwd=root, check=True, capture_output=True)


async def test_the_workspace_files_counts_are_kept_ahead_for_the_next_server(lsp, ws):
    """A git work tree's files nobody opened get their counts kept too (``engram_lsp.ahead``),
    once the index has stayed the same a while after an ingest: the next server answers their
    first lens from disk, with the titles a computed lens shows."""
    text = ws.files["hello.py"] + "\n\ndef mine(a, b):\n    return a * b + 42\n"
    (ws.root / "mixed.py").write_text(text)
    (ws.root / "ignored.py").write_text(text)
    (ws.root / ".gitignore").write_text("ignored.py\n")
    _git_init(ws.root)
    client = await lsp(ws)
    await wait_indexed(client)
    store = _store_path(ws)
    mixed = ws.root / "mixed.py"
    key = lens_store.key(mixed, text)

    def kept() -> bool:
        try:
            return key in orjson.loads(store.read_bytes())["entries"]
        except (OSError, ValueError):
            return False

    wait_until(kept, 30, message="the counts of a file never opened kept ahead")
    entries = orjson.loads(store.read_bytes())["entries"]
    assert lens_store.key(ws.root / "ignored.py", text) not in entries  # git ignores it
    await client.shutdown_session()
    log = ws.base / "server.log"

    client = await lsp(ws)  # its first lens of the file: from the counts kept ahead
    uri = open_doc(client, ws, "mixed.py")
    from_disk = _titles(await lenses(client, uri))
    assert log.read_text().count(FROM_DISK + uri) == 1
    await client.shutdown_session()

    store.unlink()  # and computed by a server that finds nothing kept: the same titles
    client = await lsp(ws)
    uri = open_doc(client, ws, "mixed.py")
    assert _titles(await lenses(client, uri)) == from_disk == ["1 session"]
    assert log.read_text().count(FROM_DISK + uri) == 1
    await client.shutdown_session()
