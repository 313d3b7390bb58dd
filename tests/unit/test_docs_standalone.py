"""The repository stands alone: nothing in it points outside it, and the docs' links resolve.

A clone is all a reader has. So no tracked text file may name the sibling folder the project was
started from (its design notes, fixtures and tools: the patterns in ``OUTSIDE``); the design
contract is ``docs/architecture.md``. And every relative link in ``README.md`` and
``docs/*.md`` — Markdown links, and repository paths written as inline code — names a file that
exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().relative_to(ROOT).as_posix()

# References to the folder outside the repository (spelled in pieces so that this file does not
# match them itself). Lookbehinds keep out ordinary paths that merely contain such a directory
# (``tools/<that name>/base_tool.py`` in a harness log) and longer file names with the same ending
# (``UNIFIED-TRACKING-DESIGN`` plus ``.md``, written by a logged session).
SIBLING = "shared"
OUTSIDE = [
    re.compile(r"\.\./" + SIBLING + r"\b"),
    re.compile(r"(?<![\w./-])" + SIBLING + "/"),
    re.compile(r"(?<![\w./-])DESIGN\.md\b"),
    re.compile(r"\bLSP-NOTES\b"),
]

# Real third-party harness logs and what Engram derives from them: their text is whatever the
# logged sessions wrote, not ours (their SOURCES.md files are ours, and are checked).
THIRD_PARTY = ("tests/data/harness/", "tests/golden/")

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
TOP_DIRS = ("engram", "engram_lsp", "bench", "tests", "clients", "scripts", "docs", "examples",
            ".ci")


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def _ours(path: str) -> bool:
    if path == HERE:
        return False
    return not path.startswith(THIRD_PARTY) or path.endswith("SOURCES.md")


def test_no_tracked_file_points_outside_the_repository():
    bad = []
    for rel in _tracked():
        if not _ours(rel):
            continue
        p = ROOT / rel
        try:
            data = p.read_bytes()
        except (FileNotFoundError, IsADirectoryError):  # deleted in the work tree, a submodule
            continue
        if b"\0" in data[:8192]:  # binary
            continue
        text = data.decode("utf-8", "replace")
        for n, line in enumerate(text.splitlines(), 1):
            if any(rx.search(line) for rx in OUTSIDE):
                bad.append(f"{rel}:{n}: {line.strip()[:160]}")
    assert not bad, ("files outside the repository are named (the design contract is "
                     "docs/architecture.md):\n" + "\n".join(bad))


def _without_code_blocks(text: str) -> str:
    """``text`` with fenced code blocks blanked (line numbers kept)."""
    return re.sub(r"^(```|~~~).*?^\1", lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.S | re.M)


def _links(text: str) -> list[str]:
    """Targets of Markdown links and images, reference definitions and HTML src/href."""
    out = re.findall(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    out += re.findall(r"^\s*\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)", text, flags=re.M)
    out += re.findall(r"(?:src|href)=\"([^\"]+)\"", text)
    return out


def _is_relative(target: str) -> bool:
    return not re.match(r"^(?:[a-z][a-z0-9+.-]*:|#|//)", target, flags=re.I)


def test_docs_pages_named_by_the_code_exist():
    """A ``docs/<page>.md`` named anywhere outside ``tests/`` (a docstring, a comment, a client
    source, a doc) exists. (Test fixtures may quote other projects' docs.)"""
    missing = []
    for rel in _tracked():
        if not _ours(rel) or rel.startswith("tests/"):
            continue
        try:
            data = (ROOT / rel).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue
        if b"\0" in data[:8192]:
            continue
        for page in set(re.findall(r"(?<![\w./-])docs/[\w-]+\.md\b", data.decode("utf-8", "replace"))):
            if not (ROOT / page).exists():
                missing.append(f"{rel}: {page}")
    assert not missing, "pages that do not exist are named:\n" + "\n".join(sorted(missing))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc: Path):
    text = _without_code_blocks(doc.read_text(encoding="utf-8"))
    missing = []
    for target in _links(text):
        if not _is_relative(target):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path and not (doc.parent / path).exists():
            missing.append(target)
    assert not missing, f"{doc.relative_to(ROOT)}: links to missing files: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_repository_paths_named_in_docs_exist(doc: Path):
    """Inline code that is a repository file path (``engram/query/walk.py``) names a file that is
    there: a module that moved must not leave its old path behind in the docs. Placeholders
    (``<harness>``, ``*``, ``{a,b}``) and names without an extension (LSP methods such as
    ``engram/explain``) are not paths."""
    text = _without_code_blocks(doc.read_text(encoding="utf-8"))
    missing = []
    for span in re.findall(r"`([^`\n]+)`", text):
        path = span.strip()
        if not re.fullmatch(rf"(?:{'|'.join(map(re.escape, TOP_DIRS))})/[\w./-]*\.\w+", path):
            continue
        if not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"{doc.relative_to(ROOT)}: names paths that do not exist: {missing}"
