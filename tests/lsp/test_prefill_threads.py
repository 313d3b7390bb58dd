"""Every query thread's connection is prefilled (``Backend.prefill``): the background reads of
one thread (its prefill, a workspace file's lens counts ahead) share the ingest guard with the
other's, and only an ingest holds it alone (``engram_lsp.backend._IngestGuard``). With a plain
lock, the second thread's prefill found the guard held by the first's and gave up, and its
connection went without prepared rows (its first explain walked unprepared)."""

from __future__ import annotations

import threading

from waiting import wait_until

from engram.query import walk
from engram_lsp.backend import Backend, _IngestGuard
from engram_lsp.settings import Settings


def test_reads_share_the_guard_and_an_ingest_waits_for_them():
    guard = _IngestGuard()
    assert guard.try_shared() and guard.try_shared()  # two background reads at once
    entered = threading.Event()

    def ingest():
        with guard:
            entered.set()

    t = threading.Thread(target=ingest)
    t.start()
    assert not entered.wait(0.2)  # the ingest waits for the reads
    guard.release_shared()
    assert not entered.wait(0.1)
    guard.release_shared()
    assert entered.wait(5)
    t.join(5)
    with guard:  # while an ingest holds it, a read gives up at once
        assert not guard.try_shared()
    assert guard.try_shared()
    guard.release_shared()


def test_both_query_threads_are_prefilled(ws, monkeypatch):
    for k, v in ws.env().items():
        monkeypatch.setenv(k, v)
    backend = Backend(ws.root, Settings())
    try:
        backend.ingest().result(60)
        backend.prefill()
        size = backend._query_pool.size
        assert size >= 2

        def prefilled(i: int) -> bool:
            def probe(engine):
                plans = walk._Plans.of(engine.conn(), engine.config.min_confidence, False,
                                       walk.MAX_FANOUT)
                return plans.prefilled
            return backend._submit(probe, thread=i).result(30)

        wait_until(lambda: backend.prefilling() == 0, 30,
                   message="every query thread's prefill done (engram/status server.prefilling)")
        assert all(prefilled(i) for i in range(size))
    finally:
        backend.close()
