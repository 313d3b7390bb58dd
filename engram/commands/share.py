"""Team sharing commands: ``push``, ``pull``, ``share``."""

from __future__ import annotations


def register(sub, common) -> None:
    """Nothing yet."""
