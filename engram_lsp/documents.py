"""Editor documents → what the engine needs: a file name and the buffer's current text.

The engine is given the absolute path (it shows it relative to the workspace root). The text is
the open buffer's, unsaved edits included; for a document the client never opened (an agent
asking about a file on disk) it is ``None`` and the engine reads the file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from engram_lsp.params import InvalidParams, uri_to_path


@dataclasses.dataclass(frozen=True)
class Doc:
    uri: str
    path: Path
    file: str
    text: str | None
    version: int | None

    def source(self) -> str:
        """The text, reading the file when the buffer is not open ("" if unreadable)."""
        if self.text is not None:
            return self.text
        try:
            return self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


def file_arg(root: Path, path: Path) -> str:
    return str(path if path.is_absolute() else root / path)


def resolve(ls, uri: str) -> Doc:
    path = uri_to_path(uri)
    docs = ls.workspace.text_documents
    text = version = None
    if uri in docs:
        doc = docs[uri]
        text, version = doc.source, doc.version
    elif not path.exists():
        raise InvalidParams(f"document is neither open nor on disk: {uri}")
    return Doc(uri=uri, path=path, file=file_arg(ls.root, path), text=text, version=version)
