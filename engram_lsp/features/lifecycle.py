"""LSP methods ``initialize``, ``initialized``, ``shutdown`` and ``exit``.

``initialize`` answers at once: it only reads ``initializationOptions``. Everything slow happens
after ``initialized``, in the background: pull ``workspace/configuration``, then the ``Indexer``
opens the machine's index (``$ENGRAM_HOME/index/``), starts an incremental ingest (``$/progress``)
and the log watcher. A broken index is reported with a rebuild offer, never a crash. ``shutdown``
stops the watcher and any running ingest; the process then exits when the client sends ``exit`` or
closes stdin.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from lsprotocol import types

from engram_lsp import settings

log = logging.getLogger(__name__)


def register(server) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls, params: types.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop()
        ls.init_options = params.initialization_options
        settings.apply(ls, params.initialization_options, announce=False)
        ls.preloaded = threading.Event()
        ls.first_lens = threading.Event()  # set by the first code lens request (code_lens.py)
        # started once this answer is written (pygls writes it before the loop's next callback):
        # its imports hold the GIL at times, and the handshake does not wait for them
        preload = threading.Thread(target=_preload, args=(ls,), name="engram-preload", daemon=True)
        ls.loop.call_soon(preload.start)

    @server.feature(types.INITIALIZED)
    async def initialized(ls, params: types.InitializedParams) -> None:
        ls.loop = asyncio.get_running_loop()
        for warning in getattr(ls, "_init_warnings", []):
            log.warning("%s", warning)
        _keep(asyncio.ensure_future(_startup(ls)))

    @server.feature(types.SHUTDOWN)
    def shutdown(ls, params=None) -> None:
        stop(ls)


# The first code lens is answered without the engine: from the counts kept on disk
# (``engram_lsp.lenses``), else computed without numpy (``engram.query.direct``, code_lens.direct).
# The engine's import waits until that answer is written (at most this long), so that it does not
# hold the GIL in numpy's C initialisation meanwhile. A lens neither answers imports the engine on
# its query thread at once, as the preload would.
_LENS_FIRST_S = 0.5


def _preload(ls) -> None:
    """Import what the first code lens needs (``engram.query.direct``, the Python grammar), wait
    for that lens's answer, then import the engine (numpy, the fingerprinting, the queries) and
    load a grammar while the client opens its files, instead of on a later request. The answer to
    ``initialize`` is not held for it: this runs on its own thread."""
    done: threading.Event = ls.preloaded
    try:
        from engram_lsp import lenses

        if not lenses.kept_for(ls.root, ls.settings.index_path):
            from engram.query import direct

            direct.warm()
        ls.first_lens.wait(_LENS_FIRST_S)
        from engram.engine import Engine

        Engine.top_level_blocks("def warm():\n    return 1\n", "warm.py")
    except Exception:  # a warm-up; the first request does the same and reports what fails
        log.debug("preload failed", exc_info=True)
    finally:
        done.set()


# The startup's own work (checking the index, reading ahead the rows lenses look up, the startup
# ingest, the watcher) waits until the engine is imported and the client's first burst of
# requests (the open documents' lenses, a hover) has been answered and _QUIET_S has passed without
# one, at most _DEFER_MAX_S: on two cores it would otherwise compete with those first answers for
# the CPU and the GIL (an ingest's look at 16k logs, postings read into memory).
_QUIET_S = 0.05
_DEFER_MAX_S = 2.0


async def _after_first_requests(ls) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _DEFER_MAX_S
    preloaded = getattr(ls, "preloaded", None)
    while loop.time() < deadline:
        backend = ls.backend
        busy = backend is not None and backend.busy()
        quiet = time.monotonic() - ls.protocol.last_message_at >= _QUIET_S
        if (preloaded is None or preloaded.is_set()) and quiet and not busy:
            return
        await asyncio.sleep(0.01)


async def _startup(ls) -> None:
    """Configuration, then the index, then ingest and watching — all off the request path."""
    await settings.pull(ls)
    await _after_first_requests(ls)
    await ls.indexer.start()
    from engram_lsp.puller import pull_loop
    from engram_lsp.server import collect_when_idle

    _keep(asyncio.ensure_future(collect_when_idle(ls)))
    _keep(asyncio.ensure_future(pull_loop(ls)))  # sharing.autoPull (never pushes)


_TASKS: set[asyncio.Future] = set()


def _keep(task: asyncio.Future) -> None:
    """Hold a reference to a background task until it ends (the event loop keeps only a weak
    one: an unreferenced task can be garbage-collected before it runs)."""
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


def stop(ls) -> None:
    """Stop watching and cancel a running ingest (idempotent)."""
    ls.indexer.stop()
