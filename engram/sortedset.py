"""Set operations on int64 numpy arrays by sorting and binary search: several times faster than
numpy 2's hash-based ``unique`` / ``isin`` on fingerprint hashes and ids."""

from __future__ import annotations

import numpy as np


def uniq(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` (sorted distinct values) by a stable sort and a comparison (runs of sorted
    values merge in one pass)."""
    return distinct(np.sort(a, kind="stable"))


def distinct(s: np.ndarray) -> np.ndarray:
    """The distinct values of the sorted array ``s``, in order (``s`` itself when under two)."""
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


class KeyMap:
    """128-bit keys (16 bytes: a hash) → rows of ``width`` int64 counts (``width`` 0: a set), in
    16 + 8 x ``width`` bytes a key: the keys added lately in a dict, merged into sorted arrays
    every ``merge_at`` of them — a parse's memory of what it has seen then stays a small fraction
    of what a Python set or dict of the session's keys takes (and strews over the heap).
    ``map[k] = row`` (the last one set wins), ``k in map``, ``map.get(k)``, ``len``, ``rows()``
    (every key's row, in no set order). A key's last byte has its low bit set (``key``): numpy's
    fixed-width bytes would drop a trailing zero byte."""

    def __init__(self, width: int = 0, merge_at: int = 1 << 14):
        self.width, self.merge_at = width, merge_at
        self.keys = np.zeros(0, "S16")
        self.vals = np.zeros((0, width), np.int64)
        self.recent: dict[bytes, tuple] = {}

    @staticmethod
    def key(digest: bytes) -> bytes:
        """A 16-byte digest as a key of the map."""
        return digest[:15] + bytes((digest[15] | 1,))

    def _find(self, k: bytes) -> int:
        if not len(self.keys):   # nothing merged yet (most sessions): no search of an empty array
            return -1
        i = int(self.keys.searchsorted(k))
        return i if i < len(self.keys) and self.keys[i] == k else -1

    def __contains__(self, k: bytes) -> bool:
        return k in self.recent or self._find(k) >= 0

    def get(self, k: bytes) -> tuple | None:
        row = self.recent.get(k)
        if row is not None:
            return row
        i = self._find(k)
        return None if i < 0 else tuple(int(v) for v in self.vals[i])

    def __setitem__(self, k: bytes, row: tuple) -> None:
        self.recent[k] = row
        if len(self.recent) >= self.merge_at:
            self._merge()

    def add(self, k: bytes) -> None:
        self[k] = ()

    def __len__(self) -> int:
        self._merge()
        return len(self.keys)

    def rows(self) -> np.ndarray:
        self._merge()
        return self.vals

    def _merge(self) -> None:
        if not self.recent:
            return
        ks = np.array(list(self.recent), "S16")
        vs = np.array(list(self.recent.values()), np.int64).reshape(len(ks), self.width)
        self.recent = {}
        order = np.argsort(ks, kind="stable")
        ks, vs = ks[order], vs[order]
        at = self.keys.searchsorted(ks)
        old = at < len(self.keys)
        old[old] = self.keys[at[old]] == ks[old]
        self.vals[at[old]] = vs[old]          # keys seen before: the last row wins
        new = ~old
        self.keys = np.insert(self.keys, at[new], ks[new])
        self.vals = np.insert(self.vals, at[new], vs[new], axis=0)


class IntSet:
    """A set of int64 values (``add``, ``in``, ``len``): the values added lately in a Python set,
    merged into one sorted array every ``merge_at`` of them — ~8 bytes a value held, where a set
    holds an int object and a slot for each (~60 bytes), strewn over the heap among whatever was
    made meanwhile."""

    def __init__(self, merge_at: int = 1 << 12):
        self.merge_at = merge_at
        self.values = np.zeros(0, np.int64)   # sorted, distinct
        self.recent: set[int] = set()

    def add(self, v: int) -> None:
        self.recent.add(v)
        if len(self.recent) >= self.merge_at:
            self._merge()

    def __contains__(self, v: int) -> bool:
        if v in self.recent:
            return True
        s = self.values
        if not len(s):
            return False
        i = int(s.searchsorted(v))
        return i < len(s) and int(s[i]) == v

    def __len__(self) -> int:
        self._merge()
        return len(self.values)

    def _merge(self) -> None:
        if not self.recent:
            return
        new = np.fromiter(self.recent, np.int64, len(self.recent))
        self.recent = set()
        self.values = uniq(np.concatenate([self.values, new]))
