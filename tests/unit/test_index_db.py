"""Opening the index: migrations of an older index, also by several connections at once."""

from __future__ import annotations

import os
import threading

import apsw
import pytest

from engram.errors import SchemaTooNew
from engram.index import db
from engram.index.schema import MIGRATIONS


def _older_index(path) -> None:
    """An index as the Engram before the last migration left it."""
    db.connect(path).close()
    conn = apsw.Connection(str(path))
    conn.execute("DROP TABLE packed")   # what 0008 created
    conn.execute("DELETE FROM migrations WHERE name = ?", (MIGRATIONS[-1][0],))
    conn.close()


def _migrations(path) -> set[str]:
    conn = apsw.Connection(str(path))
    try:
        return {r[0] for r in conn.execute("SELECT name FROM migrations")}
    finally:
        conn.close()


def test_an_older_index_is_migrated_on_open(tmp_path):
    path = tmp_path / "index.sqlite"
    _older_index(path)
    assert MIGRATIONS[-1][0] not in _migrations(path)
    db.connect(path).close()
    assert _migrations(path) == {name for name, _sql in MIGRATIONS}


@pytest.mark.parametrize("round_", range(10))
def test_connections_opening_an_older_index_at_once_all_succeed(tmp_path, round_):
    """A language server's query threads open the index together: the one that migrates holds
    the write lock, the others wait for it (none fails with "database is locked")."""
    path = tmp_path / "index.sqlite"
    _older_index(path)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_it():
        try:
            start.wait()
            db.connect(path).close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _migrations(path) == {name for name, _sql in MIGRATIONS}


def test_an_index_from_a_newer_engram_is_refused(tmp_path):
    path = tmp_path / "index.sqlite"
    db.connect(path).close()
    conn = apsw.Connection(str(path))
    conn.execute("INSERT INTO migrations(name) VALUES ('9999_future')")
    conn.close()
    with pytest.raises(SchemaTooNew):
        db.connect(path)


# -- the index is private ---------------------------------------------------------------------

def _modes(root) -> dict[str, str]:
    import os

    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = oct(os.stat(p).st_mode & 0o777)
    return out


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_index_wal_and_shm_are_private_whatever_the_umask(tmp_path, umask):
    import os

    old = os.umask(umask)
    try:
        conn = db.connect(tmp_path / "a" / "cache" / "index.sqlite")
        with conn:
            db.set_meta(conn, "probe", "x")  # a write: the WAL and shared memory exist now
        modes = _modes(tmp_path / "a")
        conn.close()
    finally:
        os.umask(old)
    assert modes == {"cache": "0o700", "cache/index.sqlite": "0o600",
                     "cache/index.sqlite-wal": "0o600", "cache/index.sqlite-shm": "0o600"}
    assert oct((tmp_path / "a").stat().st_mode & 0o777) == "0o700"  # created by us too


def test_an_index_left_readable_is_narrowed_when_opened_for_writing(tmp_path):
    import os

    d = tmp_path / "cache"
    path = d / "index.sqlite"
    db.connect(path).close()
    for p, mode in ((d, 0o755), (path, 0o644)):
        os.chmod(p, mode)
    (d / "index.lock").touch(mode=0o644)
    os.chmod(d / "index.lock", 0o644)
    db.connect(path, readonly=True).close()  # a reader changes nothing
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    db.connect(path).close()
    assert _modes(d) == {"index.sqlite": "0o600", "index.lock": "0o600"}
    assert oct(d.stat().st_mode & 0o777) == "0o700"


def test_an_index_that_cannot_be_opened_names_its_path(tmp_path):
    path = tmp_path / "index.sqlite"
    path.mkdir()  # a directory where the database should be
    with pytest.raises(db.IndexUnavailable) as e:
        db.connect(path)
    assert e.value.path == str(path) and "a directory, not an index file" in e.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.sqlite"]  # nothing made beside it


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user's needs root")
@pytest.mark.parametrize("readonly", [False, True])
def test_an_index_in_a_directory_of_another_user_is_refused(tmp_path, readonly, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    index = theirs / "index.sqlite"
    db.connect(tmp_path / "mine.sqlite").close()
    (tmp_path / "mine.sqlite").rename(index)  # a valid index, in their directory
    os.chown(theirs, 65534, 65534)
    with pytest.raises(db.IndexUnavailable) as e:
        db.connect(index, readonly=readonly)
    assert "belongs to another user (uid 65534)" in e.value.message and e.value.path == str(index)
    os.chown(theirs, os.geteuid(), os.getegid())
    os.chown(index, 65534, 65534)  # our directory, their file
    with pytest.raises(db.IndexUnavailable) as e:
        db.connect(index, readonly=readonly)
    assert "index.sqlite belongs to another user" in e.value.message
    os.chown(theirs, 65534, 65534)
    monkeypatch.setenv("ENGRAM_INDEX_ANY_OWNER", "1")  # the user's own say: used anyway
    db.connect(index, readonly=readonly).close()
    monkeypatch.delenv("ENGRAM_INDEX_ANY_OWNER")
    for p in [theirs, *theirs.iterdir()]:  # (SQLite run by root gives -wal/-shm the file's owner)
        os.chown(p, os.geteuid(), os.getegid())
    db.connect(index, readonly=readonly).close()  # ours again: opened
