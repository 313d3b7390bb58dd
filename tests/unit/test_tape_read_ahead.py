"""Tapes read ahead on a background thread (``access.read_ahead``, started by explain for the
sessions likeliest to get windows): the query then finds them in the reader's LRU, waits for a
read under way instead of reading twice, and a tape that cannot be read still raises its own
``CorruptTape`` when the query reads it."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from engram.errors import CorruptTape
from engram.index import access, queries
from engram.tape import reader, write_tape

META = {"k": "meta", "t": "2026-01-01T00:00:00Z", "harness": "claude_code", "session": "s1"}


@pytest.fixture
def lru(monkeypatch):
    monkeypatch.delenv(reader.ENV_CACHE_MB, raising=False)
    monkeypatch.setattr(reader, "_lru", type(reader._lru)())
    monkeypatch.setattr(reader, "_lru_bytes", 0)
    monkeypatch.setattr(reader, "_caps", [])
    return reader


def _row(path, live: int = 0) -> queries.TapeRow:
    fields = dict.fromkeys(queries.TapeRow._fields)
    fields.update(path=str(path), live=live, tape_id=reader.tape_id_of(path), n_events=2)
    return queries.TapeRow(**fields)


def _tape(tmp_path, name: str, size: int = 5_000):
    d = tmp_path / name
    d.mkdir()
    ev = {"k": "msg.in", "t": "2026-01-01T00:00:01Z", "text": name + " " + "x" * size}
    return write_tape(d, [dict(META, session=name), ev]).path


def _drain() -> None:
    pool = access._ahead._pool
    if pool is not None:
        pool.submit(lambda: None).result()  # one worker: everything before it is done


def test_read_ahead_fills_the_lru_and_skips_live_tapes(tmp_path, lru):
    a, b, live = _tape(tmp_path, "a"), _tape(tmp_path, "b"), _tape(tmp_path, "c")
    access.read_ahead([_row(a), _row(b), _row(live, live=1)])
    _drain()
    held = {k[0] for k in lru._lru}
    assert held == {str(a), str(b)}   # the live tape's events come from the index, not its file
    assert access._ahead._pending == {}
    before = dict(lru._lru)
    tape = _row(a)
    evs = access.TapeAccess(conn=None).read(tape, range(1, 2))
    assert evs[0][1]["text"].startswith("a ")
    assert dict(lru._lru) == before   # taken from the LRU: nothing read again


def test_a_query_waits_for_the_read_under_way_instead_of_reading_twice(tmp_path, lru, monkeypatch):
    path = _tape(tmp_path, "slow")
    started, release, reads = threading.Event(), threading.Event(), []
    real = reader.read_raw

    def slow_read(p):
        reads.append(threading.current_thread().name)
        started.set()
        assert release.wait(10)
        return real(p)

    monkeypatch.setattr(reader, "read_raw", slow_read)
    access.read_ahead([_row(path)])
    assert started.wait(10)
    got = []
    t = threading.Thread(target=lambda: got.append(access.TapeAccess(None).read(_row(path), range(1, 2))))
    t.start()
    t.join(0.2)
    assert t.is_alive()   # waiting for the read ahead, not reading the file itself
    release.set()
    t.join(10)
    assert got and got[0][0][1]["text"].startswith("slow ")
    assert len(reads) == 1 and reads[0].startswith("engram-tape-ahead")


def test_a_corrupt_tape_read_ahead_is_reported_by_the_query_itself(tmp_path, lru):
    path = _tape(tmp_path, "bad")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    access.read_ahead([_row(path)])   # no exception here, nor on the background thread
    _drain()
    assert not lru._lru
    with pytest.raises(CorruptTape):
        access.TapeAccess(None).read(_row(path), range(1, 2))


def test_a_forked_child_reads_ahead_on_its_own_thread(tmp_path, lru):
    """A child forked after a read ahead (its parent's background thread does not exist there)
    still reads ahead and reads: nothing waits for a thread that is not there."""
    import os

    first, second = _tape(tmp_path, "first"), _tape(tmp_path, "second")
    access.read_ahead([_row(first)])
    _drain()
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when both reads work
        ok = False
        try:
            access.read_ahead([_row(second)])
            evs = access.TapeAccess(None).read(_row(second), range(1, 2))
            ok = evs[0][1]["text"].startswith("second ")
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 30
    while True:  # (a child left waiting for its parent's thread would hang: killed, and failed)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's read did not finish in 30 s")
        time.sleep(0.02)
    assert os.waitstatus_to_exitcode(status) == 0
