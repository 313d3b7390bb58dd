"""Hover and ``engram/explain`` answered from the query thread (``EngramLanguageServer.answering``):
every request gets exactly one response — a cancelled one too, whose answer may already be out —
with the card or the explain result the event loop's path gives."""

from __future__ import annotations

import threading
import time

from lsp_helpers import frame, initialize_raw, read_message, start_raw
from waiting import wait_until


def test_each_request_is_answered_once_cancelled_or_not(ws):
    proc = start_raw(ws)
    seen: list[dict] = []

    def send(obj) -> None:
        proc.stdin.write(frame(obj))
        proc.stdin.flush()

    try:
        initialize_raw(proc, ws)

        def reader():
            try:
                while True:
                    seen.append(read_message(proc.stdout))
            except (EOFError, ValueError, OSError):
                pass

        threading.Thread(target=reader, daemon=True).start()
        send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        uri = ws.uri("hello.py")
        send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1,
            "text": (ws.root / "hello.py").read_text()}}})

        def answered(i) -> dict | None:
            return next((m for m in list(seen) if m.get("id") == i and "method" not in m), None)

        def indexed() -> bool:  # the startup ingest is done
            i = 10_000 + len(seen)
            send({"jsonrpc": "2.0", "id": i, "method": "engram/status", "params": {}})
            got = wait_until(lambda: answered(i), 30, message="engram/status")
            server = got["result"]["server"]
            return bool(server["last_ingest_at"]) and not server["ingesting"]

        wait_until(indexed, 60, interval=0.2, message="the startup ingest")
        ids = []
        for n in range(12):
            i = 100 + n
            if n % 2:
                send({"jsonrpc": "2.0", "id": i, "method": "engram/explain", "params": {
                    "textDocument": {"uri": uri},
                    "range": {"start": {"line": 2, "character": 0},
                              "end": {"line": 6, "character": 0}}}})
            else:
                send({"jsonrpc": "2.0", "id": i, "method": "textDocument/hover", "params": {
                    "textDocument": {"uri": uri}, "position": {"line": 4, "character": 0}}})
            if n % 3 == 0:
                send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": i}})
            ids.append(i)
        wait_until(lambda: all(answered(i) for i in ids), 30, message="every answer")
        time.sleep(1.0)  # a second response would come by now
        send({"jsonrpc": "2.0", "id": 999, "method": "engram/status", "params": {}})
        wait_until(lambda: answered(999), 30, message="the last status")
        for i in ids:
            assert sum(1 for m in seen if m.get("id") == i and "method" not in m) == 1, i
        hovers = [answered(i) for i in ids[::2] if i % 3 != 1]  # (not cancelled)
        explains = [answered(i) for i in ids[1::2] if i % 3 != 1]
        assert hovers and all("Session" in h["result"]["contents"]["value"] or
                              "session" in h["result"]["contents"]["value"] for h in hovers)
        assert explains and all(e["result"]["sessions"] for e in explains)
        assert len({str(h["result"]) for h in hovers}) == 1  # the same card every time
    finally:
        proc.kill()
        proc.wait()


def _frames(data: bytes) -> list[dict]:
    import io

    stream, out = io.BytesIO(data), []
    while stream.tell() < len(data):
        out.append(read_message(stream))
    return out


def test_a_cancelled_request_gets_one_response_whoever_answers_first():
    import asyncio
    import io

    from engram_lsp.server import ANSWERED, FrameWriter, create_server

    protocol = create_server().protocol
    out = io.BytesIO()
    protocol.set_writer(FrameWriter(out))
    assert protocol.answers_from_threads()

    async def cancelled():
        task = asyncio.ensure_future(asyncio.sleep(10))
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return task

    task = asyncio.run(cancelled())
    # the query thread answers first, then the loop sees the cancellation: the result only
    assert protocol.answer(5, {"n": 1}) is True
    protocol._send_handler_result(task, msg_id=5)
    # the loop answers the cancellation first, then the query thread finishes: the error only
    protocol._send_handler_result(task, msg_id=6)
    assert protocol.answer(6, {"n": 2}) is False
    frames = _frames(out.getvalue())
    assert [(f["id"], "result" in f) for f in frames] == [(5, True), (6, False)]
    assert frames[0]["result"] == {"n": 1} and frames[1]["error"]["code"] == -32800
    protocol._send_response(7, result=ANSWERED)  # (a handler's marker is never written)
    assert len(_frames(out.getvalue())) == 2
