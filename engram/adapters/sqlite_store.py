"""Read a harness's SQLite store without ever taking a write lock.

Harness databases (OpenCode's ``opencode.db``, Cursor's ``state.vscdb``) belong to a running
program. Engram opens them with ``file:<path>?mode=ro`` and ``SQLITE_OPEN_READONLY`` and reads
everything it needs inside one deferred read transaction (one consistent snapshot), then closes.
A read-only connection never blocks a WAL-mode writer.

When the file is locked anyway (rollback-journal mode with a writer mid-commit, an exclusive
``locking_mode``, or a read-only directory without the ``-shm`` file), the read is retried once,
copy-free, with ``immutable=1`` (no locks at all; committed WAL frames are not seen, so the result
may lag the writer) and the caller is told so through ``reasons``. If that fails too,
``StoreBusy`` carries a message saying what to do.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import apsw

from engram.errors import EngramError

T = TypeVar("T")

#: how long a read waits for a lock before falling back to ``immutable=1``
BUSY_TIMEOUT_MS = 2000

IMMUTABLE_REASON = ("database was locked by its writer: read without locks (immutable=1); "
                    "changes not yet checkpointed may be missing")


class StoreBusy(EngramError):
    """The store could not be read, even without locks: the user sees which file and why."""

    code = "E_SOURCE_BUSY"


def _uri(path: Path, **params: str) -> str:
    q = urllib.parse.quote(str(Path(path).resolve()))
    return f"file:{q}?" + urllib.parse.urlencode(params)


def _open(path: Path, busy_timeout_ms: int, **params: str) -> apsw.Connection:
    conn = apsw.Connection(_uri(path, **params),
                           flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.setbusytimeout(busy_timeout_ms)
    return conn


def _read(conn: apsw.Connection, fn: Callable[[apsw.Connection], T]) -> T:
    try:
        conn.execute("BEGIN DEFERRED")
        try:
            return fn(conn)
        finally:
            try:
                conn.execute("COMMIT")
            except apsw.Error:
                pass
    finally:
        conn.close()


def read_snapshot(path: Path, fn: Callable[[apsw.Connection], T], *,
                  busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> tuple[T, list[str]]:
    """Run ``fn(conn)`` on a read-only connection inside one read transaction.

    Returns ``(result, reasons)``; ``reasons`` is non-empty when the data came from the lock-free
    fallback. Raises ``StoreBusy`` when the store cannot be read at all, and lets ``apsw`` errors
    other than busy/locked/can't-open (e.g. ``SQLError`` for a missing table) through.
    """
    path = Path(path)
    if not path.is_file():
        raise StoreBusy("no such database file", path=str(path))
    retry = (apsw.BusyError, apsw.LockedError, apsw.CantOpenError, apsw.ReadOnlyError)
    try:
        return _read(_open(path, busy_timeout_ms, mode="ro"), fn), []
    except retry as first:
        try:
            return _read(_open(path, 0, mode="ro", immutable="1"), fn), [IMMUTABLE_REASON]
        except (apsw.BusyError, apsw.LockedError, apsw.CantOpenError, apsw.CorruptError,
                apsw.ReadOnlyError) as second:
            raise StoreBusy(
                f"database is locked by another process ({first}; the lock-free retry failed: "
                f"{second}); close the application or run the ingest again later",
                path=str(path)) from second
    except apsw.NotADBError as e:
        raise StoreBusy(f"not an SQLite database ({e})", path=str(path)) from e


def table_columns(conn: apsw.Connection, table: str) -> list[str]:
    """Column names of ``table`` (empty when it does not exist)."""
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
