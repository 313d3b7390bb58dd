"""The agents' commands: ``mcp``, ``brief``, ``note``, ``hooks``."""

from __future__ import annotations


def register(sub, common) -> None:
    """Nothing yet."""
