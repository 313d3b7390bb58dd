"""Request handling that more than one LSP method shares (feature modules never import each
other): ``explain`` answers both ``engram/explain`` and the ``engram.explain`` command."""

from __future__ import annotations

from engram_lsp import documents
from engram_lsp import params as P


async def explain(ls, raw) -> dict:
    """``engram/explain`` params (``textDocument``, ``range``, optional ``before``, ``after``,
    ``minConfidence``, ``all``, ``expandUntil``, ``brief``, ``windows``) → the engine's result."""
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
