"""The retrieval loop's commands: ``feedback``, ``used``."""

from __future__ import annotations


def register(sub, common) -> None:
    """Nothing yet."""
