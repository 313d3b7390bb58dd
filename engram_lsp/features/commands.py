"""LSP method ``workspace/executeCommand``: ``engram.explain`` and ``engram.reindex``.

* ``engram.explain [uri, range, options?]`` → the explain result (what code lenses and the hover's
  *Explain* link run; ``options`` takes the ``engram/explain`` keys).
* ``engram.reindex [{rebuild?: bool}]`` → rebuilds the index (default) or ingests incrementally
  (``rebuild: false``), with progress; returns the ingest summary when done.

Arguments are taken raw (``*args``) and validated here, so a wrong one is an InvalidParams error.
"""

from __future__ import annotations

from engram_lsp import params, requests


def register(server) -> None:
    @server.command("engram.explain")
    async def explain_command(ls, *args):
        if len(args) < 2:
            raise params.InvalidParams("engram.explain expects arguments [uri, range, options?]")
        uri, rng = params.plain(args[0]), params.plain(args[1])
        options = params.plain(args[2]) if len(args) > 2 and args[2] is not None else {}
        if not isinstance(uri, str):
            raise params.InvalidParams(f"engram.explain: uri must be a string, got {uri!r}")
        if not isinstance(options, dict):
            raise params.InvalidParams("engram.explain: options must be an object")
        return await requests.explain(
            ls, {**options, "textDocument": {"uri": uri}, "range": rng}
        )

    @server.command("engram.reindex")
    async def reindex_command(ls, *args):
        options = params.plain(args[0]) if args and args[0] is not None else {}
        if not isinstance(options, dict):
            raise params.InvalidParams("engram.reindex expects [{rebuild?: bool}]")
        if params.get_bool(options, "rebuild", True):
            summary = await ls.indexer.reindex()
        else:
            summary = await ls.indexer.ingest(title="Engram: indexing agent sessions")
        return summary if isinstance(summary, dict) else {"done": True}
