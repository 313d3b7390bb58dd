"""hover, codeLens, engram/explain, engram/view, engram/search, engram/status, executeCommand."""

from __future__ import annotations

import json
import platform
import sys
import urllib.parse

import pytest
from lsp_helpers import call, explain_params, hover, lenses, open_doc, plain, request, wait_indexed
from lsprotocol import types

pytestmark = pytest.mark.e2e


async def test_hover_shows_the_sessions_behind_the_function(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    result = await hover(client, uri, 4)  # inside def main()
    assert result is not None
    md = result.contents.value
    assert result.contents.kind == types.MarkupKind.Markdown
    assert "**Engram** · 1 session" in md
    assert "best 100%" in md
    assert "latest 2025-12-10 19:38 UTC" in md
    assert "create hello.py, md and js" in md  # the user's request
    assert "**Assistant:**" in md
    assert "claude_code · claude-sonnet-4-5-20250929" in md
    link = md[md.index("(command:engram.explain?") + len("(command:engram.explain?") :].split(")")[
        0
    ]
    args = json.loads(urllib.parse.unquote(link))
    assert args[0] == uri and args[1]["start"]["line"] == result.range.start.line
    assert (result.range.start.line, result.range.end.line) == (3, 5)  # def main(): … (lines 4-5)


async def test_hover_without_evidence_is_null(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    (ws.root / "mine.py").write_text("def untouched_by_agents(a, b):\n    return a * b + 42\n")
    uri = open_doc(client, ws, "mine.py")
    assert await hover(client, uri, 0) is None


async def test_hover_uses_the_unsaved_buffer(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangeWholeDocument(
                    text="def replaced_in_editor(q):\n    return sorted(q)[::-1]\n"
                )
            ],
        )
    )
    assert await hover(client, uri, 0) is None


async def test_code_lens_per_top_level_symbol(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    (ws.root / "mixed.py").write_text(
        ws.files["hello.py"] + "\n\ndef mine(a, b):\n    return a * b + 42\n"
    )
    uri = open_doc(client, ws, "mixed.py")
    result = list(await lenses(client, uri))
    assert [lens.command.title for lens in result] == ["1 session"]
    lens = result[0]
    assert lens.range.start.line == 3  # def main()
    assert lens.command.command == "engram.explain"
    assert lens.command.arguments[0] == uri
    rng = plain(lens.command.arguments[1])
    assert rng["start"]["line"] == 3


async def test_code_lens_in_javascript_and_markdown(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    js = open_doc(client, ws, "hello.js", language="javascript")
    assert [lens.command.title for lens in await lenses(client, js)] == ["1 session"]
    md = open_doc(client, ws, "hello.md", language="markdown")
    assert {lens.command.title for lens in await lenses(client, md)} == {"1 session"}


async def test_engram_explain_returns_the_engine_result(lsp, ws, monkeypatch):
    monkeypatch.setenv("ENGRAM_HOME", str(ws.engram_home))  # the server's index (one per machine)
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    result = plain(await request(client, "engram/explain", explain_params(uri, 3, 5)))
    assert result["span"]["file"] == "hello.py"
    assert result["span"]["requested"] == [4, 5]
    session = result["sessions"][0]
    assert session["harness"] == "claude_code"
    assert session["label"] == "create hello.py, md and js"
    assert session["windows"][0]["events"]
    # exactly what the engine (and so the CLI) answers on the same index
    from engram.engine import Engine

    engine = Engine(ws.root, index_path=ws.engram_home / "index" / "index.sqlite")
    expected = engine.explain(str(ws.root / "hello.py"), 4, 5, text=ws.files["hello.py"])
    engine.close()
    result["stats"].pop("elapsed_ms"), expected["stats"].pop("elapsed_ms")
    assert result == json.loads(json.dumps(expected))


async def test_engram_explain_options_and_unsaved_text(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    brief = plain(
        await request(
            client,
            "engram/explain",
            explain_params(
                uri,
                3,
                5,
                brief=True,
                before=0,
                after=0,
                minConfidence=0.9,
                all=False,
                expandUntil=5,
            ),
        )
    )
    assert brief["sessions"] and brief["sessions"][0]["windows"][0]["events"] == []
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangeWholeDocument(
                    text="def other(q):\n    return sorted(q)[::-1]\n\n\n\n"
                )
            ],
        )
    )
    empty = plain(await request(client, "engram/explain", explain_params(uri, 0, 2)))
    assert empty["sessions"] == []


async def test_explain_a_file_the_client_never_opened(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    result = plain(
        await request(client, "engram/explain", explain_params(ws.uri("hello.py"), 3, 5))
    )
    assert result["sessions"]


async def test_execute_command_explain_and_reindex(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    rng = {"start": {"line": 3, "character": 0}, "end": {"line": 5, "character": 0}}
    result = plain(
        await call(
            client.workspace_execute_command_async(
                types.ExecuteCommandParams(command="engram.explain", arguments=[uri, rng])
            )
        )
    )
    assert result["sessions"][0]["harness"] == "claude_code"
    summary = plain(
        await call(
            client.workspace_execute_command_async(
                types.ExecuteCommandParams(command="engram.reindex", arguments=[])
            )
        )
    )
    assert summary["sessions"] == 1
    assert await hover(client, uri, 4) is not None


async def test_view_steps_through_a_tape(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    explained = plain(await request(client, "engram/explain", explain_params(uri, 3, 5)))
    tape = explained["sessions"][0]["tape_id"]
    anchor = explained["sessions"][0]["windows"][0]["anchor"]
    view = plain(
        await request(
            client, "engram/view", {"tapeId": tape, "at": anchor, "before": 1, "after": 1}
        )
    )
    assert view["tape_id"] == tape and view["at"] == anchor
    assert [e["offset"] for e in view["events"]] == [anchor - 1, anchor, anchor + 1]
    later = plain(await request(client, "engram/view", {"tapeId": tape, "at": anchor + 3}))
    assert later["at"] == anchor + 3


async def test_search_and_status(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    found = plain(await request(client, "engram/search", {"query": "hello world", "limit": 5}))
    assert found  # the engine's search result object
    status = plain(await request(client, "engram/status", {}))
    assert status["indexed"] is True
    assert status["counts"]["sessions"] == 1
    assert status["live_sessions"][0]["harness"] == "claude_code"
    assert "embedding" in status
    assert str(ws.home / ".claude" / "projects") in status["server"]["watching"]
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    malloc_env = any(k.startswith("MALLOC_") for k in ws.env())
    assert status["server"]["heap_kept"] is (glibc and not malloc_env)
    # the postings are held in memory from the first query on (Engine.hold_postings; read in
    # the background once explain_blocks finds the index ahead of them)
    assert set(status["server"]["memory"]) == {"postings", "reading"}


@pytest.mark.filterwarnings("error::pytest_lsp.LspSpecificationWarning")
async def test_spec_compliant_with_neovim_capabilities(lsp, ws):
    """Impersonate Neovim (no codeLens refresh support): no refresh requests, valid messages."""
    client = await lsp(ws, capabilities="neovim")
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    assert await hover(client, uri, 4) is not None
    assert [lens.command.title for lens in await lenses(client, uri)] == ["1 session"]
    assert client.refresh_requests == 0
