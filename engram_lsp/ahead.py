"""Code lens counts of the workspace's files, kept on disk ahead of the files being opened.

The lens counts a server keeps on disk (``engram_lsp.lenses``) answer the first lenses of a
restarted server without its engine, but only for the files some server showed at the index's
current generation. A file nobody opened since the last ingest that changed the index cost a new
server its engine's import and a computation (250-350 ms at 16k sessions). So once the index has
stayed the same for ``DELAY_S`` after an ingest of this server (the startup ingest included), and
the client has been quiet for ``QUIET_S``, the server computes the lenses of the workspace's files
too — ``git ls-files -co --exclude-standard`` of the root, the most recently modified first, at
most ``MAX_FILES`` of at most ``MAX_BYTES`` — and keeps their counts beside those of the files it
showed. The next server's first lens of such a file, as long as its saved text and the index are
still those, is read from disk.

Each file is one background job on a query thread (``Backend.ahead_job``: the same computation as
a code lens, ``top_level_blocks`` then ``block_results``, so the same counts), taken only when no
request waits, one at a time, and only while the client is quiet: a request that comes waits for
at most one file's computation. A new ingest starts the pass over (what was computed belongs to
the old generation); the counts are written in one rewrite of the file at the end of a pass.

Before that wait, right after each ingest (the startup one first), a shorter pass keeps the block
table (``engram_lsp.blocks``) of every workspace file that has none: a file's first hover otherwise
parses the whole file (a tree-sitter parse: 1-5 ms for 300-1,100 lines, holding the interpreter),
and an editor opens a file and hovers it at once. A table depends on the file's text only, not on
the index, so this pass does not wait for the index to settle, and its files (a parse and a walk
per line, 5-25 ms each, stopped as soon as a request waits, then done again) are taken whenever
the client has been quiet for ``TABLES_QUIET_S``; the tables are written every ``TABLES_SAVE``
files. Outside a git work tree nothing is computed ahead.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections import deque
from pathlib import Path

log = logging.getLogger(__name__)

DELAY_S = 5.0  # the index unchanged this long after an ingest before a pass starts
QUIET_S = 1.0  # no request for this long before each file (an editor's pauses, not a burst's gaps)
TABLES_QUIET_S = 0.05  # ... before each file's block table (a burst's gaps: each is a few ms, and stops for a request)
TABLES_SAVE = 32  # block tables written every this many files (what a pass cut short computed is kept)
MAX_FILES = 200
MAX_BYTES = 256 * 1024
_POLL_S = 0.05
_STALE_S = 0.5  # while requests come, whether a new ingest made the pass stale is seen this late at most


def workspace_files(root: Path, limit: int = MAX_FILES) -> list[Path]:
    """The work tree's files (tracked and untracked, not ignored), regular and at most
    ``MAX_BYTES``, the most recently modified first (then by path), at most ``limit``; [] outside
    a git work tree."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode:
        return []
    found = []
    for name in sorted(set(out.stdout.decode("utf-8", "surrogateescape").split("\0"))):
        if not name:
            continue
        path = root / name
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_size <= MAX_BYTES and (st.st_mode & 0o170000) == 0o100000:
            found.append((-st.st_mtime_ns, name, path))
    found.sort()
    return [p for _m, _n, p in found[:limit]]


