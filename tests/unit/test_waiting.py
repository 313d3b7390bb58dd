"""tests/waiting.py: waits on a condition, with a deadline and a message."""

from __future__ import annotations

import asyncio
import time

import pytest
from waiting import async_wait_until, wait_until


def test_returns_the_first_truthy_value():
    calls = []

    def ready():
        calls.append(1)
        return len(calls) >= 3 and "ready"

    assert wait_until(ready, 5, interval=0.001) == "ready"
    assert len(calls) == 3


def test_times_out_with_the_message():
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for the moon"):
        wait_until(lambda: False, 0.05, interval=0.01, message="the moon")
    assert 0.05 <= time.monotonic() - t0 < 2


def test_predicate_errors_propagate():
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 / 0, 1)


def test_async_wait_lets_the_loop_run():
    async def main():
        box = []
        asyncio.get_running_loop().call_later(0.01, box.append, "done")

        async def filled():
            return box and box[0]

        assert await async_wait_until(filled, 5, interval=0.001) == "done"
        with pytest.raises(AssertionError, match="waiting for nothing"):
            await async_wait_until(lambda: None, 0.02, message="nothing")

    asyncio.run(main())
