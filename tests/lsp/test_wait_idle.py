"""``Backend.wait_idle``: background work waits for the client to be quiet without polling — it is
woken when the last request under way ends, never in the middle of one."""

from __future__ import annotations

import threading
import time

from engram_lsp.backend import Backend
from engram_lsp.settings import Settings


def _waiter(backend: Backend, quiet: float, timeout: float | None, out: list) -> threading.Thread:
    def run():
        out.append((backend.wait_idle(quiet, timeout), time.monotonic()))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_wait_idle_returns_once_the_requests_end_and_the_quiet_has_passed(tmp_path):
    backend = Backend(tmp_path, Settings())
    try:
        assert backend.wait_idle(0.0, 1.0) is True  # nothing ran: idle now
        got: list = []
        with backend.answering():  # a request under way (counted as one, no engine needed)
            t = _waiter(backend, 0.1, 10.0, got)
            time.sleep(0.3)
            assert got == []  # still running: it waits
            ended = time.monotonic()
        t.join(5)
        assert got and got[0][0] is True
        assert got[0][1] - ended >= 0.09  # and then for the quiet, from the request's end
    finally:
        backend.close()


def test_wait_idle_gives_up_at_its_timeout_and_when_the_server_closes(tmp_path):
    backend = Backend(tmp_path, Settings())
    try:
        with backend.answering():
            t0 = time.monotonic()
            assert backend.wait_idle(0.0, 0.2) is False
            assert 0.15 <= time.monotonic() - t0 < 5.0
            got: list = []
            t = _waiter(backend, 0.0, None, got)
            time.sleep(0.1)
            backend.close()
            t.join(5)
            assert got and got[0][0] is False
    finally:
        backend.close()


def test_a_waiter_is_not_woken_by_each_request_of_a_burst(tmp_path, monkeypatch):
    """During a burst of requests a waiter for quiet looks at most once per request under way at
    its look, not at the end of every request: it sleeps for the quiet, then until the request
    under way ends (``_wait_quiet``) — the polls this replaced woke every 10 ms, mostly in the
    middle of requests."""
    backend = Backend(tmp_path, Settings())
    looks = []
    wait = backend._wait_quiet
    monkeypatch.setattr(backend, "_wait_quiet", lambda left, slept: looks.append(left) or wait(left, slept))
    try:
        got: list = []
        with backend.answering():
            t = _waiter(backend, 0.2, 10.0, got)
            time.sleep(0.05)
        t0 = time.monotonic()
        for _ in range(40):  # 40 requests of 5 ms back to back (~0.2 s + gaps)
            with backend.answering():
                time.sleep(0.005)
        burst = time.monotonic() - t0
        t.join(5)
        assert got and got[0][0] is True
        # not one per request (40), nor one per 10 ms: about two per _QUIET_S (50 ms) of the burst
        assert len(looks) < 40 and len(looks) <= 2 * burst / 0.05 + 4, (len(looks), burst)
    finally:
        backend.close()
