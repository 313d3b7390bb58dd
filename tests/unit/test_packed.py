"""``engram.index.packed``: fingerprint rows stored one SQLite row per index key give back the
rows a plain ``(hash, block, line)`` table gives, value for value and in its order; an index
written before migration 0008 is converted to the same bytes and answers the same."""

from __future__ import annotations

import random

import apsw
import numpy as np

from engram.index import db, packed, queries
from engram.index.schema import MIGRATIONS


def _rows(seed: int, n_keys: int = 400) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    keys = [rng.randint(-(2**31), 2**31 - 1) for _ in range(n_keys)] + [-(2**31), 2**31 - 1, 0, -1]
    out = set()
    for k in keys:
        for _ in range(rng.randint(1, 8)):
            block = rng.randint(1, 2**32 - 1) if rng.random() < 0.05 else rng.randint(1, 5000)
            line = rng.choice([0, 1, 65534, 65535, 65536, 2**31]) if rng.random() < 0.1 \
                else rng.randint(0, 3000)
            out.add((k, block, line))
    return sorted(out)


def _add_in_batches(conn, rows, n_batches: int = 5) -> None:
    """As ingest adds them: each batch the rows of new blocks (higher ids than before)."""
    by_block = sorted(rows, key=lambda r: (r[1], r[0], r[2]))
    bounds = np.linspace(0, len(by_block), n_batches + 1).astype(int)
    for i, j in zip(bounds[:-1], bounds[1:]):
        part = by_block[i:j]
        while j < len(by_block) and part and by_block[j][1] == part[-1][1]:  # a block stays whole
            part.append(by_block[j])
            j += 1
        part = sorted(set(part) - _added(conn))
        if part:
            a = np.array(part, dtype=np.int64)
            with conn:
                packed.add(conn, a[:, 0], a[:, 1], a[:, 2])


def _added(conn) -> set:
    K, B, L = packed.key_range(conn)
    return set(zip(K.tolist(), B.tolist(), L.tolist()))


def _plain(conn, rows) -> None:
    conn.execute("CREATE TEMP TABLE plain(hash INTEGER, block INTEGER, line INTEGER,"
                 " PRIMARY KEY(hash, block, line)) WITHOUT ROWID")
    conn.executemany("INSERT INTO temp.plain VALUES (?,?,?)", rows)


def test_rows_are_the_plain_tables_rows_in_its_order(tmp_path):
    rows = _rows(1)
    conn = db.connect(tmp_path / "index.sqlite")
    _add_in_batches(conn, rows)
    _plain(conn, rows)
    assert conn.execute("SELECT count(*) FROM fingerprints").fetchone()[0] == \
        sum(1 for r in rows if r[2] >= packed.WIDE)   # only lines past 16 bits stay there
    assert packed.count(conn) == len(rows)
    keys = sorted({r[0] for r in rows})
    rng = random.Random(2)
    for n in (0, 1, 7, 120, len(keys)):
        ask = np.unique(np.array(rng.sample(keys, n) + [12345], dtype=np.int64))
        ca = apsw.carray(queries._i64(ask))
        sql = "SELECT hash, block, line FROM temp.plain WHERE hash IN carray(?)"
        K, B, L = packed.rows(conn, ask)
        assert list(zip(K.tolist(), B.tolist(), L.tolist())) == list(conn.execute(sql, (ca,)))
        K, B, L = packed.rows(conn, ask, above=2500)
        assert list(zip(K.tolist(), B.tolist(), L.tolist())) == \
            list(conn.execute(sql + " AND block > 2500", (ca,)))
        K, B, L = packed.rows(conn, ask, outside=(100, 4000))
        assert list(zip(K.tolist(), B.tolist(), L.tolist())) == \
            list(conn.execute(sql + " AND (block < 100 OR block > 4000)", (ca,)))
        bl = np.arange(1, 5000, 3, dtype=np.int64)
        K, B, L = packed.rows(conn, ask, blocks=bl)
        assert list(zip(K.tolist(), B.tolist(), L.tolist())) == \
            list(conn.execute(sql + " AND block IN carray(?)", (ca, apsw.carray(queries._i64(bl)))))
        want = dict(conn.execute("SELECT hash, count(*) FROM temp.plain WHERE hash IN carray(?)"
                                 " GROUP BY hash", (ca,)))
        assert packed.key_counts(conn, ask) == want
        codes = queries.key_block_codes(conn, ask)
        assert codes.tolist() == [r[0] for r in conn.execute(
            "SELECT DISTINCT hash * 4294967296 + block FROM temp.plain WHERE hash IN carray(?)"
            " ORDER BY 1", (ca,))]
    conn.close()


def test_an_index_before_0008_is_converted_to_the_same_bytes(tmp_path):
    rows = _rows(3)
    new = db.connect(tmp_path / "new.sqlite")
    _add_in_batches(new, rows, n_batches=1)
    path = tmp_path / "old.sqlite"
    db.connect(path).close()
    conn = apsw.Connection(str(path))   # as an Engram before 0008 left it, its rows in place
    conn.execute("DROP TABLE packed")
    conn.execute("DELETE FROM migrations WHERE name = '0008_packed_postings'")
    conn.executemany("INSERT INTO fingerprints VALUES (?,?,?)", rows)
    conn.close()
    old = db.connect(path)
    assert {r[0] for r in old.execute("SELECT name FROM migrations")} == {n for n, _ in MIGRATIONS}
    q = "SELECT * FROM packed ORDER BY key"
    assert list(old.execute(q)) == list(new.execute(q))
    w = "SELECT * FROM fingerprints ORDER BY hash, block, line"
    assert list(old.execute(w)) == list(new.execute(w)) == [r for r in rows if r[2] >= packed.WIDE]
    hashes = np.unique(np.array([r[0] for r in rows], dtype=np.int64) << 32)
    assert queries.postings(old, hashes) == queries.postings(new, hashes)
    assert len(queries.postings(old, hashes)) == len(rows)
    old.close()
    new.close()


def test_blobs_appended_out_of_order_are_read_in_order(tmp_path):
    conn = db.connect(tmp_path / "index.sqlite")
    with conn:   # a later batch with a lower block id (an id reused after ``delete_blocks``)
        packed.add(conn, np.array([5, 5]), np.array([20, 30]), np.array([1, 2]))
        packed.add(conn, np.array([5, 7]), np.array([10, 10]), np.array([4, 4]))
    K, B, L = packed.rows(conn, np.array([5, 7]))
    assert list(zip(K.tolist(), B.tolist(), L.tolist())) == [(5, 10, 4), (5, 20, 1), (5, 30, 2), (7, 10, 4)]
    conn.close()


def test_delete_blocks_removes_their_rows_only(tmp_path):
    rows = _rows(4, n_keys=60)
    conn = db.connect(tmp_path / "index.sqlite")
    _add_in_batches(conn, rows)
    gone = {r[1] for r in rows[::3]}
    with conn:
        packed.delete_blocks(conn, gone)
    assert sorted(_added(conn)) == [r for r in rows if r[1] not in gone]
    assert packed.count(conn) == len([r for r in rows if r[1] not in gone])
    conn.close()
