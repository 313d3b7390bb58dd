"""LSP methods ``$/progress`` (work-done progress), ``workspace/codeLens/refresh`` and
``window/showMessageRequest`` (the rebuild offer) around background ingests.

``start(ls)`` queues an ingest on the backend's ingest thread, reports it as work-done progress
(when the client supports ``window.workDoneProgress``), then asks the client to refresh its code
lenses. A failure is logged and shown (``showNotifications``); a broken index gets one offer to
rebuild it (``Rebuild index`` → the same as the ``engram.reindex`` command).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

from lsprotocol import types

log = logging.getLogger(__name__)

REBUILD = "Rebuild index"


def register(server) -> None:  # no handlers of its own: used by lifecycle, commands, config
    return None


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


def start(
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
    summary = await start(ls, rebuild=True, title="Engram: rebuilding the index")
    ls.rebuild_offered = False
    if ls.settings.watch_enabled and ls.watcher is None:  # startup stopped at the broken index
        from engram_lsp.features import watch

        await watch.start(ls)
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
