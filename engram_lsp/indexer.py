"""The service that keeps the index fresh for the language server: ingest with progress, the
rebuild offer, live watching with a periodic sweep, and embedding after ingest. No LSP method of
its own: ``features/lifecycle``, ``config`` and ``commands`` drive it.

**Ingest.** LSP methods ``$/progress`` (work-done progress), ``workspace/codeLens/refresh`` and
``window/showMessageRequest`` (the rebuild offer) around background ingests.

``start_ingest(ls)`` queues an ingest on the backend's ingest thread, reports it as work-done progress
(when the client supports ``window.workDoneProgress``), then asks the client to refresh its code
lenses. A failure is logged and shown (``showNotifications``); a broken index gets one offer to
rebuild it (``Rebuild index`` → the same as the ``engram.reindex`` command).

**Watching** (``start_watching``): log dirs and tape sources → incremental ingest →
``workspace/codeLens/refresh``. A watchdog observer watches every path of ``engine.watch_paths()``. File events are collected and flushed at most
``watch.debounceMs`` (200 ms) after the first one, so a burst of 1,000 appended lines is one ingest
and a single appended line is indexed well inside the 2 s freshness target. Paths that change while
an ingest runs are ingested together right after it (``Backend.ingest_changed``). Rotation (a move)
ingests the new name; a deleted log is ignored; a watched directory that does not exist yet is
polled for until it appears. Events under the index directory are ignored (the index is ours).

Besides events, a full incremental ingest runs every ``SWEEP_S`` seconds while the server is idle,
so live sessions whose logs went quiet get sealed into tapes (``seal_after``) without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from lsprotocol import types

log = logging.getLogger(__name__)

REBUILD = "Rebuild index"


def _describe(*args, **kwargs) -> tuple[str | None, int | None]:
    """Turn whatever the engine's progress callback passes into (message, percentage)."""
    info = dict(kwargs)
    if args and isinstance(args[0], dict):
        info.update(args[0])
        args = args[1:]
    nums = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    texts = [a for a in args if isinstance(a, str)]
    done = info.get("done", nums[0] if len(nums) >= 1 else None)
    total = info.get("total", nums[1] if len(nums) >= 2 else None)
    message = (
        info.get("message")
        or info.get("source")
        or info.get("path")
        or (texts[0] if texts else None)
    )
    if isinstance(message, str) and "/" in message:
        message = message.rstrip("/").rsplit("/", 1)[-1]
    pct = None
    if isinstance(done, (int, float)) and isinstance(total, (int, float)) and total > 0:
        pct = max(0, min(100, int(100 * done / total)))
    return (str(message) if message is not None else None), pct


def _supports_progress(ls) -> bool:
    caps = ls.client_capabilities
    return bool(caps and caps.window and caps.window.work_done_progress)


def start_ingest(
    ls,
    *,
    rebuild: bool = False,
    seal: bool = False,
    title: str = "Engram: indexing",
    quiet: bool = False,
) -> asyncio.Future:
    """Run an ingest in the background; returns an asyncio future with the engine's summary.

    ``quiet``: no progress UI (the periodic sweep); lenses are refreshed only if it changed
    something.
    """
    loop = asyncio.get_running_loop()
    result: asyncio.Future = loop.create_future()
    token = f"engram-ingest-{uuid.uuid4().hex[:12]}"
    progress_ok = _supports_progress(ls) and not quiet
    state = {"created": False, "last": 0.0}

    def report(*args, **kwargs) -> None:  # called on the ingest thread
        now = time.monotonic()
        if not state["created"] or now - state["last"] < 0.1:
            return
        state["last"] = now
        message, pct = _describe(*args, **kwargs)
        ls.on_loop(
            ls.work_done_progress.report,
            token,
            types.WorkDoneProgressReport(message=message, percentage=pct),
        )

    async def run() -> None:
        if progress_ok:
            try:
                await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=5.0)
                ls.work_done_progress.begin(
                    token,
                    types.WorkDoneProgressBegin(
                        title=title,
                        message="reading agent session logs",
                        percentage=0,
                        cancellable=False,
                    ),
                )
                state["created"] = True
            except Exception as exc:
                log.debug("work-done progress unavailable: %s", exc)
        fut: Future = ls.get_backend().ingest(rebuild=rebuild, seal=seal, progress=report)
        summary = error = None
        try:
            summary = await asyncio.wrap_future(fut)
        except Exception as exc:
            error = exc
        if state["created"]:
            ls.work_done_progress.end(
                token,
                types.WorkDoneProgressEnd(
                    message=_summary_text(summary) if error is None else f"failed: {error}"
                ),
            )
        if error is not None:
            if type(error).__name__ == "IngestCancelled":
                result.set_result(None)
                return
            log.error("ingest failed: %s", error)
            if ls.looks_corrupt(error):
                ls.offer_rebuild_for(error)
            else:
                ls.notify_user(f"Engram: indexing failed: {error}", error=True)
            result.set_exception(error)
            return
        unchanged = isinstance(summary, dict) and summary.get("nothing_to_do")
        if not (quiet and unchanged):
            log.info("ingest done: %s", _summary_text(summary))
            ls.refresh_code_lenses()
            embed_in_background(ls)
        result.set_result(summary)

    task = asyncio.ensure_future(run())
    task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
    result.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)
    return result


