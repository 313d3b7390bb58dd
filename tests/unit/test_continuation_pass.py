"""The continuation pass's shortcuts change no row (issue 22, ingest throughput).

* ``_tail_hits`` reads each predecessor's tail refs (a few hundred rows, kept across calls) and
  matches them against the head's blocks, instead of asking the index for every ref of those
  blocks among the predecessors (a preamble block is held by thousands of tapes): the same hits.
* ``TapeText.prefetch`` reads each tape's head once (it used to be read again by ``get``).
* ``TapeText.decide_boilerplate`` takes the head-boilerplate decisions of a batch of heads at
  once: the same decisions as one call per head.
"""

from __future__ import annotations

from collections import defaultdict

import apsw
import numpy as np
from test_scale_accuracy import _world

from engram.engine import Engine
from engram.index import queries, schema
from engram.lineage import continuations
from engram.lineage.cache import CachedAccess, IngestCache, postings
from engram.lineage.rules import POPULAR_POSTINGS, TAIL_EVENTS
from engram.sortedset import member, uniq


def _tail_hits_by_blocks(conn, preds, hashes, with_preamble):
    """What ``_tail_hits`` computed before: every ref of the head's blocks among ``preds``."""
    rows = postings(conn, uniq(hashes))
    if not len(rows):
        return {}
    rows = rows[~member(rows[:, 0], continuations._runs_over(np.sort(rows[:, 0]), POPULAR_POSTINGS))]
    if not len(rows):
        return {}
    out: dict = defaultdict(lambda: defaultdict(set))
    blocks = sorted(set(rows[:, 1].tolist()))
    for blk, eid, role, tape, ofs in conn.execute(
            "SELECT r.block, r.event, r.role, e.tape, e.ofs FROM refs r"
            " JOIN events e ON e.id=r.event WHERE r.block IN carray(?) AND e.tape IN carray(?)",
            (apsw.carray(queries._i64(blocks)), apsw.carray(queries._i64(sorted(preds))))):
        a = preds[tape]
        if ofs < a.n_events - TAIL_EVENTS:
            continue
        if role == schema.ROLE_MSG_IN and not with_preamble:
            first = conn.execute("SELECT min(ofs) FROM events WHERE tape=? AND kind IN (?,?)",
                                 (tape, schema.kind_code("msg.out"),
                                  schema.kind_code("tool.call"))).fetchone()[0]
            if ofs < (first if first is not None else 1 << 30):
                continue
        out[tape][eid] |= set(rows[rows[:, 1] == blk, 0].tolist())
    return out


def _plain(d) -> dict:
    return {t: {e: set(hs) for e, hs in evs.items() if hs} for t, evs in d.items()}


def _tape_rows(conn) -> list:
    """Every tape's row of the index."""
    return list(queries.tapes(conn, [r[0] for r in conn.execute("SELECT id FROM tapes")]).values())


def test_tail_hits_from_the_tails_equal_the_blocks_query(world):
    _world(world, readers=3)
    eng = Engine(world.root)
    try:
        conn = eng.conn()
        trows = queries.tapes(conn, [r[0] for r in conn.execute("SELECT id FROM tapes")])
        text = continuations.TapeText(CachedAccess(conn, IngestCache()), IngestCache())
        tails = continuations.TailCache()
        compared = hits = 0
        for b in trows.values():
            preds = {a.id: a for a in trows.values() if a.id != b.id}
            head_k = text.get(b)["head_k"]
            if not len(head_k):
                continue
            for with_preamble in (False, True):
                want = _plain(_tail_hits_by_blocks(conn, preds, head_k, with_preamble))
                got = _plain(continuations._tail_hits(conn, preds, head_k, with_preamble,
                                                      tails=tails))
                assert got == want, (b.session, with_preamble)
                compared += 1
                hits += len(got)
        assert compared >= 8 and hits > 0  # something was found and compared
        assert tails  # the tails were kept for the next head
    finally:
        eng.close()


def test_prefetch_reads_each_head_once(world, monkeypatch):
    _world(world, readers=2)
    eng = Engine(world.root)
    try:
        conn = eng.conn()
        trows = _tape_rows(conn)
        plain = continuations.TapeText(CachedAccess(conn, IngestCache()), IngestCache())
        want = {t.id: plain.get(t) for t in trows}
        text = continuations.TapeText(CachedAccess(conn, IngestCache()), IngestCache())
        reads: list[int] = []
        real = continuations.TapeText._head
        monkeypatch.setattr(continuations.TapeText, "_head",
                            lambda self, t: reads.append(t.id) or real(self, t))
        monkeypatch.setattr(continuations, "PREFETCH_TAPES", 2)  # more than one batch
        text.prefetch(trows)
        got = {t.id: text.get(t) for t in trows}
        assert sorted(reads) == sorted(t.id for t in trows)  # once each
        for tid, c in want.items():
            assert c["markers"] == got[tid]["markers"] and c["task"] == got[tid]["task"]
            assert np.array_equal(c["head"], got[tid]["head"])
            assert np.array_equal(c["head_k"], got[tid]["head_k"])
    finally:
        eng.close()


