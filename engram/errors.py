"""One error hierarchy with stable codes.

Each surface translates these at its boundary: the CLI prints ``Error: <message>`` to stderr and
exits 1; the language server answers a JSON-RPC error carrying ``code``. "No evidence" is never an
error.
"""

from __future__ import annotations


class EngramError(Exception):
    """Base class. The user sees ``message``; ``code`` is stable and machine-readable."""

    code = "engram-error"

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line

    def __str__(self) -> str:
        where = ""
        if self.path:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        return f"{where}{self.message}"

    def to_dict(self) -> dict:
        return {"error": {"code": self.code, "path": self.path, "line": self.line,
                          "message": self.message}}


class CorruptTape(EngramError):
    """A tape could not be decompressed or parsed, or its name does not match its content."""

    code = "corrupt-tape"


class UnsupportedLog(EngramError):
    """A harness log in a format or version this adapter does not understand (strict mode)."""

    code = "unsupported-log"


class SchemaTooNew(EngramError):
    """The index was written by a newer Engram."""

    code = "schema-too-new"


class IndexMismatch(EngramError):
    """The index was built with other fingerprint parameters; run ``engram ingest --rebuild``."""

    code = "index-mismatch"


class NotIndexed(EngramError):
    """No index exists yet; run ``engram ingest``."""

    code = "not-indexed"


class BadSpan(EngramError):
    """A span argument could not be understood (``FILE:START-END``)."""

    code = "bad-span"


class UnknownTape(EngramError):
    """No tape with that id (or id prefix) is indexed."""

    code = "unknown-tape"


class WorkerGone(RuntimeError):
    """The worker process exited or its pipe broke before answering."""
