"""``explain_blocks`` (code lens, hover): per-block session counts in one pass over a document.

Small hand-built Claude Code sessions (``tests/claude_log.py``), ingested through the CLI; the
lens of a whole file is compared with each block looked up on its own and with a per-event
reference computed the slow way (one query per block).
"""

from __future__ import annotations

import json

import apsw
import numpy as np
import pytest
from claude_log import World
from waiting import wait_until

from engram import fingerprint
from engram.cli import main
from engram.engine import Engine
from engram.index import packed, postings, queries
from engram.query import explain
from engram.query.blocks import SAMPLE, _block_queries

SHORT = '''def clamp(value, low, high):
    """Keep value inside [low, high]."""
    return max(low, min(high, value))
'''
OTHER = '''def render_invoice_table(rows, currency="EUR"):
    """Format invoice rows as an aligned plain-text table with a grand total."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(3)]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    total = sum(r[2] for r in rows)
    lines.append(f"TOTAL {total:.2f} {currency}")
    return "\\n".join(lines)
'''


def _long_class(n: int = 40) -> str:
    """A class with enough distinct code to have more than ``SAMPLE`` winnowed fingerprints."""
    body = [f'''    def method_{i}(self, item_{i}, limit_{i}={i * 7}):
        """Step {i}: scale item_{i} by factor_{i} and clip it at limit_{i}."""
        factor_{i} = self.base_{i % 5} * {i + 3} - len(self.history)
        self.history.append((item_{i}, factor_{i}))
        return min(limit_{i}, item_{i} * factor_{i})
''' for i in range(n)]
    return "class Pipeline:\n" + "\n".join(body)


LONG = _long_class()
LONG_FEW = _long_class(6)      # a copy of a seventh of the class: below the floor
LONG_MOST = _long_class(30)    # three quarters of it: above
MODULE = "import math\n\n\n" + SHORT + "\n\n" + LONG + "\n\n" + OTHER


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    return w


def _ingest(capsys) -> None:
    assert main(["ingest", "--seal"]) == 0
    json.loads(capsys.readouterr().out)


def _blocks(text: str) -> list[tuple[int, int]]:
    out, start = [], 1
    for part in text.split("\n\n\n"):
        n = part.strip("\n").count("\n") + 1
        out.append((start, start + n - 1))
        start += part.count("\n") + 3
    return out


def _reference(conn, text: str) -> tuple[int, float]:
    """(sessions, best) of one block, one query per looked-up key set, no numpy joins."""
    _rows_table(conn)
    kg = fingerprint.all_kgrams(text)[0]
    win = np.unique(queries.index_keys(fingerprint.fingerprint(text).hashes))
    keys = np.unique(queries.index_keys(kg)) if len(win) <= explain.ALL_KGRAMS_MAX else win[:SAMPLE]
    sample = win[:SAMPLE]
    bp = {r[0] for r in conn.execute("SELECT hash FROM boilerplate")}
    keys = [k for k in keys.tolist() if k not in bp]
    n = len([k for k in sample.tolist() if k not in bp])
    if not keys or not n:
        return 0, 0.0
    hits = dict(conn.execute(
        "SELECT block, count(DISTINCT hash) FROM temp.fprows WHERE hash IN carray(?) GROUP BY block",
        (apsw.carray(queries._i64(keys)),)))
    best: dict[int, float] = {}
    for b, h in hits.items():
        conf = min(1.0, h / n)
        if conf <= explain.DIRECT_FLOOR:
            continue
        for (tape,) in conn.execute(
                "SELECT e.tape FROM refs r JOIN events e ON e.id = r.event WHERE r.block = ?", (b,)):
            best[tape] = max(best.get(tape, 0.0), conf)
    return len(best), max(best.values(), default=0.0)


