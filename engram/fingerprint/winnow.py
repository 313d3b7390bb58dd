"""k-gram hashes and winnowing (Schleimer, Wilkerson & Aiken, SIGMOD 2003), vectorised.

A k-gram is ``k`` consecutive tokens of one text; its hash folds the k token hashes
polynomially (``acc = acc * M + h``, mod 2**64) and finishes with the XXH3 avalanche, then is
reinterpreted as int64 (SQLite integers are signed). Windowing keeps, in every window of ``w``
consecutive k-gram hashes, the minimum (compared as int64), the rightmost one on ties, and each
position once. Because the selected position of a sliding window never moves left, "once" is a
single comparison with the previous window's choice. Window minima come from a log2(w)-step
doubling over (value, position) pairs, so the cost is O(n log w) numpy passes, not O(n w).

Guarantees (checked by the property tests): a text with fewer than ``k`` tokens has no
fingerprint; a text with at least one k-gram but fewer than ``w`` treats all its k-grams as one
window and keeps its (rightmost) minimum; otherwise any run of ``k + w - 1`` tokens shared by two
texts yields at least one shared fingerprint, and consecutive kept positions are at most ``w``
k-grams apart. Ties are broken "rightmost" as in the paper's basic winnowing; its "robust"
variant (prefer the previous window's choice among equal minima) is not used: it only differs in
runs of identical k-grams, where this keeps every position of the run (same hash, so the set of
distinct hashes is identical).

Each fingerprint carries the 0-based line of its k-gram's first token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from engram.env import env_int
from engram.fingerprint.tokenize import PAD, avalanche, encode, hash_spans, line_of, spans

# also DEFAULT_K and DEFAULT_W: module attributes resolved on first use (``__getattr__``)
__all__ = ["FP_VERSION", "Fingerprints", "fingerprint", "span_prints", "fingerprint_batch",
           "all_kgrams", "text_tokens", "line_span_prints", "default_params"]

FP_VERSION = 1
"""Bump whenever any output of this package changes (tokens, hashes, selection, lines)."""
BENCH_K = 5
"""Tokens per k-gram, chosen by the accuracy benchmark (docs/benchmarks.md)."""
BENCH_W = 8
"""k-grams per winnowing window, chosen by the accuracy benchmark (see BENCH_K)."""

# ``DEFAULT_K`` / ``DEFAULT_W`` (module attributes, see ``__getattr__``) are BENCH_K / BENCH_W
# unless ENGRAM_CALIBRATE_K / ENGRAM_CALIBRATE_W say otherwise. Those variables exist only for
# calibration runs (bench/calibrate.py, one process per (k, w)); the index records k and w and
# refuses to mix them. They are read on first use, not at import (a bad value falls back to the
# benchmark's choice with a warning), and then held for the life of the process: the hot path
# pays one global lookup, and one process never fingerprints with two (k, w).
_params: tuple[int, int] | None = None


def default_params() -> tuple[int, int]:
    """``(DEFAULT_K, DEFAULT_W)``: resolved from the environment on the first call, then held."""
    global _params
    p = _params
    if p is None:
        p = _params = (_positive("ENGRAM_CALIBRATE_K", BENCH_K),
                       _positive("ENGRAM_CALIBRATE_W", BENCH_W))
    return p


def _positive(name: str, default: int) -> int:
    v = env_int(name, default)
    if v < 1:
        logging.getLogger(__name__).warning("%s=%d is not >= 1; using the default %d",
                                            name, v, default)
        return default
    return v


def _kw(k: int | None, w: int | None) -> tuple[int, int]:
    """``(k, w)`` with ``None`` replaced by ``DEFAULT_K`` / ``DEFAULT_W``."""
    if k is None or w is None:
        dk, dw = _params or default_params()
        return (dk if k is None else k), (dw if w is None else w)
    return k, w


def __getattr__(name: str) -> int:
    if name == "DEFAULT_K":
        return default_params()[0]
    if name == "DEFAULT_W":
        return default_params()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SUB_BATCH = 1 << 18
"""Characters per internal sub-batch of ``fingerprint_batch`` (a speed knob; output unaffected)."""

_M = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier folding token hashes into a k-gram hash


@dataclass(frozen=True, eq=False)
class Fingerprints:
    """The winnowed fingerprints of one text, in text order (arrays are read-only)."""

    hashes: np.ndarray
    """int64[n]: k-gram hashes kept by winnowing."""
    lines: np.ndarray
    """int32[n]: 0-based line of the first token of each kept k-gram."""
    n_tokens: int
    """Number of tokens in the text."""
    kgrams: np.ndarray | None = None
    """int64[m]: every k-gram hash of the text, un-winnowed (``all_kgrams``), in text order — only
    when ``fingerprint_batch`` was asked for it (``keep_kgrams``), else ``None``."""


def fingerprint(text: str, k: int | None = None, w: int | None = None) -> Fingerprints:
    """Winnowed fingerprints of one text; empty when it has fewer than ``k`` tokens (``k`` and
    ``w`` default to ``DEFAULT_K`` / ``DEFAULT_W``, as in every function here)."""
    return fingerprint_batch([text], k, w)[0]


def all_kgrams(text: str, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every k-gram hash of ``text`` (int64) and its first token's line (int32), un-winnowed."""
    k, _ = _kw(k, 1)
    _check(k, 1)
    buf, _ = encode([text])
    n = len(buf) - PAD
    starts, ends = spans(buf, n)
    kg = _kgram_hashes(hash_spans(buf, starts, ends), k)
    return kg, line_of(buf, n, starts[: len(kg)])


