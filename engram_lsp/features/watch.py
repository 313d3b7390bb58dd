"""Live watching: log dirs and tape sources → incremental ingest → ``workspace/codeLens/refresh``.

(No LSP request of its own; it ends in ``workspace/codeLens/refresh``.) A watchdog observer watches
every path of ``engine.watch_paths()``. File events are collected and flushed at most
``watch.debounceMs`` (200 ms) after the first one, so a burst of 1,000 appended lines is one ingest
and a single appended line is indexed well inside the 2 s freshness target. Paths that change while
an ingest runs are ingested together right after it (``Backend.ingest_changed``). Rotation (a move)
ingests the new name; a deleted log is ignored; a watched directory that does not exist yet is
polled for until it appears. Events under the index directory are ignored (the index is ours).

Besides events, a full incremental ingest runs every ``SWEEP_S`` seconds while the server is idle,
so live sessions whose logs went quiet get sealed into tapes (``seal_after``) without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)

_POLL_MISSING_S = 2.0
SWEEP_S = 300.0


def register(server) -> None:  # started by lifecycle after the first ingest is queued
    return None


class Watcher:
    """watchdog observer + debounce; calls ``on_batch(paths)`` from a timer thread."""

    def __init__(self, paths: list[Path], ignore: list[Path], debounce_s: float, on_batch):
        from watchdog.observers import Observer

        self.paths = [Path(p) for p in paths]
        self.ignore = [str(Path(p)) for p in ignore]
        self.debounce_s = debounce_s
        self.on_batch = on_batch
        self.observer = Observer()
        self.observer.daemon = True
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._missing: list[Path] = []
        self._stopped = threading.Event()
        self._poller: threading.Thread | None = None
        self.sweeper: asyncio.Future | None = None

    def start(self) -> None:
        for path in self.paths:
            self._schedule(path)
        self.observer.start()
        if self._missing:
            self._poller = threading.Thread(
                target=self._poll_missing, name="engram-watch-poll", daemon=True
            )
            self._poller.start()

    def _schedule(self, path: Path) -> bool:
        from watchdog.events import FileSystemEventHandler

        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write"):
                    return
                if getattr(event, "is_directory", False) and event.event_type != "moved":
                    return
                watcher._event(getattr(event, "dest_path", "") or event.src_path)
                if event.event_type == "moved":
                    watcher._event(event.src_path)

        try:
            if path.is_dir():
                self.observer.schedule(Handler(), str(path), recursive=True)
            elif path.is_file():
                self.observer.schedule(Handler(), str(path.parent), recursive=False)
            else:
                self._missing.append(path)
                return False
        except Exception as exc:  # e.g. inotify watch limit: log, keep the others
            log.warning("cannot watch %s: %s", path, exc)
            return False
        log.info("watching %s", path)
        return True

    def _poll_missing(self) -> None:
        while not self._stopped.wait(_POLL_MISSING_S) and self._missing:
            for path in list(self._missing):
                if path.exists():
                    self._missing.remove(path)
                    if self._schedule(path):
                        self._event(str(path))

    def _event(self, path: str) -> None:
        if not path or any(path == p or path.startswith(p + "/") for p in self.ignore):
            return
        if path.endswith((".tmp", "-journal", "-wal", "-shm", "~")):
            return
        with self._lock:
            self._pending.add(path)
            if self._timer is None and not self._stopped.is_set():
                self._timer = threading.Timer(self.debounce_s, self._flush)
                self._timer.daemon = True
                self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            batch = sorted(self._pending)
            self._pending.clear()
            self._timer = None
        if batch and not self._stopped.is_set():
            try:
                self.on_batch(batch)
            except Exception:
                log.exception("watch batch failed")

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        try:
            self.observer.stop()
        except Exception:
            pass


async def start(ls) -> None:
    """Start watching what the engine says to watch (idempotent)."""
    if ls.watcher is not None:
        return
    backend = ls.get_backend()
    try:
        paths = await ls.run(lambda engine: list(engine.watch_paths()))
    except Exception as exc:
        log.warning("not watching for new sessions: %s", exc)
        return
    index = backend.index_path()
    ignore = [index.parent] if index is not None else []
    ignore.append(backend.root / ".engram-cache")

    def done(summary, error) -> None:
        if error is not None:
            if type(error).__name__ == "IngestCancelled":
                log.debug("live ingest stopped: %s", error)
            else:
                log.warning("live ingest failed: %s", error)
            return
        ls.refresh_code_lenses()

    def on_batch(batch: list[str]) -> None:
        log.debug("changed: %s", batch)
        backend.ingest_changed(batch, done)

    watcher = Watcher(paths, ignore, ls.settings.debounce_ms / 1000.0, on_batch)
    try:
        await asyncio.get_running_loop().run_in_executor(None, watcher.start)
    except Exception as exc:
        log.warning("file watching unavailable: %s", exc)
        return
    ls.watcher = watcher
    watcher.sweeper = asyncio.ensure_future(_sweep(ls, watcher))


async def _sweep(ls, watcher) -> None:
    """Every SWEEP_S: an incremental ingest of everything (seals quiet live sessions)."""
    from engram_lsp.features import ingest

    while ls.watcher is watcher:
        await asyncio.sleep(SWEEP_S)
        backend = ls.backend
        if ls.watcher is not watcher or backend is None or backend.closing:
            return
        if not backend.ingesting:
            try:
                await ingest.start(ls, title="Engram: indexing agent sessions", quiet=True)
            except Exception as exc:  # reported by ingest.start
                log.debug("periodic ingest failed: %s", exc)


def stop(ls) -> None:
    watcher, ls.watcher = ls.watcher, None
    if watcher is not None:
        watcher.stop()
        sweeper = getattr(watcher, "sweeper", None)
        if sweeper is not None:
            sweeper.cancel()
