"""Waiting in tests: on a condition, never for a fixed time.

``wait_until(predicate, timeout)`` polls ``predicate`` until it returns something truthy and
returns that value; after ``timeout`` seconds it fails the test, saying what it waited for. A
fixed ``time.sleep`` is either too short on a loaded machine (flaky) or too long everywhere else
(slow); a wait on the condition the test needs is neither. A sleep that makes a time gap on
purpose (mtime granularity, a quiet period the code under test measures) is not a wait: keep it,
with a comment saying why.

Importable from every test directory (``from waiting import wait_until``): ``tests/`` is on
``sys.path`` because it holds the root ``conftest.py`` (as for ``claude_log``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["async_wait_until", "wait_until"]

T = TypeVar("T")


def _what(predicate: Callable, message: str | None) -> str:
    return message or getattr(predicate, "__doc__", None) or getattr(predicate, "__name__", "?")


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.02, *,
               message: str | None = None) -> T:
    """Call ``predicate()`` every ``interval`` seconds until it returns a truthy value, and
    return that value. After ``timeout`` seconds (measured on the monotonic clock) the test
    fails with ``message`` (default: the predicate's docstring or name). The predicate is
    always called once more at the deadline; exceptions it raises propagate."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {_what(predicate, message)}")
        time.sleep(min(interval, deadline - now))


async def async_wait_until(predicate: Callable[[], T | Awaitable[T]], timeout: float,
                           interval: float = 0.02, *, message: str | None = None) -> T:
    """``wait_until`` for asyncio tests: the event loop keeps running between the calls; the
    predicate may be a plain function or a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        now = time.monotonic()
        if now >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {_what(predicate, message)}")
        await asyncio.sleep(min(interval, deadline - now))
