"""Request handling that more than one LSP method shares (feature modules never import each
other): ``explain`` answers both ``engram/explain`` and the ``engram.explain`` command."""

from __future__ import annotations

from engram_lsp import documents
from engram_lsp.params import InvalidParams, get_bool, get_float, get_int, line_range, require_object, text_document_uri


async def explain(ls, raw, answer: bool = False) -> dict:
    """``engram/explain`` params (``textDocument``, ``range``, optional ``before``, ``after``,
    ``minConfidence``, ``all``, ``expandUntil``, ``brief``, ``windows``) → the engine's result
    (``answer``: written as the response from the query thread, ``EngramLanguageServer.answering``)."""
    params = require_object(raw)
    uri = text_document_uri(params)
    if "range" not in params:
        raise InvalidParams("missing required parameter 'range'")
    start, end = line_range(params["range"])
    s = ls.settings
    kwargs = {
        "before": get_int(params, "before", s.before, hi=10_000),
        "after": get_int(params, "after", s.after, hi=10_000),
        "min_confidence": get_float(params, "minConfidence", s.min_confidence),
        "all": get_bool(params, "all", False),
        "expand_until": get_int(params, "expandUntil", None, hi=1_000_000),
        "brief": get_bool(params, "brief", False),
        "window_sessions": get_int(params, "windows", s.window_sessions, hi=1_000_000),
    }
    doc = documents.resolve(ls, uri)

    def job(engine):
        return engine.explain(doc.file, start, end, text=doc.text, **kwargs)

    return await ls.run(ls.answering(job) if answer else job)
