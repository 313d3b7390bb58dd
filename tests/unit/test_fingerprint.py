"""engram.fingerprint: tokens, xxh3 hashes, k-grams, winnowing — properties and exact values."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

import engram.fingerprint.winnow as winnow
from engram.fingerprint import (
    FP_VERSION,
    Fingerprints,
    all_kgrams,
    fingerprint,
    fingerprint_batch,
    line_span_prints,
    span_prints,
    text_tokens,
    tokenize,
)
from engram.fingerprint.tokenize import PAD, hash_spans

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# -- strategies ---------------------------------------------------------------------------------

# a small vocabulary so texts repeat tokens and k-grams (ties in winnowing windows happen)
WORDS = ["def", "x", "y", "self", "return", "0", "42", "3", "foo_bar", "é", "naïve", "日本",
         "a_very_long_identifier_that_is_more_than_sixteen_bytes", "b" * 200]
PUNCT = list("()[]{}:;,.=+-*/<>'\"#@!$%^&|\\`~?")
token = st.sampled_from(WORDS + PUNCT)
tokens = st.lists(token, max_size=60)
space = st.sampled_from([" ", "  ", "\t", "\n", "\n    ", " \n\n", "\r\n"])
ks = st.integers(min_value=1, max_value=7)
ws = st.integers(min_value=1, max_value=9)


@st.composite
def spaced(draw, toks):
    """Join tokens with arbitrary non-empty whitespace (so word tokens never merge)."""
    seps = draw(st.lists(space, min_size=len(toks) + 1, max_size=len(toks) + 1))
    return seps[0] + "".join(t + s for t, s in zip(toks, seps[1:]))


# -- references: slow, obviously-correct versions ------------------------------------------------

TOKEN_RE = re.compile(rb"[A-Za-z0-9_\x80-\xff]+|[^\x00-\x20\x7f]")


def ref_tokens(text: str) -> list[tuple[bytes, int, int]]:
    data = text.encode("utf-8", "surrogatepass")
    return [(m.group(), m.start(), data.count(b"\n", 0, m.start()))
            for m in TOKEN_RE.finditer(data)]


def ref_winnow(h: list[int], w: int) -> list[int]:
    """Positions kept: rightmost minimum of every window, each once; one window if fewer than w."""
    if not h:
        return []
    if len(h) < w:
        windows = [(0, len(h))]
    else:
        windows = [(i, i + w) for i in range(len(h) - w + 1)]
    kept: list[int] = []
    for a, z in windows:
        m = min(h[a:z])
        p = max(i for i in range(a, z) if h[i] == m)
        if p not in kept:
            kept.append(p)
    return kept


def positions(text: str, k: int, w: int) -> np.ndarray:
    kg, _ = all_kgrams(text, k)
    return winnow._winnow(kg, np.array([0, len(kg)]), w)


# -- tokens -------------------------------------------------------------------------------------


@given(st.text(max_size=200))
def test_tokens_match_reference_and_xxh3(text):
    toks = tokenize(text)
    ref = ref_tokens(text)
    assert toks.starts.tolist() == [s for _, s, _ in ref]
    assert (toks.ends - toks.starts).tolist() == [len(b) for b, _, _ in ref]
    assert toks.lines.tolist() == [line for _, _, line in ref]
    assert toks.hashes.tolist() == [xxhash.xxh3_64_intdigest(b) for b, _, _ in ref]
    assert toks.hashes.dtype == np.uint64 and toks.lines.dtype == np.int32


def test_vectorised_xxh3_every_length():
    rng = np.random.default_rng(7)
    pieces = [rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
              for n in list(range(1, 300)) * 3 + [1000, 5000]]
    buf = b"".join(pieces) + bytes(PAD)
    ends = np.cumsum([len(p) for p in pieces])
    starts = ends - [len(p) for p in pieces]
    got = hash_spans(buf, starts.astype(np.int64), ends.astype(np.int64))
    assert got.tolist() == [xxhash.xxh3_64_intdigest(p) for p in pieces]


def test_string_contents_are_tokens_and_quotes_punctuation():
    toks = tokenize('s = "hello world"')
    assert toks.hashes.tolist() == [xxhash.xxh3_64_intdigest(t) for t in
                                    (b"s", b"=", b'"', b"hello", b"world", b'"')]


def test_lone_surrogate_and_control_bytes_do_not_crash():
    toks = tokenize("a\ud800b\x00c\x7fd")
    assert len(toks.hashes) == 3  # "a<surrogate>b" is one word; NUL and DEL separate like spaces


# -- winnowing properties -----------------------------------------------------------------------


@given(tokens, ks, ws, st.data())
def test_winnowing_matches_reference(toks, k, w, data):
    text = data.draw(spaced(toks))
    kg, _ = all_kgrams(text, k)
    assert len(kg) == max(len(toks) - k + 1, 0)
    keep = ref_winnow(kg.tolist(), w)
    assert positions(text, k, w).tolist() == keep
    fp = fingerprint(text, k, w)
    assert fp.hashes.tolist() == kg[keep].tolist()
    assert fp.n_tokens == len(toks)


@pytest.mark.parametrize(("text", "k", "w", "kept"), [
    ("x x x x", 1, 2, [1, 2, 3]),          # ties: the rightmost minimum, each position once
    ("x x x x x x", 1, 9, [5]),             # fewer k-grams than w: one window over all of them
    ("a b c d e f g h", 3, 4, None),        # no ties: compared with the reference below
])
def test_winnowing_examples(text, k, w, kept):
    kg, _ = all_kgrams(text, k)
    want = ref_winnow(kg.tolist(), w) if kept is None else kept
    assert positions(text, k, w).tolist() == want


@given(tokens, ks, ws, st.data())
def test_fewer_than_k_tokens_no_fingerprint(toks, k, w, data):
    text = data.draw(spaced(toks[: k - 1]))
    fp = fingerprint(text, k, w)
    assert len(fp.hashes) == 0 and len(fp.lines) == 0


@given(tokens, ks, ws, st.data())
def test_any_kgram_gives_at_least_one_fingerprint(toks, k, w, data):
    text = data.draw(spaced(toks))
    assert (len(fingerprint(text, k, w).hashes) > 0) == (len(toks) >= k)


@given(tokens, tokens, tokens, ks, ws, st.data())
def test_shared_run_shares_a_fingerprint(a, b, shared, k, w, data):
    shared = (shared * (k + w))[: k + w - 1] if shared else ["z"] * (k + w - 1)
    left, right = data.draw(st.integers(0, len(a))), data.draw(st.integers(0, len(b)))
    t1 = data.draw(spaced(a[:left] + shared + a[left:]))
    t2 = data.draw(spaced(b[:right] + shared + b[right:]))
    common = set(fingerprint(t1, k, w).hashes.tolist()) & set(fingerprint(t2, k, w).hashes.tolist())
    assert common


@given(tokens, ks, ws, st.data())
def test_gap_between_kept_positions_at_most_w(toks, k, w, data):
    pos = positions(data.draw(spaced(toks)), k, w)
    n_kg = max(len(toks) - k + 1, 0)
    if n_kg:
        assert pos[0] < w and pos[-1] > n_kg - 1 - w
        assert (np.diff(pos) <= w).all() and (np.diff(pos) > 0).all()


@given(tokens, ks, ws, st.data())
def test_whitespace_and_indentation_do_not_change_hashes(toks, k, w, data):
    t1, t2 = data.draw(spaced(toks)), data.draw(spaced(toks))
    assert fingerprint(t1, k, w).hashes.tolist() == fingerprint(t2, k, w).hashes.tolist()
    assert all_kgrams(t1, k)[0].tolist() == all_kgrams(t2, k)[0].tolist()


@given(tokens, ks, ws, st.data())
def test_lines_are_those_of_each_kgram_first_token(toks, k, w, data):
    text = data.draw(spaced(toks))
    ref_lines = [line for _, _, line in ref_tokens(text)]
    kg, lines = all_kgrams(text, k)
    assert lines.tolist() == ref_lines[: len(kg)]
    fp = fingerprint(text, k, w)
    assert fp.lines.tolist() == lines[positions(text, k, w)].tolist()
    assert fp.lines.dtype == np.int32


# -- batches ------------------------------------------------------------------------------------

texts_st = st.lists(st.one_of(st.text(max_size=80), tokens.flatmap(spaced)), max_size=12)


@pytest.mark.parametrize("sub_batch", [1, 50, 1 << 18])
@settings(max_examples=60)
@given(texts=texts_st, k=ks, w=ws)
def test_batch_equals_individual(texts, k, w, sub_batch):
    old = winnow.SUB_BATCH
    winnow.SUB_BATCH = sub_batch
    try:
        batch = fingerprint_batch(texts, k, w)
    finally:
        winnow.SUB_BATCH = old
    assert len(batch) == len(texts)
    for text, got in zip(texts, batch):
        one = fingerprint(text, k, w)
        assert got.hashes.tolist() == one.hashes.tolist()
        assert got.lines.tolist() == one.lines.tolist()
        assert got.n_tokens == one.n_tokens


@settings(max_examples=150)
@given(toks=tokens, k=ks, w=ws, data=st.data())
def test_line_span_prints_equal_span_prints_of_the_lines(toks, k, w, data):
    """A span cut from a file's tokens has the k-grams, lines and fingerprints of the span's own
    text: explain fingerprints spans of a file that way."""
    text = data.draw(spaced(toks)) + data.draw(st.sampled_from(["", "\n", "x"]))
    lines = text.split("\n")
    first = data.draw(st.integers(0, len(lines) - 1))
    last = data.draw(st.integers(first, len(lines) - 1))
    span = "\n".join(lines[first:last + 1]) + "\n"
    want = span_prints(span, k, w)
    got = line_span_prints(text_tokens(text), first, last, k, w)
    for a, b in zip(want, got):
        assert a.tolist() == b.tolist()
        assert a.dtype == b.dtype


def test_batch_never_joins_tokens_or_kgrams_across_texts():
    a, b = "alpha beta", "gamma delta"
    got = fingerprint_batch([a, b], k=3, w=1)
    assert [len(f.hashes) for f in got] == [0, 0]
    assert [f.n_tokens for f in got] == [2, 2]
    assert fingerprint_batch([], 3, 4) == []


def test_result_types_and_immutability():
    fp = fingerprint("for i in range(10):\n    print(i, i * 2)\n")
    assert isinstance(fp, Fingerprints)
    assert fp.hashes.dtype == np.int64 and fp.lines.dtype == np.int32
    assert isinstance(fp.n_tokens, int)
    with pytest.raises(ValueError):
        fp.hashes[0] = 1
    with pytest.raises(ValueError):
        fingerprint("x", k=0)


# -- stability ----------------------------------------------------------------------------------

STABLE_TEXT = 'def greet(name):\n    """Say hi."""\n    return f"hello, {name}!" + str(42)\n'
# checked-in values: if these change, every index must be rebuilt — bump FP_VERSION and update
STABLE = {
    "fp_version": 1,
    "hashes": [-7211265951691836521, -6654907083301002329, -5532642640334047599,
               -3453345260350212971, -1920569099293611333, -6631925137548665846],
    "lines": [0, 1, 1, 1, 1, 2],
    "token0": 11233357625814872456,  # xxh3_64(b"def")
}
STABLE_CODE = """
import json, sys
from engram.fingerprint import FP_VERSION, fingerprint, tokenize
fp = fingerprint(sys.argv[1], 5, 8)
print(json.dumps({"fp_version": FP_VERSION, "hashes": fp.hashes.tolist(),
                  "lines": fp.lines.tolist(), "token0": int(tokenize(sys.argv[1]).hashes[0])}))
"""


def test_exact_values_are_stable():
    fp = fingerprint(STABLE_TEXT, 5, 8)
    now = {"fp_version": FP_VERSION, "hashes": fp.hashes.tolist(), "lines": fp.lines.tolist(),
           "token0": int(tokenize(STABLE_TEXT).hashes[0])}
    assert now == STABLE
    assert STABLE["token0"] == xxhash.xxh3_64_intdigest(b"def")


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_same_values_in_another_process_and_hash_seed(seed):
    env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", STABLE_CODE, STABLE_TEXT], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == STABLE
