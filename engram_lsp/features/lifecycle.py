"""LSP methods ``initialize``, ``initialized``, ``shutdown`` and ``exit``.

``initialize`` answers at once: it only reads ``initializationOptions``. Everything slow happens
after ``initialized``, in the background: pull ``workspace/configuration``, open the index under
``<root>/.engram-cache/``, start an incremental ingest (with ``$/progress``) and the log watcher.
A broken index is reported with a rebuild offer, never a crash. ``shutdown`` stops the watcher
and any running ingest; the process then exits when the client sends ``exit`` or closes stdin.
"""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types

from engram_lsp import indexer
from engram_lsp.features import config

log = logging.getLogger(__name__)


def register(server) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls, params: types.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop()
        ls.init_options = params.initialization_options
        config.apply(ls, params.initialization_options, announce=False)

    @server.feature(types.INITIALIZED)
    async def initialized(ls, params: types.InitializedParams) -> None:
        ls.loop = asyncio.get_running_loop()
        for warning in getattr(ls, "_init_warnings", []):
            log.warning("%s", warning)
        asyncio.ensure_future(_startup(ls))

    @server.feature(types.SHUTDOWN)
    def shutdown(ls, params=None) -> None:
        stop(ls)


async def _startup(ls) -> None:
    """Configuration, then the index, then ingest and watching — all off the request path."""
    await config.pull(ls)
    backend = ls.get_backend()
    index = backend.index_path()
    existed = index is not None and index.exists()
    try:
        await ls.run(lambda engine: engine.status())  # open and check the index on a thread
    except Exception as exc:  # reported to the user by ls.run / below; the server stays up
        log.error("could not open the Engram index at %s: %s", index, exc)
        if not ls.rebuild_offered:
            ls.rebuild_offered = True
            indexer.offer_rebuild(ls, f"could not open the index ({exc})")
        return
    log.info("engram-lsp %s: workspace %s, index %s", ls.version, backend.root, index)
    backend.prefill()
    if ls.settings.ingest_on_startup:
        indexer.start_ingest(ls, title="Engram: indexing agent sessions")
    elif not existed:
        ls.rebuild_offered = True
        indexer.offer_rebuild(ls, "this workspace has no index yet", action="Build index")
    if ls.settings.watch_enabled:
        await indexer.start_watching(ls)
    from engram_lsp.server import collect_when_idle

    asyncio.ensure_future(collect_when_idle(ls))


def stop(ls) -> None:
    """Stop watching and cancel a running ingest (idempotent)."""
    indexer.stop_watching(ls)
    if ls.backend is not None:
        ls.backend.close(timeout=2.0)
