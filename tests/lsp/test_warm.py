"""``textDocument/didOpen`` reads ahead for ``engram/explain`` (``Backend.warm``,
``Engine.prefetch_steps``): answers are unchanged, and requests never wait for the warm-up."""

from __future__ import annotations

import json
import threading
import time

import pytest
from lsp_helpers import explain_params, open_doc, plain, request, wait_indexed
from waiting import async_wait_until, wait_until

from engram import fingerprint
from engram.engine import Engine
from engram.query import explain
from engram_lsp.backend import Backend
from engram_lsp.settings import Settings

READ_AHEAD = "read ahead for explain: "  # logged (DEBUG, --log-file) per query thread done


async def _warmed(client, timeout: float = 20.0) -> None:
    async def idle():
        return (await request(client, "engram/status", {})).server.warming == 0

    await async_wait_until(idle, timeout, interval=0.05, message="the warm-up to finish (warming == 0)")


@pytest.mark.e2e
async def test_open_reads_ahead_for_explain_and_the_answer_is_the_same(lsp, ws, monkeypatch):
    monkeypatch.setenv("ENGRAM_HOME", str(ws.engram_home))  # the server's home (one index, tapes)
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    server_log = ws.base / "server.log"
    # the read-ahead starts once the client has been quiet a moment, and logs each query thread it
    # is done with; the log is read, not engram/status (a request would put the warm-up off)
    await async_wait_until(lambda: server_log.read_text().count(READ_AHEAD) >= 2, 20.0,
                           message="the read-ahead on both query threads (two log lines)")
    await _warmed(client)
    log = server_log.read_text()
    assert log.count(READ_AHEAD) == 2, log  # one per query thread
    result = plain(await request(client, "engram/explain", explain_params(uri, 3, 5)))
    engine = Engine(ws.root, index_path=ws.engram_home / "index" / "index.sqlite")
    expected = engine.explain(str(ws.root / "hello.py"), 4, 5, text=ws.files["hello.py"])
    engine.close()
    result["stats"].pop("elapsed_ms"), expected["stats"].pop("elapsed_ms")
    assert result == json.loads(json.dumps(expected))
    assert result["sessions"]


def test_read_ahead_steps_touch_only_what_explain_reads(ws, monkeypatch):
    """The real steps run to the end on an indexed workspace and change no answer."""
    for k, v in ws.env().items():
        monkeypatch.setenv(k, v)
    backend = Backend(ws.root, Settings())
    try:
        backend.ingest().result(60)
        file, text = str(ws.root / "hello.py"), ws.files["hello.py"]
        engine = backend.open()
        before = engine.explain(file, 4, 5, text=text)
        paths = explain.edited_paths(engine.conn(), "hello.py", whole=True)
        assert paths, "the session's edits of hello.py are found by its path"
        n = sum(1 for _ in engine.prefetch_steps(file, text))
        assert n > len(paths)
        after = engine.explain(file, 4, 5, text=text)
        before["stats"].pop("elapsed_ms"), after["stats"].pop("elapsed_ms")
        assert after == before
    finally:
        backend.close()


def test_read_ahead_tokenises_the_file_once_for_every_span(ws, monkeypatch):
    """The read-ahead's first step holds the buffer's tokens (``explain._file_tokens``), which a
    file's first explain would otherwise compute: the explain after it finds them, and answers
    as it would have without them."""
    for k, v in ws.env().items():
        monkeypatch.setenv(k, v)
    backend = Backend(ws.root, Settings())
    try:
        backend.ingest().result(60)
        file, text = str(ws.root / "hello.py"), ws.files["hello.py"] + "\n# not yet tokenised\n"
        engine = backend.open()
        explain._TOKENS.items.pop(text, None)
        cold = engine.explain(file, 4, 5, text=text)
        explain._TOKENS.items.pop(text, None)
        steps = engine.prefetch_steps(file, text)
        next(steps)
        held = explain._TOKENS.peek(text)
        assert held is not None
        assert [a.tolist() for a in held] == [a.tolist() for a in fingerprint.text_tokens(text)]
        for _ in steps:
            pass
        warm = engine.explain(file, 4, 5, text=text)
        assert explain._TOKENS.peek(text) is held  # used, not computed again
        cold["stats"].pop("elapsed_ms"), warm["stats"].pop("elapsed_ms")
        assert warm == cold
    finally:
        backend.close()


