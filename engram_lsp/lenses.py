"""Code lens counts kept on disk, so that a server's first lens needs neither the engine nor numpy.

A server that has just started cannot compute a code lens until it has imported the engine
(numpy, the fingerprinting, SQLite) and opened the index: 100-300 ms of CPU, the bulk of the first
lens after a start. Yet an editor that restarts mostly opens documents the previous server already
answered, on the same index. So every lens a server computes is also written here, as the only
thing a lens shows — each top-level block's range and session count — keyed by the document's path
and a hash of its text, and tagged with the index's ``generation`` (a token every ingest that
changed the index writes, ``Engine.ingest``). A new server answers a lens from here when the
document's text and the index's generation are still those of the entry: the same lenses, from a
JSON file and one SQLite read, a few ms after the handshake. Anything else goes the usual way.

Kept next to the index it describes (``index.sqlite.lenses``, 0600 in the index's 0700 directory):
ranges and counts only, no text of a session or of the document. One file for every repository
and server of the machine that uses the index: written whole (write, then rename), the last
writer winning, so two servers writing at once lose an entry, never corrupt the file; a file that
cannot be read is a miss. At most ``MAX_ENTRIES`` documents, the most recently written kept; an
entry of another generation is never used, and the first write under a new generation drops
them all.

Entries are written only when what was computed is known to belong to the generation they are
tagged with: no ingest of this server under way, the index's generation the same before and after
the computation and the one this server last saw after an ingest (its in-memory caches are
dropped when that changes). The index's generation is read here with ``apsw`` directly (a
read-only connection opened for the read: a rebuilt index is a new file), the one row of the index
the server reads without the engine; importing ``engram.engine`` is what this module avoids.
A crashed ingest that committed some batches and never wrote its new generation leaves entries
of the generation before it answering until the next ingest finishes — as the server's in-memory
caches, which are keyed the same way, would until then.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from engram_lsp.kept import KeptFile

log = logging.getLogger(__name__)

MAX_ENTRIES = 512
SUFFIX = ".lenses"
VERSION = 1

_GENERATION_SQL = "SELECT value FROM meta WHERE key = 'generation'"


def kept_for(root, index_path=None) -> bool:
    """Whether lens counts are kept for the index ``root`` resolves to (with a configured
    ``index.path``, if any): a first lens is then read from them, no count needed."""
    try:
        from engram.config import resolve_index_path

        return os.path.exists(str(resolve_index_path(root, index_path)) + SUFFIX)
    except Exception:
        return False


def key(path: str | os.PathLike, text: str) -> str:
    """The entry of a document: its path and its text, hashed."""
    import hashlib  # here: OpenSSL's load (~3 ms) is not a server start's cost when none is kept

    h = hashlib.sha256(os.fsencode(str(path)))
    h.update(b"\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:40]


def index_generation(index: Path | None) -> str | None:
    """The index's ``generation`` meta value; None when there is none or it cannot be read."""
    if index is None:
        return None
    try:
        import apsw

        conn = apsw.Connection(str(index), flags=apsw.SQLITE_OPEN_READONLY)
    except Exception:
        return None
    try:
        conn.set_busy_timeout(50)
        row = conn.execute(_GENERATION_SQL).fetchone()
        return str(row[0]) if row and row[0] is not None else None
    except Exception:  # no meta table yet, a locked or broken file: no lens from here
        return None
    finally:
        with contextlib.suppress(Exception):
            conn.close()


class LensStore(KeptFile):
    """The lens counts of one index, on disk (see the module docstring)."""

    def __init__(self, index: Path):
        super().__init__(index, SUFFIX, VERSION, MAX_ENTRIES, "code lens counts")
        self.index = Path(index)

    def get(self, doc_key: str) -> list[list[int]] | None:
        """``[[start, end, sessions], ...]`` of the document when its entry belongs to the index's
        current generation; else None."""
        data = self._load()
        blocks = data.get("entries", {}).get(doc_key) if data else None
        if not isinstance(blocks, list):
            return None
        generation = data.get("generation")
        if not generation or generation != index_generation(self.index):
            return None
        return blocks

    def has(self, doc_key: str, generation: str) -> bool:
        """Whether the document's entry is kept for ``generation``."""
        data = self._load()
        return data.get("generation") == generation and doc_key in data.get("entries", {})

    def put(self, doc_key: str, generation: str, blocks: list[list[int]]) -> None:
        """Write the document's entry for ``generation`` (best effort: a failure is logged)."""
        self.put_many({doc_key: blocks}, generation)

    def put_many(self, new: dict[str, list[list[int]]], generation: str) -> None:
        """Write several documents' entries for ``generation`` in one rewrite of the file, in
        the order given (the last the most recent); best effort, a failure is logged."""
        data = self._load()
        entries = data.get("entries", {}) if data.get("generation") == generation else {}
        self._write(entries, new, generation=generation)


def counts(results: list[dict]) -> list[list[int]]:
    """What a lens shows of ``explain_blocks`` results: ``[start, end, sessions]`` per block."""
    return [[int(r["range"][0]), int(r["range"][1]), int(r.get("sessions") or 0)]
            for r in results]


def as_results(blocks: list[list[int]]) -> list[dict]:
    """The entries back as the ``explain_blocks`` fields a lens reads."""
    return [{"range": [s, e], "sessions": n} for s, e, n in blocks]