def test_lens_matches_each_block_alone_and_a_slow_reference(world, capsys):
    w = world
    text = MODULE
    w.session(session_id="aaaa0001-0000-0000-0000-000000000001").user("write the module") \
        .write("mod.py", text).save()
    w.session(session_id="bbbb0001-0000-0000-0000-000000000002").user("look at it") \
        .read("mod.py").save()
    w.session(session_id="cccc0001-0000-0000-0000-000000000003").user("only the clamp helper") \
        .write("clamp.py", SHORT).save()
    w.session(session_id="dddd0001-0000-0000-0000-000000000004").user("start a pipeline") \
        .write("few.py", LONG_FEW).save()
    w.session(session_id="eeee0001-0000-0000-0000-000000000005").user("most of a pipeline") \
        .write("most.py", LONG_MOST).save()
    w.checkout()
    _ingest(capsys)
    blocks = _blocks(text)
    assert len(blocks) == 4
    lines = text.split("\n")
    eng = Engine(w.root)
    try:
        whole = eng.explain_blocks(str(w.root / "mod.py"), text, blocks)
        assert [r["range"] for r in whole] == [list(b) for b in blocks]
        for (s, e), res in zip(blocks, whole):
            alone_text = "\n".join(lines[s - 1:e]) + "\n"
            alone = eng.explain_blocks(str(w.root / "mod.py"), alone_text, [(1, e - s + 1)],
                                       windows=False)[0]
            assert {**alone, "range": res["range"]} == res
            n, best = _reference(eng.conn(), alone_text)
            assert res["sessions"] == n
            assert res["best"] == round(best, 4)
        short, long_ = whole[1], whole[2]
        assert short["sessions"] == 3 and short["best"] == 1.0     # writer, reader, the copy
        assert long_["sessions"] == 3 and long_["best"] == 1.0     # writer, reader, most
        assert long_["top"]["session"] in ("aaaa0001-0000-0000-0000-000000000001",
                                           "bbbb0001-0000-0000-0000-000000000002")
        # the hover's single block carries a transcript window
        s, e = blocks[1]
        hover = eng.explain_blocks(str(w.root / "mod.py"), "\n".join(lines[s - 1:e]) + "\n",
                                   [(1, e - s + 1)])[0]
        assert hover["top"]["windows"][0]["events"]
    finally:
        eng.close()


def test_large_blocks_are_looked_up_through_a_bounded_sample(world, capsys):
    w = world
    w.session(session_id="aaaa0002-0000-0000-0000-000000000001").user("write it") \
        .write("pipe.py", LONG).save()
    w.checkout()
    _ingest(capsys)
    n_win = len(np.unique(fingerprint.fingerprint(LONG).hashes))
    assert n_win > SAMPLE
    eng = Engine(w.root)
    try:
        conn = eng.conn()
        cache = postings._cache(conn)
        cache.check(conn)
        n = LONG.count("\n")
        q_block, _keys, denom = _block_queries(cache, conn, LONG, [(1, n), (1, 3)])
        assert (q_block == 0).sum() <= SAMPLE and denom[0] <= SAMPLE
        assert (q_block == 1).sum() > 0                       # a short block: every k-gram
        res = eng.explain_blocks(str(w.root / "pipe.py"), LONG, [(1, n)])[0]
        assert res["sessions"] == 1 and res["best"] == 1.0
    finally:
        eng.close()


def test_no_evidence_and_empty_input(world, capsys):
    w = world
    w.session(session_id="aaaa0003-0000-0000-0000-000000000001").user("write it") \
        .write("inv.py", OTHER).save()
    w.checkout()
    _ingest(capsys)
    eng = Engine(w.root)
    try:
        assert eng.explain_blocks("x.py", "", []) == []
        res = eng.explain_blocks("x.py", "a = 1\n\n\nb = 2\n", [(1, 1), (4, 4)])
        assert [r["sessions"] for r in res] == [0, 0]
        assert res[0] == {"range": [1, 1], "sessions": 0, "best": 0.0, "latest": None, "top": None}
    finally:
        eng.close()


def _rows_table(conn) -> None:
    """Every fingerprint row as a plain temp table ``fprows(hash, block, line)`` (the index packs
    one row per key: ``engram.index.packed``), for the reference queries to be plain SQL."""
    conn.execute("DROP TABLE IF EXISTS temp.fprows")
    conn.execute("CREATE TEMP TABLE fprows(hash INTEGER, block INTEGER, line INTEGER)")
    K, B, L = packed.key_range(conn)
    conn.executemany("INSERT INTO temp.fprows VALUES (?,?,?)", zip(K.tolist(), B.tolist(), L.tolist()))


def _grouped_counts(conn, hashes):
    """The per-block counts and matched count the plain SQL way (GROUP BY, a probe per hash): the
    reference ``held_block_counts`` and ``queries.block_counts`` are held to."""
    _rows_table(conn)
    keys = apsw.carray(queries._keyed(hashes)[0])
    counts = dict(conn.execute(
        "SELECT block, count(*) FROM (SELECT DISTINCT hash, block FROM temp.fprows"
        " WHERE hash IN carray(?)) GROUP BY block", (keys,)))
    matched = conn.execute("SELECT count(*) FROM carray(?) c WHERE EXISTS"
                           " (SELECT 1 FROM temp.fprows f WHERE f.hash = c.value)",
                           (keys,)).fetchone()[0]
    return counts, matched


def _wait_held(conn) -> None:
    wait_until(lambda: postings.held_postings_status(conn.filename)["postings"] is not None, 10,
               message="the held postings to be read")


