"""Archival without deletion: ``engram gc --older-than 90d [--dry-run]``.

Sealed sessions whose last event is older than the cut-off leave the hot index: their rows
(events, text references, full-text rows, lineage edges) move to the *archive index*,
``archive.sqlite`` beside the index (the same schema, built from the same tapes), and the hot
index keeps only the tape's row, marked ``archived`` in its ``meta_json`` — so a later ingest
does not index the tape again, and ``engram tapes``/``view``/``show`` still list and open it.
Tapes are never touched. ``engram explain --all`` also asks the archive index and appends what it
finds there, marked ``"archived": true``. Notes of kind ``warning`` and ``decision`` never age
out; other notes do, like any session. ``engram ingest --rebuild`` brings every archived session
back into the hot index (the archive is an optimisation of a derived index, not data).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import orjson

from engram.errors import EngramError
from engram.timestamps import utc_iso

KEEP_KINDS = ("warning", "decision")
ARCHIVE_NAME = "archive.sqlite"
_AGE = re.compile(r"^\s*(\d+)\s*([dwh]?)\s*$")


def parse_age(text: str) -> float:
    """``90d`` / ``12w`` / ``36h`` / ``90`` (days) → seconds; ``EngramError`` otherwise."""
    m = _AGE.match(str(text))
    if not m or int(m.group(1)) <= 0:
        raise EngramError(f"--older-than wants a duration like 90d, 12w or 36h, got {text!r}")
    n, unit = int(m.group(1)), m.group(2) or "d"
    return n * {"d": 86400, "w": 7 * 86400, "h": 3600}[unit]


def archive_path(index_path: Path) -> Path:
    return Path(index_path).with_name(ARCHIVE_NAME)


def _keeps(harness: str | None, meta: dict) -> bool:
    note = meta.get("note")
    return harness == "engram" and isinstance(note, dict) and note.get("kind") in KEEP_KINDS


def candidates(conn, age_s: float, now: float | None = None) -> list[dict]:
    """The sealed tapes last active before ``now - age_s`` that may leave the hot index."""
    cutoff = utc_iso((time.time() if now is None else now) - age_s, millis=True)
    out = []
    for tid, tape_id, path, harness, last_t, mj in conn.execute(
            "SELECT id, tape_id, path, harness, last_t, meta_json FROM tapes WHERE live=0 AND "
            "last_t IS NOT NULL AND last_t < ? ORDER BY last_t, tape_id", (cutoff,)):
        meta = orjson.loads(mj or b"{}")
        if meta.get("archived") or _keeps(harness, meta) or not path:
            continue
        out.append({"id": tid, "tape_id": tape_id, "path": path, "harness": harness,
                    "last_t": last_t, "label": meta.get("label")})
    return out


def _strip_rows(conn, tid: int) -> None:
    """A tape's rows, all but its ``tapes`` row (``store.delete_tape`` without the last step)."""
    ev = "SELECT id FROM events WHERE tape=?"
    conn.execute(f"DELETE FROM fts WHERE rowid IN ({ev})", (tid,))
    conn.execute(f"DELETE FROM refs WHERE event IN ({ev})", (tid,))
    conn.execute(f"DELETE FROM live_events WHERE event IN ({ev})", (tid,))
    conn.execute(f"DELETE FROM edges WHERE from_event IN ({ev}) OR to_event IN ({ev})", (tid, tid))
    conn.execute(f"DELETE FROM tombstones WHERE event IN ({ev})", (tid,))
    conn.execute("DELETE FROM continuations WHERE from_tape=? OR to_tape=?", (tid, tid))
    conn.execute("DELETE FROM events WHERE tape=?", (tid,))


def archive(conn, index_path: Path, age_s: float, *, dry_run: bool = False,
            now: float | None = None) -> dict:
    """Move the old sessions out of the hot index (module docstring):
    ``{archived, kept_notes, dry_run, archive, sessions: [...]}``."""
    from engram.index import db, store
    from engram.tape import reader

    todo = candidates(conn, age_s, now)
    kept = conn.execute("SELECT count(*) FROM tapes WHERE harness='engram' AND live=0").fetchone()[0]
    kept -= sum(1 for t in todo if t["harness"] == "engram")
    where = archive_path(index_path)
    report = {"archived": len(todo), "dry_run": dry_run, "archive": str(where),
              "notes_kept": kept,
              "sessions": [{k: t[k] for k in ("tape_id", "harness", "last_t", "label")}
                           for t in todo[:200]]}
    if dry_run or not todo:
        return report
    arch = db.connect(where, create=True)
    try:
        have = {r[0] for r in arch.execute("SELECT tape_id FROM tapes")}
        batch = store.Batch(arch)
        for t in todo:
            if t["tape_id"] in have:
                continue
            events = reader.read_tape(t["path"])
            batch.add(store.SessionRecord(t["tape_id"], events, path=t["path"],
                                          source_path=events[0].get("source_path")))
            if batch.n_events >= 50_000:
                batch.commit([])
                batch = store.Batch(arch)
        batch.commit([])
    finally:
        arch.close()
    with conn:
        for t in todo:
            _strip_rows(conn, t["id"])
            conn.execute("UPDATE tapes SET meta_json = json_set(coalesce(meta_json, '{}'), "
                         "'$.archived', json('true')) WHERE id=?", (t["id"],))
    return report


def archived_sessions(index_path: Path, explain_fn) -> list[dict]:
    """``explain_fn(conn)`` on the archive index (when there is one), its sessions marked
    ``archived: true``."""
    from engram.index import db

    where = archive_path(index_path)
    if not where.exists():
        return []
    arch = db.connect(where, create=False)
    try:
        res = explain_fn(arch)
    finally:
        arch.close()
    for s in res.get("sessions", []):
        s["archived"] = True
    return res.get("sessions", [])
