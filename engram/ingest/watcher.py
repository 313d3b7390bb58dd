"""Engram's one file watcher: ``engram watch`` and the language server both use ``Watcher``.

``Watcher(paths, on_batch, ...)`` watches the agents' log locations and tape directories (what
``Engine.watch_paths()`` lists) and reports what changed; the caller ingests it. What it does:

* **Paths.** A directory is watched recursively (watchdog's observer: inotify on Linux); a file
  through its parent directory. A path that does not exist yet (no agent has run here yet) is
  looked for every ``poll_s`` (``POLL_S``, 2 s) and watched once it appears; its own path is then
  reported as changed. A directory in a batch means "anything under it may be new" (it appeared,
  or was moved in): the callers ingest everything then, not just the paths of the batch.
* **Events.** File creation, modification, deletion and moves; a move reports both names (log
  rotation: the new name is ingested). Directory events other than moves, and opening or closing
  a file without writing, are dropped. Nothing under an ``ignore`` path is reported (the index
  directory: the index is Engram's own output), nor temporary files (``*.tmp``, ``*~``). SQLite's
  ``-wal``/``-shm``/``-journal`` files are reported: a harness that keeps its sessions in SQLite
  (Cursor, OpenCode) may change only its ``-wal`` file, which ingest maps to the store.
* **Debounce.** Changed paths are collected and handed to ``on_batch(paths)`` (sorted, each once)
  ``debounce_s`` after the *first* event of a batch (``DEBOUNCE_S``, 200 ms; the editor's
  ``watch.debounceMs``): a burst of a thousand appended lines is one batch, and a steady stream of
  appends is still reported every ``debounce_s`` (never starved waiting for a quiet moment).
  Events that arrive while ``on_batch`` runs make the next batch.
* **Sweep.** Every ``sweep_s`` (``SWEEP_S``, 300 s; ``None``: never) ``on_sweep()`` is called,
  changes or not: the caller runs a full incremental ingest, so live sessions whose logs went
  quiet are sealed into tapes (``seal_after``) and anything an event missed is picked up.
* **Threads.** The callbacks run one at a time on the watcher's own thread (``engram-watch``),
  never concurrently; a slow one delays the next batch, which then holds everything that changed
  meanwhile. An exception in a callback goes to ``on_error`` (default: the log) and the watcher
  carries on. ``stop()`` returns at once; ``join()`` waits for the threads.

``Engine.watcher(on_batch, ...)`` builds one for everything the engine's ingest reads, the index
directory ignored. ``watch_forever(engine, report)`` is ``engram watch``: an ingest of everything, then an ingest of
each batch and each sweep. It prints nothing: ``report(summary)`` receives the summary of the
first ingest and of every later one that changed the index (``engram.cli`` prints them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.2
SWEEP_S = 300.0
POLL_S = 2.0
_TEMP_SUFFIXES = (".tmp", "~")


def _log_error(exc: BaseException) -> None:
    log.error("watch: %s", exc, exc_info=exc)


class Watcher:
    """watchdog observer + debounce + polling for missing paths + periodic sweep (see the module
    docstring)."""

    def __init__(
        self,
        paths: Iterable[Path | str],
        on_batch: Callable[[list[str]], None],
        *,
        ignore: Iterable[Path | str] = (),
        debounce_s: float = DEBOUNCE_S,
        on_sweep: Callable[[], None] | None = None,
        sweep_s: float | None = SWEEP_S,
        poll_s: float = POLL_S,
        on_error: Callable[[BaseException], None] = _log_error,
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self.ignore = [str(Path(p)) for p in ignore]
        self.debounce_s = max(0.0, float(debounce_s))
        self.on_batch = on_batch
        self.on_sweep = on_sweep
        self.sweep_s = sweep_s if on_sweep is not None else None
        self.poll_s = poll_s
        self.on_error = on_error
        self.observer = None
        self._cond = threading.Condition()
        self._pending: set[str] = set()
        self._due: float | None = None  # when the pending batch is handed over
        self._missing: list[Path] = []
        self._stopped = False
        self._thread: threading.Thread | None = None

    # --- control -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start watching (raises if watchdog cannot start at all; a path that cannot be watched
        is logged and left out)."""
        from watchdog.observers import Observer

        self.observer = Observer()
        self.observer.daemon = True
        for path in self.paths:
            self._schedule(path)
        self.observer.start()
        self._thread = threading.Thread(target=self._run, name="engram-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; a batch not handed over yet is dropped. Returns at once."""
        with self._cond:
            self._stopped = True
            self._pending.clear()
            self._cond.notify_all()
        if self.observer is not None:
            try:
                self.observer.stop()
            except Exception:  # stopping is best effort
                log.debug("stopping the observer failed", exc_info=True)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the watcher's threads to end (after ``stop``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in (self.observer, self._thread):
            if thread is not None and thread.is_alive() and thread is not threading.current_thread():
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                thread.join(left)

    @property
    def missing(self) -> list[Path]:
        """The watched paths that do not exist yet (looked for every ``poll_s``)."""
        with self._cond:
            return list(self._missing)

    # --- events --------------------------------------------------------------------------------

    def _schedule(self, path: Path) -> bool:
        from watchdog.events import FileSystemEventHandler

        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write"):
                    return
                if event.is_directory and event.event_type != "moved":
                    return
                watcher.changed(getattr(event, "dest_path", "") or event.src_path)
                if event.event_type == "moved":
                    watcher.changed(event.src_path)

        try:
            if path.is_dir():
                self.observer.schedule(Handler(), str(path), recursive=True)
            elif path.is_file():
                self.observer.schedule(Handler(), str(path.parent), recursive=False)
            else:
                with self._cond:
                    self._missing.append(path)
                    self._cond.notify_all()
                return False
        except Exception as exc:  # e.g. the inotify watch limit: log, keep the others
            log.warning("cannot watch %s: %s", path, exc)
            return False
        log.info("watching %s", path)
        return True

    def changed(self, path: str) -> None:
        """Report ``path`` as changed (the observer's events come here); filtered and debounced."""
        if isinstance(path, bytes):
            path = path.decode(errors="surrogateescape")
        if not path or any(path == p or path.startswith(p + "/") for p in self.ignore):
            return
        if path.endswith(_TEMP_SUFFIXES):
            return
        with self._cond:
            if self._stopped:
                return
            self._pending.add(path)
            if self._due is None:
                self._due = time.monotonic() + self.debounce_s
                self._cond.notify_all()

    # --- the watcher's thread ------------------------------------------------------------------

    def _run(self) -> None:
        now = time.monotonic()
        next_poll = now + self.poll_s
        next_sweep = None if self.sweep_s is None else now + self.sweep_s
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    times = [t for t in (
                        self._due,
                        next_poll if self._missing else None,
                        next_sweep,
                    ) if t is not None]
                    wake = min(times) if times else None
                    if wake is not None and wake <= now:
                        break
                    self._cond.wait(None if wake is None else wake - now)
                batch: list[str] = []
                if self._due is not None and self._due <= now:
                    batch = sorted(self._pending)
                    self._pending.clear()
                    self._due = None
                poll = bool(self._missing) and next_poll <= now
                sweep = next_sweep is not None and next_sweep <= now
            if batch:
                self._call(self.on_batch, batch)
            if poll:
                self._poll_missing()
                next_poll = time.monotonic() + self.poll_s
            if sweep:
                self._call(self.on_sweep)
                next_sweep = time.monotonic() + self.sweep_s

    def _poll_missing(self) -> None:
        for path in self.missing:
            if path.exists():
                with self._cond:
                    self._missing.remove(path)
                if self._schedule(path):
                    self.changed(str(path))

    def _call(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:
            try:
                self.on_error(exc)
            except Exception:
                log.exception("watch: the error handler failed")


# --- engram watch --------------------------------------------------------------------------------


def watch_forever(
    engine,
    report: Callable[[dict], None],
    stop: threading.Event | None = None,
    *,
    on_error: Callable[[BaseException], None] = _log_error,
    debounce_s: float = DEBOUNCE_S,
    sweep_s: float | None = SWEEP_S,
    poll_s: float = POLL_S,
    started: Callable[[Watcher], None] | None = None,
) -> None:
    """Ingest everything, then keep ingesting what changes until ``stop`` is set (or Ctrl-C).

    ``report(summary)``: the first ingest's summary and every later one that changed the index.
    ``on_error(exc)``: an ingest that failed (the watch goes on). ``started(watcher)``: called
    once the watcher runs and the first ingest is reported.
    """
    lock = threading.Lock()  # one ingest at a time: the first one runs beside the watcher

    def ingest(**kwargs) -> None:
        with lock:
            res = engine.ingest(**kwargs)
        if not res.get("nothing_to_do"):
            report(res)

    def on_batch(batch: list[str]) -> None:
        existing = [Path(p) for p in batch if Path(p).exists()]
        if any(p.is_dir() for p in existing):  # a directory appeared: anything may be new
            ingest()
        elif existing:  # (only deletions: nothing new to read)
            ingest(paths=existing)

    watcher = engine.watcher(
        on_batch,
        debounce_s=debounce_s,
        on_sweep=ingest,
        sweep_s=sweep_s,
        poll_s=poll_s,
        on_error=on_error,
    )
    watcher.start()  # before the first ingest: nothing written meanwhile is missed
    try:
        with lock:
            first = engine.ingest()
        report(first)
        if started is not None:
            started(watcher)
        stop = stop or threading.Event()
        while not stop.wait(1.0):
            pass
    finally:
        watcher.stop()
        watcher.join(timeout=2)
