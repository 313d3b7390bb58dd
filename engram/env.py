"""Environment variables, read when they are used (never at import time).

A bad value never crashes ``import engram``: it falls back to the default with a logging
warning. Every ``ENGRAM_*`` variable the code reads is documented in docs/configuration.md
("Environment variables"); a test checks that.
"""

from __future__ import annotations

import logging
import os

__all__ = ["env_int", "env_flag"]

log = logging.getLogger(__name__)

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def env_int(name: str, default: int) -> int:
    """The integer value of environment variable ``name`` now; ``default`` when it is unset or
    empty, and (with a warning) when it is not an integer."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw.strip())
    except ValueError:
        log.warning("%s=%r is not an integer; using the default %d", name, raw, default)
        return default


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to a true value now (``1``, ``true``,
    ``yes``, ``on``; any case). Unset, empty, ``0``, ``false``, ``no`` and ``off`` are false; any
    other value is false with a warning."""
    raw = os.environ.get(name)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value not in _FALSE:
        log.warning("%s=%r is not a flag (1/0, true/false, yes/no, on/off); treating it as off",
                    name, raw)
    return False
