"""The workflow requests over LSP on a real git repository: the hover's commits and notes,
``engram/review``, ``engram/stats``, ``engram/note``, ``engram/feedback``, ``engram/used``."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from lsp_helpers import explain_params, hover, open_doc, plain, request, wait_indexed
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from waiting import async_wait_until

pytestmark = pytest.mark.e2e


def _git(root, *args) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo_ws(ws):
    """The workspace's repo as a real git repository: one commit with the session's files, a
    second with a hand-written file."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    shutil.rmtree(ws.root / ".git")
    _git(ws.root, "init", "-q", "-b", "main")
    _git(ws.root, "config", "user.email", "dev@example.com")
    _git(ws.root, "config", "user.name", "Dev")
    _git(ws.root, "add", "hello.py", "hello.md", "hello.js")
    _git(ws.root, "commit", "-q", "-m", "Add the hello files")
    (ws.root / "mine.py").write_text("def typed_by_a_person(a, b):\n    return a * b + 42\n")
    _git(ws.root, "add", "mine.py")
    _git(ws.root, "commit", "-q", "-m", "A hand-written helper")
    return ws


async def _hover_text(client, uri, line, want: str) -> str:
    """The hover's Markdown once it contains ``want`` (the commits come from a cache the first
    hover fills when git takes longer than the hover waits)."""
    seen = []

    async def has():
        result = await hover(client, uri, line)
        seen[:] = [result.contents.value if result else ""]
        return seen[0] if want in seen[0] else None

    try:
        return await async_wait_until(has, 20, interval=0.2, message=f"a hover with {want!r}")
    except AssertionError:
        raise AssertionError(f"no {want!r} in the hover: {seen}") from None


async def test_hover_names_the_commit_and_shows_a_warning_note_first(lsp, repo_ws):
    ws = repo_ws
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    sha = _git(ws.root, "rev-parse", "HEAD~1")
    md = await _hover_text(client, uri, 4, f"`{sha[:7]}`")
    assert f"Commit: `{sha[:7]}` Add the hello files (" in md
    assert "**Engram** · 1 session" in md
    # a warning note on the function: the hover shows it first
    note = plain(await request(client, "engram/note", {
        "textDocument": {"uri": uri},
        "range": {"start": {"line": 3, "character": 0}, "end": {"line": 4, "character": 0}},
        "kind": "warning", "text": "main() is called by the release script; keep its name"}))
    assert note["tape_id"] and note["note"]["kind"] == "warning"
    # at once: the note is indexed when the request answers, and the cached hover is dropped
    md = (await hover(client, uri, 4)).contents.value
    assert md.startswith("> ⚠ **Warning** note: main() is called by the release script; keep its name")
    assert md.index("Warning") < md.index("**Engram**")


async def test_note_refuses_unsaved_buffers_and_bad_kinds(lsp, repo_ws):
    ws = repo_ws
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    span = {"start": {"line": 3, "character": 0}, "end": {"line": 4, "character": 0}}
    with pytest.raises(JsonRpcException, match="unknown note kind 'rumour'"):
        await request(client, "engram/note", {"textDocument": {"uri": uri}, "range": span,
                                              "kind": "rumour", "text": "x"})
    with pytest.raises(JsonRpcInvalidParams, match="'text'"):
        await request(client, "engram/note", {"textDocument": {"uri": uri}, "range": span,
                                              "kind": "todo"})
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="def other():\n    pass\n")]))
    with pytest.raises(JsonRpcInvalidParams, match="save the file first"):
        await request(client, "engram/note", {"textDocument": {"uri": uri}, "range": span,
                                              "kind": "todo", "text": "tidy this"})


async def test_review_and_stats(lsp, repo_ws):
    ws = repo_ws
    client = await lsp(ws)
    await wait_indexed(client)
    with pytest.raises(JsonRpcException, match="no such revision: 'HEAD~2'"):
        await request(client, "engram/review", {"range": "HEAD~2..HEAD"})
    review = plain(await request(client, "engram/review", {"range": "HEAD~1..HEAD"}))
    assert review["range"] == "HEAD~1..HEAD"
    assert [c["subject"] for c in review["commits"]] == ["A hand-written helper"]
    assert review["commits"][0]["sessions"] == []
    with pytest.raises(JsonRpcInvalidParams, match="A..B"):
        await request(client, "engram/review", {"range": "HEAD"})
    # the fixture session ran in /tmp/private, outside this repository: only --all counts it
    stats = plain(await request(client, "engram/stats", {"by": "harness"}))
    assert stats["by"] == "harness" and stats["rows"] == []
    stats = plain(await request(client, "engram/stats", {"by": "harness", "all": True}))
    assert [r["key"] for r in stats["rows"]] == ["claude_code"]
    assert stats["total"]["sessions"] == 1
    with pytest.raises(JsonRpcInvalidParams, match="by must be one of"):
        await request(client, "engram/stats", {"by": "colour"})


async def test_feedback_and_used(lsp, repo_ws):
    ws = repo_ws
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    explained = plain(await request(client, "engram/explain", explain_params(uri, 3, 5)))
    assert explained["sessions"], explained
    tape = explained["sessions"][0]["tape_id"]
    fb = plain(await request(client, "engram/feedback", {
        "session": tape, "verdict": "helpful", "textDocument": {"uri": uri},
        "range": {"start": {"line": 3, "character": 0}, "end": {"line": 4, "character": 0}}}))
    assert fb["confidence"] == pytest.approx(0.58)
    used = plain(await request(client, "engram/used", {"session": tape}))
    assert used["recorded"] is True and used["tape_id"] == tape
    with pytest.raises(JsonRpcInvalidParams, match="verdict must be one of"):
        await request(client, "engram/feedback", {"session": tape, "verdict": "meh"})
    with pytest.raises(JsonRpcException, match="no indexed session"):
        await request(client, "engram/feedback", {"session": "nobody-at-all", "verdict": "helpful"})
