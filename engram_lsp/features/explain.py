"""LSP method ``engram/explain`` (custom request): the design's explain result for a range.

Params ``{textDocument: {uri}, range, before?, after?, minConfidence?, all?, expandUntil?,
brief?, windows?}`` (``windows``: how many of the ranked sessions get transcript windows); the result is exactly the engine's explain object (the CLI's JSON). The buffer's current
text is used, unsaved edits included. Params are validated here (see ``engram_lsp.params``): a bad
one is a JSON-RPC InvalidParams error naming it.
"""

from __future__ import annotations

from engram_lsp import documents
from engram_lsp import params as P

METHOD = "engram/explain"


async def explain(ls, raw) -> dict:
    params = P.require_object(raw)
    uri = P.text_document_uri(params)
    if "range" not in params:
        raise P.InvalidParams("missing required parameter 'range'")
    start, end = P.line_range(params["range"])
    s = ls.settings
    kwargs = {
        "before": P.get_int(params, "before", s.before, hi=10_000),
        "after": P.get_int(params, "after", s.after, hi=10_000),
        "min_confidence": P.get_float(params, "minConfidence", s.min_confidence),
        "all": P.get_bool(params, "all", False),
        "expand_until": P.get_int(params, "expandUntil", None, hi=1_000_000),
        "brief": P.get_bool(params, "brief", False),
        "window_sessions": P.get_int(params, "windows", s.window_sessions, hi=1_000_000),
    }
    doc = documents.resolve(ls, uri)
    return await ls.run(
        lambda engine: engine.explain(doc.file, start, end, text=doc.text, **kwargs)
    )


def register(server) -> None:
    @server.feature(METHOD)
    async def engram_explain(ls, params) -> dict:
        return await explain(ls, params)
