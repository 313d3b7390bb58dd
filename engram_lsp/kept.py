"""A JSON file of entries the language servers keep beside the index, shared by every server.

``KeptFile`` is what the lens counts (``engram_lsp.lenses``) and the block tables
(``engram_lsp.blocks``) have in common: ``<index><suffix>``, ``{"version": N, "entries": {...},
...}``, read again only when it changed on disk (its mtime and size), written whole (write a
private 0600 temp file, then rename), the last writer winning, so two servers writing at once lose
an entry, never corrupt the file. At most ``max_entries`` entries, the most recently written kept;
a file that cannot be read, or of another version, is empty. Best effort: a failed write is
logged, never raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

import orjson

log = logging.getLogger(__name__)


class KeptFile:
    def __init__(self, index: Path, suffix: str, version: int, max_entries: int, what: str):
        self.path = Path(str(index) + suffix)
        self.version, self.max_entries, self.what = version, max_entries, what
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read
        self._data: dict = {}

    def _load(self) -> dict:
        """The file's content, ``entries`` a dict (read again only when it changed on disk); {}
        when missing or unreadable. The same object until the file changes."""
        try:
            st = os.stat(self.path)
        except OSError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp == self._stamp:
                return self._data
        try:
            with open(self.path, "rb") as f:
                data = orjson.loads(f.read())
            if not (isinstance(data, dict) and data.get("version") == self.version
                    and isinstance(data.get("entries"), dict)):
                data = {}
        except (OSError, ValueError):
            data = {}
        with self._lock:
            self._stamp, self._data = stamp, data
        return data

    def _write(self, entries: dict, new: dict, **fields) -> None:
        """``entries`` with ``new`` added (in their order, the last the most recent), written with
        ``fields`` in one rewrite of the file; nothing written when ``new`` changes nothing."""
        if not new or all(entries.get(k) == v for k, v in new.items()):
            return
        entries = dict(entries)
        for k, v in new.items():
            entries.pop(k, None)
            entries[k] = v
        while len(entries) > self.max_entries:
            entries.pop(next(iter(entries)))
        body = orjson.dumps({"version": self.version, **fields, "entries": entries})
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.info("keeping %s failed: %s", self.what, exc)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
