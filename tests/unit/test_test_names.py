"""pytest imports test modules by their file name (the test directories are not packages): two
``test_*.py`` files with one name in different directories stop the whole run at collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_its_own_name():
    seen: dict[str, list[str]] = defaultdict(list)
    for p in sorted(TESTS.rglob("test_*.py")):
        if "node_modules" not in p.parts:
            seen[p.name].append(str(p.relative_to(TESTS)))
    assert {n: ps for n, ps in seen.items() if len(ps) > 1} == {}