def span_prints(text: str, k: int | None = None, w: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One tokenising pass for a query span: ``(every k-gram hash, its first token's line,
    the winnowed hashes)`` — the same values as ``all_kgrams(text, k)`` and
    ``fingerprint(text, k, w).hashes``."""
    k, w = _kw(k, w)
    _check(k, w)
    kg, lines = all_kgrams(text, k)
    sel = _winnow(kg, np.array([0, len(kg)], dtype=np.int64), w) if len(kg) else np.zeros(0, np.int64)
    return kg, lines, kg[sel]


def text_tokens(text: str) -> tuple[np.ndarray, np.ndarray]:
    """``(hash of every token of text, its 0-based line)`` (uint64, int32), in text order: what
    ``line_span_prints`` cuts a span's k-grams from. No token crosses a line (``\\n`` is
    whitespace), so the tokens of lines ``a..b`` of a text are exactly the tokens of the text made
    of those lines."""
    buf, _ = encode([text])
    n = len(buf) - PAD
    starts, ends = spans(buf, n)
    return hash_spans(buf, starts, ends), line_of(buf, n, starts)


def line_span_prints(tokens: tuple[np.ndarray, np.ndarray], first: int, last: int,
                     k: int | None = None, w: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``span_prints`` of lines ``first..last`` (0-based, inclusive) of the text whose
    ``text_tokens`` are given: the same values as ``span_prints`` of those lines joined (lines
    relative to ``first``), without tokenising them again. An editor explains many spans of one
    file; tokenising the file once is most of the cost of each."""
    k, w = _kw(k, w)
    _check(k, w)
    hashes, lines = tokens
    a, b = np.searchsorted(lines, [first, last + 1])
    kg = _kgram_hashes(hashes[a:b], k)
    kl = lines[a:a + len(kg)] - np.int32(first)
    sel = _winnow(kg, np.array([0, len(kg)], dtype=np.int64), w) if len(kg) else np.zeros(0, np.int64)
    return kg, kl, kg[sel]


def fingerprint_batch(
    texts: list[str], k: int | None = None, w: int | None = None, *,
    keep_kgrams: list[bool] | None = None,
) -> list[Fingerprints]:
    """``[fingerprint(t, k, w) for t in texts]``, computed in one vectorised pass.

    The texts are joined with ``\\n`` and tokenised together; k-grams and windows never cross
    from one text into the next. Large batches are processed in sub-batches of about
    ``SUB_BATCH`` characters (whole texts), which keeps the working set in cache; the result is
    the same for any split. ``keep_kgrams[i]`` true also returns text ``i``'s un-winnowed
    k-gram hashes (``Fingerprints.kgrams``, equal to ``all_kgrams(texts[i], k)[0]``), computed in
    the same pass.
    """
    k, w = _kw(k, w)
    _check(k, w)
    out: list[Fingerprints] = []
    i = 0
    while i < len(texts):  # sub-batches of about SUB_BATCH characters: they stay in cache
        j, size = i, 0
        while j < len(texts) and (size < SUB_BATCH or j == i):
            size += len(texts[j])
            j += 1
        out.extend(_batch(texts[i:j], k, w, keep_kgrams[i:j] if keep_kgrams is not None else None))
        i = j
    return out


