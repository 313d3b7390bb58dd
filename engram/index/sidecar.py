"""Sidecars: ``<tape_id>.sidecar.jsonl`` beside a tape (or in the ``sidecars/`` directory beside
a tape directory, e.g. ``.engram/sidecars/``) add enrichment to a tape without touching it.

Each line is one JSON object of metadata about the tape — a reviewer's note, a ticket, a summary,
any keys. Its ``text`` (else ``note``, else ``summary``) is fingerprinted like any other block;
``at`` (optional) is the tape event offset it belongs to. A match on it makes ``explain`` return the
object labelled ``source: "enrichment"`` next to the raw window around ``at``.

Rows: one ``events`` row per line under the tape, with a *negative* offset (``-1 - line``) so it can
never collide with a tape event, kind ``other``; the object itself in ``live_events`` (the index
keeps what the tape does not). A sidecar's size and mtime are kept in ``cursors`` (adapter
``sidecar``); a changed sidecar replaces its rows. Without sidecars nothing here runs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import apsw
import orjson

from engram.index import store

log = logging.getLogger(__name__)

SUFFIX = ".sidecar.jsonl"
MAX_LINES = 10_000
OTHER_KIND = 99


def sidecar_files(tape_dirs: list[Path]) -> list[Path]:
    out: list[Path] = []
    for d in tape_dirs:
        for base in (d, d.parent / "sidecars"):
            if base.is_dir():
                for p in sorted(base.glob("*" + SUFFIX)):
                    if p not in out and p.is_file():
                        out.append(p)
    return out


def _records(p: Path) -> list[dict]:
    out = []
    with open(p, "rb") as f:
        for i, raw in enumerate(f):
            if i >= MAX_LINES:
                break
            raw = raw.strip()
            if not raw:
                continue
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                log.warning("%s:%d: not JSON, skipped", p, i + 1)
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


def index_sidecars(conn: apsw.Connection, tape_dirs: list[Path]) -> int:
    """Index new or changed sidecars of indexed tapes; returns how many files were (re)indexed."""
    files = sidecar_files(tape_dirs)
    if not files:
        return 0
    cursors = {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT source, size, mtime_ns FROM cursors WHERE adapter='sidecar'")}
    done = 0
    for p in files:
        tape_id = p.name[: -len(SUFFIX)]
        row = conn.execute("SELECT id, n_events FROM tapes WHERE tape_id=?", (tape_id,)).fetchone()
        if row is None:
            continue
        st = p.stat()
        if cursors.get(str(p)) == (st.st_size, st.st_mtime_ns):
            continue
        recs = _records(p)
        with conn:
            _replace(conn, row[0], recs)
            conn.execute("INSERT OR REPLACE INTO cursors(source, adapter, size, mtime_ns, state, live)"
                         " VALUES (?, 'sidecar', ?, ?, '{}', 0)", (str(p), st.st_size, st.st_mtime_ns))
        done += 1
    return done


def _replace(conn: apsw.Connection, tape: int, recs: list[dict]) -> None:
    old = "SELECT id FROM events WHERE tape=? AND ofs<0"
    conn.execute(f"DELETE FROM fts WHERE rowid IN ({old})", (tape,))
    conn.execute(f"DELETE FROM refs WHERE event IN ({old})", (tape,))
    conn.execute(f"DELETE FROM live_events WHERE event IN ({old})", (tape,))
    conn.execute("DELETE FROM events WHERE tape=? AND ofs<0", (tape,))
    next_event = conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0] + 1
    blocks = store.BlockIds(conn)
    for i, rec in enumerate(recs):
        body = dict(rec)
        body["source"] = "enrichment"
        text = next((body[k] for k in ("text", "note", "summary") if isinstance(body.get(k), str)), None)
        if text is not None:
            body["text"] = text
        eid = next_event
        next_event += 1
        conn.execute("INSERT INTO events(id, tape, ofs, kind, t) VALUES (?,?,?,?,?)",
                     (eid, tape, -1 - i, OTHER_KIND, body.get("t") if isinstance(body.get("t"), str) else None))
        conn.execute("INSERT INTO live_events VALUES (?,?)",
                     (eid, orjson.dumps(body, option=orjson.OPT_SORT_KEYS)))
        if text and text.strip():
            conn.execute("INSERT INTO fts(rowid, text) VALUES (?,?)", (eid, text[: store.MAX_FTS_CHARS]))
        for btext, role, line0 in store.event_blocks(body):
            _btext, bid = blocks.id_of(btext)
            conn.execute("INSERT OR IGNORE INTO refs VALUES (?,?,?,?)", (bid, eid, role, line0))
    if blocks.new:
        store.Batch(conn)._insert_blocks(blocks.new, blocks.ids)


def body(conn: apsw.Connection, event: int) -> dict:
    """The sidecar object behind an event row (``{}`` when it is not a sidecar row)."""
    r = conn.execute("SELECT body FROM live_events WHERE event=?", (event,)).fetchone()
    return orjson.loads(r[0]) if r else {}
