"""The language server's query threads: a request goes to the free thread of the lowest number
(``engram_lsp.backend.QueryThreads``), so a client asking one thing at a time is answered by one
connection, whose rows and memos its earlier requests filled; a second request while the first
runs is taken by the next thread at once."""

from __future__ import annotations

import threading

from engram_lsp.backend import QueryThreads


def _name() -> str:
    return threading.current_thread().name


def test_one_request_at_a_time_goes_to_the_first_thread():
    pool = QueryThreads(3, "t-seq")
    try:
        names = [pool.submit(_name).result(timeout=10) for _ in range(50)]
    finally:
        pool.shutdown()
    assert set(names) == {"t-seq_0"}


def test_a_request_while_the_first_thread_is_busy_goes_to_the_next():
    pool = QueryThreads(2, "t-busy")
    started, release = threading.Event(), threading.Event()

    def hold():
        started.set()
        release.wait(10)
        return _name()

    try:
        first = pool.submit(hold)
        assert started.wait(10)
        second = pool.submit(_name).result(timeout=10)  # answered while the first still runs
        release.set()
        assert (first.result(timeout=10), second) == ("t-busy_0", "t-busy_1")
    finally:
        release.set()
        pool.shutdown()


def test_background_work_of_the_first_thread_sends_requests_to_the_next():
    pool = QueryThreads(2, "t-bg")
    started, release = threading.Event(), threading.Event()

    def job():
        started.set()
        release.wait(10)

    try:
        bg = pool.submit(job, thread=0)
        assert started.wait(10)
        assert pool.submit(_name).result(timeout=10) == "t-bg_1"
        release.set()
        bg.result(timeout=10)
        assert pool.submit(_name).result(timeout=10) == "t-bg_0"
    finally:
        release.set()
        pool.shutdown()


def test_requests_queued_together_all_get_answered():
    pool = QueryThreads(2, "t-many")
    try:
        futures = [pool.submit(lambda i=i: i * i) for i in range(200)]
        assert [f.result(timeout=10) for f in futures] == [i * i for i in range(200)]
    finally:
        pool.shutdown()


def test_a_request_after_an_answer_waits_for_the_thread_finishing_up():
    """A thread whose request is answered (``answered``) but not yet back to waiting (on a busy
    machine: preempted after writing the response) still takes the next request: the client
    asks again as soon as it reads the answer, and the next thread's connection holds none of
    the rows the earlier requests read."""
    pool = QueryThreads(2, "t-done")
    answered, release = threading.Event(), threading.Event()

    def first():
        pool.answered()  # the answer is out; what is left is finishing up
        answered.set()
        release.wait(10)
        return _name()

    try:
        one = pool.submit(first)
        assert answered.wait(10)
        two = pool.submit(_name)
        threading.Timer(0.2, release.set).start()
        assert (one.result(timeout=10), two.result(timeout=10)) == ("t-done_0", "t-done_0")
        # without ``answered`` the same request goes to the next thread at once
        started = threading.Event()
        release.clear()

        def busy():
            started.set()
            release.wait(10)
            return _name()

        three = pool.submit(busy)
        assert started.wait(10)
        assert pool.submit(_name).result(timeout=10) == "t-done_1"
        release.set()
        assert three.result(timeout=10) == "t-done_0"
    finally:
        release.set()
        pool.shutdown()


def test_answered_off_a_query_thread_does_nothing():
    pool = QueryThreads(2, "t-off")
    try:
        pool.answered()  # not a query thread: no effect
        assert pool.submit(_name).result(timeout=10) == "t-off_0"
    finally:
        pool.shutdown()


def test_the_collector_runs_between_requests_not_inside_them():
    """Automatic garbage collection is off while a request is answered (``engram.collect``), on
    again once it is done, and the collection due by then has run: garbage a request leaves in
    cycles is freed when it ends, not by a collection inside the next request. Background jobs
    leave the collector as it is."""
    import gc
    import weakref

    class Node:
        pass

    freed: list[bool] = []
    kept: list = []  # what the request allocated, alive past its end (the count stays up)

    def request():
        enabled = gc.isenabled()
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        weakref.finalize(a, freed.append, True)
        del a, b
        kept.extend([] for _ in range(gc.get_threshold()[0] * 3))  # past the youngest threshold
        assert gc.get_count()[0] > gc.get_threshold()[0]  # no automatic collection ran
        return enabled

    def background():
        return gc.isenabled()

    was = gc.isenabled()
    gc.enable()
    pool = QueryThreads(2, "t-gc")
    try:
        gc.collect()
        assert pool.submit(request).result(timeout=10) is False  # off inside the request
        deadline = threading.Event()
        for _ in range(100):  # ``end`` runs right after the result is set
            if freed and gc.isenabled():
                break
            deadline.wait(0.01)
        assert freed == [True]  # the collection due at the request's end freed the cycle
        assert gc.isenabled()
        assert not pool.collector.answering()
        assert pool.submit(background, thread=1).result(timeout=10) is True
    finally:
        pool.shutdown()
        if not was:
            gc.disable()
