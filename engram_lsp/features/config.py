"""LSP method ``workspace/didChangeConfiguration`` (and the ``workspace/configuration`` pull).

Settings come from ``initializationOptions`` and are refined by the client's ``engram`` section
(``engram_lsp.settings`` documents the keys and precedence). Invalid values fall back to defaults
with a warning in the client's log. A change to what the engine indexes (sources, harnesses,
exclude, indexPath, embedding) reopens the engine, re-ingests and restarts the watcher
(``Indexer.settings_changed``); other changes apply to the next request.
"""

from __future__ import annotations

from lsprotocol import types

from engram_lsp import settings as settings_mod


def register(server) -> None:
    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls, params: types.DidChangeConfigurationParams) -> None:
        pushed = getattr(params, "settings", None)
        before = ls.settings
        if not await settings_mod.pull(ls) and pushed:
            settings_mod.apply(ls, settings_mod.merge(ls.init_options or {}, pushed))
        if ls.settings.engine_key() != before.engine_key() and ls.backend is not None:
            await ls.indexer.settings_changed()
        else:
            ls.refresh_code_lenses()
