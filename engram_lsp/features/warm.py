"""LSP methods ``textDocument/didOpen`` and ``didClose``: prepare for the new document.

pygls keeps the buffer (document sync is built in); this only prepares what the first requests
about the document will need, in the background, giving way to requests:

* the tree-sitter parse a hover needs (``Backend.parse``, ``Engine.parse_symbols``), on the
  backend's background thread: it starts a moment after the open (the requests an editor sends
  with the open arrive first), waits while a request runs, and one that arrives mid-parse cancels
  it (it is tried again afterwards). A code lens asked for right after the open therefore never
  waits for it (for Python the lens does not need the parse at all, see ``engram.query.symbols``).
  When the text's block table is kept (``engram_lsp.blocks``) hovers read their blocks from it,
  and the parse (for an incremental one after an edit) waits until the client is quiet;
* then what ``engram/explain`` reads on the first explain of a file — its edit history,
  re-anchoring, the lineage and transcript windows of the sessions that edited or read it — on
  the query threads between requests (``Backend.warm``, ``Engine.prefetch_steps``). Explain answers
  the same with or without it, only sooner;
* then, on the last of those threads, the hover of every block of the file
  (``hover.ahead_steps``: the hover's own computation, cached per index generation and buffer
  version, so a later hover of the unchanged buffer is a cache hit).
"""

from __future__ import annotations

import logging
import time
from urllib.parse import unquote

from lsprotocol import types

from engram_lsp import documents
from engram_lsp.features import code_lens, hover
from engram_lsp.params import InvalidParams, uri_to_path

log = logging.getLogger(__name__)

_GRACE_S = 0.05
_GIVE_UP_S = 30.0
_QUIET_S = 0.05
_POLL_S = 0.01
_FIRST_LENS_S = 2.0  # as long as the lens request waits for the count (code_lens._OPENED_WAIT_S)


def _warm(backend, doc: documents.Doc, parse: bool, window: tuple[int | None, int | None],
          is_open=lambda: True, lens_pending=None) -> None:
    """Parse ``doc`` for hovers, then read ahead for explain; nothing for a document closed
    meanwhile (``is_open``): an editor that opens and closes files in a row would otherwise
    have each closed one parsed while it asks about the next. ``lens_pending()``: true while the
    server's first code lens, whose count this open started (``code_lens.opened``), is not
    answered and the engine not imported: the warm-up waits for that too (at most
    ``_FIRST_LENS_S``)."""
    time.sleep(_GRACE_S)
    deadline = time.monotonic() + _GIVE_UP_S
    # (a first code lens counting: even the kept table's look waits; and the answer is written a
    # moment after its count ends, on the request's thread: the parse would import the engine
    # meanwhile — numpy's import holds the interpreter for ~100 ms at a time — and push it back)
    first = time.monotonic() + _FIRST_LENS_S
    # (the first lens: polled, it is over within ``_FIRST_LENS_S``; the requests: waited for
    # without waking in the middle of one, ``Backend.wait_idle``)
    while lens_pending is not None and time.monotonic() < min(first, deadline) and lens_pending() \
            and not backend.closing:
        time.sleep(_POLL_S)
    backend.wait_idle(0.0, max(0.0, deadline - time.monotonic()))
    if not is_open():
        return
    text = doc.source()
    # hovers read their blocks from a kept table (``engram_lsp.blocks``): then the parse (kept for
    # an incremental one after an edit) waits until no request has come or gone for a moment
    kept = parse and backend.kept_block_table(doc.path, text) is not None
    while parse and time.monotonic() < deadline and not backend.closing and is_open():
        idle = backend.wait_idle(_QUIET_S if kept else 0.0, max(0.0, deadline - time.monotonic()))
        if idle and backend.parse(text, doc.path):
            break
    if not backend.closing and is_open():
        # explain's read-ahead, then the file's hovers (one pass, ``hover.ahead_steps``)
        ahead = (lambda engine: hover.ahead_steps(engine, backend, doc)) if parse else None
        backend.warm(doc.file, text, *window, ahead=ahead)


def _opening(backend, *args) -> None:
    """``_warm`` of a file counted by ``Backend.opening`` until its warm-up is queued."""
    try:
        _warm(backend, *args)
    finally:
        backend.opening(-1)


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: types.DidOpenTextDocumentParams) -> None:
        uri = params.text_document.uri
        if not uri.startswith("file:") or ls.backend is not None and ls.backend.closing:
            return
        backend = ls.get_backend()  # (the first document may come before any request made one)
        s = ls.settings
        try:
            doc = documents.resolve(ls, uri)
            code_lens.opened(ls, backend, doc)  # a first lens counted from now, when it can be
            lens_pending = None
            if doc.uri in getattr(ls, "lens_counts_opened", ()):  # (its count started: fresh server)
                lens_pending = lambda: not (ls.first_lens.is_set() or ls.preloaded.is_set())  # noqa: E731
            docs, key = ls.workspace.text_documents, unquote(uri)  # (pygls keys them unquoted)
            backend.opening(1)
            try:
                backend.background(_opening, backend, doc, s.hover_enabled, (s.before, s.after),
                                   lambda: key in docs, lens_pending)
            except BaseException:
                backend.opening(-1)
                raise
        except Exception:  # warming is best effort
            log.debug("warm-up failed for %s", uri, exc_info=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if ls.backend is not None and uri.startswith("file:"):
            try:
                ls.backend.forget(documents.file_arg(ls.root, uri_to_path(uri)))
            except InvalidParams:  # not a path: nothing was queued for it
                pass
