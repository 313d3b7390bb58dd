"""The server's side of the engine: one ``Engine``, its query and ingest threads, and the caches.

Nothing here speaks LSP. Queries (hover, code lens, explain, view, search, status) run on two
query threads; ingests (startup, reindex, watcher batches) run one at a time on an ingest thread,
so a hover never waits for an ingest to finish (the index is SQLite in WAL mode: readers never
block on the writer). Watcher batches are coalesced: paths that change while an ingest runs are
ingested together right after it.

``generation`` goes up after every ingest; per-document results are cached by
``(uri, version, generation)``, so a hover or lens after an unchanged buffer and an unchanged
index costs a dict lookup.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from engram_lsp.settings import Settings

log = logging.getLogger(__name__)

_CACHE_SIZE = 256
_BLOCK_CACHE_SIZE = 20_000


class IngestCancelled(Exception):
    """Raised from the progress callback to stop an ingest when the server shuts down."""


def _open_engine(root: Path, settings: Settings):
    """Build the engine for ``root`` with the editor's settings layered over Engram's config."""
    from engram.engine import Engine  # imported lazily: the server answers initialize first

    index_path = None
    if settings.index_path:
        p = Path(settings.index_path).expanduser()
        index_path = p if p.is_absolute() else root / p
    return Engine(root, index_path=index_path, config=_engine_config(root, settings))


def _engine_config(root: Path, settings: Settings):
    """Engram's config for ``root`` (global + repo files) with the editor's settings on top."""
    from engram import config as config_mod

    cfg = config_mod.load(root)
    overrides: dict[str, Any] = {}  # window/minConfidence travel with each explain instead
    if settings.sources:
        overrides["sources"] = list(settings.sources)
    if settings.exclude:
        overrides["exclude"] = list(settings.exclude)
    if settings.harnesses:
        overrides["harnesses"] = dict(settings.harnesses)
    if settings.embedding:
        overrides["embedding"] = dict(settings.embedding)
    config_mod.apply_mapping(cfg, overrides, "editor settings")
    return cfg


class Backend:
    """Owns the Engine and runs everything that touches it off the event loop."""

    def __init__(self, root: Path, settings: Settings):
        self.root = Path(root)
        self.settings = settings
        self.engine = None
        self.generation = 0
        self.last_ingest: dict[str, Any] | None = None
        self.last_ingest_error: str | None = None
        self.last_ingest_at: float | None = None
        self.ingesting = False
        self._closing = threading.Event()
        # the engine keeps one read connection per thread: two readers, so a slow code lens on a
        # big file does not hold up a hover
        self._query_pool = ThreadPoolExecutor(2, thread_name_prefix="engram-query")
        self._ingest_pool = ThreadPoolExecutor(1, thread_name_prefix="engram-ingest")
        self._lock = threading.Lock()
        self._pending_paths: set[str] = set()
        self._watch_job: Future | None = None
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._blocks: OrderedDict[tuple[int, str], dict] = OrderedDict()
        self._open_lock = threading.Lock()
        self.index_ident: tuple[int, int] | None = None  # (dev, inode) of the index we read
        self.index_lost = False

    # --- lifecycle ----------------------------------------------------------------------------

    def open(self):
        """Open the engine (idempotent); raises what the engine raises on a broken index."""
        with self._open_lock:
            if self.engine is None:
                self.engine = _open_engine(self.root, self.settings)
                self.index_ident = self._index_ident()
                _preload_model(self.engine)
            return self.engine

    def reopen(self, settings: Settings | None = None) -> None:
        """Close and forget the engine (new settings); the next call opens a fresh one."""
        with self._open_lock:
            if settings is not None:
                self.settings = settings
            engine, self.engine = self.engine, None
        if engine is not None:
            try:
                engine.close()
            except Exception:  # closing a broken engine must not stop a rebuild
                log.exception("closing the engine failed")
        self.invalidate()

    def index_path(self) -> Path | None:
        if self.settings.index_path:
            p = Path(self.settings.index_path).expanduser()
            return p if p.is_absolute() else self.root / p
        return self.root / ".engram-cache" / "index.sqlite"

    def close(self, timeout: float = 3.0) -> None:
        """Stop: cancel a running ingest at its next progress report, wait briefly, close."""
        self._closing.set()
        self._query_pool.shutdown(wait=False, cancel_futures=True)
        self._ingest_pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        while self.ingesting and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self.ingesting and self.engine is not None:
            try:
                self.engine.close()
            except Exception:
                log.exception("closing the engine failed")

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    # --- queries -------------------------------------------------------------------------------

    def query(self, fn: Callable[..., Any], *args, **kwargs) -> Future:
        """Run ``fn(engine, *args, **kwargs)`` on the query thread."""

        def run():
            engine = self.open()
            self.check_index()
            return fn(engine, *args, **kwargs)

        return self._query_pool.submit(run)

    def _index_ident(self) -> tuple[int, int] | None:
        index = self.index_path()
        try:
            st = index.stat() if index is not None else None
        except OSError:
            return None
        return (st.st_dev, st.st_ino) if st else None

    def check_index(self) -> None:
        """Raise ``NotIndexed`` once when the index file vanished or was replaced under us.

        (Deleting ``.engram-cache/`` while the editor is open would otherwise leave the query
        threads reading the deleted file forever.) The stale connections are dropped, so the next
        query reads the file that is there now; the caller offers a rebuild.
        """
        if self.ingesting:  # a rebuild replaces the file on purpose
            return
        ident = self._index_ident()
        if not self.index_lost and (self.index_ident is None or ident == self.index_ident):
            return
        self.index_lost = False
        self.index_ident = ident
        self.reopen()
        from engram.errors import NotIndexed

        raise NotIndexed(
            "the index is missing (was .engram-cache/ deleted?)", path=str(self.index_path())
        )

    def cached(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """Memoise per index generation (call from the query thread)."""
        full = (self.generation, *key)
        with self._lock:
            if full in self._cache:
                self._cache.move_to_end(full)
                return self._cache[full]
        value = compute()
        with self._lock:
            self._cache[full] = value
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return value

    def block_results(
        self, engine, file: str, text: str, blocks: list[tuple[int, int]]
    ) -> list[dict]:
        """``explain_blocks`` for ``blocks`` of ``text``, reusing results for unchanged blocks.

        Results are cached per index generation by the block's own text, so after an edit only
        the blocks whose text changed are looked up — still in one ``explain_blocks`` call (the
        whole document on first sight, else just the changed blocks concatenated). Hover and code
        lens share the cache.
        """
        lines = text.split("\n")
        texts = ["\n".join(lines[s - 1 : e]) for s, e in blocks]
        gen = self.generation
        with self._lock:
            known = {i: self._blocks.get((gen, t)) for i, t in enumerate(texts)}
        missing = [i for i, r in known.items() if r is None]
        if missing:
            if len(missing) == len(blocks):
                computed = engine.explain_blocks(file, text, list(blocks))
            else:
                sub, ranges, line = [], [], 1
                for i in missing:
                    n = texts[i].count("\n") + 1
                    sub.append(texts[i])
                    ranges.append((line, line + n - 1))
                    line += n + 1  # a blank line between blocks
                computed = engine.explain_blocks(file, "\n\n".join(sub) + "\n", ranges)
            with self._lock:
                for i, result in zip(missing, computed, strict=True):
                    known[i] = result
                    self._blocks[(gen, texts[i])] = result
                while len(self._blocks) > _BLOCK_CACHE_SIZE:
                    self._blocks.popitem(last=False)
        return [{**known[i], "range": [s, e]} for i, (s, e) in enumerate(blocks)]

    def invalidate(self) -> None:
        with self._lock:
            self.generation += 1
            self._cache.clear()
            self._blocks.clear()

    # --- ingest --------------------------------------------------------------------------------

    def ingest(
        self,
        *,
        rebuild: bool = False,
        seal: bool = False,
        paths: Iterable[str] | None = None,
        progress: Callable[..., None] | None = None,
    ) -> Future:
        """Queue an ingest on the ingest thread; the future holds the engine's summary."""
        return self._ingest_pool.submit(
            self._run_ingest, rebuild, seal, None if paths is None else sorted(set(paths)), progress
        )

    def ingest_changed(
        self, paths: Iterable[str], done: Callable[[dict | None, Exception | None], None]
    ) -> None:
        """Watcher entry point: ingest these paths soon, coalescing with paths already queued."""
        with self._lock:
            self._pending_paths.update(paths)
            if self._watch_job is not None and not self._watch_job.done():
                return
            try:
                self._watch_job = self._ingest_pool.submit(self._drain_pending, done)
            except RuntimeError:  # shutting down
                return

    def _drain_pending(self, done) -> None:
        while not self.closing:
            with self._lock:
                batch = sorted(self._pending_paths)
                self._pending_paths.clear()
            if not batch:
                return
            existing = [p for p in batch if Path(p).exists()]
            if not existing:  # only deletions: nothing new to read
                continue
            try:
                summary = self._run_ingest(False, False, existing, None)
            except Exception as exc:  # reported, never raised into the watcher
                done(None, exc)
            else:
                done(summary, None)

    def _run_ingest(self, rebuild, seal, paths, progress):
        if self.closing:
            raise IngestCancelled("server is shutting down")

        def report(*args, **kwargs):
            if self.closing:
                raise IngestCancelled("server is shutting down")
            if progress is not None:
                progress(*args, **kwargs)

        self.ingesting = True
        started = time.monotonic()
        summary = None
        try:
            engine = self.open()
            kwargs: dict[str, Any] = {"progress": report}
            if rebuild:
                kwargs["rebuild"] = True
            if seal:
                kwargs["seal"] = True
            if paths is not None:
                kwargs["paths"] = [Path(p) for p in paths]
            replaced = self.index_ident is not None and self._index_ident() != self.index_ident
            summary = engine.ingest(**kwargs)
            self.index_ident = self._index_ident()
            if replaced and not rebuild:  # deleted under us: this ingest wrote a partial index
                self.index_lost = True
            self.last_ingest = summary if isinstance(summary, dict) else {"summary": summary}
            self.last_ingest_error = None
            return summary
        except Exception as exc:
            self.last_ingest_error = str(exc)
            raise
        finally:
            self.last_ingest_at = time.time()
            self.ingesting = False
            if not (isinstance(summary, dict) and summary.get("nothing_to_do")):
                self.invalidate()  # new evidence: cached hovers and lenses are stale
            log.info(
                "ingest (%s) took %.0f ms",
                "paths" if paths else ("rebuild" if rebuild else "all"),
                (time.monotonic() - started) * 1000,
            )


def _preload_model(engine) -> None:
    """Load the embedding model in a daemon thread when semantic scoring is active, so the first
    ``engram/explain`` or search does not pay the load (a no-op without vectors; never fails)."""
    try:
        from engram.embed import hybrid

        hybrid.preload(engine)
    except Exception:  # optional signal
        log.debug("embedding preload skipped", exc_info=True)
