"""The ``Indexer``: the language server's one object that keeps the index fresh.

The server owns one (``ls.indexer``). It starts the index after ``initialized`` (``start``), runs
ingests in the background with work-done progress (``ingest``), offers a rebuild of a broken index
(``offer_rebuild``), rebuilds it (``reindex``), watches the agents' logs and tape sources
(``watch`` / ``unwatch``), sweeps them every ``SWEEP_S`` seconds, embeds new reasoning text after
an ingest (``embed``), reopens the engine when the settings that define what is indexed change
(``settings_changed``) and stops it all at shutdown (``stop``). LSP features do not drive each
other: they call this object, and what must follow a change of the index subscribes to it with
``on_indexed`` (the code lens feature refreshes the client's lenses that way).

**Ingest.** ``ingest()`` queues an ingest on the backend's ingest thread, reports it as work-done
progress (``$/progress``, when the client supports ``window.workDoneProgress``), then tells the
``on_indexed`` listeners. A failure is logged and shown (``showNotifications``); a broken index gets
one offer to rebuild it (``window/showMessageRequest``: ``Rebuild index`` → ``reindex``, the same as
the ``engram.reindex`` command).

**Watching** (``watch``): one ``engram.ingest.watcher.Watcher`` (``Engine.watcher``; its docstring
has the rules) on every path the engine's ingest reads, with the index directory ignored. Changed
paths come in batches at most ``watch.debounceMs`` (200 ms) after the first change, so a burst of
1,000 appended lines is one ingest and a single appended line is indexed well inside the 2 s
freshness target; paths that change while an ingest runs are ingested together right after it
(``Backend.ingest_changed``). Rotation ingests the new name, a deleted log is ignored, a directory
that does not exist yet is polled for until it appears. Every ``SWEEP_S`` (``engram.ingest.watcher``,
300 s) a full incremental ingest runs unless one is running, so live sessions whose logs went quiet
get sealed into tapes (``seal_after``) without a restart.

**Embedding** (issue 7): after an ingest that changed the index, new reasoning text is embedded on
a thread of its own when ``embedding.enabled`` is true, or ``auto`` and this repository already has
vectors.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from lsprotocol import types

from engram_lsp.backend import IngestCancelled

log = logging.getLogger(__name__)

REBUILD = "Rebuild index"

Listener = Callable[[dict | None], None]


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


def _settle(future: asyncio.Future) -> None:
    """Mark a future's exception as retrieved (it is reported where it happens)."""
    future.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)


