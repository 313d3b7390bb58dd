"""LSP method ``textDocument/codeLens``: ``N sessions`` on each top-level symbol.

Blocks come from ``Engine.top_level_blocks``; all of them go to one ``explain_blocks`` call
(one fingerprint pass, one index query per document; after an edit only the blocks whose text
changed, see ``Backend.block_results``). A lens appears where a block has at least
``codeLens.minSessions`` sessions; its command is ``engram.explain`` with ``[uri, range]``.
Results are cached per buffer version and index generation. After every ingest the client is
asked to refresh its lenses (``workspace/codeLens/refresh``: an ``Indexer.on_indexed`` listener).
The counts of a saved file's lenses are also kept on disk for the index's generation, and a
buffer this server has not answered yet is answered from there when its text and the index are
still the same (``engram_lsp.lenses``): the first lenses after a start need no engine. Before the
engine is imported, a buffer's lenses are counted without it (``engram.query.direct``), from the
moment the buffer opens (``opened``: its text is there) on a thread of their own, one buffer after
the other in the order they opened, so that the lens request an editor sends after the open finds
the count done or under way.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import queue
import threading
from concurrent.futures import Future

from lsprotocol import types

from engram_lsp import documents, render
from engram_lsp.params import lsp_range

log = logging.getLogger(__name__)

# Counted without the engine up to this size (~3,500 lines of code: ~150 ms of CPU at most, on
# the event loop); a bigger buffer's first lens waits for the engine (numpy counts it faster).
DIRECT_MAX_CHARS = 128 * 1024


def lens_blocks(engine, backend, doc: documents.Doc) -> list[dict]:
    """``explain_blocks`` for every top-level block (query thread, cached)."""
    text = doc.source()

    def compute():
        generation = backend.settled_generation(engine)
        blocks = [(s, e) for s, e, _name in engine.top_level_blocks(text, doc.path)]
        results = backend.block_results(engine, doc.file, text, blocks) if blocks else []
        backend.keep_lenses(engine, doc.path, text, results, generation)
        return results

    return backend.cached(lens_key(doc, text), compute)


def lens_key(doc: documents.Doc, text: str) -> tuple:
    return ("lens", doc.uri, doc.version if doc.text is not None else hash(text))


def _kept(backend) -> bool:
    """Whether lens counts are kept on disk for the index (else nothing is hashed to look)."""
    store = backend.lens_store()
    return store is not None and store.path.exists()


def stored(backend, doc: documents.Doc) -> list[dict] | None:
    """The lens counts kept on disk for an open buffer not answered yet by this server (the
    first lenses after a start, before the engine is loaded: ``engram_lsp.lenses``)."""
    if doc.text is None or not _kept(backend) or backend.peek(lens_key(doc, doc.text)):
        return None
    results = backend.stored_lenses(doc.path, doc.text)
    if results is not None:
        log.debug("code lens from the kept counts: %s", doc.uri)
    return results


def _without_engine(ls, backend, doc: documents.Doc) -> bool:
    """Whether ``doc``'s lenses are counted without the engine: while the server has not imported
    it (its first lenses), for an open buffer up to ``DIRECT_MAX_CHARS``, outside a rebuild."""
    preloaded = getattr(ls, "preloaded", None)
    return not (doc.text is None or len(doc.text) > DIRECT_MAX_CHARS or preloaded is None
                or preloaded.is_set() or backend.engine is not None or backend.rebuilding
                or backend.closing)


def _count(backend, doc: documents.Doc, keep: bool = False) -> list[dict] | None:
    """``keep``: the connection is kept for the next count (``direct.release`` closes it)."""
    _freeze_startup()
    with backend.answering():  # background work gives way meanwhile (``Backend.busy``)
        try:
            from engram.query import direct as counts

            results = counts.lens_counts(backend.index_path(), doc.text, doc.path, close=not keep)
        except Exception:  # a shortcut: the engine's path answers
            log.debug("code lens without the engine failed", exc_info=True)
            return None
    if results is not None:
        log.debug("code lens without the engine: %s", doc.uri)
    return results


_frozen = False


def _freeze_startup() -> None:
    """Before a fresh server's first count (from its first open): take the objects alive now
    (the modules, pygls' converter, the server) out of the garbage collector's scans
    (``gc.freeze``), as the server does anyway once its startup is over
    (``server.collect_when_idle``, which thaws them first to collect them once). Else a
    collection of the middle generation that falls in the first lens's window — tens of thousands
    of objects made since the imports, next to none of them garbage — costs it 1.5-5 ms."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def direct(ls, backend, doc: documents.Doc) -> list[dict] | None:
    """The counts of a server that has not imported the engine yet (its first lenses), computed
    without it or numpy (``engram.query.direct``: the same counts); None once the engine is
    there (the usual path is then as quick, and fills the caches hovers use), for a buffer not
    open or over ``DIRECT_MAX_CHARS``, during a rebuild, or for an index it does not read."""
    return _count(backend, doc) if _without_engine(ls, backend, doc) else None


# Counts started as their buffer opened (``opened``), by uri: (the buffer's ``lens_key``, the
# count's Future). Only while the engine is not imported, a few at a time, counted one after the
# other in the order the buffers opened (an editor restoring several tabs asks for the first one's
# lens first: counting them all at once would make it wait for the others).
_OPENED_MAX = 8


def opened(ls, backend, doc: documents.Doc) -> None:
    """Start counting the lenses of a buffer that just opened without the engine (``direct``),
    on the server's first-lens thread, when its lens would be counted that way and no counts are
    kept on disk (their lookup answers first): the lens request that follows finds it done or
    under way."""
    try:
        if (not ls.settings.code_lens_enabled or not doc.uri.startswith("file:")
                or not _without_engine(ls, backend, doc)):
            return
        _freeze_startup()  # (from the open on: a collection may fall before the count starts)
        if _kept(backend):
            return
        started = ls.__dict__.setdefault("lens_counts_opened", {})
        if len(started) >= _OPENED_MAX:
            return
        future: Future = Future()
        started[doc.uri] = (lens_key(doc, doc.text), future)

        def count() -> None:
            log.debug("code lens counted from the open: %s", doc.uri)
            results = None  # (_count catches what it can; on None the lens counts again)
            try:
                results = _count(backend, doc, keep=True)
            finally:
                future.set_result(results)

        _first_lens_queue(ls).put(count)
    except Exception:  # a head start only
        log.debug("counting an opened buffer's lenses failed", exc_info=True)


def _first_lens_queue(ls) -> queue.SimpleQueue:
    """The jobs of the server's first-lens thread (started on first use; idle once the engine
    is imported, as nothing more is queued)."""
    jobs = getattr(ls, "lens_count_jobs", None)
    if jobs is None:
        jobs = ls.lens_count_jobs = queue.SimpleQueue()
        threading.Thread(target=_run_jobs, args=(jobs,), name="engram-first-lens",
                         daemon=True).start()
    return jobs


def _run_jobs(jobs: queue.SimpleQueue) -> None:
    while True:
        try:
            jobs.get()()
        except BaseException:  # (logged by the job; the next one still runs)
            log.debug("a first-lens job failed", exc_info=True)
        if jobs.empty():
            # the connection a count kept (and the one opened at the start, ``early``), closed
            # once no count is queued: after the answer, not in it
            _release()


def _release() -> None:
    try:
        from engram.query import direct as counts

        counts.release()
    except Exception:
        log.debug("closing the lens count's connection failed", exc_info=True)


def _opened_count(ls, doc: documents.Doc) -> list[dict] | None:
    """The count ``opened`` started for this buffer as it is now (None: none, or another text).
    Waited for on the event loop, as a count made there would hold it: the startup's own work on
    the loop (the configuration's round trip, its polling) would otherwise share the interpreter
    with the count and delay the lens (a trace: ~8 ms of the loop's CPU during a ~620-line file's
    count). At most ``_OPENED_WAIT_S``; then the lens counts again."""
    started = getattr(ls, "lens_counts_opened", None)
    entry = started.pop(doc.uri, None) if started else None
    if entry is None or doc.text is None or entry[0] != lens_key(doc, doc.text):
        return None
    try:
        return entry[1].result(timeout=_OPENED_WAIT_S)
    except TimeoutError:
        log.debug("a count started at the open did not end in time: %s", doc.uri)
        return None


_OPENED_WAIT_S = 2.0


def register(server) -> None:
    server.indexer.on_indexed(lambda _summary: server.refresh_code_lenses())

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))
    async def code_lens(ls, params: types.CodeLensParams) -> list[dict]:
        if not ls.settings.code_lens_enabled or not params.text_document.uri.startswith("file:"):
            return []
        doc = documents.resolve(ls, params.text_document.uri)
        backend = ls.get_backend()
        results = stored(backend, doc)
        if results is None:
            results = _opened_count(ls, doc)
        if results is None:
            results = direct(ls, backend, doc)
        first = getattr(ls, "first_lens", None)
        if first is not None:
            # the engine's import may start now (lifecycle._preload): once this answer is written
            # when there is one (the answer is sent by a callback of this task's end, queued
            # after the first of these two), at once otherwise (the lens needs the engine)
            loop = asyncio.get_running_loop()
            if results is not None:
                loop.call_soon(loop.call_soon, first.set)
            else:
                first.set()
        if results is None:
            results = await ls.run(lens_blocks, backend, doc, quiet=list)
        return lenses_of(results, doc.uri, ls.settings.min_sessions)


def lenses_of(results: list[dict], uri: str, min_sessions: int) -> list[dict]:
    """``CodeLens`` objects as JSON (written out as they are, see ``server.EngramProtocol``)."""
    lenses = []
    for block in results:
        n = int(block.get("sessions") or 0)
        if n < min_sessions:
            continue
        start, end = block["range"]
        at = {"line": start - 1, "character": 0}
        lenses.append(
            {
                "range": {"start": at, "end": dict(at)},
                "command": {
                    "title": render.lens_title(n),
                    "command": "engram.explain",
                    "arguments": [uri, lsp_range(start, end)],
                },
            }
        )
    return lenses
