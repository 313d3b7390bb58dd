"""``engram.linediff.SequenceMatcher`` (cydifflib when installed) answers exactly as difflib does:
blame, edit diffs and whole-file writes depend on which lines a diff calls kept."""

from __future__ import annotations

import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from engram import linediff

# a small alphabet: repeated lines (the ambiguous case for a diff) are common
lines = st.lists(st.integers(0, 12), max_size=80)
words = st.lists(st.sampled_from(["", "x = 1", "return x", "}", "def f():", "pass"]), max_size=40)


@settings(max_examples=300)
@given(a=lines, b=lines)
def test_same_matching_blocks_and_opcodes_on_line_hashes(a, b):
    want = difflib.SequenceMatcher(None, a, b, autojunk=False)
    got = linediff.SequenceMatcher(None, a, b, autojunk=False)
    assert [tuple(m) for m in got.get_matching_blocks()] == [tuple(m) for m in want.get_matching_blocks()]
    assert got.get_opcodes() == want.get_opcodes()


@settings(max_examples=150)
@given(a=words, b=words, context=st.integers(0, 3))
def test_same_grouped_opcodes_on_text_lines(a, b, context):
    want = difflib.SequenceMatcher(None, a, b, autojunk=False)
    got = linediff.SequenceMatcher(None, a, b, autojunk=False)
    assert list(got.get_grouped_opcodes(context)) == list(want.get_grouped_opcodes(context))


def test_the_compiled_differ_is_used_when_installed():
    try:
        import cydifflib
    except ImportError:
        assert linediff.SequenceMatcher is difflib.SequenceMatcher
    else:
        assert linediff.SequenceMatcher is cydifflib.SequenceMatcher
