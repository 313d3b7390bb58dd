"""The line differ behind blame, edit diffs and whole-file writes: ``difflib.SequenceMatcher``.

``cydifflib`` is a compiled port of the same algorithm (same matching blocks and opcodes, ~3.5x
faster on the few-hundred-line edits of a log); it is a dependency, and difflib itself stands in
when it is missing, with identical answers. ``tests/unit/test_linediff.py`` holds them to that.
"""

from __future__ import annotations

try:
    from cydifflib import SequenceMatcher
except ImportError:  # pragma: no cover - a dependency; the standard library gives the same answers
    from difflib import SequenceMatcher

__all__ = ["SequenceMatcher"]
