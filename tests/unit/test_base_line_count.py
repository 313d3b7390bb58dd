"""``base.line_count`` is ``len(base.lines_of(text))`` (the ranges of read and edit events)."""

from __future__ import annotations

from engram.adapters import base


def test_line_count_is_the_number_of_lines_of():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(st.lists(st.sampled_from(["a", "\n", "\r", "\r\n", " ", "é", "\u2028", "\x0b"]), max_size=12).map("".join))
    def check(text):
        assert base.line_count(text) == len(base.lines_of(text))

    check()
    assert base.line_count(None) == 0 == len(base.lines_of(None))
    assert base.line_count("a\nb\n") == 2 and base.line_count("a\n\n") == 2 and base.line_count("a") == 1
