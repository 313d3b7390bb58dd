"""initialize / progress / refresh / shutdown / disconnect / configuration."""

from __future__ import annotations

import time

import pytest
from lsp_helpers import explain_params, lenses, open_doc, plain, request, wait_indexed
from lsp_helpers import frame as _frame
from lsp_helpers import initialize_raw as _initialize
from lsp_helpers import read_until as _read_until
from lsp_helpers import start_raw as _start_raw
from lsprotocol import types
from waiting import async_wait_until

pytestmark = pytest.mark.e2e


async def test_initialize_answers_at_once_and_advertises_features(lsp, ws):
    t0 = time.monotonic()
    client = await lsp(ws)
    assert time.monotonic() - t0 < 10
    caps = client.init_result.capabilities
    assert caps.hover_provider
    assert caps.code_lens_provider is not None
    assert set(caps.execute_command_provider.commands) >= {"engram.explain", "engram.reindex"}
    assert client.init_result.server_info.name == "engram-lsp"
    status = await wait_indexed(client)
    assert status.server.root == str(ws.root)
    # the machine's one index, under the server's ENGRAM_HOME (the workspace's, not this process's)
    assert status.index == str(ws.engram_home / "index" / "index.sqlite")


async def test_startup_ingest_reports_progress_then_refreshes_lenses(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    await async_wait_until(lambda: client.refresh_requests >= 1, 10.0,
                           message="a workspace/codeLens/refresh request after the ingest")
    reports = [
        r
        for token, rs in client.progress_reports.items()
        if token.startswith("engram-ingest")
        for r in rs
    ]
    assert reports and reports[0].kind == "begin" and reports[-1].kind == "end"
    assert "Engram" in reports[0].title


async def test_no_refresh_request_when_client_lacks_support(lsp, ws):
    client = await lsp(ws, capabilities=types.ClientCapabilities())
    await wait_indexed(client)
    # The server logs "ingest done" and then, on the same turn of its event loop, tells the
    # on_indexed listeners (where a refresh would be sent). Once that log message is here and a
    # request sent after it is answered, any refresh request would have arrived before the answer.
    await async_wait_until(lambda: any(m.message.startswith("ingest done") for m in client.log_messages),
                           10.0, message='the server\'s "ingest done" log message')
    await request(client, "engram/status", {})
    assert client.refresh_requests == 0


async def test_invalid_settings_fall_back_to_defaults_with_a_warning(lsp, ws):
    client = await lsp(ws, init_options={"codeLens": {"minSessions": "lots"}, "minConfidence": 7})
    await wait_indexed(client)
    logs = " ".join(m.message for m in client.log_messages)
    assert "codeLens.minSessions" in logs and "minConfidence" in logs
    uri = open_doc(client, ws, "hello.py")
    assert [lens.command.title for lens in await lenses(client, uri)] == ["1 session"]


async def test_workspace_configuration_section_is_read(lsp, ws):
    client = await lsp(ws, configuration={"codeLens": {"minSessions": 2}})
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    assert list(await lenses(client, uri)) == []
    status = await request(client, "engram/status", {})
    assert status.server.settings.codeLens.minSessions == 2


async def test_window_sessions_setting_and_param(lsp, ws):
    """``window.sessions`` (0 here: anchors only) is the default of engram/explain's ``windows``,
    which a request can still raise."""
    client = await lsp(ws, configuration={"window": {"sessions": 0}})
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    status = plain(await request(client, "engram/status", {}))
    assert status["server"]["settings"]["window"]["sessions"] == 0
    anchors = plain(await request(client, "engram/explain", explain_params(uri, 3, 5)))
    assert anchors["sessions"] and all("events" not in w for s in anchors["sessions"]
                                       for w in s["windows"])
    full = plain(await request(client, "engram/explain", explain_params(uri, 3, 5, windows=1)))
    assert full["sessions"][0]["windows"][0]["events"]
    assert [s["tape_id"] for s in full["sessions"]] == [s["tape_id"] for s in anchors["sessions"]]


async def test_code_lens_can_be_disabled_by_init_options(lsp, ws):
    client = await lsp(ws, init_options={"engram": {"codeLens": {"enabled": False}}})
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    assert list(await lenses(client, uri)) == []


def test_client_disconnect_ends_the_process(ws):
    proc = _start_raw(ws)
    try:
        reply = _initialize(proc, ws)
        assert "capabilities" in reply["result"]
        proc.stdin.write(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        proc.stdin.flush()
        # the server is up and working: it opened the index and started the startup ingest
        _read_until(
            proc,
            lambda msg: msg.get("method") == "window/logMessage"
            and msg["params"]["message"].startswith("engram-lsp "),
            what='the "engram-lsp <version>: workspace ..." log message',
        )
        proc.stdin.close()  # the editor went away without shutdown/exit
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_shutdown_then_exit(ws):
    proc = _start_raw(ws)
    try:
        _initialize(proc, ws)
        proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
        proc.stdin.flush()
        _read_until(proc, lambda msg: msg.get("id") == 2, what="the shutdown response")
        proc.stdin.write(_frame({"jsonrpc": "2.0", "method": "exit"}))
        proc.stdin.flush()
        assert proc.wait(timeout=15) == 0
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_main_version_does_not_start_a_server(capsys):
    import pytest

    from engram_lsp.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert "engram-lsp" in capsys.readouterr().out


async def test_did_change_configuration_applies_new_settings(lsp, ws):
    client = await lsp(ws, configuration={"codeLens": {"minSessions": 1}})
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    assert [lens.command.title for lens in await lenses(client, uri)] == ["1 session"]
    client.set_configuration({"codeLens": {"minSessions": 3}}, section="engram")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    async def no_lens():
        return list(await lenses(client, uri)) == []

    await async_wait_until(no_lens, 10.0, interval=0.1, message="the lens to go (minSessions 3)")


async def test_engine_settings_change_reindexes(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    before = (await request(client, "engram/status", {})).server.last_ingest_at
    client.set_configuration({"harnesses": {"claude_code": {"enabled": False}}}, section="engram")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    async def reindexed():
        status = await request(client, "engram/status", {})
        return status if status.server.last_ingest_at != before and not status.server.ingesting else None

    status = await async_wait_until(reindexed, 20.0, interval=0.1,
                                    message="the ingest after the settings change to finish")
    # the only harness with logs is off: its directory is no longer watched
    assert not any(w.endswith("/.claude/projects") for w in status.server.watching)
