"""LSP method ``workspace/didChangeConfiguration`` (and the ``workspace/configuration`` pull).

Settings come from ``initializationOptions`` and are refined by the client's ``engram`` section
(``engram_lsp.settings`` documents the keys and precedence). Invalid values fall back to defaults
with a warning in the client's log. A change to what the engine indexes (sources, harnesses,
exclude, indexPath, embedding) reopens the engine, re-ingests and restarts the watcher; other
changes apply to the next request.
"""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types

from engram_lsp import settings as settings_mod

log = logging.getLogger(__name__)


def register(server) -> None:
    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls, params: types.DidChangeConfigurationParams) -> None:
        pushed = getattr(params, "settings", None)
        before = ls.settings
        if not await pull(ls) and pushed:
            apply(ls, settings_mod.merge(ls.init_options or {}, pushed))
        if ls.settings.engine_key() != before.engine_key() and ls.backend is not None:
            from engram_lsp import indexer

            log.info("engine settings changed: reopening the index")
            indexer.stop_watching(ls)
            ls.backend.reopen(ls.settings)
            indexer.start_ingest(ls, title="Engram: re-indexing (settings changed)")
            if ls.settings.watch_enabled:
                await indexer.start_watching(ls)
        else:
            ls.refresh_code_lenses()


def apply(ls, raw, *, announce: bool = True) -> list[str]:
    """Parse ``raw`` into ``ls.settings``; warnings go to the log (or wait for ``initialized``)."""
    parsed, warnings = settings_mod.parse(settings_mod.merge(raw or {}))
    ls.settings = parsed
    if ls.backend is not None and parsed.engine_key() == ls.backend.settings.engine_key():
        ls.backend.settings = parsed
    if announce:
        for w in warnings:
            log.warning("%s", w)
    else:
        ls._init_warnings = warnings
    return warnings


async def pull(ls) -> bool:
    """Ask the client for section ``engram`` when it supports ``workspace/configuration``."""
    caps = ls.client_capabilities
    if not (caps and caps.workspace and caps.workspace.configuration):
        return False
    try:
        result = await asyncio.wait_for(
            ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="engram")])
            ),
            timeout=5.0,
        )
    except Exception as exc:  # a client that cannot answer keeps the init options
        log.warning("workspace/configuration failed: %s", exc)
        return False
    log.debug("workspace/configuration: %r", result)
    section = result[0] if isinstance(result, (list, tuple)) and result else None
    if section is not None and not isinstance(section, dict):
        from engram_lsp.params import plain

        section = plain(section)
    apply(ls, settings_mod.merge(ls.init_options or {}, section or {}))
    return True
