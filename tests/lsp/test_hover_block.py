"""The block a hover explains, found without a parse where a scan can tell
(``engram_lsp.features.hover.enclosing_block``): on every line of real Python files, the same
block as tree-sitter's ``Engine.enclosing_block``."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.engine import Engine
from engram_lsp.features import hover

ROOT = Path(__file__).resolve().parents[2]


def _sources() -> list[Path]:
    """Real Python files: this repository's own and the installed packages' (click, numpy, ...)."""
    import click
    import numpy

    out = sorted((ROOT / "engram").rglob("*.py")) + sorted((ROOT / "engram_lsp").rglob("*.py"))
    for pkg in (click, numpy):
        out += sorted(Path(pkg.__file__).parent.rglob("*.py"))[:150]
    return out


def test_every_line_gets_the_block_tree_sitter_gives():
    """Every line the scan answers for (the others are the tree's answer by construction)."""
    blocks = lines = 0
    for path in _sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        for start, end in hover._flat_definitions(Engine, text, str(path)):
            blocks += 1
            for line in range(start, end + 1):
                want = Engine.enclosing_block(text, path, line)
                assert hover.enclosing_block(Engine, text, path, line) == want, f"{path}:{line}"
                lines += 1
    assert blocks > 1_000 and lines > 10_000


@pytest.mark.parametrize("source, line, block", [
    ("def f():\n    return 1\n\n\ndef g():\n    def inner():\n        pass\n    return inner\n",
     7, (6, 7)),  # a nested definition: the tree's answer
    ("@deco\ndef f(x):\n    return x\n", 1, (1, 3)),
    ("class A:\n    x: int = 1\n    y = 'a class'\n", 2, (1, 3)),
    ("x = 1\ny = 2\n", 1, None),
])
def test_small_cases(source, line, block):
    want = Engine.enclosing_block(source, "m.py", line)
    assert hover.enclosing_block(Engine, source, "m.py", line) == want
    if block is not None:
        assert want == block
