"""Garbage collection between requests, for the long-running servers (``engram mcp``, the
language server).

An explain allocates tens of thousands of objects; the young-generation collections those
allocations set off (and now and then a middle-generation pass of a few ms) fell inside the
request being answered. A server that answers requests one after the other can run them after
the answer is written instead, while the client reads it: automatic collection is off while a
request is being answered, and once the answer is out, the collection the collector's own rule
calls for by then runs (``collect_due``). The same objects are collected, by the same rule,
only at another moment."""

from __future__ import annotations

import gc
import threading


def collect_due() -> None:
    """The collection the collector's own rule calls for by now, or none (CPython's: once the
    youngest generation's count passes its threshold, the oldest generation whose count passes
    its own; ``gc.get_count``, ``gc.get_threshold``), for a process that turned automatic
    collection off to collect between requests."""
    c0, c1, c2 = gc.get_count()
    t0, t1, t2 = gc.get_threshold()
    if t0 and c0 > t0:
        gc.collect(2 if c2 > t2 else 1 if c1 > t1 else 0)


class BetweenRequests:
    """Automatic collection off while at least one request is being answered (``begin`` ..
    ``end``, from any thread); when the last one ends, collection is back on (as it was before
    the first began) and the collection due by then runs, on the thread that ended it.

    A request that runs long is not a leak: ``collect_due`` still collects when called while
    automatic collection is off (the language server's idle loop calls it every 0.25 s)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._was_enabled = False

    def begin(self) -> None:
        with self._lock:
            if self._running == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._running += 1

    def end(self) -> None:
        with self._lock:
            self._running -= 1
            last = self._running == 0
            if last and self._was_enabled:
                gc.enable()
        if last:
            collect_due()

    def answering(self) -> bool:
        """Whether a request is being answered now (automatic collection is off for it)."""
        return self._running > 0
