"""Block tables kept on disk, so that a file's first hover needs no parse.

A hover explains the innermost function or class around the hovered line
(``Engine.enclosing_block``), which needs a tree-sitter parse of the whole file: about 3 ms of
CPU for an average file, 12-15 ms for a 5,000-line one, and the first hover of a file usually
comes right after the editor opened it, before the parse started in the background at the open
is done. The answer depends on the file's text and language only (not on the index), so every
line's answer can be computed once (``Engine.block_table``: runs ``[first, last, start, end]``)
and kept: a hover of a text whose table is kept reads its block from the table
(``Engine.table_block``), the same ``(start, end)`` as the parse, without parsing.

Tables are computed for the workspace's files right after each ingest (the startup one first)
whenever the client is quiet for a moment, and again by the pass that keeps their lens counts ahead
(``engram_lsp.ahead``: ``Backend.table_job``, ``Backend.ahead_job``), and kept next to the index
(``index.sqlite.blocks``, 0600 in the index's 0700 directory): line numbers only, keyed by a hash
of the text and the file's suffix (which names its language), no text and no path. One file for
every server of the machine: written whole (write, then rename), the last writer winning; a file
or an entry that cannot be read is a miss (the hover parses). At most ``MAX_ENTRIES`` texts, the
most recently written kept.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePath

from engram_lsp.kept import KeptFile

MAX_ENTRIES = 1024
SUFFIX = ".blocks"
VERSION = 1


def key(path: str | os.PathLike, text: str) -> str:
    """The entry of a text: its language's tag (the file's suffix, else its name) and the text,
    hashed. Two files with the same text and suffix share it (the same parse, the same table)."""
    p = PurePath(str(path))
    h = hashlib.sha256((p.suffix.lower() or p.name).encode("utf-8", "surrogatepass"))
    h.update(b"\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:40]


def valid(table) -> bool:
    """Whether ``table`` is a block table (runs of 4 ints covering lines 1..n in order, each
    answer a range inside 1..n); an entry that is not is never used."""
    if not isinstance(table, list) or not table:
        return False
    expect = 1
    for run in table:
        if not (isinstance(run, list) and len(run) == 4 and all(type(x) is int for x in run)):
            return False
        first, last, start, end = run
        if first != expect or last < first or not 1 <= start <= end:
            return False
        expect = last + 1
    return all(run[3] < expect for run in table)


class BlockStore(KeptFile):
    """The block tables of one index's machine, on disk (see the module docstring)."""

    def __init__(self, index: Path):
        super().__init__(index, SUFFIX, VERSION, MAX_ENTRIES, "block tables")
        self._checked: dict[str, list] = {}  # entries found valid, of the content last read
        self._checked_of: dict | None = None  # that content

    def get(self, doc_key: str) -> list[list[int]] | None:
        """The kept table of the text, or None."""
        data = self._load()
        with self._lock:
            if self._checked_of is not data:
                self._checked, self._checked_of = {}, data
            hit = self._checked.get(doc_key)
        if hit is not None:
            return hit
        table = data.get("entries", {}).get(doc_key)
        if table is None or not valid(table):
            return None
        with self._lock:
            if self._checked_of is data:
                self._checked[doc_key] = table
        return table

    def has(self, doc_key: str) -> bool:
        return doc_key in self._load().get("entries", {})

    def put_many(self, new: dict[str, list[list[int]]]) -> None:
        """Keep these tables (the last the most recent) in one rewrite of the file; best effort,
        a failure is logged."""
        self._write(self._load().get("entries", {}), new)
