"""An opened file's hovers computed ahead (``hover.ahead_steps``, run by ``Backend.warm`` while
the client is quiet): every block's entry is cached, and is what a hover computes with nothing
ahead, on every line. Real server for the index, real engine in process."""

from __future__ import annotations

import threading
import time

from lsp_helpers import hover, open_doc, request, wait_indexed
from waiting import async_wait_until

from engram.engine import Engine
from engram_lsp.backend import Backend
from engram_lsp.documents import Doc
from engram_lsp.features import hover as hover_feature
from engram_lsp.settings import Settings

MINE = "\n\ndef mine(a, b):\n    return a * b + 42\n"  # a block no session wrote


async def test_the_hovers_computed_ahead_are_the_hovers(lsp, ws, monkeypatch):
    client = await lsp(ws)
    await wait_indexed(client)  # the server's startup ingest built the index
    monkeypatch.setenv("HOME", str(ws.home))
    monkeypatch.setenv("ENGRAM_HOME", str(ws.engram_home))
    path = ws.root / "mixed.py"
    text = ws.files["hello.py"] + MINE
    path.write_text(text)
    doc = Doc(uri=path.as_uri(), path=path, file=str(path), text=text, version=3)
    table = Engine.block_table(text, path)
    blocks = sorted({(start, end) for _first, _last, start, end in table})
    assert len(blocks) > 1
    ahead, alone = Backend(ws.root, Settings()), Backend(ws.root, Settings())
    try:
        steps = ahead.query(lambda engine: len(list(hover_feature.ahead_steps(engine, ahead, doc))))
        assert steps.result(timeout=60) >= len(blocks)
        assert all(ahead.peek(("hover", doc.uri, 3, s, e)) for s, e in blocks)
        lines = text.count("\n") + 1
        got = [ahead.query(hover_feature.hover_block, ahead, doc, n).result(timeout=60)
               for n in range(1, lines + 1)]
        want = [alone.query(hover_feature.hover_block, alone, doc, n).result(timeout=60)
                for n in range(1, lines + 1)]
        assert got == want
        assert any(entry and entry.get("sessions") for _s, _e, entry in got)
        assert any(entry is None or not entry.get("sessions") for _s, _e, entry in got)
    finally:
        ahead.close()
        alone.close()


async def test_an_opened_file_is_settled_with_its_hovers_and_answers_them(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    (ws.root / "mixed.py").write_text(ws.files["hello.py"] + MINE)
    uri = open_doc(client, ws, "mixed.py")

    async def settled():
        status = await request(client, "engram/status", {})
        return status.server.warming == 0

    await async_wait_until(settled, 60, interval=0.05, message="the opened file's warm-up")
    card = await hover(client, uri, 4)
    assert card is not None and "**Engram** · 1 session" in card.contents.value
    assert await hover(client, uri, ws.files["hello.py"].count("\n") + 3) is None  # mine()


async def test_a_status_poll_is_not_the_user_at_work(lsp, ws, monkeypatch):
    """``engram/status`` runs as a passive request: a client polling it every 50 ms neither makes
    the warm-up give way nor keeps the quiet it waits for from coming."""
    client = await lsp(ws)
    await wait_indexed(client)
    monkeypatch.setenv("HOME", str(ws.home))
    monkeypatch.setenv("ENGRAM_HOME", str(ws.engram_home))
    backend = Backend(ws.root, Settings())
    try:
        backend.query(lambda engine: None).result(timeout=60)  # a request: the quiet starts
        gate = threading.Event()
        polled = backend.query_passive(lambda engine: gate.wait(10) and engine.status())
        time.sleep(0.1)
        assert not backend.busy() and backend.since_request() >= 0.1
        gate.set()
        assert polled.result(timeout=60)["counts"]
        assert backend.since_request() >= 0.1
        gate.clear()
        asked = backend.query(lambda engine: gate.wait(10))
        time.sleep(0.05)
        assert backend.busy() and backend.since_request() == 0.0
        gate.set()
        asked.result(timeout=60)
    finally:
        backend.close()
