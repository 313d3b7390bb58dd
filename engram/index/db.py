"""Connections: WAL, busy timeout, migrations, and the fingerprint-parameter check.

Settings are applied inside ``connect()``, never at import. One writer at a time (SQLite's own
lock, waited on with a busy timeout); readers never block in WAL mode.

The index is private: its directory 0700, the database 0600 before SQLite first opens it (SQLite
gives ``-wal`` and ``-shm`` the database's mode), whatever the umask; an index left readable by an
older Engram is narrowed when opened for writing.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import apsw

from engram import fingerprint, paths
from engram.env import env_flag
from engram.errors import EngramError, IndexMismatch, NotIndexed, SchemaTooNew
from engram.index.schema import MIGRATIONS

log = logging.getLogger(__name__)

SCHEMA_VERSION = len(MIGRATIONS)
SQLITE_MAX_PATH = 512
"""The longest absolute path SQLite's unix VFS opens (its ``MAX_PATHNAME``)."""
BUSY_TIMEOUT_MS = 30_000
MMAP_BYTES = 256 << 20   # of the index file mapped by a reading connection (``connect(mmap=...)``)


def fingerprint_params() -> dict:
    from engram.index.queries import INDEX_HASH_BITS
    from engram.index.store import BLOCK_RULES

    return {"fp_version": fingerprint.FP_VERSION, "k": fingerprint.DEFAULT_K,
            "w": fingerprint.DEFAULT_W, "index_hash_bits": INDEX_HASH_BITS, "blocks": BLOCK_RULES}


class IndexUnavailable(EngramError):
    """The index file cannot be opened (permissions, a missing or read-only directory)."""

    code = "index-unavailable"


def index_file(path) -> Path:
    """``path`` as the index's file; ``IndexUnavailable`` when it names a directory (``/``, ``..``,
    an existing directory), where neither the index nor its lock beside it can be made."""
    path = Path(path)
    if path.name in ("", ".", "..") or path.is_dir():
        raise IndexUnavailable("a directory, not an index file: point index.path or --index at a "
                               "file (for example <directory>/index.sqlite)", path=str(path))
    why = _not_yours(path)
    if why:
        raise IndexUnavailable(f"{why}: the index holds your transcripts' text, so Engram keeps it "
                               "in a directory of yours; point index.path or --index there",
                               path=str(path))
    return path


def _not_yours(path: Path) -> str | None:
    """Why the index at ``path`` is not the user's own, or None. Its directory must belong to
    the user (or not exist yet: it is then made, 0700): in a directory of someone else's (a
    committed config's ``index.path: /tmp/index.sqlite``), another user could make the index,
    its ``-wal``/``-shm`` or its lock before Engram does, owned by them, and then read every
    event written there or plant answers; ``paths.private_file`` cannot narrow a file of theirs.
    The files that exist must be the user's too (a directory handed over with them in it)."""
    if env_flag("ENGRAM_INDEX_ANY_OWNER"):  # (the user's own say, never a config's: e.g. a
        return None                          # filesystem that shows their files as another uid's)
    me = os.geteuid()
    d = path.parent
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return None
    except OSError:
        return None  # (connect's own error names what is wrong with it)
    if st.st_uid != me:
        return f"its directory {d} belongs to another user (uid {st.st_uid})"
    for p in (path, *_siblings(path)):
        try:
            owner = os.lstat(p).st_uid
        except OSError:
            continue
        if owner != me:
            return f"{p.name} belongs to another user (uid {owner})"
    return None


