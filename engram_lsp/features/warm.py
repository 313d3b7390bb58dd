"""LSP method ``textDocument/didOpen``: parse the new document in the background.

pygls keeps the buffer (document sync is built in); this only hands the text to
``engram.symbols`` so that the tree-sitter parse a hover needs is cached before the first hover.
The parse runs on the backend's background thread and gives way to requests: it starts a moment
after the open (the requests an editor sends with the open arrive first), waits while a query
runs, and one that arrives mid-parse cancels it (it is tried again afterwards). A code lens asked
for right after the open therefore never waits for it (for Python the lens does not need the
parse at all, see ``engram.symbols``).
"""

from __future__ import annotations

import logging
import time

from lsprotocol import types

from engram import symbols
from engram_lsp import documents

log = logging.getLogger(__name__)

_GRACE_S = 0.05
_GIVE_UP_S = 30.0
_POLL_S = 0.01


def _warm(backend, doc: documents.Doc) -> None:
    time.sleep(_GRACE_S)
    text = doc.source()
    deadline = time.monotonic() + _GIVE_UP_S
    while time.monotonic() < deadline and not backend.closing:
        if not backend.busy() and symbols.parse(text, doc.path, cancel=backend.busy):
            return
        time.sleep(_POLL_S)


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: types.DidOpenTextDocumentParams) -> None:
        uri = params.text_document.uri
        backend = ls.backend
        if not uri.startswith("file:") or backend is None or backend.closing:
            return
        if not ls.settings.hover_enabled:
            return
        try:
            backend.background(_warm, backend, documents.resolve(ls, uri))
        except Exception:  # warming is best effort
            log.debug("warm-up parse failed for %s", uri, exc_info=True)
