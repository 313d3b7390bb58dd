"""engram.query.symbols: enclosing blocks and top-level blocks, tree-sitter and fallback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engram.query import symbols

PY = '''import os


@decorator
def f(x):
    y = 1

    return y


class C:
    """Doc."""

    def m(self):
        return 2

    async def n(self):
        return 3


if __name__ == "__main__":
    f(1)
'''

TS = """import x from "y";

export function a(b: number): number {
  return b;
}

const f = (x: number) => {
  return x + 1;
};

class K {
  m(): number {
    return 1;
  }
}

interface I {
  a: string;
}
"""

GO = """package main

import "fmt"

type Point struct {
	X, Y int
}

func (p Point) String() string {
	return fmt.Sprintf("%d,%d", p.X, p.Y)
}

func main() {
	fmt.Println(Point{1, 2})
}
"""

RUST = """use std::fmt;

struct P { x: i32 }

impl fmt::Display for P {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.x)
    }
}

fn main() {
    println!("{}", P { x: 1 });
}
"""

MD = """# Title

Intro paragraph.

## First

Text one.

## Second

Text two,
more.
"""


@pytest.mark.parametrize(
    "line, block",
    [
        (4, (4, 8)),  # decorator belongs to the function
        (5, (4, 8)),
        (7, (4, 8)),  # blank line inside the function
        (8, (4, 8)),
        (12, (11, 18)),  # class docstring → class
        (15, (14, 15)),  # method body → method
        (18, (17, 18)),  # async method
        (22, (21, 22)),  # module-level statement → its chunk
        (1, (1, 1)),
    ],
)
def test_python_enclosing_block(line, block):
    assert symbols.enclosing_block(PY, "m.py", line) == block


def test_python_top_level_blocks():
    assert symbols.top_level_blocks(PY, "pkg/m.py") == [(4, 8, "f"), (11, 18, "C")]


def test_language_name_instead_of_path():
    assert symbols.enclosing_block(PY, "python", 15) == (14, 15)
    assert symbols.language_for("python") == "python"
    assert symbols.language_for("src/a.tsx") == "tsx"
    assert symbols.language_for("Makefile") == "make"
    assert symbols.language_for("notes.unknownext") is None


def test_typescript():
    assert symbols.top_level_blocks(TS, "a.ts") == [
        (3, 5, "a"),
        (7, 9, "f"),
        (11, 15, "K"),
        (17, 19, "I"),
    ]
    assert symbols.enclosing_block(TS, "a.ts", 8) == (7, 9)
    assert symbols.enclosing_block(TS, "a.ts", 13) == (12, 14)  # method inside the class
    assert symbols.enclosing_block(TS, "a.ts", 4) == (3, 5)  # export wrapper included


def test_go_and_rust():
    assert [b[2] for b in symbols.top_level_blocks(GO, "main.go")] == ["Point", "String", "main"]
    assert symbols.enclosing_block(GO, "main.go", 10) == (9, 11)
    assert symbols.top_level_blocks(RUST, "lib.rs") == [(3, 3, "P"), (5, 9, "P"), (11, 13, "main")]
    assert symbols.enclosing_block(RUST, "lib.rs", 7) == (6, 8)  # fn inside impl
    assert symbols.enclosing_block(RUST, "lib.rs", 5) == (5, 9)  # the impl


def test_markdown_sections():
    assert symbols.top_level_blocks(MD, "README.md") == [(5, 7, "First"), (9, 12, "Second")]
    assert symbols.enclosing_block(MD, "README.md", 11) == (9, 12)


def test_fallback_chunks_for_unknown_languages():
    text = "alpha one\nalpha two\n\nbeta\n  indented body\n\n  more body\nend\n\ngamma\n"
    assert symbols.top_level_blocks(text, "x.unknownext") == [
        (1, 2, "alpha one"),
        (4, 8, "beta"),
        (10, 10, "gamma"),
    ]
    assert symbols.enclosing_block(text, "x.unknownext", 7) == (4, 8)
    assert symbols.enclosing_block(text, None, 2) == (1, 2)
    assert symbols.enclosing_block(text, "x.unknownext", 3) == (3, 3)  # a blank line stays itself


def test_fallback_names_definitions():
    text = "def foo(a):\n    return a\n\nclass Bar:\n    pass\n"
    assert [b[2] for b in symbols.top_level_blocks(text, "x.unknownext")] == ["foo", "Bar"]


def test_edges():
    assert symbols.enclosing_block("", "a.py", 1) == (1, 1)
    assert symbols.top_level_blocks("", "a.py") == []
    assert symbols.enclosing_block(PY, "a.py", 10_000) == (21, 22)  # clamped to the last line
    assert symbols.enclosing_block(PY, "a.py", 0) == (1, 1)
    broken = "def broken(:\n    return (\n\ndef ok():\n    return 1\n"
    assert symbols.enclosing_block(broken, "a.py", 5) == (4, 5)


def test_unicode_text():
    text = 'def grüße():\n    return "héllo — ✓"\n\n\ndef zwei():\n    return 2\n'
    assert symbols.enclosing_block(text, "u.py", 2) == (1, 2)
    assert symbols.top_level_blocks(text, "u.py") == [(1, 2, "grüße"), (5, 6, "zwei")]


def test_fast_on_a_5000_line_file():
    text = "".join(f"def f{i}(a):\n    b = a + {i}\n    return b\n\n" for i in range(1250))
    symbols.top_level_blocks(text, "big.py")  # warm the parser
    t0 = time.perf_counter()
    blocks = symbols.top_level_blocks(text + "\n", "big.py")
    parse_ms = (time.perf_counter() - t0) * 1000
    assert len(blocks) == 1250
    t0 = time.perf_counter()
    for line in range(1, 5000, 50):
        symbols.enclosing_block(text + "\n", "big.py", line)  # cached tree
    per_hover_ms = (time.perf_counter() - t0) * 1000 / 100
    assert parse_ms < 500 and per_hover_ms < 5, (parse_ms, per_hover_ms)


def test_grammars_ship_with_the_package():
    """tree-sitter-language-pack 1.x downloads grammars at run time (impossible offline): the
    project pins a release that bundles them (0.13.0)."""
    for lang in ("python", "javascript", "typescript", "go", "rust", "markdown"):
        assert symbols._parser(lang) is not None, (
            f"no bundled tree-sitter grammar for {lang}: pin tree-sitter-language-pack==0.13.0"
        )


def test_incremental_reparse_matches_a_fresh_parse():
    """After an edit the previous tree of the same document is reused; results must not change."""
    import random

    rng = random.Random(5)
    base = "".join(f"def f{i}(a):\n    b = a + {i}\n    return b\n\n" for i in range(200))
    symbols.top_level_blocks(base, "inc/doc.py")
    cur = base
    for i in range(40):
        lines = cur.split("\n")
        j = rng.randrange(len(lines))
        op = rng.choice(["insert", "delete", "modify", "replace"])
        if op == "insert":
            lines.insert(j, f"    x_{i} = 'é{i}'")
        elif op == "delete":
            del lines[j]
        elif op == "modify":
            lines[j] += f"  # ✓ {i}"
        else:
            lines[j : j + 3] = [f"class K{i}:", "    pass"]
        cur = "\n".join(lines)
        incremental = symbols._top_level_tree(cur, cur.splitlines(), "python", "inc/doc.py")
        fresh_tree = symbols._parser("python").parse(cur.encode())
        assert str(symbols._tree(cur, "python", "inc/doc.py").root_node) == str(
            fresh_tree.root_node
        )
        fresh = symbols._top_level_tree(cur, cur.splitlines(), "python", f"inc/fresh{i}.py")
        assert incremental == fresh, (i, op)
        assert symbols.top_level_blocks(cur, "inc/doc.py") == fresh, (i, op)  # the scan agrees


# --- Python top-level blocks without a parse (the code lens) --------------------------------------


def _by_tree(text: str) -> list[tuple[int, int, str]]:
    """What ``top_level_blocks`` answered before the scan: from the tree-sitter parse."""
    symbols._trees.clear()
    symbols._recent.clear()
    return symbols._top_level_tree(text, text.splitlines(), "python", "x.py")


SCAN_CASES = {
    "trailing comments": (
        "def f():\n    x = 1\n    # kept\n# not kept\n\ndef g():\n    pass\n"
        "        # deeper: kept\n  # shallower than the body: not\nx = 1\n"
    ),
    "a column-0 comment inside": "def f():\n    x = 1\n# inside\n    y = 2\nz = 3\n",
    "comment runs": (
        "class C:\n    def m(self):\n        pass\n    # class level\n        # deeper\n"
        "# out\n    # indented after an outdented one\nq = 1\n"
    ),
    "decorators": (
        "@dec\n# between\n@dec2(\n  a)\nclass C:\n    def m(self):\n        pass\n\n\n\n"
        "async def h():\n    return 1\nif True:\n    def inner(): pass\n"
    ),
    "brackets at column 0": (
        "def f():\n    x = [\n1,\n    ]\n    return x\ndef g(): return (\n1)\n"
    ),
    "strings at column 0": (
        'def f():\n    s = """\ndef fake():\n    pass\n"""\n    return s\n'
        "x = '''\nclass Nope:\n'''\n"
        r"""def g():
    return "#" + '\'' + r"\"" + 'a\
b'
"""
    ),
    "continuations": "def f():\n    return 1 + \\\n2\ndef g(): pass",
    "one-liners and a docstring body": (
        "def f(): pass\n    # after a one-liner\nclass K: x = 1\n"
        'def d():\n    """Doc."""\n    # after the docstring\n\n\nX = 1\n'
    ),
    "tabs and CRLF": (
        "def f():\r\n\tx = 1\r\n\t# tab comment\r\n        # eight spaces\r\nz = 2\r\n"
    ),
    "comments at the end": "def f():\n    return 1\n    # end\n\n# tail\n",
    "no newline at the end": "class A:\n    pass\n\ndef b():\n    return 2",
    "module docstring and statements": (
        '"""Mod."""\nimport os\n\nX = {\n"a": 1,\n}\n\ndef after():\n    return X\n'
    ),
    "signature over lines": (
        "def f(\n    a,\n    b=(1,\n2),\n):\n    return a\n    # end\nY = 1\n"
    ),
    "nested functions": (
        "def outer():\n    def inner():\n        return 1\n        # inner end\n"
        "    # outer end\n    return inner\n# no\n"
    ),
    "no definitions": "x = 1\n\n\ny = 2\n",
    "f-strings and bytes": (
        "def f(x):\n    return f\"{x!r:>{10}}\" + rb\"\\d\" + b'#'\nz = 1\n"
    ),
}


@pytest.mark.parametrize("name", list(SCAN_CASES))
def test_python_scan_matches_the_parse(name):
    text = SCAN_CASES[name]
    assert symbols._python_top_level(text) is not None, name
    assert symbols.top_level_blocks(text, "x.py") == _by_tree(text), name


@pytest.mark.parametrize(
    "text",
    [
        'def f():\n    return "open\n',  # an unterminated string
        "def f():\n    return '''open\n",  # an unterminated triple-quoted string
        "def f():\n    return (1\n",  # unbalanced brackets
        "def f():\n    return 1)\n",
        "@decorator\nx = 1\n",  # a decorator on no definition
        "def f():\n    pass\n\x0c\ndef g():\n    pass\n",  # a form feed
        "def f():\r    pass\r",  # bare \r line breaks
    ],
)
def test_python_scan_gives_up_and_the_parse_answers(text):
    assert symbols._python_top_level(text) is None
    assert symbols.top_level_blocks(text, "x.py") == _by_tree(text)


def test_python_scan_matches_the_parse_on_real_files():
    """The project's own code and a slice of the standard library: the scan gives the parse's
    blocks for every file the grammar parses without an error (the wider check behind this, on
    ~40,000 files of site-packages, agreed on every one)."""
    import os

    root = Path(__file__).resolve().parents[2]
    files = sorted(root.glob("engram/**/*.py")) + sorted(root.glob("engram_lsp/**/*.py"))
    files += sorted(root.glob("tests/**/*.py")) + sorted(root.glob("bench/*.py"))
    files += sorted(Path(os.__file__).parent.glob("*.py"))[:150]
    compared = 0
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text or symbols._tree(text, "python").root_node.has_error:
            continue
        assert symbols.top_level_blocks(text, f) == _by_tree(text), f
        compared += symbols._python_top_level(text) is not None
    assert compared > 200


def test_cancelled_background_parse_caches_nothing():
    text = "".join(f"def f{i}(a):\n    return a + {i}\n\n" for i in range(2000))
    symbols._trees.clear()
    symbols._recent.clear()
    assert symbols.parse(text, "cancel.py", cancel=lambda: True) is False
    assert not symbols._trees
    assert symbols.parse(text, "cancel.py", cancel=lambda: False) is True
    assert len(symbols._trees) == 1
    assert symbols.enclosing_block(text, "cancel.py", 4) == (4, 5)
    assert symbols.parse("x = 1\n", "notes.unknownext") is True  # no grammar: nothing to do
