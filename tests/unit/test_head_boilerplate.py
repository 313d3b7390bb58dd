"""The head-boilerplate decision of the continuation pass (``continuations._head_boilerplate``):
the hashes whose blocks are given at the head of enough tapes. Its two costs at scale: the query
plan (it must start from the blocks, not from every tape of the harness) and uniting tape sets
per posting (``_held_by_many`` decides most hashes from counts)."""

from __future__ import annotations

import array
import random

import apsw
import numpy as np

from engram.index import connect
from engram.lineage import continuations


def _naive(rows: np.ndarray, tapes_in: dict[int, set[int]], need: int) -> set[int]:
    """What the pass computed before: the tapes of every row's block, united per hash."""
    tapes_of: dict[int, set[int]] = {}
    for h, b in rows[:, :2].tolist():
        if b in tapes_in:
            tapes_of.setdefault(h, set()).update(tapes_in[b])
    return {h for h, ts in tapes_of.items() if len(ts) >= need}


def test_held_by_many_equals_uniting_every_row() -> None:
    rng = random.Random(5)
    for trial in range(300):
        n_blocks, n_tapes = rng.randint(1, 30), rng.randint(1, 40)
        tapes_in = {b: set(rng.sample(range(n_tapes), rng.randint(1, n_tapes)))
                    for b in range(n_blocks) if rng.random() < 0.7}
        rows = np.array([(rng.randint(-5, 20), rng.randrange(n_blocks + 3), rng.randint(1, 9))
                         for _ in range(rng.randint(1, 120))], dtype=np.int64)
        need = rng.randint(4, max(4, n_tapes))
        got = continuations._held_by_many(rows, tapes_in, need, set())
        assert got == _naive(rows, tapes_in, need), trial
    # hashes already known are left out of the exact check only (the caller adds them anyway)
    rows = np.array([(1, 0, 1), (1, 1, 1)], dtype=np.int64)
    tapes_in = {0: {1, 2, 3}, 1: {4, 5}}
    assert continuations._held_by_many(rows, tapes_in, 4, set()) == {1}
    assert continuations._held_by_many(rows, tapes_in, 4, {1}) == set()
    assert continuations._held_by_many(rows, tapes_in, 6, set()) == set()


def test_head_input_query_starts_from_the_blocks(tmp_path) -> None:
    conn = connect(tmp_path / "index.sqlite")
    ids = apsw.carray(array.array("q", [1, 2, 3]))
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + continuations.HEAD_INPUT_SQL,
                                       (ids, 3, 12, "claude_code"))]
    searches = [p for p in plan if p.startswith("SEARCH")]
    assert searches[0].startswith("SEARCH r "), plan
    assert not any("tapes_harness" in p for p in plan), plan
    conn.close()