class LensesAhead:
    """The thread that computes the workspace's lens counts ahead (see the module docstring)."""

    def __init__(self, backend):
        self.backend = backend
        self._cond = threading.Condition()
        self._asked_at: float | None = None  # monotonic time of the last ingest's end
        self._pass = 0  # bumped by every ingest: a pass under way for an older one stops
        self.pending = 0  # files of the pass under way still to compute (``engram/status``)
        self.tables_pending = 0  # files whose block tables the tables pass has still to look at
        self._tables_for = 0  # the pass whose block tables were computed
        self._thread: threading.Thread | None = None

    def after_ingest(self) -> None:
        """An ingest of this server ended: (re)start the pass after ``DELAY_S``."""
        with self._cond:
            self._asked_at = time.monotonic()
            self._pass += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="engram-lenses-ahead",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _loop(self) -> None:
        backend = self.backend
        while not backend.closing:
            with self._cond:
                while self._asked_at is None and not backend.closing:
                    self._cond.wait()
                if backend.closing:
                    return
                number = self._pass
                tables = self._tables_for != number
                if not tables:
                    wait = self._asked_at + DELAY_S - time.monotonic()
                    if wait > 0:
                        self._cond.wait(wait)
                        continue
                    self._asked_at = None
            if tables:  # first, without waiting for the index to settle
                self._tables_for = number
                try:
                    self._tables_pass(number)
                except Exception:  # an optimisation: a hover parses what has no table
                    log.debug("computing block tables ahead failed", exc_info=True)
                finally:
                    self.tables_pending = 0
                continue
            try:
                self._one_pass(number)
            except Exception:  # an optimisation: lenses are computed when asked for
                log.debug("computing lens counts ahead failed", exc_info=True)
            finally:
                self.pending = 0

    def _stale(self, number: int) -> bool:
        return number != self._pass or self.backend.closing

    def _wait_quiet(self, number: int, quiet: float) -> None:
        """Until no ingest runs and the client has been quiet for ``quiet``, or the pass is stale."""
        backend = self.backend
        while not self._stale(number) and (backend.ingesting or backend.since_request() < quiet):
            if backend.ingesting:
                time.sleep(_POLL_S)
            else:  # not a wake every ``_POLL_S`` in the middle of requests (``wait_idle``)
                backend.wait_idle(quiet, _STALE_S)

    def _tables_pass(self, number: int) -> None:
        """The block table of each workspace file that has none kept (``Backend.table_job``),
        between requests; a file cut short by a request is taken again once, at the end."""
        backend = self.backend
        store = backend.block_store()
        if store is None:
            return
        started = time.monotonic()
        files = workspace_files(backend.root)
        self.tables_pending = len(files)
        todo, again, new, made = deque(files), set(), {}, 0
        while todo:
            self._wait_quiet(number, TABLES_QUIET_S)
            if self._stale(number):
                break
            path = todo.popleft()
            try:
                got = backend.query_background(backend.table_job, path, thread=0).result()
            except Exception:
                log.debug("block table ahead failed for %s", path, exc_info=True)
                got = {}
            if got is None and path not in again:  # a request came: once more, at the end
                again.add(path)
                todo.append(path)
                continue
            self.tables_pending -= 1
            new.update(got or {})
            if len(new) >= TABLES_SAVE:
                store.put_many(new)
                made, new = made + len(new), {}
        if new:
            store.put_many(new)
        log.debug("block tables ahead: %d of %d files computed (%.0f ms)", made + len(new), len(files),
                  (time.monotonic() - started) * 1000)

    def _one_pass(self, number: int) -> None:
        backend = self.backend
        if not backend.settings.code_lens_enabled:
            return
        files = workspace_files(backend.root)
        self.pending = len(files)
        started, done, generation, tables = time.monotonic(), {}, None, {}
        for path in files:
            self._wait_quiet(number, QUIET_S)
            if self._stale(number):
                break
            try:
                got = backend.query_background(backend.ahead_job, path, thread=0).result()
            except Exception:
                log.debug("lens counts ahead failed for %s", path, exc_info=True)
                got = None
            self.pending -= 1
            if got is None:
                continue
            gen, key, blocks, table = got
            tables.update(table)  # (the text's, whatever the index: kept even if the pass stops)
            if generation is None:
                generation = gen
            if gen != generation or self._stale(number):  # the index changed under the pass
                done = {}
                break
            if key is not None:
                done[key] = blocks
        if tables and backend.block_store() is not None:
            backend.block_store().put_many(tables)
        if done and generation is not None and not self._stale(number):
            backend.lens_store().put_many(done, generation)
        log.debug("lens counts ahead: %d of %d files computed (%.0f ms)", len(done), len(files),
                  (time.monotonic() - started) * 1000)
