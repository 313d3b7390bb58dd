"""``edges.Postings`` keeps each fetched chunk's rows sorted as three narrow columns and joins
them: the same rows in the same order as one stable sort of all of them by (hash, block) — keys
shared by two full hashes, popular and skipped hashes, lines and blocks past 32 bits included —
and a ``match_all`` over them gives the same groups."""

from __future__ import annotations

import random

import numpy as np

from engram.index import connect, queries
from engram.lineage import edges
from engram.lineage.cache import postings
from engram.sortedset import uniq


def _reference(conn, hashes: np.ndarray, skip: set[int]) -> np.ndarray:
    """The rows as the lineage pass held them before: fetched at once, sorted at once."""
    skipped = uniq(np.fromiter(skip, np.int64, len(skip)))
    hs = edges._unskipped(hashes, skipped)
    arr = edges._filtered(postings(conn, hs), skipped, None)
    return arr[np.lexsort((arr[:, 1], arr[:, 0]))]


def _index(tmp_path, rng: random.Random):
    conn = connect(tmp_path / "index.sqlite")
    full = set()
    while len(full) < 3000:
        h = rng.randint(-(2**63), 2**63 - 1)
        full.add(h)
        if rng.random() < 0.05:   # a second full hash of the same 32-bit index key
            full.add((h & ~0xFFFFFFFF) | rng.randint(0, 0xFFFFFFFF))
    hashes = uniq(np.array(sorted(full), dtype=np.int64))
    keys = sorted(set(queries.index_keys(hashes).tolist()))
    rows = set()
    for k in keys:
        for _ in range(rng.choice((1, 2, 3, 40))):   # some keys popular (> POPULAR_POSTINGS)
            b = rng.randint(1, 5000) if rng.random() < 0.97 else rng.randint(2**32, 2**33)
            ln = rng.randint(0, 400) if rng.random() < 0.97 else rng.choice((70000, 2**31 + 3))
            rows.add((k, b, ln))
    with conn:
        conn.executemany("INSERT INTO fingerprints VALUES (?,?,?)", sorted(rows))
    return conn, hashes


def test_narrow_postings_are_the_sorted_rows(tmp_path, monkeypatch) -> None:
    rng = random.Random(5)
    conn, hashes = _index(tmp_path, rng)
    monkeypatch.setattr(edges, "POPULAR_POSTINGS", 30)
    skip = set(rng.sample(hashes.tolist(), 50))
    want = _reference(conn, hashes, skip)
    assert len(want) > 1000 and (want[:, 1] >= 2**32).any() and (want[:, 2] >= 2**31).any()
    for fetch in (7, 100, 2500):   # many chunks, a few, one
        monkeypatch.setattr(edges, "FETCH_HASHES", fetch)
        post = edges.Postings(conn, hashes, skip)
        assert post.complete
        got = np.stack([post.H, post.B, post.L], axis=1)
        assert got.dtype == np.int64 and got.shape == want.shape and (got == want).all(), fetch
    conn.close()


def test_narrow_columns_when_they_fit(tmp_path, monkeypatch) -> None:
    rng = random.Random(9)
    conn, hashes = _index(tmp_path, rng)
    small = "DELETE FROM fingerprints WHERE block >= 4294967296 OR line >= 65536"
    with conn:
        conn.execute(small)
    want = _reference(conn, hashes, set())
    monkeypatch.setattr(edges, "FETCH_HASHES", 64)
    post = edges.Postings(conn, hashes, set())
    assert post.H.dtype == np.int64 and post.B.dtype == np.int32 and post.L.dtype == np.int32
    assert (np.stack([post.H, post.B, post.L], axis=1) == want).all()
    # the groups of a match are those of the int64 columns
    wide = edges.Postings.__new__(edges.Postings)
    wide.H, wide.B, wide.L, wide.complete = want[:, 0].copy(), want[:, 1].copy(), want[:, 2].copy(), True
    qs = [(uniq(np.array(rng.sample(hashes.tolist(), 200), np.int64)), 200) for _ in range(5)] + [None]
    for a, b in zip(post.match_all(qs), wide.match_all(qs)):
        if a is None:
            assert b is None
            continue
        for f in ("blocks", "counts", "lmin", "lmax", "passing"):
            assert (getattr(a, f) == getattr(b, f)).all() and getattr(a, f).dtype == getattr(b, f).dtype, f
    assert edges.Postings(conn, hashes, set(), max_rows=10).complete is False
    conn.close()
