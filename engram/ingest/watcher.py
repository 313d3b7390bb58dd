"""``engram watch``: ingest continuously as harness logs change (watchdog, debounced).

Changed paths are collected for ``DEBOUNCE_S`` after the last event, then ingested together with
``Engine.ingest(paths=...)``; a periodic full pass seals sessions that went quiet. Rotation,
deletion and bursts of appends need no special handling: ingest re-stats every source it is given.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

import orjson

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.2
SEAL_CHECK_S = 60.0


class ChangeCollector:
    """Thread-safe set of changed paths with a debounce deadline."""

    def __init__(self, debounce: float = DEBOUNCE_S):
        self.debounce = debounce
        self._paths: set[str] = set()
        self._last = 0.0
        self._cv = threading.Condition()

    def add(self, path: str) -> None:
        with self._cv:
            self._paths.add(path)
            self._last = time.monotonic()
            self._cv.notify()

    def take(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` for a quiet, non-empty set of changes; return and clear it."""
        end = time.monotonic() + timeout
        with self._cv:
            while True:
                now = time.monotonic()
                if self._paths and now - self._last >= self.debounce:
                    out = sorted(self._paths)
                    self._paths.clear()
                    return out
                if now >= end:
                    return []
                wait = (self._last + self.debounce - now) if self._paths else (end - now)
                self._cv.wait(max(0.01, min(wait, end - now)))


def start_observer(roots: list[Path], collector: ChangeCollector):
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event):
            if event.is_directory and event.event_type == "modified":
                return
            collector.add(event.src_path)
            dest = getattr(event, "dest_path", None)
            if dest:
                collector.add(dest)

    obs = Observer()
    for root in roots:
        target = root if root.is_dir() else root.parent
        if not target.is_dir():
            continue  # not created yet; the periodic full pass picks it up once it exists
        obs.schedule(Handler(), str(target), recursive=True)
    obs.daemon = True
    obs.start()
    return obs


def watch_forever(engine, pretty: bool = False, stop: threading.Event | None = None) -> None:
    roots = engine.watch_paths()
    collector = ChangeCollector()
    obs = start_observer(roots, collector)
    out = sys.stdout
    first = engine.ingest()
    _report(out, first, pretty)
    last_full = time.monotonic()
    try:
        while stop is None or not stop.is_set():
            changed = collector.take(timeout=1.0)
            if changed:
                res = engine.ingest(paths=[Path(p) for p in changed])
                if not res.get("nothing_to_do"):
                    _report(out, res, pretty)
            if time.monotonic() - last_full >= SEAL_CHECK_S:
                res = engine.ingest()
                last_full = time.monotonic()
                if not res.get("nothing_to_do"):
                    _report(out, res, pretty)
    finally:
        obs.stop()
        obs.join(timeout=2)


def _report(out, res: dict, pretty: bool) -> None:
    if pretty:
        from engram.render import render_ingest

        out.write(render_ingest(res))
    else:
        out.write(orjson.dumps(res, option=orjson.OPT_SORT_KEYS).decode() + "\n")
    out.flush()