def test_boilerplate_decided_per_batch_equals_per_head(world, monkeypatch):
    _world(world, readers=5)  # five tapes given the same first request: boilerplate
    eng = Engine(world.root)
    try:
        conn = eng.conn()
        trows = _tape_rows(conn)
        plain = continuations.TapeText(CachedAccess(conn, IngestCache()), IngestCache())
        want = {t.id: continuations._head_boilerplate(conn, t.harness, plain.get(t)["head_k"])
                for t in trows}
        text = continuations.TapeText(CachedAccess(conn, IngestCache()), IngestCache())
        monkeypatch.setattr(continuations, "PREFETCH_TAPES", 3)  # more than one batch
        calls: list[int] = []
        real = continuations._head_boilerplate
        monkeypatch.setattr(continuations, "_head_boilerplate",
                            lambda *a, **k: calls.append(1) or real(*a, **k))
        text.prefetch(trows, conn)
        n_batch = len(calls)
        assert 0 < n_batch <= 2 * (-(-len(trows) // 3))  # a call (and its inner one) per batch
        for t in trows:
            head_k = text.get(t)["head_k"]
            known = text.bp.get(t.harness, {})
            assert all(h in known for h in head_k.tolist())  # decided ahead, every hash
            got = continuations._head_boilerplate(conn, t.harness, head_k, text.bp,
                                                  text.n_tapes, text.prints)
            assert got == want[t.id], t.session
        assert len(calls) == n_batch + len(trows)  # answered from the decisions: no inner call
        assert any(want.values()) and any(  # boilerplate found, and head hashes that are not
            len(text.get(t)["head_k"]) > len(want[t.id]) for t in trows)
    finally:
        eng.close()


def test_boilerplate_of_a_hash_sharing_its_index_key_decided_as_alone(world):
    """Two hashes of a batch with one 32-bit index key: the smaller is decided from the key's rows
    as when asked for alone (``postings`` gives the rows to the larger of the two asked for)."""
    _world(world, readers=5)
    eng = Engine(world.root)
    try:
        conn = eng.conn()
        trows = _tape_rows(conn)
        text = continuations.TapeText(CachedAccess(conn, IngestCache()), IngestCache())
        text.prefetch(trows)   # heads only: no decisions yet
        t0 = trows[0]
        bp = {h for t in trows
              for h in continuations._head_boilerplate(conn, t.harness, text.get(t)["head_k"])}
        big = max(h for h in bp if h & 0xFFFFFFFF)   # boilerplate, low bits to spare
        twin = big - 1                                # its key, a smaller hash
        assert queries.index_keys(np.array([twin]))[0] == queries.index_keys(np.array([big]))[0]
        alone = continuations._head_boilerplate(conn, t0.harness, np.array([twin], np.int64))
        assert alone == {twin}   # alone, the key's rows are its own: boilerplate
        text.cache[-1] = {"head": np.array([twin]), "head_k": np.array([twin]), "markers": set(),
                          "task": None}
        fake = t0._replace(id=-1)
        text.decide_boilerplate(conn, [*trows, fake])
        known = text.bp[t0.harness]
        assert known[big] and known[twin]
    finally:
        eng.close()


def test_agents_from_cut_at_until_equals_the_rows_before_it():
    """``agents_from(.., until)`` stops at the first tape started after ``until``: the rows the
    caller kept before (the first ``limit`` agents, up to the first one past ``until``)."""
    import random

    rng = random.Random(7)
    fields = queries.TapeRow._fields
    rows = []
    for i in range(300):
        vals = dict.fromkeys(fields)
        vals.update(id=i + 1, tape_id=f"t{i:04d}", harness="claude_code", n_events=5,
                    tier=rng.choice(["orchestrator", "agent", None]),
                    first_t=f"2026-01-01T00:{rng.randrange(60):02d}:00Z")
        rows.append(queries.TapeRow(**vals))
    table = continuations._TapeTable(rows)
    for _ in range(200):
        first = f"2026-01-01T00:{rng.randrange(60):02d}:00Z"
        until = rng.choice([None, f"2026-01-01T00:{rng.randrange(60):02d}:30Z"])
        limit = rng.choice([1, 5, 200])
        want = []
        for r in table.agents_from(first, limit):
            if until is not None and r.first_t > until:
                break
            want.append(r.id)
        assert [r.id for r in table.agents_from(first, limit, until)] == want


def test_hashes_per_block_equal_a_set_per_block():
    """``_hashes_per_block``: each block's distinct hashes counted, blocks in the order they first
    occur — what ``_dispatch_of`` built as a set per block."""
    import random

    rng = random.Random(3)
    for trial in range(300):
        n = rng.randint(0, 60)
        rows = np.array([(rng.randint(-3, 8), rng.randint(0, 9), rng.randint(1, 5)) for _ in range(n)],
                        dtype=np.int64).reshape(-1, 3)
        want: dict = defaultdict(set)
        for h, b, _ln in rows.tolist():
            want[b].add(h)
        got = continuations._hashes_per_block(rows)
        assert list(got.items()) == [(b, len(hs)) for b, hs in want.items()], trial


def test_boilerplate_from_the_table_read_once_equals_the_query(world):
    """``TapeText.boilerplate`` (the table's keys read once a pass) gives ``cache.boilerplate``'s
    set (one query per call), hashes sharing an index key included."""
    import random

    from engram.lineage.cache import boilerplate

    _world(world, readers=2)
    eng = Engine(world.root)
    try:
        conn = eng.conn()
        rng = random.Random(5)
        hashes = [rng.getrandbits(63) * rng.choice((1, -1)) for _ in range(300)]
        keys = sorted(set(queries.index_keys(np.array(hashes, np.int64)).tolist()))
        with conn:
            conn.executemany("INSERT OR REPLACE INTO boilerplate VALUES (?, 500)",
                             [(k,) for k in keys[::3]])
        text = continuations.TapeText(CachedAccess(conn, IngestCache()), IngestCache())
        found = 0
        for _ in range(50):
            q = np.array(rng.sample(hashes, rng.randint(0, 40)), np.int64)
            q = np.r_[q, q[:3] ^ 1]   # others of the same keys
            want = boilerplate(conn, q)
            assert text.boilerplate(conn, q) == want
            found += len(want)
        assert found  # some were boilerplate
    finally:
        eng.close()
