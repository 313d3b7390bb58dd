"""``lineage.cache._rows``: fingerprint rows read as two lists SQLite formats and numpy parses are
the rows a cursor gives, value for value and in the same order (negative 32-bit keys included)."""

from __future__ import annotations

import itertools
import random

import apsw
import numpy as np

from engram.index import connect, queries
from engram.lineage import cache

SQL = "SELECT hash, block, line FROM fingerprints WHERE hash IN carray(?)"


def test_rows_equal_the_cursor(tmp_path) -> None:
    conn = connect(tmp_path / "index.sqlite")
    rng = random.Random(11)
    keys = [rng.randint(-(2**31), 2**31 - 1) for _ in range(300)] + [-(2**31), 2**31 - 1, 0, -1]
    rows = {(k, rng.randint(1, 2**31 - 1) if rng.random() < 0.1 else rng.randint(1, 90000),
             rng.randint(0, 70000)) for k in keys for _ in range(rng.randint(1, 6))}
    with conn:
        conn.executemany("INSERT INTO fingerprints VALUES (?,?,?)", sorted(rows))
    for n in (0, 1, 7, 120, len(keys)):
        ask = np.unique(np.array(rng.sample(keys, n) + [12345], dtype=np.int64))
        for sql, args in ((SQL, (apsw.carray(queries._i64(ask)),)),
                          (SQL + " AND (block < ? OR block > ?)",
                           (apsw.carray(queries._i64(ask)), 500, 60000))):
            want = np.fromiter(itertools.chain.from_iterable(conn.execute(sql, args)),
                               np.int64).reshape(-1, 3)
            got = cache._rows(conn, sql, args)
            assert got.shape == want.shape and (got == want).all(), n
    conn.close()
