"""Every error path answers: bad params → JSON-RPC errors; a broken index → a rebuild offer."""

from __future__ import annotations

import shutil

import pytest
from lsp_helpers import (
    call,
    frame,
    hover,
    initialize_raw,
    open_doc,
    read_until,
    request,
    start_raw,
    wait_indexed,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from waiting import async_wait_until

pytestmark = pytest.mark.e2e


INVALID_PARAMS = -32602
ENGRAM_ERROR = -32001


def _rng(a=3, b=5):
    return {"start": {"line": a, "character": 0}, "end": {"line": b, "character": 0}}


async def _error(coro) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as exc:
        await call(coro, timeout=10)
    return exc.value


@pytest.mark.parametrize(
    "params, needle",
    [
        ({}, "textDocument"),
        ({"textDocument": {}}, "textDocument.uri"),
        ({"textDocument": {"uri": "URI"}}, "range"),
        ({"textDocument": {"uri": "URI"}, "range": "3-5"}, "range"),
        (
            {"textDocument": {"uri": "URI"}, "range": {"start": {"line": 5}, "end": {"line": 2}}},
            "before start",
        ),
        (
            {"textDocument": {"uri": "URI"}, "range": {"start": {"line": -1}, "end": {"line": 2}}},
            "range.start.line",
        ),
        ({"textDocument": {"uri": "URI"}, "range": _rng(), "minConfidence": 2}, "minConfidence"),
        ({"textDocument": {"uri": "URI"}, "range": _rng(), "before": "three"}, "before"),
        ({"textDocument": {"uri": "URI"}, "range": _rng(), "brief": "yes"}, "brief"),
        ({"textDocument": {"uri": "URI"}, "range": _rng(), "windows": -1}, "windows"),
        ({"textDocument": {"uri": "untitled:Untitled-1"}, "range": _rng()}, "file: URIs"),
        (
            {"textDocument": {"uri": "file:///nonexistent/x.py"}, "range": _rng()},
            "neither open nor on disk",
        ),
        ([1, 2], "must be an object"),
    ],
)
async def test_explain_bad_params_get_invalid_params(lsp, ws, params, needle):
    client = await lsp(ws, init_options={"ingestOnStartup": False, "watch": {"enabled": False}})
    uri = ws.uri("hello.py")
    if (
        isinstance(params, dict)
        and isinstance(params.get("textDocument"), dict)
        and params["textDocument"].get("uri") == "URI"
    ):
        params = {**params, "textDocument": {"uri": uri}}
    err = await _error(client.protocol.send_request_async("engram/explain", params))
    assert err.code == INVALID_PARAMS
    assert needle in err.message


async def test_other_requests_validate_their_params(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    for method, params, needle in [
        ("engram/view", {}, "tapeId"),
        ("engram/view", {"tapeId": "abc"}, "'at'"),
        ("engram/view", {"tapeId": "abc", "at": "x"}, "'at'"),
        ("engram/search", {}, "query"),
        ("engram/search", {"query": "x", "limit": 0}, "limit"),
    ]:
        err = await _error(client.protocol.send_request_async(method, params))
        assert err.code == INVALID_PARAMS and needle in err.message, (method, params, err.message)
    uri = open_doc(client, ws, "hello.py")
    err = await _error(
        client.protocol.send_request_async(
            "engram/explain", {"textDocument": {"uri": uri}, "range": _rng(500, 510)}
        )
    )
    assert err.code == ENGRAM_ERROR and err.data["code"] == "bad-span"
    err = await _error(
        client.protocol.send_request_async("engram/view", {"tapeId": "nope", "at": 0})
    )
    assert err.code == ENGRAM_ERROR and "nope" in err.message
    assert err.data["code"] == "unknown-tape"


def test_malformed_standard_params_are_answered_not_dropped(ws):
    """pygls alone would answer nothing (the client would hang): we answer InvalidParams."""
    proc = start_raw(ws)
    try:
        initialize_raw(proc, ws)
        for i, (method, params) in enumerate(
            [
                ("textDocument/hover", {"textDocument": {}, "position": {"line": "x"}}),
                ("textDocument/codeLens", {"textDocument": 7}),
            ],
            start=10,
        ):
            proc.stdin.write(frame({"jsonrpc": "2.0", "id": i, "method": method, "params": params}))
            proc.stdin.flush()
            msg = read_until(proc, lambda m, i=i: m.get("id") == i, what=f"the answer to {method}")
            assert msg["error"]["code"] == INVALID_PARAMS and method in msg["error"]["message"]
    finally:
        proc.kill()
        proc.wait()


async def test_bad_command_arguments(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    for args in (
        [],
        ["file:///x.py"],
        [42, _rng()],
        [ws.uri("hello.py"), "bad"],
        [ws.uri("hello.py"), _rng(), "opts"],
    ):
        err = await _error(
            client.workspace_execute_command_async(
                types.ExecuteCommandParams(command="engram.explain", arguments=args)
            )
        )
        assert err.code == INVALID_PARAMS, args
    err = await _error(
        client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="engram.reindex", arguments=["now"])
        )
    )
    assert err.code == INVALID_PARAMS
    # and the server is still fine
    uri = open_doc(client, ws, "hello.py")
    assert await hover(client, uri, 4) is not None


async def test_corrupt_index_offers_a_rebuild_that_works(lsp, ws):
    cache = ws.engram_home / "index"
    cache.mkdir()
    (cache / "index.sqlite").write_bytes(b"this is not a database" * 500)
    client = await lsp(ws, rebuild_answer="Rebuild index")
    await async_wait_until(lambda: client.message_requests, 15.0, message="the rebuild offer")
    offer = client.message_requests[0]
    assert offer.type == types.MessageType.Error
    assert [a.title for a in offer.actions] == ["Rebuild index"]
    # the client picked "Rebuild index": the index is rebuilt and answers again
    uri = open_doc(client, ws, "hello.py")

    async def hover_back():
        try:
            return await hover(client, uri, 4)
        except JsonRpcException:  # while the rebuild runs
            return None

    await async_wait_until(hover_back, 20.0, interval=0.1, message="the hover to recover after the rebuild")

    async def watching():  # and it watches the logs again
        status = await request(client, "engram/status", {})
        return status if status.server.watching else None

    status = await async_wait_until(watching, 10.0, interval=0.1, message="the logs to be watched again")
    assert status.indexed is True
    assert str(ws.home / ".claude" / "projects") in status.server.watching


async def test_missing_index_without_startup_ingest_offers_to_build(lsp, ws):
    client = await lsp(ws, init_options={"ingestOnStartup": False}, rebuild_answer="Build index")
    await async_wait_until(lambda: client.message_requests, 15.0, message="the offer to build the index")
    assert [a.title for a in client.message_requests[0].actions] == ["Build index"]
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    assert await hover(client, uri, 4) is not None


async def test_index_deleted_while_running_offers_a_rebuild(lsp, ws):
    client = await lsp(ws, rebuild_answer="Rebuild index")
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    assert await hover(client, uri, 4) is not None
    shutil.rmtree(ws.engram_home / "index")
    # the next hover notices (no error, no stale answer from the deleted file) and offers a rebuild
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangeWholeDocument(text=ws.files["hello.py"])
            ],
        )
    )
    await hover(client, uri, 4)
    await async_wait_until(lambda: client.message_requests, 15.0, message="the rebuild offer")
    assert "missing" in client.message_requests[0].message
    # the client said "Rebuild index"
    await async_wait_until(lambda: hover(client, uri, 4), 20.0, interval=0.1,
                           message="the hover to recover after the rebuild")
    assert (ws.engram_home / "index" / "index.sqlite").exists()
