"""LSP method ``textDocument/codeLens``, a server's first: with no counts kept on disk, a server
whose engine is not imported yet counts the lens without it (``engram.query.direct``, no numpy),
the same titles as the engine's lens of the same text; once the engine is there, lenses go the
engine's way."""

from __future__ import annotations

from lsp_helpers import lenses, open_doc, wait_indexed
from lsprotocol import types

from engram_lsp import lenses as lens_store

DIRECT = "code lens without the engine: "


def _titles(result) -> list[str]:
    return [lens.command.title for lens in result]


async def _counted_by_the_engine(lsp, ws) -> tuple[str, list[str]]:
    """mixed.py's text and lens titles from a server with the engine; then that server is shut
    down and the lens counts it kept are removed (the next server starts with nothing kept)."""
    text = ws.files["hello.py"] + "\n\ndef mine(a, b):\n    return a * b + 42\n"
    (ws.root / "mixed.py").write_text(text)
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "mixed.py")
    computed = _titles(await lenses(client, uri))
    await client.shutdown_session()
    (ws.engram_home / "index" / ("index.sqlite" + lens_store.SUFFIX)).unlink(missing_ok=True)
    return text, computed


async def test_a_first_lens_without_the_engine_is_the_engines(lsp, ws):
    text, computed = await _counted_by_the_engine(lsp, ws)
    assert computed == ["1 session"]
    assert DIRECT not in (ws.base / "server.log").read_text()

    # a fresh server, nothing kept: the first lens before the engine's import, the same titles
    client = await lsp(ws)
    uri = open_doc(client, ws, "mixed.py")
    assert _titles(await lenses(client, uri)) == computed
    assert DIRECT + uri in (ws.base / "server.log").read_text()
    # once the engine is loaded (its startup ingest done), the engine answers
    await wait_indexed(client)
    other = open_doc(client, ws, "other.py", text=text + "\n# another buffer\n")
    assert _titles(await lenses(client, other)) == computed
    assert DIRECT + other not in (ws.base / "server.log").read_text()
    await client.shutdown_session()


async def test_a_big_buffer_waits_for_the_engine(lsp, ws):
    from engram_lsp.features.code_lens import DIRECT_MAX_CHARS

    text = ws.files["hello.py"] + "\n\ndef mine(a, b):\n    return a * b + 42\n"
    big = text + "\n" + "# padding\n" * (DIRECT_MAX_CHARS // 10 + 1)
    (ws.root / "big.py").write_text(big)
    client = await lsp(ws)
    await wait_indexed(client)  # the index, then a fresh server with nothing kept
    await client.shutdown_session()
    (ws.engram_home / "index" / ("index.sqlite" + lens_store.SUFFIX)).unlink(missing_ok=True)
    client = await lsp(ws)
    uri = open_doc(client, ws, "big.py")
    assert _titles(await lenses(client, uri)) == ["1 session"]
    assert DIRECT not in (ws.base / "server.log").read_text()
    await client.shutdown_session()


async def test_the_first_lens_is_counted_from_the_open(lsp, ws):
    """Nothing kept: the count starts as the buffer opens (its text is there) and the lens
    request takes it; a buffer changed before the request is counted again, as it is now."""
    text, computed = await _counted_by_the_engine(lsp, ws)

    client = await lsp(ws)
    uri = open_doc(client, ws, "mixed.py")
    # another buffer, changed before its lens is asked for: counted as it is now (none of the new
    # text is indexed), not as it opened
    other = open_doc(client, ws, "other.py", text=text)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=other, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(
            text="def fresh():\n    return 'nobody wrote this'\n")]))
    assert _titles(await lenses(client, uri)) == computed
    assert _titles(await lenses(client, other)) == []
    log = (ws.base / "server.log").read_text()
    assert "code lens counted from the open: " + uri in log and DIRECT + uri in log
    assert "code lens counted from the open: " + other in log
    await client.shutdown_session()