def _batch(texts: list[str], k: int, w: int, keep_kgrams: list[bool] | None = None
           ) -> list[Fingerprints]:
    buf, nbytes = encode(texts)
    n = len(buf) - PAD
    starts, ends = spans(buf, n)
    hashes = hash_spans(buf, starts, ends)

    # byte offset where each text starts (texts are separated by one "\n" byte)
    text_start = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(nbytes + 1, out=text_start[1:])
    tok_off = np.searchsorted(starts, text_start[:-1])  # first token of each text
    n_tok = np.diff(np.append(tok_off, len(starts)))

    # k-grams over the concatenation; keep those that stay inside one text
    kg = _kgram_hashes(hashes, k)
    n_kg = np.maximum(n_tok - (k - 1), 0)
    keep = np.ones(len(kg), dtype=bool)
    bad = (tok_off[1:, None] - np.arange(1, k)[None, :]).ravel()  # k-grams ending past a text end
    keep[bad[(bad >= 0) & (bad < len(kg))]] = False
    kg_pos = np.flatnonzero(keep) if not keep.all() else np.arange(len(kg))  # -> token index
    kg = kg[kg_pos]
    kg_off = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(n_kg, out=kg_off[1:])

    sel = _winnow(kg, kg_off, w)
    fp_hash = kg[sel]
    fp_line = line_of(buf, n, starts[kg_pos[sel]])
    fp_hash.flags.writeable = False
    # lines relative to each text's first line
    line0 = line_of(buf, n, text_start[:-1])
    cut = np.searchsorted(sel, kg_off)
    out = []
    for t in range(len(texts)):
        a, z = cut[t], cut[t + 1]
        lines = fp_line[a:z] - line0[t]
        lines.flags.writeable = False
        kgrams = None
        if keep_kgrams is not None and keep_kgrams[t]:
            kgrams = kg[kg_off[t]:kg_off[t + 1]].copy()
            kgrams.flags.writeable = False
        out.append(Fingerprints(hashes=fp_hash[a:z], lines=lines, n_tokens=int(n_tok[t]),
                                kgrams=kgrams))
    return out


def _check(k: int, w: int) -> None:
    if k < 1 or w < 1:
        raise ValueError(f"k and w must be >= 1 (got k={k}, w={w})")


def _kgram_hashes(h: np.ndarray, k: int) -> np.ndarray:
    """int64 hash of every k consecutive token hashes (``len(h) - k + 1`` of them, or none)."""
    m = len(h) - k + 1
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    acc = h[:m].copy()
    for j in range(1, k):
        acc *= _M
        acc += h[j:j + m]
    return avalanche(acc).view(np.int64)


def _winnow(v: np.ndarray, off: np.ndarray, w: int) -> np.ndarray:
    """Indices into ``v`` kept by winnowing each segment ``v[off[t]:off[t+1]]`` separately."""
    seg_len = np.diff(off)
    parts = []
    m = len(v) - w + 1  # windows v[i:i+w] over the concatenation
    if m > 0 and (seg_len >= w).any():
        rel = _sliding_argmin(v, w)  # argmin of window i is i + rel[i]
        # the same position as the previous window: rel drops by exactly one
        keep = np.ones(m, dtype=bool)
        keep[1:] = rel[1:] + 1 != rel[:-1]
        # windows that cross from one segment into the next are not windows
        bad = (off[1:-1, None] - np.arange(1, w)[None, :]).ravel()
        bad = bad[(bad >= 0) & (bad < m)]
        if len(bad):
            keep[bad[bad + 1 < m] + 1] = True  # the window after a crossing one is never a repeat
            keep[bad] = False
        idx = np.flatnonzero(keep)
        parts.append(idx + rel[idx])
    # segments with 1..w-1 values: one window over the whole segment
    short = np.flatnonzero((seg_len > 0) & (seg_len < w))
    if len(short):
        cols = np.arange(w)
        idx = off[short][:, None] + cols[None, :]
        valid = cols[None, :] < seg_len[short][:, None]
        vals = np.where(valid, v[np.minimum(idx, len(v) - 1)], np.iinfo(np.int64).max)
        hit = valid & (vals == vals.min(axis=1)[:, None])
        last = w - 1 - np.argmax(hit[:, ::-1], axis=1)
        parts.append(off[short] + last)
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate(parts)) if len(parts) > 1 else parts[0]


def _sliding_argmin(v: np.ndarray, w: int) -> np.ndarray:
    """For each window ``v[i:i+w]``, the offset (from ``i``) of its minimum, rightmost on ties.

    Doubling: the answer for a span of ``a + b`` comes from the answers for its first ``a`` and
    last ``a`` values (overlapping when ``b < a``) — the right one wins ties, so it stays the
    rightmost. Offsets are small unsigned ints, so each step moves little memory.
    """
    n = len(v)
    dtype = np.uint8 if w < 255 else np.uint32
    val = v
    rel = np.zeros(n, dtype=dtype)
    span = 1
    while span < w:
        step = min(span, w - span)  # combine [i, i+span) with [i+step, i+step+span)
        m = n - (span + step) + 1
        left, right = val[:m], val[step:step + m]
        take_right = right <= left
        val = np.minimum(left, right)
        rel = np.where(take_right, rel[step:step + m] + dtype(step), rel[:m])
        span += step
    return rel
