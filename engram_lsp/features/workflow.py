"""The git and team workflow over LSP (custom requests), each the engine's JSON as the CLI prints it:

* ``engram/review`` ``{range}`` → ``engram review A..B`` (commits, files, sessions, agent share,
  dead ends). The client picks the range ("Engram: Review branch": the branch against its upstream).
* ``engram/stats`` ``{by?, since?, all?}`` → ``engram stats`` (sessions, tokens, cost, agent lines
  at HEAD).
* ``engram/note`` ``{textDocument, range, kind, text, related?}`` → ``engram note FILE:A-B``: a note
  on the lines (``Engine.add_note``; tier ``human``). The note keeps the span's text as it is on
  disk, so a buffer with unsaved edits is refused with a message to save first. After a note or
  feedback the server's cached hovers and lenses are dropped (they may show it now).
* ``engram/feedback`` ``{session, verdict, textDocument?, range?, note?}`` → ``engram feedback``
  (``helpful`` | ``not_relevant`` | ``incorrect``; with a range, about that span of the buffer).
* ``engram/used`` ``{session, answer?}`` → ``engram used`` (the editor opened a session of an answer).

Params are validated here (InvalidParams naming the field); the engine's errors (a bad range, an
unknown session, not a git repository) come back as Engram errors with their code.
"""

from __future__ import annotations

from engram_lsp import documents
from engram_lsp.params import (
    InvalidParams,
    get_bool,
    get_str,
    line_range,
    require_object,
    text_document_uri,
)

STATS_BY = ("harness", "model", "week", "file", "session")
VERDICTS = ("helpful", "not_relevant", "incorrect")


def _span(ls, params: dict) -> tuple[documents.Doc, int, int]:
    doc = documents.resolve(ls, text_document_uri(params))
    if "range" not in params:
        raise InvalidParams("missing required parameter 'range'")
    start, end = line_range(params["range"])
    return doc, start, end


def _changed(ls) -> None:
    """The index changed under this server (a note or feedback tape was ingested): cached hovers
    and lenses are dropped, and the client asked for fresh lenses."""
    ls.get_backend().invalidate()
    ls.refresh_code_lenses()


def register(server) -> None:
    @server.feature("engram/review")
    async def engram_review(ls, raw) -> dict:
        params = require_object(raw)
        range_ = get_str(params, "range")
        if ".." not in range_:
            raise InvalidParams(f"range must be A..B (e.g. origin/main..HEAD), got {range_!r}")
        return await ls.run(lambda engine: engine.review(range_))

    @server.feature("engram/stats")
    async def engram_stats(ls, raw=None) -> dict:
        params = require_object(raw) if raw is not None else {}
        by = get_str(params, "by", required=False, default="model")
        if by not in STATS_BY:
            raise InvalidParams(f"by must be one of {', '.join(STATS_BY)}, got {by!r}")
        since = get_str(params, "since", required=False)
        all_ = get_bool(params, "all", False)
        return await ls.run(lambda engine: engine.stats(by=by, since=since, all_=all_))

    @server.feature("engram/note")
    async def engram_note(ls, raw) -> dict:
        params = require_object(raw)
        doc, start, end = _span(ls, params)
        kind = get_str(params, "kind")
        text = get_str(params, "text")
        related = get_str(params, "related", required=False)
        if doc.text is not None:
            try:
                from engram.engine import Engine

                saved = Engine.read_file(doc.path)
            except Exception:  # not on disk (an untitled buffer): the engine says why
                saved = None
            if saved is not None and saved != doc.text:
                raise InvalidParams("save the file first: a note keeps the span's text as it is "
                                    "on disk")
        result = await ls.run(lambda engine: engine.add_note(
            doc.file, start, end, kind, text, related, tier="human", via="lsp"))
        _changed(ls)
        return result

    @server.feature("engram/feedback")
    async def engram_feedback(ls, raw) -> dict:
        params = require_object(raw)
        session = get_str(params, "session")
        verdict = get_str(params, "verdict")
        if verdict not in VERDICTS:
            raise InvalidParams(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
        note = get_str(params, "note", required=False)
        file = start = end = text = None
        if params.get("textDocument") is not None:
            doc, start, end = _span(ls, params)
            file, text = doc.file, doc.text
        result = await ls.run(lambda engine: engine.feedback(
            session, verdict, file, start, end, note=note, text=text))
        _changed(ls)
        return result

    @server.feature("engram/used")
    async def engram_used(ls, raw) -> dict:
        params = require_object(raw)
        session = get_str(params, "session")
        answer = get_str(params, "answer", required=False)
        return await ls.run(lambda engine: engine.used(session, answer, client="lsp"))