def test_a_request_during_the_warm_up_is_answered_at_once(ws, monkeypatch):
    """A slow warm-up (steps of 20 ms) stops between two steps for a request, which is answered
    long before the warm-up is done; the warm-up then goes on, on every query thread."""
    for k, v in ws.env().items():
        monkeypatch.setenv(k, v)
    started = threading.Event()
    done: list[str] = []

    def slow_steps(engine, file, text, before=None, after=None):  # Engine.prefetch_steps, slowed
        started.set()
        for _ in range(25):
            time.sleep(0.02)  # not a wait: a read-ahead step that takes 20 ms of work
            yield
        done.append(threading.current_thread().name)

    monkeypatch.setattr(Engine, "prefetch_steps", slow_steps)
    backend = Backend(ws.root, Settings())
    try:
        backend.ingest().result(60)
        backend.warm(str(ws.root / "hello.py"), ws.files["hello.py"])
        assert started.wait(10)
        assert backend.query(lambda engine: "answer").result(10) == "answer"
        # answered before the warm-up of either thread got through its 25 steps (no time bound:
        # a loaded machine may delay the answer, never reorder it after the warm-up)
        assert not done and backend.warming() == 1
        wait_until(lambda: backend.warming() == 0, 20, message="the warm-up to finish on both threads")
        assert sorted(done) == ["engram-query_0", "engram-query_1"]
    finally:
        backend.close()


def test_a_document_closed_before_its_warm_up_is_neither_parsed_nor_read_ahead(ws, monkeypatch):
    """``_warm`` of a document the editor closed meanwhile parses nothing and reads nothing ahead
    (an editor opening and closing files in a row would otherwise have each closed one parsed
    while it asks about the next); one still open gets both."""
    from engram_lsp import documents
    from engram_lsp.features import warm

    for k, v in ws.env().items():
        monkeypatch.setenv(k, v)
    backend = Backend(ws.root, Settings())
    calls: list[str] = []
    parse, read_ahead = backend.parse, backend.warm
    monkeypatch.setattr(backend, "parse", lambda *a: calls.append("parse") or parse(*a))
    monkeypatch.setattr(backend, "warm", lambda *a, **k: calls.append("warm") or read_ahead(*a, **k))
    path = ws.root / "hello.py"
    doc = documents.Doc(uri=path.as_uri(), path=path, file=str(path), text=ws.files["hello.py"],
                        version=1)
    try:
        warm._warm(backend, doc, True, (None, None), is_open=lambda: False)
        assert calls == []
        still_open = iter([True, True, False])  # closed while the parse waits or runs
        warm._warm(backend, doc, True, (None, None), is_open=lambda: next(still_open, False))
        assert "warm" not in calls
        calls.clear()
        warm._warm(backend, doc, True, (None, None))
        assert calls == ["parse", "warm"]
    finally:
        backend.close()


def test_an_open_that_started_the_first_lens_count_parses_after_its_answer(ws, monkeypatch):
    """The open of a fresh server's first file starts counting its lens (``code_lens.opened``);
    its warm-up's parse (which imports the engine) waits until that lens is answered, not only
    until the count is over (the answer is written a moment later), and at most ``_FIRST_LENS_S``
    when no lens request comes; an open that started no count does not wait."""
    from engram_lsp import documents
    from engram_lsp.features import warm

    for k, v in ws.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(warm, "_GRACE_S", 0.0)
    backend = Backend(ws.root, Settings())
    calls: list[tuple[str, bool]] = []
    answered = threading.Event()
    monkeypatch.setattr(backend, "parse", lambda *a: calls.append(("parse", answered.is_set())) or True)
    monkeypatch.setattr(backend, "warm", lambda *a, **k: calls.append(("warm", answered.is_set())))
    path = ws.root / "hello.py"
    doc = documents.Doc(uri=path.as_uri(), path=path, file=str(path), text=ws.files["hello.py"],
                        version=1)
    try:
        threading.Timer(0.3, answered.set).start()
        t0 = time.monotonic()
        warm._warm(backend, doc, True, (None, None), lens_pending=lambda: not answered.is_set())
        assert calls == [("parse", True), ("warm", True)]
        assert time.monotonic() - t0 >= 0.25
        # no lens request: the warm-up goes on after _FIRST_LENS_S
        calls.clear()
        monkeypatch.setattr(warm, "_FIRST_LENS_S", 0.2)
        never = threading.Event()
        t0 = time.monotonic()
        warm._warm(backend, doc, True, (None, None), lens_pending=lambda: not never.is_set())
        assert [c for c, _ in calls] == ["parse", "warm"]
        assert 0.15 <= time.monotonic() - t0 < 5.0
        # an open that started no count does not wait
        calls.clear()
        monkeypatch.setattr(warm, "_FIRST_LENS_S", 5.0)
        t0 = time.monotonic()
        warm._warm(backend, doc, True, (None, None), lens_pending=None)
        assert [c for c, _ in calls] == ["parse", "warm"]
        assert time.monotonic() - t0 < 2.5
    finally:
        backend.close()