def connect(path: Path, *, create: bool = True, readonly: bool = False,
            mmap: bool = True) -> apsw.Connection:
    """Open (and, if ``create``, initialise or migrate) the index at ``path``.

    ``mmap``: read the file through a memory map (``MMAP_BYTES``), as the readers that answer
    queries do. An ingest opens it without one: its mapped pages count in its resident memory,
    and again in its parse worker's (~370 MB of the two at 16k sessions), for reads that SQLite's
    page cache and the OS serve as well.

    Raises ``NotIndexed`` when it does not exist and ``create`` is false, ``SchemaTooNew`` for an
    index from a newer Engram, ``IndexMismatch`` when fingerprint parameters differ (rebuild).
    """
    path = index_file(path)
    if (not create or readonly) and not path.exists():
        raise NotIndexed("no index yet; run `engram ingest`", path=str(path))
    if not readonly:
        _make_private(path)
    flags = apsw.SQLITE_OPEN_READONLY if readonly else (
        apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE)
    try:
        conn = apsw.Connection(str(path), flags=flags)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        if not readonly:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA cache_size=-65536")
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute(f"PRAGMA mmap_size={MMAP_BYTES if mmap else 0}")
        if not readonly:
            _migrate(conn)
        _check_meta(conn, path, readonly)
    except apsw.NotADBError:
        raise NotIndexed("the index file is not a database (corrupt); run `engram ingest --rebuild`",
                         path=str(path)) from None
    except apsw.CorruptError:
        raise NotIndexed("the index is corrupt; run `engram ingest --rebuild`", path=str(path)) from None
    except apsw.CantOpenError:
        full = len(os.path.abspath(path))
        if full > SQLITE_MAX_PATH:
            raise IndexUnavailable(
                f"path too long for SQLite ({full} characters, at most {SQLITE_MAX_PATH}): point "
                "ENGRAM_HOME, index.path or --index at a shorter path", path=str(path)) from None
        raise IndexUnavailable(
            "cannot open the index: check that you own it and its directory (ls -ld), or point "
            "--index elsewhere", path=str(path)) from None
    return conn


def _make_private(path: Path) -> None:
    """The index's directory 0700 and its files 0600 (``engram.paths``): created so before SQLite
    opens them, narrowed when an older Engram left them readable. The ingest lock beside the index
    (``Engine._ingest_lock``, created just before this) too."""
    paths.private_dir(path.parent)
    paths.create_private(path)
    for sibling in _siblings(path):
        paths.private_file(sibling)


def _siblings(path: Path) -> tuple[Path, ...]:
    """The files beside the index at ``path``: SQLite's ``-wal`` and ``-shm``, the ingest lock."""
    return Path(f"{path}-wal"), Path(f"{path}-shm"), path.with_suffix(".lock")


def _migrate(conn: apsw.Connection) -> None:
    """Apply the migrations this index lacks. An up-to-date index is only read; otherwise the
    migrations run in one ``BEGIN IMMEDIATE`` transaction, so that two connections opening an
    old index at once (a server's query threads) take turns through the busy timeout instead of
    one failing with "database is locked" (two deferred transactions that both read, then both
    write, cannot wait for each other)."""
    if _up_to_date(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        _apply_migrations(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _up_to_date(conn: apsw.Connection) -> bool:
    try:
        done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
        have = {r[0] for r in conn.execute("SELECT key FROM meta WHERE key = 'fingerprint'")}
    except apsw.SQLError:  # a new, empty database
        return False
    return done == {m for m, _ in MIGRATIONS} and bool(have)


def _apply_migrations(conn: apsw.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY)")
    done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
    if len(done) > len(MIGRATIONS) or any(n not in {m for m, _ in MIGRATIONS} for n in done):
        raise SchemaTooNew("the index was written by a newer Engram; upgrade or rebuild")
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        conn.execute(sql)
        conn.execute("INSERT INTO migrations(name) VALUES (?)", (name,))
    params = fingerprint_params()
    have = dict(conn.execute("SELECT key, value FROM meta"))
    if "fingerprint" not in have:
        conn.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (json.dumps(params, sort_keys=True),))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))


def _check_meta(conn: apsw.Connection, path: Path, readonly: bool) -> None:
    try:
        have = dict(conn.execute("SELECT key, value FROM meta"))
    except apsw.SQLError:
        raise NotIndexed("the index has no schema; run `engram ingest --rebuild`", path=str(path)) from None
    fp = have.get("fingerprint")
    if fp is not None and json.loads(fp) != fingerprint_params():
        raise IndexMismatch(
            f"the index was built with fingerprint parameters {fp}, this Engram uses "
            f"{json.dumps(fingerprint_params(), sort_keys=True)}; run `engram ingest --rebuild`",
            path=str(path))


def get_meta(conn: apsw.Connection, key: str, default=None):
    for (v,) in conn.execute("SELECT value FROM meta WHERE key=?", (key,)):
        return v
    return default


def set_meta(conn: apsw.Connection, key: str, value: str) -> None:
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
