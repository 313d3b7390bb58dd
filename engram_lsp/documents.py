"""Editor documents → what the engine needs: a file name and the buffer's current text.

The engine is given the absolute path (it shows it relative to the workspace root). The text is
the open buffer's, unsaved edits included; for a document the client never opened (an agent
asking about a file on disk) it is ``None`` and the engine reads the file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from engram.errors import EngramError
from engram_lsp.params import InvalidParams, uri_to_path

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Doc:
    uri: str
    path: Path
    file: str
    text: str | None
    version: int | None

    def source(self) -> str:
        """The text, reading the file when the buffer is not open.

        "" when the file is not a regular file of bounded size (``engram.files``: a FIFO,
        ``/dev/zero``, a directory, more than 16 MiB, ...) or cannot be read: hover and code lens
        then show nothing. ``engram/explain`` passes ``text=None`` to the engine instead, which
        reads the file the same way and answers the refusal as an error.
        """
        if self.text is not None:
            return self.text
        try:
            from engram.engine import Engine

            return Engine.read_file(self.path)
        except (OSError, EngramError) as exc:
            log.info("not reading %s: %s", self.uri, exc)
            return ""


def _exists(path: Path) -> bool:
    try:
        os.stat(path)
    except (OSError, ValueError):  # ValueError: an embedded NUL byte
        return False
    return True


def file_arg(root: Path, path: Path) -> str:
    return str(path if path.is_absolute() else root / path)


def resolve(ls, uri: str) -> Doc:
    path = uri_to_path(uri)
    docs = ls.workspace.text_documents
    text = version = None
    if uri in docs:
        doc = docs[uri]
        text, version = doc.source, doc.version
    elif not _exists(path):
        raise InvalidParams(f"document is neither open nor on disk: {uri}")
    return Doc(uri=uri, path=path, file=file_arg(ls.root, path), text=text, version=version)
