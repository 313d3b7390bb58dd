"""``strip_gutter``'s fast path for Claude Code's Read listings (``_arrow_listing``) gives what its
line-by-line regex loop gives, on listings, near-listings and anything else."""

from __future__ import annotations

import pytest

from engram.adapters import base


def _by_loop(text: str):
    saved = base._arrow_listing
    base._arrow_listing = lambda lines: None
    try:
        return base.strip_gutter(text)
    finally:
        base._arrow_listing = saved


def _listing(lines: list[str], first: int = 1, width: int = 6) -> str:
    return "\n".join(f"{first + i:>{width}}→{ln}" for i, ln in enumerate(lines))


@pytest.mark.parametrize("text", [
    "", "\n", "x", "     1→a", "     1→a\n", "     1→a\n     2→b\n", "     1→a\n\n<system-reminder>r</system-reminder>",
    "     1→a\n     2→\n\n", "\n     1→a", "     1→a\n     3→b", "     1→a\n     2→b\nplain", "    01→a",
    "     0→a\n     1→b", "    -1→a", "    +1→a", "  1_0→a", "     ١→a", "\t    1→a", "1→a\n2→b",
    "     1\ta\n     2\tb",
    "     1→a→b\n     2→→", "     1→a\r\n     2→b\r\n", _listing(["x"] * 3, first=999_998), _listing(["y"] * 5, 16_382),
    _listing(["z"] * 20_000) + "\n", _listing(["w"] * 3, first=1_000_000, width=7),
    _listing(["a", "", "b"]) + "\n\n<system-reminder>\nx\n</system-reminder>\n",
    _listing(["q"] * 4) + "\n  \n" + _listing(["r"], 9), _listing(["q"] * 4) + "\n<system-reminder>",
])
def test_fast_path_gives_what_the_loop_gives(text):
    assert base.strip_gutter(text) == _by_loop(text)


def test_a_listing_is_stripped_by_the_fast_path():
    text = _listing(["def f():", "    return 1", ""]) + "\n\n<system-reminder>\nnote\n</system-reminder>\n"
    assert base._arrow_listing(text.split("\n")) is None   # the reminder: not all lines
    assert base._arrow_listing(text.split("\n")[:3]) == (["def f():", "    return 1", ""], 1)
    assert base.strip_gutter(text) == ("def f():\n    return 1\n\n", 1)


def test_fast_path_on_random_listings():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    line = st.lists(st.sampled_from(list("ab →\t1 \ré") + ["<system-reminder>"]), max_size=8).map("".join)

    @settings(max_examples=500, deadline=None, derandomize=True)
    @given(st.lists(line, min_size=0, max_size=12), st.integers(0, 1_000_005), st.sampled_from([5, 6, 7]),
           st.lists(st.tuples(st.integers(0, 11), st.sampled_from(["", "  ", "x", "<system-reminder>", "     7→k"])),
                    max_size=2),
           st.booleans())
    def check(lines, first, width, edits, trailing):
        rows = _listing(lines, first, width).split("\n") if lines else []
        for i, row in edits:
            if i < len(rows):
                rows[i] = row
        text = "\n".join(rows) + ("\n" if trailing else "")
        assert base.strip_gutter(text) == _by_loop(text)
        if rows and base._arrow_listing(rows) is not None:
            fast[0] += 1

    fast = [0]
    check()
    assert fast[0] >= 50  # the fast path was taken, not only the loop
