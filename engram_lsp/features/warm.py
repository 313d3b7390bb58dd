"""LSP method ``textDocument/didOpen``: parse the new document in the background.

pygls keeps the buffer (document sync is built in); this only hands the text to
``engram.symbols`` on a query thread so the tree-sitter parse of a big file is cached before the
first hover or code lens asks for it.
"""

from __future__ import annotations

import logging

from lsprotocol import types

from engram import symbols
from engram_lsp.params import uri_to_path

log = logging.getLogger(__name__)


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        if not doc.uri.startswith("file:") or ls.backend is None or ls.backend.closing:
            return
        try:
            path = uri_to_path(doc.uri)
            ls.backend.query(lambda engine: symbols.top_level_blocks(doc.text, path))
        except Exception:  # warming is best effort
            log.debug("warm-up parse failed for %s", doc.uri, exc_info=True)
