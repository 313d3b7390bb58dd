"""Python's top-level blocks by the scan without numpy (``symbols._python_top_level_plain``, what
a language server's first code lens reads blocks with) are the numpy scan's, hence the parse's:
on ``test_symbols``' cases (and where the scan gives up), and on real files — the project's own,
a slice of the standard library and of site-packages — each whole, with CRLF line breaks, and
cut in the middle of a line (unterminated strings and brackets)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_symbols import SCAN_CASES, _by_tree

from engram.query import symbols

ROOT = Path(__file__).resolve().parents[2]


def _variants(text: str) -> list[str]:
    return [text, text.replace("\n", "\r\n"), text[: len(text) // 2], text[len(text) // 3:],
            text.replace("    ", "\t")]


@pytest.mark.parametrize("name", list(SCAN_CASES))
def test_plain_scan_is_the_scan(name):
    text = SCAN_CASES[name]
    assert symbols._python_top_level_plain(text) == symbols._python_top_level(text) is not None
    assert symbols.top_level_blocks(text, "x.py", plain=True) == _by_tree(text), name
    for t in _variants(text):
        assert symbols._python_top_level_plain(t) == symbols._python_top_level(t), (name, t)


@pytest.mark.parametrize(
    "text",
    [
        'def f():\n    return "open\n',
        "def f():\n    return '''open\n",
        "def f():\n    return (1\n",
        "def f():\n    return 1)\n",
        "def f():\n    return )(\n",
        "@decorator\nx = 1\n",
        "def f():\n    pass\n\x0c\ndef g():\n    pass\n",
        "def f():\r    pass\r",
        "x = 1 \\\n",
        "x = 1 \\",
        "def f():\n    return 1 + \\\r\n2\r\ndef g(): pass\r\n",
    ],
)
def test_plain_scan_gives_up_where_the_scan_does(text):
    assert symbols._python_top_level_plain(text) == symbols._python_top_level(text)
    assert symbols.top_level_blocks(text, "x.py", plain=True) == _by_tree(text)


def test_plain_scan_is_the_scan_on_real_files():
    files = sorted(ROOT.glob("engram/**/*.py")) + sorted(ROOT.glob("engram_lsp/**/*.py"))
    files += sorted(ROOT.glob("tests/**/*.py")) + sorted(ROOT.glob("bench/*.py"))
    files += sorted(Path(os.__file__).parent.glob("*.py"))[:200]
    site = Path(pytest.__file__).resolve().parents[1]
    files += sorted(site.glob("*/*.py"))[:300]
    compared = answered = 0
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for t in _variants(text):
            got = symbols._python_top_level_plain(t)
            assert got == symbols._python_top_level(t), f
            compared += 1
            answered += got is not None
    assert compared > 1000 and answered > compared // 2, (compared, answered)


def test_plain_scan_loads_no_numpy():
    import subprocess
    import sys

    code = ("import sys\nfrom engram.query import symbols\n"
            "print(symbols.top_level_blocks('def f():\\n    return 1\\n', 'a.py', plain=True))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.split("\n")[:2] == ["[(1, 2, 'f')]", "[]"]
