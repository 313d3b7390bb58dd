"""Live watching: lines appended to a Claude Code log show up in hover and code lens."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid

import pytest
from lsp_helpers import hover, lenses, open_doc, request, wait_indexed
from workspaces import NEW_CODE

pytestmark = pytest.mark.e2e


async def _wait_for_hover(client, uri, line, deadline_s):
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        result = await hover(client, uri, line)
        if result is not None:
            return result, time.monotonic() - t0
        await asyncio.sleep(0.05)
    return None, time.monotonic() - t0


async def test_appended_line_is_in_hover_within_two_seconds(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    (ws.root / "fib.py").write_text(NEW_CODE)
    uri = open_doc(client, ws, "fib.py")
    assert await hover(client, uri, 2) is None
    assert list(await lenses(client, uri)) == []
    refreshes = client.refresh_requests
    ws.append_write("fib.py", NEW_CODE, text="Adding a memoised Fibonacci helper.")
    result, elapsed = await _wait_for_hover(client, uri, 2, 5.0)
    assert result is not None, "appended session never reached the hover"
    assert elapsed < 2.0, f"hover took {elapsed:.2f}s after the append"
    assert "1 session" in result.contents.value
    assert [lens.command.title for lens in await lenses(client, uri)] == ["1 session"]
    for _ in range(40):
        if client.refresh_requests > refreshes:
            break
        await asyncio.sleep(0.05)
    assert client.refresh_requests > refreshes


async def test_burst_rotation_and_deletion(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    # a burst of 1,000 appended lines (each flushed: one file event each), the code in the last
    ingests_before = sum("ingest (paths)" in m.message for m in client.log_messages)
    with open(ws.log, "a", encoding="utf-8") as f:
        for i in range(999):
            f.write(
                json.dumps(
                    {
                        "type": "user",
                        "sessionId": ws.session,
                        "cwd": ws.cwd,
                        "uuid": f"burst-{i}",
                        "timestamp": "2025-12-10T19:41:00.000Z",
                        "message": {"role": "user", "content": f"progress line {i} of the burst"},
                    }
                )
                + "\n"
            )
            f.flush()
    ws.append_write("fib.py", NEW_CODE)
    (ws.root / "fib.py").write_text(NEW_CODE)
    uri = open_doc(client, ws, "fib.py")
    result, _ = await _wait_for_hover(client, uri, 2, 15.0)
    assert result is not None, "burst was not ingested"
    ingests = sum("ingest (paths)" in m.message for m in client.log_messages) - ingests_before
    assert 1 <= ingests <= 10, f"{ingests} ingests for one burst: not debounced"

    # rotation: the log is moved away and a new one starts under the old name
    rotated = ws.log.with_name(ws.log.stem + "-rotated.jsonl")
    ws.log.rename(rotated)
    other = NEW_CODE.replace("fibonacci_memo", "lucas_memo").replace(
        "n if n < 2", "(2, 1)[n] if n < 2"
    )
    ws.append_write("lucas.py", other)
    (ws.root / "lucas.py").write_text(other)
    uri2 = open_doc(client, ws, "lucas.py")
    result, _ = await _wait_for_hover(client, uri2, 2, 15.0)
    assert result is not None, "log written after rotation was not ingested"

    # deletion: the server keeps answering
    ws.log.unlink()
    rotated.unlink()
    await asyncio.sleep(1.0)
    status = await request(client, "engram/status", {})
    assert status.indexed is True
    await hover(client, uri, 2)  # evidence may stay or go; the server must answer


async def test_a_log_directory_created_after_startup_is_watched(lsp, ws):
    """A harness directory that does not exist at startup is polled for (every 2 s) and watched
    once it appears: a session written there reaches the hover."""
    later = ws.home / "later-projects"
    paths = [str(ws.log.parent.parent), str(later)]
    client = await lsp(ws, init_options={"harnesses": {"claude_code": {"paths": paths}}})
    await wait_indexed(client)
    assert str(later) in (await request(client, "engram/status", {})).server.watching
    (ws.root / "fib.py").write_text(NEW_CODE)
    uri = open_doc(client, ws, "fib.py")
    assert await hover(client, uri, 2) is None
    other = dataclasses.replace(ws, log=later / "project" / "other.jsonl", session=str(uuid.uuid4()))
    other.log.parent.mkdir(parents=True)
    other.append_write("fib.py", NEW_CODE, text="Adding a memoised Fibonacci helper.")
    result, _ = await _wait_for_hover(client, uri, 2, 15.0)
    assert result is not None, "a session in a directory created after startup was not ingested"