class Indexer:
    """Keeps the index fresh: ingest, progress, the rebuild offer, watching, sweeping, embedding.

    Call its methods on the server's event loop, except ``offer_rebuild_for`` (any thread).
    """

    def __init__(self, ls) -> None:
        self.ls = ls
        self.watcher = None  # an engram.ingest.watcher.Watcher (Engine.watcher) while watching
        self.rebuild_offered = False  # one offer per broken index
        self._listeners: list[Listener] = []
        self._embed_pool: ThreadPoolExecutor | None = None
        self._embedding = threading.Event()  # one embedding run at a time

    # --- listeners -----------------------------------------------------------------------------

    def on_indexed(self, listener: Listener) -> Listener:
        """Call ``listener(summary)`` on the event loop after every ingest that finished (startup,
        reindex, a watched change, a settings change; not a periodic sweep that found nothing
        new). ``summary`` is the engine's ingest summary (None for a watched change's batch that
        failed to report one). Usable as a decorator."""
        self._listeners.append(listener)
        return listener

    def _indexed(self, summary) -> None:
        for listener in list(self._listeners):
            try:
                listener(summary)
            except Exception:
                log.exception("an on_indexed listener failed")

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """After ``initialized`` (settings read): open and check the index, then ingest in the
        background (or offer to build a missing index when ``ingestOnStartup`` is off) and watch."""
        ls = self.ls
        backend = ls.get_backend()
        index = backend.index_path()
        existed = index is not None and index.exists()
        try:
            await ls.run(lambda engine: engine.status())  # open and check the index on a thread
        except Exception as exc:  # reported to the user by ls.run / here; the server stays up
            log.error("could not open the Engram index at %s: %s", index, exc)
            self.offer_rebuild(f"could not open the index ({exc})")
            return
        log.info("engram-lsp %s: workspace %s, index %s", ls.version, backend.root, index)
        backend.prefill()
        if ls.settings.ingest_on_startup:
            self.ingest(title="Engram: indexing agent sessions")
        elif not existed:
            self.offer_rebuild("this workspace has no index yet", action="Build index")
        if ls.settings.watch_enabled:
            await self.watch()

    async def settings_changed(self) -> None:
        """What is indexed changed (sources, harnesses, exclude, indexPath, embedding): reopen
        the engine with the new settings, re-ingest, watch what the new settings say."""
        backend = self.ls.backend
        if backend is None:
            return
        log.info("engine settings changed: reopening the index")
        self.unwatch()
        backend.reopen(self.ls.settings)
        self.ingest(title="Engram: re-indexing (settings changed)")
        if self.ls.settings.watch_enabled:
            await self.watch()

    def stop(self) -> None:
        """Stop watching and cancel a running ingest (idempotent; at shutdown)."""
        self.unwatch()
        if self.ls.backend is not None:
            self.ls.backend.close(timeout=2.0)

    # --- ingest --------------------------------------------------------------------------------

    def _supports_progress(self) -> bool:
        caps = self.ls.client_capabilities
        return bool(caps and caps.window and caps.window.work_done_progress)

    def ingest(
        self,
        *,
        rebuild: bool = False,
        seal: bool = False,
        title: str = "Engram: indexing",
        quiet: bool = False,
    ) -> asyncio.Future:
        """Run an ingest in the background; returns an asyncio future with the engine's summary
        (None when it was cancelled by a shutdown).

        ``quiet``: no progress UI (the periodic sweep); listeners are told only if it changed
        something.
        """
        ls = self.ls
        loop = asyncio.get_running_loop()
        result: asyncio.Future = loop.create_future()
        token = f"engram-ingest-{uuid.uuid4().hex[:12]}"
        progress_ok = self._supports_progress() and not quiet
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
                if isinstance(error, IngestCancelled):
                    result.set_result(None)
                    return
                log.error("ingest failed: %s", error)
                if ls.looks_corrupt(error):
                    self.offer_rebuild_for(error)
                else:
                    ls.notify_user(f"Engram: indexing failed: {error}", error=True)
                result.set_exception(error)
                return
            unchanged = isinstance(summary, dict) and summary.get("nothing_to_do")
            if not (quiet and unchanged):
                log.info("ingest done: %s", _summary_text(summary))
                self._indexed(summary)
                self.embed()
            result.set_result(summary)

        _settle(asyncio.ensure_future(run()))
        _settle(result)
        return result

    async def reindex(self):
        """Rebuild the index from the logs and tapes (the engine deletes the old index file
        first); returns the ingest summary."""
        self.rebuild_offered = True  # no second offer while this rebuild runs
        self.ls.get_backend().invalidate()
        try:
            summary = await self.ingest(rebuild=True, title="Engram: rebuilding the index")
        finally:
            self.rebuild_offered = False
        if self.ls.settings.watch_enabled and self.watcher is None:  # startup stopped early
            await self.watch()
        return summary

    # --- the rebuild offer ---------------------------------------------------------------------

    def offer_rebuild_for(self, exc: BaseException) -> None:
        """Offer a rebuild when ``exc`` says the index is broken (once; from any thread)."""
        if self.ls.looks_corrupt(exc):
            self.offer_rebuild(getattr(exc, "message", None) or str(exc))

    def offer_rebuild(self, reason: str, *, action: str = REBUILD) -> None:
        """Show the problem with a one-click rebuild (``window/showMessageRequest``; a client that
        cannot ask gets a ``window/showMessage`` naming the command). Once until a rebuild ran."""
        if self.rebuild_offered:
            return
        self.rebuild_offered = True
        self.ls.on_loop(self._offer, reason, action)

    def _offer(self, reason: str, action: str) -> None:
        ls = self.ls

        async def ask() -> None:
            message = f"Engram: {reason}. Rebuild the index from the session logs and tapes?"
            caps = ls.client_capabilities
            if not (caps and caps.window and caps.window.show_message):
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
                await self.reindex()

        _settle(asyncio.ensure_future(ask()))

    # --- watching ------------------------------------------------------------------------------

    @property
    def watching(self) -> list[str]:
        """The paths being watched (empty when not watching)."""
        watcher = self.watcher
        return [str(p) for p in watcher.paths] if watcher is not None else []

    async def watch(self) -> None:
        """Watch what the engine's ingest reads, and sweep every ``SWEEP_S`` (idempotent)."""
        if self.watcher is not None:
            return
        ls = self.ls
        backend = ls.get_backend()

        def done(summary, error) -> None:  # on the ingest thread
            if error is not None:
                if isinstance(error, IngestCancelled):
                    log.debug("live ingest stopped: %s", error)
                else:
                    log.warning("live ingest failed: %s", error)
                return
            ls.on_loop(self._indexed, summary)

        def on_batch(batch: list[str]) -> None:  # on the watcher's thread
            log.debug("changed: %s", batch)
            backend.ingest_changed(batch, done)

        def on_sweep() -> None:  # on the watcher's thread
            ls.on_loop(self._sweep, watcher)

        try:
            watcher = await ls.run(
                lambda engine: engine.watcher(
                    on_batch, debounce_s=ls.settings.debounce_ms / 1000.0, on_sweep=on_sweep
                )
            )
        except Exception as exc:
            log.warning("not watching for new sessions: %s", exc)
            return
        if self.watcher is not None:  # a second call won the race
            return
        try:
            await asyncio.get_running_loop().run_in_executor(None, watcher.start)
        except Exception as exc:
            log.warning("file watching unavailable: %s", exc)
            watcher.stop()
            return
        self.watcher = watcher

    def _sweep(self, watcher) -> None:
        """Every ``SWEEP_S`` (on the loop): an incremental ingest of everything, unless one runs
        (seals quiet live sessions; tells the listeners only if it changed something)."""
        backend = self.ls.backend
        if self.watcher is not watcher or backend is None or backend.closing:
            return
        if not backend.ingesting:
            self.ingest(title="Engram: indexing agent sessions", quiet=True)

    def unwatch(self) -> None:
        """Stop watching and sweeping (idempotent)."""
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            watcher.stop()

    # --- embedding after ingest (issue 7) ----------------------------------------------------------

    def embed(self) -> None:
        """Embed new reasoning text on a thread of its own (one torch thread, so hovers keep their
        core), with work-done progress; one run at a time; never blocks a request. Runs when
        ``embedding.enabled`` is ``true``, or ``auto`` once this repository has vectors (someone ran
        ``engram embed``): it then keeps them up to date; it never starts a multi-minute model job
        for a user who did not ask for semantic scoring."""
        ls = self.ls
        backend = ls.get_backend()
        engine = backend.engine
        if engine is None or self._embedding.is_set() or not engine.embedding_wanted():
            return
        self._embedding.set()
        if self._embed_pool is None:
            self._embed_pool = ThreadPoolExecutor(1, thread_name_prefix="engram-embed")
        token = f"engram-embed-{uuid.uuid4().hex[:12]}"
        progress_ok = self._supports_progress()
        state = {"created": False, "last": 0.0}

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            if not state["created"] or now - state["last"] < 0.5:
                return
            state["last"] = now
            pct = int(done * 100 / total) if total else None
            ls.on_loop(
                ls.work_done_progress.report,
                token,
                types.WorkDoneProgressReport(message=f"{done}/{total} chunks", percentage=pct),
            )

        def work() -> dict:
            import os

            os.environ.setdefault("ENGRAM_EMBED_THREADS", "1")
            return engine.embed(progress=progress, should_stop=lambda: backend.closing)

        async def go() -> None:
            try:
                if progress_ok:
                    try:
                        await asyncio.wait_for(
                            ls.work_done_progress.create_async(token), timeout=5.0
                        )
                        ls.work_done_progress.begin(
                            token,
                            types.WorkDoneProgressBegin(
                                title="Engram: embedding reasoning", percentage=0, cancellable=False
                            ),
                        )
                        state["created"] = True
                    except Exception as exc:
                        log.debug("work-done progress unavailable: %s", exc)
                loop = asyncio.get_running_loop()
                try:
                    res = await loop.run_in_executor(self._embed_pool, work)
                    msg = f"{res.get('embedded', 0)} new chunks embedded"
                    log.info("embedding done: %s", res)
                except Exception as exc:  # the semantic signal is optional
                    msg = f"failed: {exc}"
                    log.warning("background embedding failed: %s", exc)
                if state["created"]:
                    ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=msg))
            finally:
                self._embedding.clear()

        _settle(asyncio.ensure_future(go()))
