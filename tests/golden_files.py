"""Golden files: compared, never silently (re)created.

``compare_golden(path, text, update=...)`` is what the ``golden_compare`` fixture
(tests/conftest.py) calls. Without ``--update-golden`` a golden file that differs fails the test,
and so does one that is missing: a test whose golden file was deleted, renamed or never
committed must not pass by writing its own expectation. With ``--update-golden`` the file is
written (only when its text changes); review the diff and commit it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["compare_golden"]


def compare_golden(path: Path, text: str, *, update: bool) -> None:
    path = Path(path)
    if update:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"golden file missing: {path}\n(run pytest --update-golden to write it from "
                    "the current output, then review and commit it)", pytrace=False)
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"output differs from golden {path} (pytest --update-golden rewrites it)"
