"""The retrieval log: one JSON line per explain, search, brief or MCP call, and per use.

``<index dir>/retrieval_log/<YYYY-MM-DD>.jsonl`` (UTC day; directory 0700, files 0600), appended
with one ``write`` per line. A line holds the operation, the time, a hash of the query (xxh3-128 of
the query text or of the span's ``file:start-end``), the returned sessions with their scores, the
client (``cli`` / ``lsp`` / ``mcp``) and an answer id — never code, query text or transcript
text. ``retrieval.log: false`` in config turns it off (nothing is written, not even uses).

``{"op": "search", "t": "...Z", "answer": "<16 hex>", "query": "<32 hex>", "client": "cli",
"results": [{"session": "...", "tape_id": "...", "score": 0.61}, ...]}``; a use is
``{"op": "used", "t": ..., "session": ..., "answer": <id or null>, "client": ...}``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

from engram import paths
from engram.digest import text_hash
from engram.timestamps import utc_iso

log = logging.getLogger(__name__)

DIR_NAME = "retrieval_log"
OPS = ("explain", "search", "brief", "mcp", "used")
CLIENTS = ("cli", "lsp", "mcp", "api")
#: sessions recorded per answer.
MAX_RESULTS = 20


def log_dir(index_path: Path) -> Path:
    """The log directory beside the index file."""
    return Path(index_path).parent / DIR_NAME


def query_hash(query: str) -> str:
    return text_hash(query)


def enabled(config) -> bool:
    return bool(getattr(config, "retrieval", {}).get("log", True))


# the log directories made (or found) private by this process: index path -> the directory
# (``private_dir`` checks every level of the path: a server logs every explain)
_dirs: dict[str, Path] = {}


def append(index_path: Path, record: dict) -> Path:
    """Append one record (``t`` added when missing) to today's file; returns the file."""
    record = dict(record)
    record.setdefault("t", utc_iso(millis=True))
    key = os.fspath(index_path)
    d = _dirs.get(key)
    if d is None:
        d = _dirs[key] = paths.private_dir(log_dir(index_path))
    f = d / f"{record['t'][:10]}.jsonl"
    line = orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n"
    try:
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND, paths.FILE_MODE)
    except FileNotFoundError:  # the directory was removed meanwhile: made again
        _dirs.pop(key, None)
        d = _dirs[key] = paths.private_dir(log_dir(index_path))
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND, paths.FILE_MODE)
    try:
        os.fchmod(fd, paths.FILE_MODE)
        os.write(fd, line)
    finally:
        os.close(fd)
    return f


def answer_record(op: str, query: str, sessions: Iterable[dict], client: str) -> dict:
    """The record of one answer: ``sessions`` are result dicts (``session``, ``tape_id``, and
    ``score`` or ``confidence``); only ids and numbers are kept."""
    t = utc_iso(millis=True)
    results = []
    for s in list(sessions)[:MAX_RESULTS]:
        sc = s.get("score", s.get("confidence"))
        results.append({"session": s.get("session"), "tape_id": s.get("tape_id"),
                        "score": sc if isinstance(sc, (int, float)) else None})
    qh = query_hash(query)
    answer = text_hash(f"{op}\n{t}\n{qh}\n{client}\n" + "\n".join(
        str(r["tape_id"]) for r in results))[:16]
    return {"op": op, "t": t, "answer": answer, "query": qh, "client": client, "results": results}


def log_answer(engine, op: str, query: str, sessions: Iterable[dict], client: str) -> str | None:
    """Log an answer of ``engine`` unless the log is off; its answer id. Never raises: a log that
    cannot be written is reported in the process log and the answer goes on."""
    if not enabled(engine.config):
        return None
    rec = answer_record(op, query, sessions, client)
    try:
        append(engine.index_path, rec)
    except OSError as e:
        log.warning("retrieval log not written: %s", e.strerror or e)
        return None
    return rec["answer"]


def log_use(engine, session: str, client: str, answer: str | None = None) -> bool:
    """Record a use of ``session`` (``engram used``, the editor's "open session"); False when the
    log is off or cannot be written."""
    if not enabled(engine.config):
        return False
    try:
        append(engine.index_path, {"op": "used", "session": session, "answer": answer,
                                   "client": client})
    except OSError as e:
        log.warning("retrieval log not written: %s", e.strerror or e)
        return False
    return True


def read(index_path: Path) -> Iterator[dict]:
    """Every record, oldest file first, in file order; a line that is not JSON is skipped."""
    d = log_dir(index_path)
    if not d.is_dir():
        return
    for f in sorted(d.glob("*.jsonl")):
        try:
            data = f.read_bytes()
        except OSError:
            continue
        for line in data.splitlines():
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                yield rec


_USES: dict[str, tuple[tuple, dict[str, list[str]]]] = {}


def uses(index_path: Path) -> dict[str, list[str]]:
    """``{session: [times it was used]}`` from the log (memoised on the files' sizes)."""
    d = log_dir(index_path)
    try:
        files = sorted(d.glob("*.jsonl")) if d.is_dir() else []
        key = tuple((f.name, f.stat().st_size) for f in files)
    except OSError:
        return {}
    hit = _USES.get(str(d))
    if hit is not None and hit[0] == key:
        return hit[1]
    out: dict[str, list[str]] = {}
    for rec in read(index_path):
        if rec.get("op") == "used" and isinstance(rec.get("session"), str) and rec.get("t"):
            out.setdefault(rec["session"], []).append(rec["t"])
    _USES[str(d)] = (key, out)
    return out
