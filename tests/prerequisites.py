"""Missing prerequisites: a skip on a developer's machine, a failure in CI.

``.ci/run`` installs every prerequisite of the suite first (clients/vscode/scripts/setup-e2e.sh,
``make test``'s test extras), so under ``CI`` a missing one means the setup broke, and a skipped
test would hide exactly that. ``missing(reason)`` skips the test, or fails it when ``CI`` is set
to anything but ``""``, ``0`` or ``false``.
"""

from __future__ import annotations

import os

import pytest

__all__ = ["in_ci", "missing"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(reason: str) -> None:
    """Skip (locally) or fail (under CI) because a prerequisite named in ``reason`` is missing."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: the setup must provide it)", pytrace=False)
    pytest.skip(reason)
