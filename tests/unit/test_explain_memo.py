"""Explain's per-file memos and its at-once line hashes give the values of the plain computations."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from engram import fingerprint
from engram.index import store
from engram.query import explain

ROOT = Path(__file__).resolve().parents[2]


def _texts() -> list[str]:
    """This repository's own Python files, and texts made to trip the byte-level strip: Unicode
    spaces at either end of a line, C0 separators, lone surrogates, NULs, long lines."""
    out = [p.read_text(errors="surrogateescape") for p in sorted((ROOT / "engram").rglob("*.py"))]
    out += ["", "\n", "abc", "  abc  ", "\xa0abc\xa0", "\u3000x y z\u3000", "abc\x1c", "\x1cabc",
            "é abc", "abc é", "abc\u2028", "\udc80abc", "abc\udc80", "\tfoo = bar\r", "ab",
            "a\nbcd\n\n  efg  \n", "x" * 300, " " + "y" * 129 + " ", "\x0b\x0cabc\x85", "\x85abc",
            "a\x00bc", "\x00abc\x00", "abc\x7f", "\x7fabc", "@[`{ab1", "Z9_z"]
    rng = random.Random(7)
    alpha = "ab c\t\n\xa0é\u3000\x1c_1()\r\x0b\udc80\x00@[`{Z9\x7f\x1f\x1b"
    out += ["".join(rng.choice(alpha) for _ in range(rng.randint(0, 80))) for _ in range(3000)]
    return out


def test_line_hashes_at_once_equal_store_line_hashes():
    for text in _texts():
        want = store.line_hashes(text)
        got = store._line_hashes_at_once(text)
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), repr(text[:80])


def test_file_line_hashes_memoised_read_only_and_equal():
    text = "\n".join(f"    value_{i} = compute({i}, 'x')" for i in range(store.AT_ONCE_LINES + 5))
    small = "def f(x):\n    return x + 1\n"
    for t in (text, small):
        a = explain._file_line_hashes(t)
        assert a.tolist() == store.line_hashes(t).tolist()
        assert not a.flags.writeable
        assert explain._file_line_hashes(t) is a  # memoised


def test_span_line_hashes_same_with_and_without_the_file_memo():
    lines = [f"def f{i}(a, b):" if i % 3 == 0 else ("" if i % 3 == 1 else f"    return a * {i} + b")
             for i in range(200)]
    text = "\n".join(lines) + "\n"
    for lo, hi in ((1, 1), (5, 40), (150, 200)):
        span = "\n".join(lines[lo - 1:hi]) + "\n"
        want = store.line_hashes(span).tolist()
        explain._LINE_HASHES.items.pop(text, None)
        assert explain._span_line_hashes(span, text, (lo, hi)).tolist() == want  # the span alone
        explain._file_line_hashes(text)
        assert explain._span_line_hashes(span, text, (lo, hi)).tolist() == want  # cut from the file


def test_per_file_memo_bounded_by_count_and_bytes():
    memo = explain._PerFile(size=3, budget=100)
    for i in range(5):
        memo.put(f"t{i}", i, 10)
    assert list(memo.items) == ["t2", "t3", "t4"] and memo.held == 30
    assert memo.peek("t2") == 2 and list(memo.items) == ["t3", "t4", "t2"]  # most recent last
    memo.put("big", "B", 90)
    assert list(memo.items) == ["t2", "big"] and memo.held == 100
    memo.put("huge", "H", 500)  # over the budget alone: kept, the others go
    assert list(memo.items) == ["huge"] and memo.held == 500
    memo.put("huge", "H2", 5)
    assert memo.peek("huge") == "H2" and memo.held == 5
    assert memo.peek("missing") is None


def test_span_prints_from_memoised_tokens_equal_the_span_alone():
    files = [p.read_text() for p in sorted((ROOT / "engram" / "query").glob("*.py"))]
    rng = random.Random(3)
    for _ in range(3):  # every file asked about in turn: the memo keeps them all
        for text in files:
            lines = text.split("\n")
            a = rng.randrange(len(lines) - 1)
            b = min(len(lines) - 2, a + rng.randint(0, 60))
            want = fingerprint.span_prints("\n".join(lines[a:b + 1]) + "\n")
            got = fingerprint.line_span_prints(explain._file_tokens(text), a, b)
            for x, y in zip(got, want):
                assert x.dtype == y.dtype and np.array_equal(x, y)
    assert all(explain._TOKENS.peek(t) is not None for t in files)


def test_document_lines_memo_holds_an_agents_files():
    """``engine._lines`` keeps the lines of the last 256 documents (an agent's few dozen files in any
    order, not eight): the same tuple for the same text, a text's own lines for a changed one."""
    from engram import engine

    texts = [f"def f{i}():\n    return {i}\n" * (i + 1) for i in range(40)]
    first = [engine._lines(t) for t in texts]
    for t, got in zip(texts, first):
        assert engine._lines(t) is got
        assert got == tuple(t.split("\n"))
    changed = texts[0] + "x = 1\n"
    assert engine._lines(changed) == tuple(changed.split("\n"))


def test_a_file_not_tokenised_ahead_is_not_tokenised_for_one_span():
    """``span_fingerprints`` of a span of a file whose tokens nobody holds tokenises the span
    alone (the file stays untokenised); once the file's tokens are held, spans are cut from them.
    Both give the same values."""
    text = (ROOT / "engram" / "query" / "explain.py").read_text()
    lines = text.split("\n")
    explain._TOKENS.items.pop(text, None)
    got = []
    for a, b in ((10, 14), (200, 260)):
        span = "\n".join(lines[a:b + 1]) + "\n"
        with explain._span_prints_lock:
            explain._SPAN_PRINTS.pop(span, None)
        cold = explain.span_fingerprints(span, (text, a, b))
        assert explain._TOKENS.peek(text) is None
        with explain._span_prints_lock:
            explain._SPAN_PRINTS.pop(span, None)
        explain._file_tokens(text)
        warm = explain.span_fingerprints(span, (text, a, b))
        explain._TOKENS.items.pop(text, None)
        for x, y in zip(cold, warm):
            assert x.dtype == y.dtype and np.array_equal(x, y)
        got.append(len(cold[0]))
    assert all(got)