def _summary_text(summary) -> str:
    if not isinstance(summary, dict):
        return "done"
    parts = []
    for key in ("sources", "sessions", "tapes", "events", "live", "errors"):
        v = summary.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            parts.append(f"{v} {key}")
        elif isinstance(v, list):
            parts.append(f"{len(v)} {key}")
    return ", ".join(parts) or "done"


def offer_rebuild(ls, reason: str, *, action: str = REBUILD) -> None:
    """Show the problem with a one-click rebuild (``window/showMessageRequest``)."""

    async def ask() -> None:
        message = f"Engram: {reason}. Rebuild the index from the session logs and tapes?"
        caps = ls.client_capabilities
        can_ask = bool(caps and caps.window and caps.window.show_message)
        if not can_ask:
            ls.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Error,
                    message=message + " (run the engram.reindex command)",
                )
            )
            return
        try:
            choice = await ls.window_show_message_request_async(
                types.ShowMessageRequestParams(
                    type=types.MessageType.Error,
                    message=message,
                    actions=[types.MessageActionItem(title=action)],
                )
            )
        except Exception as exc:
            log.warning("showMessageRequest failed: %s", exc)
            return
        if choice is not None and getattr(choice, "title", None) == action:
            await reindex(ls)

    asyncio.ensure_future(ask())


async def reindex(ls):
    """Rebuild the index from the logs and tapes (the engine deletes the old index file first)."""
    ls.rebuild_offered = True  # no second offer while this rebuild runs
    ls.get_backend().invalidate()
    summary = await start_ingest(ls, rebuild=True, title="Engram: rebuilding the index")
    ls.rebuild_offered = False
    if ls.settings.watch_enabled and ls.watcher is None:  # startup stopped at the broken index
        await start_watching(ls)
    return summary


# -- embedding after ingest (issue 7) --------------------------------------------------------------
_EMBED_POOL: ThreadPoolExecutor | None = None
_EMBED_RUNNING = threading.Event()


def _embedding_wanted(engine) -> bool:
    """Background embedding runs when ``embedding.enabled`` is ``true``, or ``auto`` once this
    repository has vectors (someone ran ``engram embed``): it then keeps them up to date. It
    never starts a multi-minute model job for a user who did not ask for semantic scoring."""
    try:
        from engram.embed import run
    except ImportError:
        return False
    try:
        on, _why = run.wanted(engine.config)
        if not on:
            return False
        if engine.config.embedding.get("enabled") is True:
            return True
        return run.state(engine).get("vectors", 0) > 0
    except Exception:  # optional signal: never disturb the server
        log.debug("embedding state check failed", exc_info=True)
        return False


def embed_in_background(ls) -> None:
    """Embed new reasoning text on a thread of its own (one torch thread, so hovers keep their
    core), with work-done progress; one run at a time; never blocks a request."""
    global _EMBED_POOL
    backend = ls.get_backend()
    engine = getattr(backend, "engine", None)
    if engine is None or _EMBED_RUNNING.is_set() or not _embedding_wanted(engine):
        return
    _EMBED_RUNNING.set()
    if _EMBED_POOL is None:
        _EMBED_POOL = ThreadPoolExecutor(1, thread_name_prefix="engram-embed")
    token = f"engram-embed-{uuid.uuid4().hex[:12]}"
    progress_ok = _supports_progress(ls)
    state = {"created": False, "last": 0.0}

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if not state["created"] or now - state["last"] < 0.5:
            return
        state["last"] = now
        pct = int(done * 100 / total) if total else None
        ls.on_loop(ls.work_done_progress.report, token,
                   types.WorkDoneProgressReport(message=f"{done}/{total} chunks", percentage=pct))

    def work() -> dict:
        import os

        os.environ.setdefault("ENGRAM_EMBED_THREADS", "1")
        from engram.embed import run

        return run.embed_index(engine, progress=progress,
                               should_stop=lambda: getattr(backend, "_closing", threading.Event()).is_set())

    async def go() -> None:
        try:
            if progress_ok:
                try:
                    await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=5.0)
                    ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
                        title="Engram: embedding reasoning", percentage=0, cancellable=False))
                    state["created"] = True
                except Exception as exc:
                    log.debug("work-done progress unavailable: %s", exc)
            loop = asyncio.get_running_loop()
            try:
                res = await loop.run_in_executor(_EMBED_POOL, work)
                msg = f"{res.get('embedded', 0)} new chunks embedded"
                log.info("embedding done: %s", res)
            except Exception as exc:  # the semantic signal is optional
                msg = f"failed: {exc}"
                log.warning("background embedding failed: %s", exc)
            if state["created"]:
                ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=msg))
        finally:
            _EMBED_RUNNING.clear()

    asyncio.ensure_future(go())


