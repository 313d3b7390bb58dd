"""LSP method ``engram/search`` (custom request): full-text search over sessions.

Params ``{query, limit?}`` → the engine's search result.
"""

from __future__ import annotations

from engram_lsp.params import get_int, get_str, require_object

METHOD = "engram/search"


def register(server) -> None:
    @server.feature(METHOD)
    async def engram_search(ls, raw) -> dict:
        params = require_object(raw)
        query = get_str(params, "query")
        limit = get_int(params, "limit", 20, lo=1, hi=10_000)
        return await ls.run(lambda engine: engine.search(query, limit=limit))
