"""LSP method ``engram/explain`` (custom request): the design's explain result for a range.

Params ``{textDocument: {uri}, range, before?, after?, minConfidence?, all?, expandUntil?,
brief?, windows?}`` (``windows``: how many of the ranked sessions get transcript windows); the
result is exactly the engine's explain object (the CLI's JSON). The buffer's current text is used,
unsaved edits included. Params are validated (see ``engram_lsp.params``, ``engram_lsp.requests``,
which the ``engram.explain`` command shares): a bad one is a JSON-RPC InvalidParams error naming it.
"""

from __future__ import annotations

from engram_lsp import requests

METHOD = "engram/explain"


def register(server) -> None:
    @server.feature(METHOD)
    async def engram_explain(ls, params) -> dict:
        return await requests.explain(ls, params, answer=True)
