"""The server's side of the engine: one ``Engine``, its query and ingest threads, and the caches.

Nothing here speaks LSP. Queries (hover, code lens, explain, view, search, status) run on two
query threads; ingests (startup, reindex, watcher batches) run one at a time on an ingest thread,
so a hover never waits for an ingest to finish (the index is SQLite in WAL mode: readers never
block on the writer) — except a rebuild, which replaces the index file: queries wait for it.
Watcher batches are coalesced: paths that change while an ingest runs are ingested together
right after it.

``generation`` goes up after every ingest; per-document results are cached by
``(uri, version, generation)``, so a hover or lens after an unchanged buffer and an unchanged
index costs a dict lookup, and a computation under way for a key is waited for, not repeated.

Between requests the query threads prepare: each reads, through its own connection, the rows
code lens and hover look up (``prefill``: at startup and after every ingest, stopping for a
request), and the index's postings are held in memory for all of them (``Engine.hold_postings``).
A background thread parses newly opened documents for hovers; then the query threads read ahead,
between requests, what the first ``engram/explain`` of such a document reads (``warm``,
``Engine.prefetch_steps``).

Everything of Engram's goes through the ``Engine`` façade (``engram.engine``); of ``engram``, the
language server imports only ``engram.engine``, ``engram.errors`` and ``engram.config``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from engram.collect import BetweenRequests
from engram.config import resolve_index_path
from engram_lsp.settings import Settings

log = logging.getLogger(__name__)

_CACHE_SIZE = 4096  # per-document results (lens, hover: the hovers of opened files computed ahead)
# a prefill stopped by a request is queued again (behind it), this often at most: each call makes
# progress, so this only bounds a prefill that a stream of requests keeps stopping
_PREFILL_TRIES = 2000
_REBUILD_WAIT_S = 60.0  # a query waits this long at most for a rebuild to finish
_BLOCK_CACHE_SIZE = 20_000
_REWARM_FILES = 2  # the most recently opened files are warmed for explain again after an ingest
_QUIET_S = 0.05  # explain's warm-up waits for this long without requests (an editor's burst)


class _WarmTask:
    """One file to warm for explain (``Backend.warm``): the query threads still to do, and the
    steps under way on the first of them."""

    def __init__(self, file: str, text: str, before, after, generation: int, threads: int,
                 ahead=None):
        self.file, self.text, self.before, self.after = file, text, before, after
        self.ahead = ahead  # ``ahead(engine)``: steps run last, on the last thread only
        self.size = threads
        self.restart(generation)

    def restart(self, generation: int) -> None:
        self.generation = generation
        self.threads = list(range(self.size))
        self.gen = None
        self.steps, self.spent = 0, 0.0  # of the thread under way, for the log


class IngestCancelled(Exception):
    """Raised from the progress callback to stop an ingest when the server shuts down."""


def _open_engine(root: Path, settings: Settings):
    """Build the engine for ``root`` with the editor's settings layered over Engram's config."""
    from engram.engine import Engine  # imported lazily: the server answers initialize first

    return Engine(root, index_path=resolve_index_path(root, settings.index_path),
                  config=_engine_config(root, settings))


def _engine_config(root: Path, settings: Settings):
    """Engram's config for ``root`` (global + repo files) with the editor's settings on top."""
    from engram import config as config_mod

    cfg = config_mod.load(root)
    # validated once, by ``settings.parse``; window/minConfidence travel with each explain instead
    config_mod.apply_values(cfg, settings.engine_values())
    return cfg


class QueryThreads:
    """The query threads (each with its own SQLite connection, see ``Engine.conn``).

    Requests come from one queue, the next going to the free thread of the lowest number: a
    client that asks one thing at a time is answered by the first thread only, whose connection
    then holds what its earlier requests read (rows, a file's log history, tape windows: each
    connection keeps its own), and the others take what comes while it is busy. Each thread also
    has its own queue of background jobs (work for its own connection, like ``prefill``), taken
    only when no request waits; a job that is running sees ``waiting()`` and can stop early.
    """

    def __init__(self, n: int, name: str):
        self._cond = threading.Condition()
        self._requests: deque = deque()
        self._background: list[deque] = [deque() for _ in range(n)]
        self._closed = False
        self._idle = [False] * n  # waiting for work (a request goes to the lowest idle thread)
        # answered its request and only finishing up (``answered``): as good as idle for routing
        self._done = [False] * n
        self._which = threading.local()  # the query thread's number, on a query thread
        # the garbage collector runs between requests, not inside one (``engram.collect``)
        self.collector = BetweenRequests()
        self.size = n
        for i in range(n):
            threading.Thread(target=self._work, args=(i,), name=f"{name}_{i}", daemon=True).start()

    def submit(self, fn: Callable[[], Any], thread: int | None = None) -> Future:
        """Queue ``fn()``: a request (``thread`` None) or a background job for that thread."""
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the query threads are shut down")
            queue = self._requests if thread is None else self._background[thread]
            queue.append((future, fn))
            self._cond.notify_all()
        return future

    def waiting(self) -> bool:
        """Whether a request is queued and no thread has taken it yet."""
        return bool(self._requests)

    def answered(self) -> None:
        """Called on a query thread when its request's answer is about to be written from this
        thread: what is left of the job is the write and finishing up (a future's callbacks, a
        few counters), so a request that comes meanwhile waits for this thread rather than going
        to a higher one. A client that asks one thing at a time sends its next request as soon as
        it reads the answer; this thread, which gave up the interpreter for the write, may not
        have got back to waiting by then (measured: the next request came 1-7 ms before the
        write call returned, at load 7-12), and the next thread, whose connection holds none of
        the rows the earlier requests read, took it (a third of an explain loop's requests in
        one run at load 4-5)."""
        i = getattr(self._which, "i", None)
        if i is None:
            return
        with self._cond:
            self._done[i] = True

    def _free_below(self, i: int) -> bool:
        """Whether a thread below ``i`` is waiting for work or only finishing up (call with
        ``_cond`` held)."""
        return any(self._idle[k] or self._done[k] for k in range(i))

    def _work(self, i: int) -> None:
        self._which.i = i
        while True:
            with self._cond:
                self._idle[i] = True
                self._done[i] = False
                while not ((self._requests and not self._free_below(i)) or self._background[i]
                           or self._closed):
                    self._cond.wait()
                self._idle[i] = False
                request = bool(self._requests) and not self._free_below(i)
                if request:
                    future, fn = self._requests.popleft()
                    if self._requests:  # more: a higher thread may take the next one now
                        self._cond.notify_all()
                elif self._background[i]:
                    future, fn = self._background[i].popleft()
                else:
                    return  # closed
            if not future.set_running_or_notify_cancel():
                continue
            if request:
                self.collector.begin()
            try:
                result = fn()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                if request:  # after the answer went out (or its future was set): the
                    self.collector.end()  # collection due runs while the client reads it

    def shutdown(self) -> None:
        """Stop taking work; queued jobs are cancelled (running ones finish on their own)."""
        with self._cond:
            self._closed = True
            queued = list(self._requests) + [job for q in self._background for job in q]
            self._requests.clear()
            for q in self._background:
                q.clear()
            self._cond.notify_all()
        for future, _fn in queued:
            future.cancel()


class _IngestGuard:
    """Background reads (a query thread's prefill, a workspace file's lens counts ahead) share it;
    an ingest holds it alone. A read never waits: it takes the guard only while no ingest holds
    it, and gives up otherwise. An ingest waits for the reads under way (they stop at their next
    step once ``ingesting`` is set). A plain lock here let one query thread's prefill turn the
    other's away, and that thread's connection then went without prepared rows."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    def try_shared(self) -> bool:
        with self._cond:
            if self._writing:
                return False
            self._readers += 1
            return True

    def release_shared(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    def __enter__(self) -> _IngestGuard:
        with self._cond:
            while self._writing or self._readers:
                self._cond.wait()
            self._writing = True
        return self

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._writing = False
            self._cond.notify_all()


class Backend:
    """Owns the Engine and runs everything that touches it off the event loop."""

    def __init__(self, root: Path, settings: Settings):
        self.root = Path(root)
        self.settings = settings
        self.engine = None
        self.generation = 0
        self.last_ingest: dict[str, Any] | None = None
        self.last_ingest_error: str | None = None
        self.last_ingest_at: float | None = None
        self._generation: str | None = None  # the index's, after our last ingest
        self.ingesting = False
        self.rebuilding = False  # an ingest that replaces the index file runs
        self._closing = threading.Event()
        # the engine keeps one read connection per thread: two readers, so a slow code lens on a
        # big file does not hold up a hover
        self._query_pool = QueryThreads(2, "engram-query")
        self._ingest_pool = ThreadPoolExecutor(1, thread_name_prefix="engram-ingest")
        self._background_pool = ThreadPoolExecutor(1, thread_name_prefix="engram-background")
        self._queries = 0  # queued or running on the query threads
        self._opening = 0  # opened files whose warm-up is not queued yet (``opening``)
        self._requests = 0  # of which requests (not background jobs)
        self._active = 0  # running on the engine
        self._ingest_guard = _IngestGuard()  # an ingest alone; background reads share it
        self._lock = threading.Lock()
        self._prefilling: set[int] = set()  # query threads whose prefill is queued or under way
        self._pending_paths: set[str] = set()
        self._watch_job: Future | None = None
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._running: dict[tuple, Future] = {}
        self._blocks: OrderedDict[tuple[int, str], dict] = OrderedDict()
        self._warm_tasks: deque[_WarmTask] = deque()  # files to warm for explain, in order
        self._warm_scheduled = False  # a warm-up job is queued or running on a query thread
        self._warm_wake = threading.Condition(self._lock)  # that thread, and ``wait_idle``
        self._idle_waiters = 0  # waiting on it for the requests under way to end (``_wait_quiet``)
        self._warm_thread: threading.Thread | None = None
        self._last_request_at = 0.0  # monotonic time a request last came or went
        self._warm_recent: OrderedDict[str, _WarmTask] = OrderedDict()  # warmed again after ingest
        self._open_lock = threading.Lock()
        self.index_ident: tuple[int, int] | None = None  # (dev, inode) of the index we read
        self.index_lost = False
        self._lens_store = None  # ``lens_store``
        self._block_store = None  # ``block_store``
        self._block_key = None  # (path, text, its block-table key): the last text asked about
        self._ahead = None  # ``engram_lsp.ahead.LensesAhead``, made by the first ingest's end

    # --- lifecycle ----------------------------------------------------------------------------

    def open(self):
        """Open the engine (idempotent); raises what the engine raises on a broken index."""
        with self._open_lock:
            if self.engine is None:
                self.engine = _open_engine(self.root, self.settings)
                self.engine.client = "lsp"  # who asks, in the retrieval log
                self.index_ident = self._index_ident()
                self.engine.preload_model()
            return self.engine

    def reopen(self, settings: Settings | None = None) -> None:
        """Close and forget the engine (new settings); the next call opens a fresh one."""
        with self._open_lock:
            if settings is not None:
                self.settings = settings
            engine, self.engine = self.engine, None
        if engine is not None:
            try:
                engine.close()
            except Exception:  # closing a broken engine must not stop a rebuild
                log.exception("closing the engine failed")
        self.invalidate()

    def index_path(self) -> Path | None:
        return resolve_index_path(self.root, self.settings.index_path)

    def close(self, timeout: float = 3.0) -> None:
        """Stop: cancel a running ingest at its next progress report, wait briefly, close."""
        self._closing.set()
        with self._lock:
            self._warm_wake.notify_all()
        if self._ahead is not None:
            self._ahead.stop()
        self._query_pool.shutdown()
        self._ingest_pool.shutdown(wait=False, cancel_futures=True)
        self._background_pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        while self.ingesting and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self.ingesting and self.engine is not None:
            try:
                self.engine.close()
            except Exception:
                log.exception("closing the engine failed")

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    # --- queries -------------------------------------------------------------------------------

    def query(self, fn: Callable[..., Any], *args, **kwargs) -> Future:
        """Run ``fn(engine, *args, **kwargs)`` on a query thread."""
        return self._submit(lambda engine: fn(engine, *args, **kwargs))

    def answered(self) -> None:
        """On a query thread: its request's answer is written (``QueryThreads.answered``)."""
        self._query_pool.answered()

    def query_passive(self, fn: Callable[..., Any], *args) -> Future:
        """``query``, for a request that is not the user at work (``engram/status``, which a
        client may poll): taken as a request, but it neither makes background work give way
        (``busy``) nor starts the quiet that the warm-up waits for (``since_request``)."""
        return self._submit(lambda engine: fn(engine, *args), counts=False)

    def _submit(self, fn: Callable[[Any], Any], thread: int | None = None,
                counts: bool = True) -> Future:
        """Queue ``fn(engine)``: a request, or (``thread``) a background job for that thread."""

        request = thread is None and counts

        def run():
            active = False
            try:
                active = self._enter()
                engine = self.open()
                if thread is None:  # a request: a background job (a warm-up step, between the
                    # deletion and the next request) would take the one ``NotIndexed`` and with it
                    # the rebuild offer, and its caller looks at no error
                    self.check_index()
                engine.refresh()  # the row cache as of now, not this connection's last read
                try:
                    return fn(engine)
                finally:
                    # after the first query's answer (read from SQLite), not before it: reading
                    # every posting would compete with it for the CPU
                    if not engine.holds_postings and not self.ingesting:
                        _hold_postings(engine)
            finally:
                with self._lock:
                    self._queries -= 1
                    self._requests -= request
                    self._active -= active
                    if request:
                        self._last_request_at = time.monotonic()
                        if not self._requests and self._idle_waiters:  # the last one: they look again
                            self._warm_wake.notify_all()

        self._count(1, request)
        try:
            future = self._query_pool.submit(run, thread)
        except BaseException:
            self._count(-1, request)
            raise
        future.add_done_callback(lambda f: f.cancelled() and self._count(-1, request))
        return future

    def _enter(self) -> bool:
        """Count a query as running on the engine, after any rebuild. A rebuild deletes the
        index file and writes a new one: a connection still open on the old file, or opened
        meanwhile (every query opens one after the rebuild closed the old), confuses SQLite's
        locks or writes the new file's schema under the rebuild, which then fails. So a rebuild
        waits for running queries (``_begin_rebuild``) and queries wait for it (answers from a
        half-built index would be wrong anyway), at most ``_REBUILD_WAIT_S``."""
        deadline = time.monotonic() + _REBUILD_WAIT_S
        while True:
            with self._lock:
                if not self.rebuilding or self.closing or time.monotonic() > deadline:
                    self._active += 1
                    return True
            time.sleep(0.02)

    def _begin_rebuild(self) -> None:
        with self._lock:
            self.rebuilding = True
        deadline = time.monotonic() + _REBUILD_WAIT_S
        while self._active and time.monotonic() < deadline:
            time.sleep(0.01)

    def _count(self, n: int, request: bool = False) -> None:
        with self._lock:
            self._queries += n
            self._requests += n * request
            if request:
                self._last_request_at = time.monotonic()
                if n < 0 and not self._requests and self._idle_waiters:
                    self._warm_wake.notify_all()

    def _yield(self) -> bool:
        """Whether background work on a query thread should stop: a request waits, or an ingest
        runs or is about to (``ingesting`` is set before it takes ``_ingest_guard``)."""
        return self._query_pool.waiting() or self.ingesting or self.closing

    def _prefill_job(self, engine, thread: int, tries: int) -> None:
        """``prefill`` this thread's connection (``Engine.prefill_postings``), never during an
        ingest (a rebuild replaces the file: a connection opened then may read the old one, or
        write the new one's schema under the rebuild): ``_run_ingest`` holds the guard. Stopped
        by a request, it is queued again (it runs when no request waits)."""
        if not self._ingest_guard.try_shared():
            return  # the ingest queues a prefill when it is done
        done = None
        try:
            if self.ingesting or self.closing:
                return
            if not self._yield():
                done = engine.prefill_postings(self._yield)
        except BaseException:
            done = False
            raise
        finally:
            self._ingest_guard.release_shared()
            if done is not None or tries <= 1 or self.closing:
                with self._lock:
                    self._prefilling.discard(thread)
        if done is None and tries > 1 and not self.closing:
            self._queue_prefill(thread, tries - 1)

    def _queue_prefill(self, thread: int, tries: int) -> None:
        try:
            self._submit(lambda engine: self._prefill_job(engine, thread, tries), thread=thread)
        except RuntimeError:  # shutting down
            pass

    def prefill(self) -> None:
        """Open each query thread's connection if need be and read the rows lens and hover look
        up through it (``prefill``), as background jobs: at startup (the first query on a thread
        otherwise pays for opening its connection, reading the schema and the rows) and after an
        ingest (the rows read before are stale). A job stops early for a request that waits; a
        thread whose job did not finish reads rows as requests need them."""
        with self._lock:
            self._prefilling.update(range(self._query_pool.size))
        for i in range(self._query_pool.size):
            self._queue_prefill(i, _PREFILL_TRIES)

    def prefilling(self) -> int:
        """Query threads whose prefill has not finished yet (``engram/status`` →
        ``server.prefilling``): one stopped by a request goes on once none waits."""
        with self._lock:
            return len(self._prefilling)

    def parse(self, text: str, path) -> bool:
        """Parse ``text`` for later hovers now (``Engine.parse_symbols``), giving way to requests:
        False when one came (``busy``) and the parse was given up. Needs no open engine."""
        from engram.engine import Engine

        return Engine.parse_symbols(text, path, cancel=self.busy)

    @contextlib.contextmanager
    def answering(self):
        """Count a request answered without the query threads (a first code lens computed
        before the engine is imported) as one: ``busy`` and ``since_request`` see it."""
        self._count(1, True)
        try:
            yield
        finally:
            self._count(-1, True)

    def busy(self) -> bool:
        """Whether a request is queued or running (background work gives way to it)."""
        return self._requests > 0

    def since_request(self) -> float:
        """Seconds since a request last came or went (0 while one is queued or running)."""
        if self._requests:
            return 0.0
        return time.monotonic() - self._last_request_at

    def wait_idle(self, quiet: float = 0.0, timeout: float | None = None) -> bool:
        """Block until no request is queued or running and none has come or gone for ``quiet``
        seconds (True), or the server closes or ``timeout`` passes first (False). For background
        work that waits for the client to be quiet: woken when the last request under way ends,
        never while one runs. (A thread that polls every few ms wakes in the middle of requests:
        each wake takes the interpreter from the query thread for a moment, and on a loaded
        machine the query thread then waits for a core again — the wall time of the explains
        during which the background thread's pollers ran was 3.5x their CPU time's excess over
        the others', stop 29.)"""
        deadline = None if timeout is None else time.monotonic() + timeout
        slept = False
        with self._lock:
            while not self.closing:
                now = time.monotonic()
                left = None if self._requests else self._last_request_at + quiet - now
                if left is not None and left <= 0:
                    return True
                if deadline is not None:
                    if now >= deadline:
                        return False
                    left = deadline - now if left is None else min(left, deadline - now)
                slept = self._wait_quiet(left, slept)
            return False

    def _wait_quiet(self, left: float | None, slept: bool) -> bool:
        """One wait on ``_warm_wake`` for quiet (call with ``_lock`` held), at most ``left``: with
        no request under way, for ``left``; with one under way, first ``_QUIET_S`` (``slept``
        False: the ends of a burst's requests do not wake it), then (``slept``) until the last
        request under way ends. Returns the next call's ``slept``. In a burst of requests that
        is two looks per ``_QUIET_S`` or so, one of them between two requests — not one per
        request, nor a poll's every few ms."""
        if not self._requests:
            self._warm_wake.wait(left)
            return False
        if not slept:
            self._warm_wake.wait(_QUIET_S if left is None else min(left, _QUIET_S))
            return True
        self._idle_waiters += 1
        try:
            self._warm_wake.wait(left)
        finally:
            self._idle_waiters -= 1
        return False

    def query_background(self, fn: Callable[..., Any], *args, thread: int = 0) -> Future:
        """Run ``fn(engine, *args)`` as a background job of query thread ``thread`` (taken when no
        request waits)."""
        return self._submit(lambda engine: fn(engine, *args), thread=thread)

    def background(self, fn: Callable[..., Any], *args) -> Future:
        """Run ``fn(*args)`` on the background thread: work that only prepares for later requests
        (no engine), done while no query runs (``busy``)."""
        return self._background_pool.submit(fn, *args)

    # --- explain warm-up -------------------------------------------------------------------------

    def warm(self, file: str, text: str, before: int | None = None, after: int | None = None,
             ahead=None):
        """Read ahead what explaining spans of ``file`` (buffer ``text``) needs, as explain would
        read it on first use (``Engine.prefetch_steps``): on each query thread's connection in turn
        (each keeps its own rows; one thread warms at a time, so the other is free for a request),
        in steps of a few milliseconds, once no request has come or gone for ``_QUIET_S``. A
        request that arrives meanwhile is taken by the free thread at once, and the warm-up stops
        after its current step until it is quiet again. Files are warmed in the order they were
        opened; the most recent ones again after an ingest (which drops what was read).
        ``ahead(engine)``: more steps (a generator), taken once, after explain's read-ahead on
        every thread (on the last one), as the hovers of the file computed ahead
        (``engram_lsp.features.hover.ahead_steps``)."""
        task = _WarmTask(file, text, before, after, self.generation, self._query_pool.size, ahead)
        with self._lock:
            if any(t.file == file and t.text == text for t in self._warm_tasks):
                return
            self._warm_tasks.append(task)
            self._warm_recent[file] = task
            self._warm_recent.move_to_end(file)
            while len(self._warm_recent) > _REWARM_FILES:
                self._warm_recent.popitem(last=False)
        self._pump_warm()

    def forget(self, file: str) -> None:
        """A closed document: no warm-up for it any more (one under way finishes its step)."""
        with self._lock:
            self._warm_recent.pop(file, None)
            self._warm_tasks = deque(t for t in self._warm_tasks if t.file != file or t.gen)

    def warming(self) -> int:
        """Files whose warm-up is queued or under way, or still to be queued (``opening``)."""
        return len(self._warm_tasks) + self._opening

    def opening(self, n: int) -> None:
        """Count an opened file whose warm-up is on its way to ``warm`` (+1), or got there or
        was given up (-1): ``warming`` counts it meanwhile."""
        with self._lock:
            self._opening += n

    def _rewarm(self) -> None:
        with self._lock:
            for task in self._warm_recent.values():
                if task not in self._warm_tasks:
                    task.restart(self.generation)
                    self._warm_tasks.append(task)
        self._pump_warm()

    def _quiet_for(self) -> float:
        """Seconds until no request has come or gone for ``_QUIET_S`` (0: quiet now); call with
        ``_lock`` held. An editor sends its requests in bursts (open, lenses, hover, ...): the
        warm-up starts after one, not between its requests."""
        if self._requests:
            return _QUIET_S
        return max(0.0, self._last_request_at + _QUIET_S - time.monotonic())

    def _pump_warm(self) -> None:
        """Tell the thread that queues warm-up jobs to look (from any thread; never blocks)."""
        with self._lock:
            if self._warm_thread is None and not self.closing:
                self._warm_thread = threading.Thread(
                    target=self._warm_loop, name="engram-warm", daemon=True
                )
                self._warm_thread.start()
            self._warm_wake.notify_all()

    def _warm_loop(self) -> None:
        """Queue the next warm-up job when none is queued or running, no ingest runs, and no
        request has come or gone for ``_QUIET_S``. While requests run it sleeps until the last
        one ends (a notify after its answer is written), then waits out the quiet."""
        while True:
            with self._lock:
                slept = False
                while True:
                    if self.closing:
                        return
                    if self._warm_tasks and not self._warm_scheduled and not self.ingesting:
                        wait = self._quiet_for()
                        if wait <= 0:
                            break
                        # while requests run: not a wake at the end of each of them
                        slept = self._wait_quiet(wait if not self._requests else None, slept)
                    else:
                        self._warm_wake.wait()
                task = self._warm_tasks[0]
                self._warm_scheduled = True
            try:
                self._submit(
                    lambda engine, t=task: self._warm_job(engine, t), thread=task.threads[0]
                )
            except RuntimeError:  # shutting down
                return

    def _warm_job(self, engine, task: _WarmTask) -> None:
        """Steps of ``task`` on this query thread until it is done here, or a request (queued or
        running), an ingest or a shutdown comes first: then it stops between two steps, and
        ``_warm_loop`` queues it again when it is quiet (after an ingest: from the start)."""
        try:
            while True:
                with self._lock:
                    if self._quiet_for() or self.ingesting or self.closing:
                        return
                    if task.generation != self.generation:  # an ingest: what was read is gone
                        task.restart(self.generation)
                        return  # back to the first thread
                if task.gen is None:
                    task.gen = engine.prefetch_steps(task.file, task.text, task.before, task.after)
                    if task.ahead is not None and len(task.threads) == 1:
                        task.gen = itertools.chain(task.gen, task.ahead(engine))
                    task.steps, task.spent = 0, 0.0
                started = time.perf_counter()
                try:
                    next(task.gen)
                except StopIteration:
                    with self._lock:
                        task.gen = None
                        thread = task.threads.pop(0)
                        if not task.threads and self._warm_tasks and self._warm_tasks[0] is task:
                            self._warm_tasks.popleft()
                    log.debug("read ahead for explain: %s on query thread %d (%d steps, %.1f ms)",
                              task.file, thread, task.steps, task.spent * 1000)
                    return  # the next thread, or the next file
                task.steps += 1
                task.spent += time.perf_counter() - started
        except Exception:  # an optimisation: explain reads what it needs itself
            log.debug("warm-up for explain failed for %s", task.file, exc_info=True)
            with self._lock:
                if self._warm_tasks and self._warm_tasks[0] is task:
                    self._warm_tasks.popleft()
        finally:
            with self._lock:
                self._warm_scheduled = False
                self._warm_wake.notify_all()

    def _index_ident(self) -> tuple[int, int] | None:
        index = self.index_path()
        try:
            st = index.stat() if index is not None else None
        except OSError:
            return None
        return (st.st_dev, st.st_ino) if st else None

    def check_index(self) -> None:
        """Raise ``NotIndexed`` once when the index file vanished or was replaced under us.

        (Deleting ``.engram-cache/`` while the editor is open would otherwise leave the query
        threads reading the deleted file forever.) The stale connections are dropped, so the next
        query reads the file that is there now; the caller offers a rebuild.
        """
        if self.ingesting:  # a rebuild replaces the file on purpose
            return
        ident = self._index_ident()
        if not self.index_lost and (self.index_ident is None or ident == self.index_ident):
            return
        self.index_lost = False
        self.index_ident = ident
        self.reopen()
        from engram.errors import NotIndexed

        raise NotIndexed(
            "the index is missing (was it deleted?)", path=str(self.index_path())
        )

    def _index_generation(self) -> str | None:
        engine = self.engine
        return engine.generation() if engine is not None else None

    def cached(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """Memoise per index generation (call from the query thread). A computation already
        running for the same key (didOpen's warm-up, a repeated request) is waited for, not
        repeated."""
        full = (self.generation, *key)
        with self._lock:
            if full in self._cache:
                self._cache.move_to_end(full)
                return self._cache[full]
            running = self._running.get(full)
            if running is None:
                running = self._running[full] = Future()
                owner = True
            else:
                owner = False
        if not owner:
            return running.result()
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                self._running.pop(full, None)
            running.set_exception(exc)
            raise
        with self._lock:
            self._running.pop(full, None)
            if full[0] == self.generation:
                self._cache[full] = value
                while len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
        running.set_result(value)
        return value

    def peek(self, key: tuple) -> bool:
        """Whether ``cached`` holds ``key`` for the current generation (no computing)."""
        with self._lock:
            return (self.generation, *key) in self._cache

    # --- code lens counts kept on disk (``engram_lsp.lenses``) ----------------------------------

    def lens_store(self):
        """The on-disk lens counts of the index this server reads (None: no index path)."""
        index = self.index_path()
        if index is None:
            return None
        store = self._lens_store
        if store is None or store.index != index:
            from engram_lsp.lenses import LensStore

            store = self._lens_store = LensStore(index)
        return store

    def block_store(self):
        """The block tables kept beside the index (``engram_lsp.blocks``; None: no index path)."""
        index = self.index_path()
        if index is None:
            return None
        store = self._block_store
        if store is None or store.path != Path(str(index) + ".blocks"):
            from engram_lsp.blocks import BlockStore

            store = self._block_store = BlockStore(index)
        return store

    def kept_block_table(self, path, text: str) -> list[list[int]] | None:
        """The text's block table kept on disk (``engram_lsp.blocks``), or None."""
        store = self.block_store() if text else None
        if store is None:
            return None
        from engram_lsp import blocks

        try:
            # the text's key (a hash of the whole text) once per buffer state: the same str object
            # comes back for every hover until the buffer changes
            last = self._block_key
            if last is None or last[0] != path or last[1] is not text:
                last = self._block_key = (path, text, blocks.key(path, text))
            return store.get(last[2])
        except Exception:  # a shortcut: the parse answers
            log.debug("reading kept block tables failed", exc_info=True)
            return None

    def enclosing_block(self, engine, path, text: str, line: int) -> tuple[int, int]:
        """``Engine.enclosing_block``, from the text's kept block table when there is one (no
        parse: ``engram_lsp.blocks``)."""
        table = self.kept_block_table(path, text)
        if table is not None:
            return engine.table_block(table, line)
        return engine.enclosing_block(text, path, line)

    def stored_lenses(self, path, text: str) -> list[dict] | None:
        """A document's lens counts from disk, when they belong to the index as it is now (no
        engine needed: the first lenses after a start); None otherwise, or during a rebuild."""
        if self.rebuilding or self.closing:
            return None
        store = self.lens_store()
        if store is None:
            return None
        from engram_lsp import lenses

        try:
            blocks = store.get(lenses.key(path, text))
        except Exception:  # a shortcut: the lens is computed instead
            log.debug("reading kept lens counts failed", exc_info=True)
            return None
        return None if blocks is None else lenses.as_results(blocks)

    def settled_generation(self, engine) -> str | None:
        """The index's generation when this server's caches are known to belong to it (no ingest
        of ours under way, the one seen after our last ingest); None otherwise."""
        if self.ingesting or self._generation is None:
            return None
        generation = engine.generation()
        return generation if generation == self._generation else None

    def keep_lenses(self, engine, path, text: str, results: list[dict], generation) -> None:
        """Write a document's lens counts to disk (``engram_lsp.lenses``) when they were computed
        under ``generation`` (from ``settled_generation`` before the computation, and still the
        index's after it) and ``text`` is the file's saved text (what a restarted editor opens
        again; an edited buffer's lenses are not written at every keystroke). Off the request
        path, on the background thread."""
        if generation is None or self.closing or self.settled_generation(engine) != generation:
            return
        store = self.lens_store()
        if store is None:
            return
        from engram_lsp import lenses

        def write() -> None:
            try:
                if _saved_text_is(path, text):
                    store.put(lenses.key(path, text), generation, lenses.counts(results))
            except Exception:  # an optimisation
                log.debug("keeping lens counts failed", exc_info=True)

        try:
            self._background_pool.submit(write)
        except RuntimeError:  # shutting down
            pass

    def lenses_ahead(self):
        """What computes the workspace's lens counts ahead (``engram_lsp.ahead``), made once."""
        if self._ahead is None:
            from engram_lsp.ahead import LensesAhead

            with self._lock:
                if self._ahead is None:
                    self._ahead = LensesAhead(self)
        return self._ahead

    def lenses_pending(self) -> int:
        """Workspace files whose lens counts the pass under way has still to compute."""
        return self._ahead.pending if self._ahead is not None else 0

    def tables_pending(self) -> int:
        """Workspace files whose block tables the tables pass under way has still to look at."""
        return self._ahead.tables_pending if self._ahead is not None else 0

    def ahead_job(self, engine, path: Path):
        """One workspace file's lens counts, computed as its code lens would be, and its block
        table (query thread, background job of ``engram_lsp.ahead``): ``(generation, key, blocks,
        tables)``, key None when the counts are kept already or the file cannot be read, tables
        ``{key: table}`` when one was computed (``engram_lsp.blocks``); None when the index is not
        settled (an ingest runs or ran since: the pass stops)."""
        if not self._ingest_guard.try_shared():
            return None
        try:
            generation = self.settled_generation(engine)
            store = self.lens_store()
            if generation is None or store is None or self.closing:
                return None
            from engram_lsp import lenses

            try:
                text = engine.read_file(path)
            except Exception:  # not a regular readable file (any more): nothing to keep
                return generation, None, None, {}
            tables = self._ahead_table(engine, path, text) or {}
            key = lenses.key(path, text)
            if not text or store.has(key, generation):
                return generation, None, None, tables
            blocks = [(s, e) for s, e, _name in engine.top_level_blocks(text, path)]
            results = self.block_results(engine, str(path), text, blocks) if blocks else []
            if self.settled_generation(engine) != generation:
                return None
            if not _saved_text_is(path, text):
                return generation, None, None, tables
            return generation, key, lenses.counts(results), tables
        finally:
            self._ingest_guard.release_shared()

    def _ahead_table(self, engine, path: Path, text: str) -> dict | None:
        """``{key: block table}`` of ``text`` when none is kept (``engram_lsp.blocks``), computed
        unless a request comes meanwhile (then None); {} when one is kept, or the text has no
        parse."""
        store = self.block_store()
        if store is None or not text:
            return {}
        from engram_lsp import blocks

        key = blocks.key(path, text)
        if store.has(key):
            return {}
        table = engine.block_table(text, path, cancel=self._query_pool.waiting)
        if table is None:
            return None if self._query_pool.waiting() else {}
        return {key: table}

    def table_job(self, engine, path: Path) -> dict | None:
        """One workspace file's block table when none is kept (query thread, background job of
        ``engram_lsp.ahead``'s tables pass; no index read): as ``_ahead_table``, {} for a file
        that cannot be read."""
        try:
            text = engine.read_file(path)
        except Exception:  # not a regular readable file (any more): nothing to keep
            return {}
        return self._ahead_table(engine, path, text)

    def block_results(
        self, engine, file: str, text: str, blocks: list[tuple[int, int]]
    ) -> list[dict]:
        """``explain_blocks`` for ``blocks`` of ``text``, reusing results for unchanged blocks.

        Results are cached per index generation by the block's own text, so after an edit only
        the blocks whose text changed are looked up — still in one ``explain_blocks`` call (the
        whole document on first sight, else just the changed blocks concatenated). Hover and code
        lens share the cache.
        """
        lines = text.split("\n")
        texts = ["\n".join(lines[s - 1 : e]) for s, e in blocks]
        gen = self.generation
        with self._lock:
            known = {i: self._blocks.get((gen, t)) for i, t in enumerate(texts)}
        missing = [i for i, r in known.items() if r is None]
        if missing:
            if len(missing) == len(blocks):
                computed = engine.explain_blocks(file, text, list(blocks), events=True)
            else:
                sub, ranges, line = [], [], 1
                for i in missing:
                    n = texts[i].count("\n") + 1
                    sub.append(texts[i])
                    ranges.append((line, line + n - 1))
                    line += n + 1  # a blank line between blocks
                computed = engine.explain_blocks(file, "\n\n".join(sub) + "\n", ranges,
                                                 events=True)
            with self._lock:
                for i, result in zip(missing, computed, strict=True):
                    known[i] = result
                    self._blocks[(gen, texts[i])] = result
                while len(self._blocks) > _BLOCK_CACHE_SIZE:
                    self._blocks.popitem(last=False)
        return [{**known[i], "range": [s, e]} for i, (s, e) in enumerate(blocks)]

    def postings_status(self) -> dict | None:
        """How many postings are held in memory (``engram/status`` → ``server.memory``)."""
        engine = self.engine
        return engine.postings_status() if engine is not None else None

    def invalidate(self) -> None:
        with self._lock:
            self.generation += 1
            self._cache.clear()
            self._blocks.clear()

    # --- ingest --------------------------------------------------------------------------------

    def ingest(
        self,
        *,
        rebuild: bool = False,
        seal: bool = False,
        paths: Iterable[str] | None = None,
        progress: Callable[..., None] | None = None,
    ) -> Future:
        """Queue an ingest on the ingest thread; the future holds the engine's summary."""
        return self._ingest_pool.submit(
            self._run_ingest, rebuild, seal, None if paths is None else sorted(set(paths)), progress
        )

    def ingest_changed(
        self, paths: Iterable[str], done: Callable[[dict | None, Exception | None], None]
    ) -> None:
        """Watcher entry point: ingest these paths soon, coalescing with paths already queued."""
        with self._lock:
            self._pending_paths.update(paths)
            if self._watch_job is not None and not self._watch_job.done():
                return
            try:
                self._watch_job = self._ingest_pool.submit(self._drain_pending, done)
            except RuntimeError:  # shutting down
                return

    def _drain_pending(self, done) -> None:
        while not self.closing:
            with self._lock:
                batch = sorted(self._pending_paths)
                self._pending_paths.clear()
            if not batch:
                return
            existing = [p for p in batch if Path(p).exists()]
            if not existing:  # only deletions: nothing new to read
                continue
            # a directory (one that appeared, or was moved in) may hold anything: ingest all
            paths = None if any(Path(p).is_dir() for p in existing) else existing
            try:
                summary = self._run_ingest(False, False, paths, None)
            except Exception as exc:  # reported, never raised into the watcher
                done(None, exc)
            else:
                done(summary, None)

    def _run_ingest(self, rebuild, seal, paths, progress):
        if self.closing:
            raise IngestCancelled("server is shutting down")

        def report(*args, **kwargs):
            if self.closing:
                raise IngestCancelled("server is shutting down")
            if progress is not None:
                progress(*args, **kwargs)

        self.ingesting = True
        if rebuild:
            self._begin_rebuild()
        started = time.monotonic()
        summary = None
        try:
            engine = self.open()
            kwargs: dict[str, Any] = {"progress": report}
            if rebuild:
                kwargs["rebuild"] = True
            if seal:
                kwargs["seal"] = True
            if paths is not None:
                kwargs["paths"] = [Path(p) for p in paths]
            replaced = self.index_ident is not None and self._index_ident() != self.index_ident
            # no prefill meanwhile; while a rebuild replaces the file, no reading of postings
            # either (a connection left open on the old file confuses SQLite's locks on the new)
            paused = engine.postings_paused() if rebuild else contextlib.nullcontext()
            with self._ingest_guard, paused:
                summary = engine.ingest(**kwargs)
                if rebuild:
                    # a query that opened its connection while the rebuild replaced the file may
                    # read the old one (unlinked, its inode number possibly reused, which
                    # ``check_index`` cannot tell): start over with connections to the new file
                    self.reopen()
            self.index_ident = self._index_ident()
            if replaced and not rebuild:  # deleted under us: this ingest wrote a partial index
                self.index_lost = True
            self.last_ingest = summary if isinstance(summary, dict) else {"summary": summary}
            self.last_ingest_error = None
            return summary
        except Exception as exc:
            self.last_ingest_error = str(exc)
            raise
        finally:
            generation = self._index_generation()
            if not (isinstance(summary, dict) and summary.get("nothing_to_do")) \
                    or generation != self._generation:
                self.invalidate()  # new evidence (ours or another process's): answers are stale
            self._generation = generation
            # said done only now: a client that waits for it never gets an answer cached before
            self.last_ingest_at = time.time()
            self.ingesting = self.rebuilding = False
            from engram_lsp import heap

            heap.trim()  # what the ingest held goes back to the kernel
            if not self.closing:
                self.prefill()  # any ingest commits (at least its time): rows read are dropped
                self._rewarm()
                self.lenses_ahead().after_ingest()
            log.info(
                "ingest (%s) took %.0f ms",
                "paths" if paths else ("rebuild" if rebuild else "all"),
                (time.monotonic() - started) * 1000,
            )


def _saved_text_is(path, text: str) -> bool:
    """Whether the file at ``path`` holds exactly ``text`` (UTF-8)."""
    data = text.encode("utf-8", "surrogatepass")
    try:
        if os.stat(path).st_size != len(data):
            return False
        with open(path, "rb") as f:
            return f.read(len(data) + 1) == data
    except (OSError, ValueError):
        return False


def _hold_postings(engine) -> None:
    """Hold the index's postings in memory (read in the background; ``Engine.hold_postings``):
    a code lens on a big file then does not wait for thousands of SQLite lookups. Called on a
    query thread, never during an ingest (a reader's connection must not hold the old file of a
    rebuild)."""
    try:
        engine.hold_postings()
    except Exception:  # an optimisation; queries fall back to SQLite
        log.debug("keeping postings in memory failed", exc_info=True)
