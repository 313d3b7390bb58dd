"""The first code lens's count through a connection opened ahead (``direct.prepare``), and its
refs → tapes read without a lookup in ``tapes`` when the tapes' ids are one unbroken run.

* ``block_tapes`` gives what the join with ``tapes`` gives, with the ids in one run and with tapes
  deleted (one in the middle, the first, the last, all of them);
* a count through the prepared connection answers as a count through a new one, also after the
  index changed meanwhile (another session ingested) and after its file was replaced (the
  prepared connection, on the old file, is then not used); ``release`` closes it.
"""

from __future__ import annotations

import os
import shutil

import apsw
import pytest
from claude_log import World

from engram.cli import main
from engram.engine import Engine
from engram.query import direct

TEXT = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    z = y * 2\n    return z - 1\n"


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    return w


def _ingest(w: World, capsys) -> None:
    w.checkout()
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()


def _index(w: World, capsys, sessions: int = 5):
    for i in range(sessions):
        s = w.session(session_id=f"aaaa0303-0000-0000-0000-00000000000{i}").user(f"task {i}")
        if i % 2:
            s.read("a.py")
        else:
            s.write("a.py", TEXT)
        s.save()
    _ingest(w, capsys)
    eng = Engine(w.root)
    try:
        return eng.index_path
    finally:
        eng.close()


def _joined(conn: apsw.Connection) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for b, t in conn.execute("SELECT r.block, e.tape FROM refs r JOIN events e ON e.id = r.event"
                             " JOIN tapes t ON t.id = e.tape"):
        out.setdefault(b, set()).add(t)
    return out


def test_block_tapes_is_the_join_with_tapes(world, capsys):
    index = _index(world, capsys)
    conn = apsw.Connection(str(index))
    try:
        blocks = [b for (b,) in conn.execute("SELECT DISTINCT block FROM refs ORDER BY block")]
        ids = [t for (t,) in conn.execute("SELECT id FROM tapes ORDER BY id")]
        assert len(blocks) > 2 and len(ids) >= 5 and ids == list(range(ids[0], ids[0] + len(ids)))
        assert direct.block_tapes(conn, blocks) == _joined(conn)
        assert sum(map(len, _joined(conn).values())) > len(blocks)  # blocks of several tapes
        # tapes deleted, their events left: a gap, then the first, then the last
        for tape in (ids[len(ids) // 2], ids[0], ids[-1]):
            conn.execute("DELETE FROM tapes WHERE id = ?", (tape,))
            got = direct.block_tapes(conn, blocks)
            assert got == _joined(conn), tape
            assert all(tape not in ts for ts in got.values())
        conn.execute("DELETE FROM tapes")
        assert direct.block_tapes(conn, blocks) == {}
    finally:
        conn.close()


def test_a_prepared_connection_answers_as_a_new_one(world, capsys):
    index = _index(world, capsys, sessions=3)
    direct.release()
    try:
        fresh = direct.lens_counts(index, TEXT, "a.py")
        assert fresh and fresh[-1]["sessions"] >= 2
        direct.prepare(index)
        conn = direct._prepared[2]
        assert direct.lens_counts(index, TEXT, "a.py", close=False) == fresh
        assert direct._prepared[2] is conn  # read through it, kept for the next count
        # the index changes meanwhile (two more writers): the kept connection sees it
        for i in range(2):
            world.session(session_id=f"bbbb0303-0000-0000-0000-00000000000{i}").user("again") \
                .write(f"b{i}.py", TEXT).save()
        _ingest(world, capsys)
        later = direct.lens_counts(index, TEXT, "a.py", close=False)
        assert direct._prepared[2] is conn
        assert later == direct.lens_counts(index, TEXT, "a.py")  # (a new connection)
        assert later[-1]["sessions"] == fresh[-1]["sessions"] + 2
        # the file replaced (a rebuild): the kept connection is on the old one, not used
        other = index.parent / "copy.sqlite"
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(str(index) + suffix):
                shutil.copyfile(str(index) + suffix, str(other) + suffix)
        os.replace(other, index)
        assert direct.lens_counts(index, TEXT, "a.py", close=False) == later
        assert direct._prepared[2] is not conn
        with pytest.raises(apsw.ConnectionClosedError):
            conn.execute("SELECT 1")
        direct.release()
        assert direct._prepared is None
        # an index that is not there: nothing prepared, no count
        direct.prepare(index.parent / "missing.sqlite")
        assert direct._prepared is None
    finally:
        direct.release()
