"""Set operations on int64 numpy arrays by sorting and binary search: several times faster than
numpy 2's hash-based ``unique`` / ``isin`` on fingerprint hashes and ids."""

from __future__ import annotations

import numpy as np


def uniq(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` (sorted distinct values) by a stable sort and a comparison (runs of sorted
    values merge in one pass)."""
    s = np.sort(a, kind="stable")
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def member(a: np.ndarray, sorted_b: np.ndarray) -> np.ndarray:
    """``np.isin(a, sorted_b)`` for a sorted ``sorted_b``, by binary search."""
    if not len(sorted_b) or not len(a):
        return np.zeros(len(a), dtype=bool)
    i = np.searchsorted(sorted_b, a)
    i[i == len(sorted_b)] = 0
    return sorted_b[i] == a
