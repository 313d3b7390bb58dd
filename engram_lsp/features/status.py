"""LSP method ``engram/status`` (custom request): index counts, live sessions, last ingest,
embedding state — the engine's status — plus a ``server`` object (version, workspace root,
index path, whether an ingest is running, the last ingest summary or error, watched paths, and
``memory``: how many postings the server holds in memory, see ``engram.query.blocks``;
``warming``: how many opened files are still being prepared (parsed, their hovers computed and
read ahead for explain), see ``Backend.warm``;
``heap_kept``: whether glibc keeps the memory the server freed, see ``engram_lsp.heap``;
``lenses_ahead``: how many workspace files' lens counts are still to be computed ahead, and
``tables_ahead``: how many files' block tables, see ``engram_lsp.ahead``).
"""

from __future__ import annotations

import datetime as dt

from engram_lsp import __version__, heap

METHOD = "engram/status"


def server_status(ls) -> dict:
    backend = ls.get_backend()
    at = backend.last_ingest_at
    return {
        "version": __version__,
        "root": str(backend.root),
        "index": str(backend.index_path()),
        "ingesting": backend.ingesting,
        "last_ingest": backend.last_ingest,
        "last_ingest_at": (
            dt.datetime.fromtimestamp(at, dt.timezone.utc).isoformat(timespec="milliseconds")
            if at
            else None
        ),
        "last_ingest_error": backend.last_ingest_error,
        "watching": ls.indexer.watching,
        "memory": backend.postings_status(),
        "warming": backend.warming(),
        "prefilling": backend.prefilling(),
        "lenses_ahead": backend.lenses_pending(),
        "tables_ahead": backend.tables_pending(),
        "heap_kept": heap.kept(),
        "pull": getattr(ls, "pull_state", None),  # sharing.autoPull (engram_lsp.puller)
        "settings": {
            "codeLens": {
                "enabled": ls.settings.code_lens_enabled,
                "minSessions": ls.settings.min_sessions,
            },
            "minConfidence": ls.settings.min_confidence,
            "window": {"before": ls.settings.before, "after": ls.settings.after,
                       "sessions": ls.settings.window_sessions},
        },
    }


def register(server) -> None:
    @server.feature(METHOD)
    async def engram_status(ls, params=None) -> dict:
        # (a client may poll it: not the user at work, see ``Backend.query_passive``)
        try:
            status = await ls.run(lambda engine: engine.status(), passive=True)
        except FileNotFoundError:  # an index file went away between two looks (a rebuild)
            status = await ls.run(lambda engine: engine.status(), passive=True)
        out = dict(status) if isinstance(status, dict) else {"engine": status}
        out["server"] = server_status(ls)
        return out