def test_postings_in_memory_and_prefilled_rows_answer_the_same(world, capsys):
    """``keep_postings`` (the server's in-memory postings) and ``prefill`` change nothing but the
    speed: before and after an ingest that adds blocks (looked up in SQLite until the snapshot is
    read again), on the first query after that ingest's commit, and with a snapshot that does not
    belong to the index (never used)."""
    w = world
    text = MODULE
    w.session(session_id="aaaa0004-0000-0000-0000-000000000001").user("write the module") \
        .write("mod.py", text).save()
    w.session(session_id="bbbb0004-0000-0000-0000-000000000002").user("only the clamp helper") \
        .write("clamp.py", SHORT).save()
    w.checkout()
    _ingest(capsys)
    blocks = _blocks(text)
    file = str(w.root / "mod.py")
    eng = Engine(w.root)
    try:
        conn = eng.conn()
        plain = eng.explain_blocks(file, text, blocks)
        assert plain[1]["sessions"] == 2
        postings.keep_postings(conn)
        _wait_held(conn)
        assert eng.explain_blocks(file, text, blocks) == plain
        cache = postings._cache(conn)
        assert cache.snap_use is not None and cache.snap_use[1] is False  # used, up to date
        assert postings.prefill(conn) and cache.full
        assert eng.explain_blocks(file, text, blocks) == plain
        hover = eng.explain_blocks(file, SHORT, [(1, SHORT.count("\n"))])
        # a new session copies the invoice code: new blocks, above the snapshot's top
        extra = "\n\ndef extra_total(rows):\n    return sum(r[2] for r in rows)\n"
        w.session(session_id="cccc0004-0000-0000-0000-000000000003").user("copy the invoice") \
            .write("inv.py", OTHER + extra).save()
        w.checkout()
        _ingest(capsys)
        after = eng.explain_blocks(file, text, blocks)  # the first query after the commit
        assert not cache.full and cache.snap_use is not None and cache.snap_use[1] is True
        assert after[3]["sessions"] == plain[3]["sessions"] + 1
        fresh = Engine(w.root)
        try:
            assert fresh.explain_blocks(file, text, blocks) == after   # no snapshot, no prefill
        finally:
            fresh.close()
        assert eng.explain_blocks(file, SHORT, [(1, SHORT.count("\n"))]) == hover
        # a snapshot whose sampled blocks differ from the index's is not used
        held = postings._held[conn.filename]
        snap = held.snapshot
        bad = postings._Snapshot(snap.codes, snap.top, dict.fromkeys(snap.samples, b"other"))
        held.snapshot = bad
        other = Engine(w.root)
        try:
            assert other.explain_blocks(file, text, blocks) == after
            assert postings._cache(other.conn()).snap_use is None
        finally:
            other.close()
    finally:
        postings._held.pop(eng.conn().filename, None)
        eng.close()


def _untimed(res: dict) -> dict:
    """An explain result without its timing (the one field that differs between two asks)."""
    return {**res, "stats": {k: v for k, v in res["stats"].items() if k != "elapsed_ms"}}


def test_explain_with_postings_in_memory_answers_the_same(world, capsys):
    """Explain counts a span's fingerprints per block from the postings a server holds in memory
    when there are some (``held_block_counts``): the same result as SQLite's, also for blocks added
    after the snapshot was read."""
    w = world
    text = MODULE
    w.session(session_id="aaaa0005-0000-0000-0000-000000000001").user("write the module") \
        .write("mod.py", text).save()
    w.checkout()
    _ingest(capsys)
    file = str(w.root / "mod.py")
    n = text.count("\n")
    eng = Engine(w.root)
    try:
        conn = eng.conn()
        spans = [(4, 6), (9, 20), (1, n)]
        plain = [eng.explain(file, s, e, text=text) for s, e in spans]
        postings.keep_postings(conn)
        _wait_held(conn)
        hashes = explain.query_fingerprints(LONG)[0]
        held = postings.held_block_counts(conn, np.unique(queries.index_keys(hashes)))
        assert held is not None and held[1] > 0
        assert held == _grouped_counts(conn, hashes)
        assert held == queries.block_counts(conn, hashes)  # SQLite's one-pass count: the same
        assert queries.block_counts(conn, np.zeros(0, dtype=np.int64)) == ({}, 0)
        assert [_untimed(eng.explain(file, s, e, text=text)) for s, e in spans] == \
            [_untimed(r) for r in plain]
        # a second session copies the class: its blocks are newer than the snapshot
        w.session(session_id="bbbb0005-0000-0000-0000-000000000002").user("copy the pipeline") \
            .write("copy.py", LONG).save()
        w.checkout()
        _ingest(capsys)
        got = eng.explain(file, 9, 20, text=text)
        assert postings._cache(conn).snap_use[1] is True  # the snapshot is behind the index
        fresh = Engine(w.root)
        try:
            assert _untimed(got) == _untimed(fresh.explain(file, 9, 20, text=text))
            assert len(got["sessions"]) == 2
        finally:
            fresh.close()
    finally:
        postings._held.pop(eng.conn().filename, None)
        eng.close()
