"""LSP method ``engram/annotate`` (custom request): the whole file's line annotation.

Params ``{textDocument: {uri}}`` → for every line of the buffer (unsaved edits included) the
session that wrote it, from ``Engine.blame`` (``engram blame``: through the logged edits, then by
fingerprints), in one request per file::

    {"uri": "...", "version": 7, "lines": 5000,
     "sessions": [{"tape_id": "...", "session": "...", "harness": "claude_code", "model": "...",
                   "label": "<the user's request>", "first_t": "...", "last_t": "...",
                   "lines": 120}],
     "runs": [{"start": 0, "end": 11, "session": 0, "via": "log"}]}

``runs`` are maximal runs of consecutive lines written by one session: ``start``/``end`` are
0-based, inclusive LSP line numbers, ``session`` indexes ``sessions``. Lines nobody wrote (a
person's, or code a session only read) are in no run: the editor leaves them unmarked.
``sessions`` are in the order they first appear in the file, so a client that colours them by
index gives neighbouring runs different colours, and the same buffer always the same colours.
Cached per buffer version and index generation (an ingest changes the answer).
"""

from __future__ import annotations

from engram_lsp import documents
from engram_lsp.params import require_object, text_document_uri

METHOD = "engram/annotate"

_SESSION_KEYS = ("tape_id", "session", "harness", "model", "label", "first_t", "last_t")


def annotation(blame: dict) -> tuple[list[dict], list[dict]]:
    """``(sessions, runs)`` of a blame result: only lines a session produced are marked. (The
    reference: the server asks ``Engine.annotate``, which gives the same on arrays, without
    blame's 5,000 per-line entries.)"""
    index: dict[str, int] = {}
    sessions: list[dict] = []
    runs: list[dict] = []
    known = blame.get("sessions") or {}
    for entry in blame.get("lines") or []:
        tid = entry.get("tape_id")
        if tid is None or not entry.get("produced") or tid not in known:
            continue
        i = index.get(tid)
        if i is None:
            i = index[tid] = len(sessions)
            meta = known[tid]
            sessions.append({"tape_id": tid, **{k: meta.get(k) for k in _SESSION_KEYS[1:]},
                             "lines": 0})
        sessions[i]["lines"] += 1
        line = entry["line"] - 1
        last = runs[-1] if runs else None
        if last is not None and last["session"] == i and last["end"] == line - 1 \
                and last["via"] == entry.get("via"):
            last["end"] = line
        else:
            runs.append({"start": line, "end": line, "session": i, "via": entry.get("via")})
    return sessions, runs


def annotate_document(engine, backend, doc: documents.Doc) -> dict:
    """The annotation of ``doc`` (query thread, cached per buffer version and generation)."""
    text = doc.source()

    def compute() -> dict:
        return engine.annotate(doc.file, text)

    key = ("annotate", doc.uri, doc.version if doc.text is not None else hash(text))
    return backend.cached(key, compute)


def register(server) -> None:
    @server.feature(METHOD)
    async def engram_annotate(ls, raw) -> dict:
        uri = text_document_uri(require_object(raw))
        doc = documents.resolve(ls, uri)
        result = await ls.run(annotate_document, ls.get_backend(), doc)
        return {"uri": uri, "version": doc.version, **result}
