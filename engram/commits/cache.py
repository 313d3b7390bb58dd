"""The per-commit attribution cache (table ``commit_attr``, migration ``0006_commits``).

A commit never changes, so its attribution is computed once per repository and kept as JSON. A
row is stale when its ``version`` is not ``attribute.VERSION`` (``ATTRIBUTION_VERSION``) or when a tape indexed after it
(``tapes.id > tapes_max``) began before the commit was made (a session ingested late can own
its lines). Writing is best effort: a busy or read-only index only costs a recomputation.
"""

from __future__ import annotations

import logging

import orjson

log = logging.getLogger(__name__)

#: ``attribute.VERSION``, kept here so that ``engram.commits.quick`` reads cached rows without
#: importing the attribution (numpy, the index): bump when the attribution rules change
ATTRIBUTION_VERSION = 9


def tapes_max(conn) -> int:
    row = conn.execute("SELECT max(id) FROM tapes").fetchone()
    return int(row[0] or 0) if row else 0


def load(conn, repo: str, shas: list[str], version: int) -> dict[str, dict]:
    """The valid cached rows of ``shas``."""
    if not shas:
        return {}
    import apsw

    rows = {}
    for i in range(0, len(shas), 20000):
        chunk = shas[i:i + 20000]
        for sha, ver, tmax, committed, data in conn.execute(
                "SELECT sha, version, tapes_max, committed, data FROM commit_attr"
                " WHERE repo=? AND sha IN carray(?)", (repo, apsw.carray(tuple(chunk)))):
            if ver == version:
                rows[sha] = (tmax, committed, data)
    if not rows:
        return {}
    low = min(t for t, _c, _d in rows.values())
    late = conn.execute("SELECT id, first_t FROM tapes WHERE id > ?", (low,)).fetchall()
    earliest: dict[int, str | None] = {}   # per tapes_max: the earliest start of a tape since
    for tmax in {t for t, _c, _d in rows.values()}:
        starts = [ft or "" for tid, ft in late if tid > tmax]
        earliest[tmax] = min(starts) if starts else None
    out = {}
    for sha, (tmax, committed, data) in rows.items():
        first = earliest[tmax]
        if first is None or (committed and first > committed):
            out[sha] = orjson.loads(data)
    return out


def store(conn, repo: str, rows: list[tuple[str, str, dict]], version: int, tmax: int) -> None:
    """Keep ``(sha, committed, attribution)`` rows; never raises."""
    if not rows:
        return
    try:
        with conn:
            conn.executemany(
                "INSERT OR REPLACE INTO commit_attr(repo, sha, version, tapes_max, committed, data)"
                " VALUES (?,?,?,?,?,?)",
                [(repo, sha, version, tmax, committed, orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))
                 for sha, committed, obj in rows])
    except Exception as e:  # busy, read-only: the next run computes them again
        log.info("commit cache not written (%s)", type(e).__name__)
