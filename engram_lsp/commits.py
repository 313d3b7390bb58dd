"""The commits that brought a span in, for the hover, computed off the hover's path.

``git blame`` and the attribution of a commit Engram has not seen yet take from tens of
milliseconds to seconds, far more than a hover may (≤ 10 ms): the hover shows the commits already
known for the block and, when there are none yet, asks for them in the background
(``Engine.span_commits`` on the background thread, once no request has come or gone for
``_QUIET_S``: not in the middle of a burst of hovers); the next hover on the block shows them. Known
answers are kept per file state (path, size, modification time) and line range, in a small LRU;
a buffer with unsaved edits gets none (its lines are not the ones git knows).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict

log = logging.getLogger(__name__)

_SIZE = 512
_SAME = 64  # buffers whose sameness with their file is remembered (per version and file state)
_QUIET_S = 0.05  # the commits are computed once no request has come or gone for this long


class SpanCommits:
    def __init__(self) -> None:
        self._known: OrderedDict[tuple, list[dict]] = OrderedDict()
        self._pending: set[tuple] = set()
        self._lock = threading.Lock()
        # per buffer: (its version and the file's state, whether they hold the same text), for
        # the last ``_SAME`` buffers hovered (hovers go from file to file: one entry was read
        # again and compared with the whole file on most of them)
        self._same: OrderedDict[str, tuple] = OrderedDict()

    def key(self, doc, start: int, end: int) -> tuple | None:
        """The file's state and the range, or None when the buffer differs from the file (the
        comparison is remembered per buffer version and file state)."""
        try:
            st = os.stat(doc.path)
        except (OSError, ValueError):
            return None
        state = (str(doc.path), st.st_size, st.st_mtime_ns)
        if doc.text is not None and not self._saved(doc, state):
            return None
        return (*state, start, end)

    def _saved(self, doc, state: tuple) -> bool:
        memo = (doc.version, state)
        with self._lock:
            hit = self._same.get(doc.uri)
        if hit is not None and hit[0] == memo:
            return hit[1]
        same = len(doc.text.encode("utf-8", "surrogatepass")) == state[1]
        if same:
            try:
                with open(doc.path, encoding="utf-8", errors="surrogateescape") as f:
                    same = f.read() == doc.text
            except OSError:
                same = False
        with self._lock:
            self._same[doc.uri] = (memo, same)
            self._same.move_to_end(doc.uri)
            while len(self._same) > _SAME:
                self._same.popitem(last=False)
        return same

    def get(self, backend, doc, start: int, end: int) -> list[dict]:
        """The commits known for lines ``start``-``end`` of ``doc`` (maybe none yet); asks for
        them in the background when they are not known."""
        key = self.key(doc, start, end)
        if key is None:
            return []
        with self._lock:
            hit = self._known.get(key)
            if hit is not None:
                self._known.move_to_end(key)
                return hit
            if key in self._pending:
                return []
            self._pending.add(key)
        try:
            backend.background(self._compute, backend, doc.file, key)
        except RuntimeError:  # shutting down
            with self._lock:
                self._pending.discard(key)
        return []

    def _compute(self, backend, file: str, key: tuple) -> None:
        # not while requests come (a burst of hovers): ``git blame`` and the attribution take
        # 5-35 ms of CPU, and on the background thread they hold the GIL half the time the next
        # hover computes; a hover never waits for them anyway. Woken when the requests end, not
        # polling (a poll wakes in the middle of a request: ``Backend.wait_idle``)
        backend.wait_idle(_QUIET_S)
        commits: list[dict] = []
        try:
            engine = backend.open()
            commits = engine.span_commits(file, key[3], key[4]).get("commits") or []
        except Exception as exc:  # not a git repository, git missing, ...: no commits line
            log.debug("span_commits failed for %s: %s", file, exc)
        with self._lock:
            self._pending.discard(key)
            self._known[key] = commits
            while len(self._known) > _SIZE:
                self._known.popitem(last=False)
