"""Live watching: lines appended to a Claude Code log show up in hover and code lens."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid

import pytest
from lsp_helpers import hover, lenses, open_doc, request, wait_indexed
from waiting import async_wait_until
from workspaces import NEW_CODE

pytestmark = pytest.mark.e2e


async def _wait_for_hover(client, uri, line, timeout, what):
    """The first hover at ``line`` that is not empty, and the seconds it took to come."""
    t0 = time.monotonic()
    result = await async_wait_until(lambda: hover(client, uri, line), timeout, interval=0.05,
                                    message=what)
    return result, time.monotonic() - t0


async def test_appended_line_is_in_hover_within_two_seconds(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    (ws.root / "fib.py").write_text(NEW_CODE)
    uri = open_doc(client, ws, "fib.py")
    assert await hover(client, uri, 2) is None
    assert list(await lenses(client, uri)) == []
    refreshes = client.refresh_requests
    ws.append_write("fib.py", NEW_CODE, text="Adding a memoised Fibonacci helper.")
    result, elapsed = await _wait_for_hover(client, uri, 2, 5.0, "the appended session in the hover")
    assert elapsed < 2.0, f"hover took {elapsed:.2f}s after the append"
    assert "1 session" in result.contents.value
    assert [lens.command.title for lens in await lenses(client, uri)] == ["1 session"]
    await async_wait_until(lambda: client.refresh_requests > refreshes, 5.0,
                           message="a code lens refresh after the append")


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
    await _wait_for_hover(client, uri, 2, 15.0, "the burst to be ingested (the hover)")
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
    await _wait_for_hover(client, uri2, 2, 15.0, "the log written after rotation to be ingested")

    # deletion: the server keeps answering, once its watcher has reported both deletions
    server_log = ws.base / "server.log"
    seen = len(server_log.read_text())

    def deletions_reported():
        changed = [line for line in server_log.read_text()[seen:].splitlines() if " changed: [" in line]
        return all(any(f"{gone.name}'" in line for line in changed) for gone in (ws.log, rotated))

    ws.log.unlink()
    rotated.unlink()
    await async_wait_until(deletions_reported, 15.0, interval=0.05,
                           message="the watcher to report the deleted logs (server.log 'changed: [...]')")
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
    await _wait_for_hover(client, uri, 2, 15.0, "the session in a directory created after startup")
