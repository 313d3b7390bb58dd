"""Opening the index: migrations of an older index, also by several connections at once."""

from __future__ import annotations

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
    conn.execute("DROP INDEX events_file")
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
