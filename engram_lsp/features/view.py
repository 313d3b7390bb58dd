"""LSP method ``engram/view`` (custom request): navigate a tape.

Params ``{tapeId, at, before?, after?}`` → the engine's view result (the events around offset
``at``). Step backward/forward by asking again with another ``at``.
"""

from __future__ import annotations

from engram_lsp.params import get_int, get_str, require_object

METHOD = "engram/view"


def register(server) -> None:
    @server.feature(METHOD)
    async def engram_view(ls, raw) -> dict:
        params = require_object(raw)
        tape_id = get_str(params, "tapeId")
        at = get_int(params, "at", None, required=True, hi=10**9)
        before = get_int(params, "before", 5, hi=10_000)
        after = get_int(params, "after", 5, hi=10_000)
        return await ls.run(lambda engine: engine.view(tape_id, at, before=before, after=after))