# -- live watching ------------------------------------------------------------------------------

_POLL_MISSING_S = 2.0
SWEEP_S = 300.0


class Watcher:
    """watchdog observer + debounce; calls ``on_batch(paths)`` from a timer thread."""

    def __init__(self, paths: list[Path], ignore: list[Path], debounce_s: float, on_batch):
        from watchdog.observers import Observer

        self.paths = [Path(p) for p in paths]
        self.ignore = [str(Path(p)) for p in ignore]
        self.debounce_s = debounce_s
        self.on_batch = on_batch
        self.observer = Observer()
        self.observer.daemon = True
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._missing: list[Path] = []
        self._stopped = threading.Event()
        self._poller: threading.Thread | None = None
        self.sweeper: asyncio.Future | None = None

    def start(self) -> None:
        for path in self.paths:
            self._schedule(path)
        self.observer.start()
        if self._missing:
            self._poller = threading.Thread(
                target=self._poll_missing, name="engram-watch-poll", daemon=True
            )
            self._poller.start()

    def _schedule(self, path: Path) -> bool:
        from watchdog.events import FileSystemEventHandler

        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write"):
                    return
                if getattr(event, "is_directory", False) and event.event_type != "moved":
                    return
                watcher._event(getattr(event, "dest_path", "") or event.src_path)
                if event.event_type == "moved":
                    watcher._event(event.src_path)

        try:
            if path.is_dir():
                self.observer.schedule(Handler(), str(path), recursive=True)
            elif path.is_file():
                self.observer.schedule(Handler(), str(path.parent), recursive=False)
            else:
                self._missing.append(path)
                return False
        except Exception as exc:  # e.g. inotify watch limit: log, keep the others
            log.warning("cannot watch %s: %s", path, exc)
            return False
        log.info("watching %s", path)
        return True

    def _poll_missing(self) -> None:
        while not self._stopped.wait(_POLL_MISSING_S) and self._missing:
            for path in list(self._missing):
                if path.exists():
                    self._missing.remove(path)
                    if self._schedule(path):
                        self._event(str(path))

    def _event(self, path: str) -> None:
        if not path or any(path == p or path.startswith(p + "/") for p in self.ignore):
            return
        if path.endswith((".tmp", "-journal", "-wal", "-shm", "~")):
            return
        with self._lock:
            self._pending.add(path)
            if self._timer is None and not self._stopped.is_set():
                self._timer = threading.Timer(self.debounce_s, self._flush)
                self._timer.daemon = True
                self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            batch = sorted(self._pending)
            self._pending.clear()
            self._timer = None
        if batch and not self._stopped.is_set():
            try:
                self.on_batch(batch)
            except Exception:
                log.exception("watch batch failed")

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        try:
            self.observer.stop()
        except Exception:
            pass


async def start_watching(ls) -> None:
    """Start watching what the engine says to watch (idempotent)."""
    if ls.watcher is not None:
        return
    backend = ls.get_backend()
    try:
        paths = await ls.run(lambda engine: list(engine.watch_paths()))
    except Exception as exc:
        log.warning("not watching for new sessions: %s", exc)
        return
    index = backend.index_path()
    ignore = [index.parent] if index is not None else []
    ignore.append(backend.root / ".engram-cache")

    def done(summary, error) -> None:
        if error is not None:
            if type(error).__name__ == "IngestCancelled":
                log.debug("live ingest stopped: %s", error)
            else:
                log.warning("live ingest failed: %s", error)
            return
        ls.refresh_code_lenses()

    def on_batch(batch: list[str]) -> None:
        log.debug("changed: %s", batch)
        backend.ingest_changed(batch, done)

    watcher = Watcher(paths, ignore, ls.settings.debounce_ms / 1000.0, on_batch)
    try:
        await asyncio.get_running_loop().run_in_executor(None, watcher.start)
    except Exception as exc:
        log.warning("file watching unavailable: %s", exc)
        return
    ls.watcher = watcher
    watcher.sweeper = asyncio.ensure_future(_sweep(ls, watcher))


async def _sweep(ls, watcher) -> None:
    """Every SWEEP_S: an incremental ingest of everything (seals quiet live sessions)."""
    while ls.watcher is watcher:
        await asyncio.sleep(SWEEP_S)
        backend = ls.backend
        if ls.watcher is not watcher or backend is None or backend.closing:
            return
        if not backend.ingesting:
            try:
                await start_ingest(ls, title="Engram: indexing agent sessions", quiet=True)
            except Exception as exc:  # reported by start_ingest
                log.debug("periodic ingest failed: %s", exc)


def stop_watching(ls) -> None:
    watcher, ls.watcher = ls.watcher, None
    if watcher is not None:
        watcher.stop()
        sweeper = getattr(watcher, "sweeper", None)
        if sweeper is not None:
            sweeper.cancel()
