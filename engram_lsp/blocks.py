"""Block tables kept on disk, so that a file's first hover needs no parse.

A hover explains the innermost function or class around the hovered line
(``Engine.enclosing_block``), which needs a tree-sitter parse of the whole file: about 3 ms of
CPU for an average file, 12-15 ms for a 5,000-line one, and the first hover of a file usually
comes right after the editor opened it, before the parse started in the background at the open
is done. The answer depends on the file's text and language only (not on the index), so every
line's answer can be computed once (``Engine.block_table``: runs ``[first, last, start, end]``)
and kept: a hover of a text whose table is kept reads its block from the table
(``Engine.table_block``), the same ``(start, end)`` as the parse, without parsing.

Tables are computed for the workspace's files by the pass that keeps their lens counts ahead
(``engram_lsp.ahead``, ``Backend.ahead_job``), and kept next to the index
(``index.sqlite.blocks``, 0600 in the index's 0700 directory): line numbers only, keyed by a hash
of the text and the file's suffix (which names its language), no text and no path. One file for
every server of the machine: written whole (write, then rename), the last writer winning; a file
or an entry that cannot be read is a miss (the hover parses). At most ``MAX_ENTRIES`` texts, the
most recently written kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from pathlib import Path, PurePath

import orjson

log = logging.getLogger(__name__)

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


class BlockStore:
    """The block tables of one index's machine, on disk (see the module docstring)."""

    def __init__(self, index: Path):
        self.path = Path(str(index) + SUFFIX)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read
        self._entries: dict = {}
        self._checked: dict[str, list] = {}  # entries found valid, of the file last read

    def _load(self) -> dict:
        """The file's entries (read again only when it changed on disk); {} when unreadable."""
        try:
            st = os.stat(self.path)
        except OSError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp == self._stamp:
                return self._entries
        try:
            with open(self.path, "rb") as f:
                data = orjson.loads(f.read())
            entries = data.get("entries") if isinstance(data, dict) \
                and data.get("version") == VERSION else None
            if not isinstance(entries, dict):
                entries = {}
        except (OSError, ValueError):
            entries = {}
        with self._lock:
            self._stamp, self._entries, self._checked = stamp, entries, {}
        return entries

    def get(self, doc_key: str) -> list[list[int]] | None:
        """The kept table of the text, or None."""
        entries = self._load()
        with self._lock:
            hit = self._checked.get(doc_key)
        if hit is not None:
            return hit
        table = entries.get(doc_key)
        if table is None or not valid(table):
            return None
        with self._lock:
            if self._entries is entries:
                self._checked[doc_key] = table
        return table

    def has(self, doc_key: str) -> bool:
        return doc_key in self._load()

    def put_many(self, new: dict[str, list[list[int]]]) -> None:
        """Keep these tables (the last the most recent) in one rewrite of the file; best effort,
        a failure is logged."""
        entries = dict(self._load())
        if not new or all(entries.get(k) == v for k, v in new.items()):
            return
        for doc_key, table in new.items():
            entries.pop(doc_key, None)
            entries[doc_key] = table
        while len(entries) > MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        body = orjson.dumps({"version": VERSION, "entries": entries})
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.info("keeping block tables failed: %s", exc)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
