"""Git-native provenance commands: ``log``, ``show COMMIT``, ``review``, ``stats``, ``graph``, ``export``."""

from __future__ import annotations


def register(sub, common) -> None:
    """Nothing yet."""
