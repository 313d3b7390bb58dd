"""engram-lsp: the Engram language server (pygls 2.x).

A thin translation layer: LSP requests in, ``engram.engine.Engine`` calls out. The composition root
is ``engram_lsp.server.create_server()``; each LSP feature lives in its own module under
``engram_lsp.features``.
"""

from engram import __version__

__all__ = ["__version__"]
