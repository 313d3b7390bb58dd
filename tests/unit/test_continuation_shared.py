"""The continuation pass shared by two processes gives the rows of the pass done whole (issue 22,
ingest throughput): the worker and the ingest's process claim (harness, cwd) groups of tapes
(``continuations.Claims``), each computes its groups' continuation and dispatch changes, and the
changes are applied every continuation change first — whichever side took which groups."""

from __future__ import annotations

import apsw
from test_scale_accuracy import _world

from engram.engine import Engine
from engram.index import queries
from engram.lineage import continuations
from engram.lineage.cache import CachedAccess, IngestCache


class _Some(continuations.Claims):
    """The groups ``lo:hi`` of the list, as if the other side had claimed the rest."""

    def __init__(self, lo: int, hi: int | None):
        super().__init__("")
        self.lo, self.hi = lo, hi

    def take(self, groups):
        yield from groups[self.lo:self.hi]


def _part(conn, trows, claims) -> tuple[list, list, dict]:
    cont: list = []
    disp: list = []
    stats = {"continuations": 0, "dispatch": 0}
    cache = IngestCache()
    continuations.compute(conn, trows, CachedAccess(conn, cache), stats, cache,
                          write=lambda sql, args: cont.append((sql, args)),
                          write_dispatch=lambda sql, args: disp.append((sql, args)),
                          claims=claims)
    return cont, disp, stats


def _applied(parts) -> list:
    m = apsw.Connection(":memory:")
    m.execute("CREATE TABLE continuations(from_tape INTEGER NOT NULL, to_tape INTEGER NOT NULL,"
              " score REAL NOT NULL, markers TEXT, anchor INTEGER,"
              " PRIMARY KEY(from_tape, to_tape)) WITHOUT ROWID")
    for part in parts:
        for sql, args in part:
            m.execute(sql, args)
    return list(m.execute("SELECT * FROM continuations ORDER BY from_tape, to_tape"))


def test_any_split_of_the_groups_gives_the_rows_of_the_whole_pass(world):
    _world(world, readers=3)
    eng = Engine(world.root)
    try:
        conn = eng.conn()
        with conn:  # the readers in a directory of their own: two groups
            conn.execute("UPDATE tapes SET cwd='/elsewhere' WHERE session LIKE 'r%'")
        ids = [r[0] for r in conn.execute("SELECT id FROM tapes ORDER BY tape_id")]
        trows = [queries.tapes(conn, ids)[i] for i in ids]
        c, d, whole_stats = _part(conn, trows, None)
        want = _applied([c, d])
        assert want and whole_stats["continuations"]  # a continuation to find
        groups = continuations._groups(trows)
        assert len(groups) == 2
        for k in range(len(groups) + 1):
            wc, wd, ws = _part(conn, trows, _Some(0, k))      # the worker's groups
            hc, hd, hs = _part(conn, trows, _Some(k, None))   # the rest, here
            assert _applied([wc, hc, wd, hd]) == want, k
            assert {n: ws[n] + hs[n] for n in ws} == whole_stats
    finally:
        eng.close()


def test_claims_hand_each_group_out_once_in_order():
    claims = continuations.Claims.create()
    try:
        groups = [("h", f"/d{i}") for i in range(7)]
        a, b = claims.take(groups), continuations.Claims(claims.path).take(groups)
        got_a, got_b = [], []
        for _i in range(3):   # the two sides in turn, then one of them alone
            got_a.append(next(a))
            got_b.append(next(b))
        got_a.extend(a)
        assert list(b) == []
        assert sorted(got_a + got_b) == sorted(groups)
        assert got_a[:3] == [groups[0], groups[2], groups[4]] and got_b == groups[1:6:2]
    finally:
        claims.remove()


def test_claims_left_by_a_killed_ingest_are_swept(tmp_path):
    """The counter lives in the user's tape directory under a tape temp file's name (0600): a
    process killed before ``remove`` leaves it for the next stager's ``sweep_temp``, which keeps
    a live process's counter."""
    import os
    import stat
    import subprocess
    import sys

    from engram import paths
    from engram.tape import writer

    mine = continuations.Claims.create()
    code = ("from engram.lineage import continuations\n"
            "print(continuations.Claims.create().path)\n")  # exits without remove(): a kill
    left = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()
    try:
        work = paths.user_tapes_dir()
        assert os.path.dirname(left) == os.path.dirname(mine.path) == str(work)
        assert stat.S_IMODE(os.stat(left).st_mode) == 0o600
        removed = writer.sweep_temp(work)
        assert [str(p) for p in removed] == [left]
        assert not os.path.exists(left) and os.path.exists(mine.path)
    finally:
        mine.remove()
