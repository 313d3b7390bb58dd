"""Token usage per session, as each harness logs it.

* **Claude Code**: the tape's ``meta.usage`` (the adapter keeps the *last* ``message.usage`` of
  each message id: Claude Code repeats it on every streaming record of one message).
  ``input_tokens`` / ``output_tokens`` / ``cache_read_input_tokens`` /
  ``cache_creation_input_tokens`` → input / output / cache read / cache write.
* **Codex CLI**: the rollout's ``event_msg`` ``token_count`` records carry a running total
  (``info.total_token_usage``); the largest one is the session's. OpenAI counts cached tokens inside
  ``input_tokens``: input = ``input_tokens - cached_input_tokens``, cache read =
  ``cached_input_tokens``, reasoning = ``reasoning_output_tokens`` (part of output).
* **Gemini CLI**: each model message's ``tokens`` (``input``, ``output``, ``cached``,
  ``thoughts``), the last version of each message id (the JSONL form rewrites messages);
  input = ``input - cached``, reasoning = ``thoughts``.

* **OpenCode**: each assistant message's ``tokens`` (``input``, ``output``, ``reasoning``,
  ``cache.read``, ``cache.write``), once per message id — from the SQLite store's ``message``
  table (read-only snapshot) or the older ``storage/message/<session>/*.json``.

Other harnesses (Cursor, OpenClaw, Aider) give ``None``: their usage is not read yet.
The Codex, Gemini and OpenCode figures are read from the session's source log when it still exists (the
tape keeps no usage for them); gone logs give ``None``, never a guess.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import orjson

from engram.index import queries
from engram.index.access import TapeAccess

log = logging.getLogger(__name__)

KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
        "reasoning_tokens")


def empty() -> dict:
    return dict.fromkeys(KEYS, 0)


def _int(v) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0


def of_tape(engine, tape_id: str) -> dict | None:
    conn = engine.conn()
    t = queries.tape_by_id(conn, tape_id)
    if t is None:
        return None
    try:
        if t.harness == "claude_code":
            meta = TapeAccess(conn).read(t, range(1))
            u = (meta[0][1] if meta else {}).get("usage")
            if not isinstance(u, dict):
                return None
            return {"input_tokens": _int(u.get("input_tokens")),
                    "output_tokens": _int(u.get("output_tokens")),
                    "cache_read_tokens": _int(u.get("cache_read_input_tokens")),
                    "cache_write_tokens": _int(u.get("cache_creation_input_tokens")),
                    "reasoning_tokens": 0}
        if t.harness == "codex" and t.source_path:
            return codex_usage(Path(t.source_path))
        if t.harness == "gemini_cli" and t.source_path:
            return gemini_usage(Path(t.source_path), t.session)
        if t.harness == "opencode" and t.source_path:
            return opencode_usage(Path(t.source_path), t.session)
    except Exception as e:  # a log gone, busy or malformed: no usage, never a failed stats
        log.info("usage of %s not read: %s", tape_id[:12], type(e).__name__)
    return None


def codex_usage(path: Path) -> dict | None:
    last = None
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        for raw in f:
            if b'"token_count"' not in raw:
                continue
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            p = rec.get("payload") if isinstance(rec, dict) else None
            info = p.get("info") if isinstance(p, dict) and p.get("type") == "token_count" else None
            tot = info.get("total_token_usage") if isinstance(info, dict) else None
            # a running total never goes down: the largest is the session's (a trailing record of
            # zeros, as a trimmed or restarted log has, is not a reset of what was spent)
            if isinstance(tot, dict) and (last is None or _size(tot) >= _size(last)):
                last = tot
    if last is None:
        return None
    cached = _int(last.get("cached_input_tokens"))
    return {"input_tokens": max(_int(last.get("input_tokens")) - cached, 0),
            "output_tokens": _int(last.get("output_tokens")), "cache_read_tokens": cached,
            "cache_write_tokens": _int(last.get("cache_write_input_tokens")),
            "reasoning_tokens": _int(last.get("reasoning_output_tokens"))}


def _size(u: dict) -> int:
    return _int(u.get("total_tokens")) or (_int(u.get("input_tokens")) + _int(u.get("output_tokens")))


def gemini_usage(path: Path, session: str | None) -> dict | None:
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    msgs: dict = {}
    try:
        doc = json.loads(text)
        recs = doc.get("messages", []) if isinstance(doc, dict) else doc
    except ValueError:
        recs = []
        for line in text.splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and isinstance(r.get("$set"), dict) and "messages" in r["$set"]:
                recs = list(r["$set"]["messages"])
            else:
                recs.append(r)
    for i, m in enumerate(recs if isinstance(recs, list) else []):
        if not isinstance(m, dict) or not isinstance(m.get("tokens"), dict):
            continue
        if session and m.get("sessionId") not in (None, session):
            continue
        msgs[m.get("id", i)] = m["tokens"]
    if not msgs:
        return None
    out = empty()
    for tk in msgs.values():
        cached = _int(tk.get("cached"))
        out["input_tokens"] += max(_int(tk.get("input")) - cached, 0)
        out["output_tokens"] += _int(tk.get("output"))
        out["cache_read_tokens"] += cached
        out["reasoning_tokens"] += _int(tk.get("thoughts"))
    return out


def opencode_usage(path: Path, session: str | None) -> dict | None:
    msgs: dict[str, dict] = {}
    if path.is_file():
        from engram.adapters.sqlite_store import read_snapshot

        rows, _reasons = read_snapshot(path, lambda c: c.execute(
            "SELECT id, data FROM message WHERE session_id=? ORDER BY id", (session,)).fetchall())
        for mid, data in rows:
            try:
                msgs[mid] = json.loads(data)
            except (TypeError, ValueError):
                continue
    elif path.is_dir():
        st = path / "storage" if (path / "storage" / "message").is_dir() else path
        for p in sorted((st / "message" / (session or "")).glob("*.json")):
            try:
                m = json.loads(p.read_text(encoding="utf-8", errors="replace"))
            except (OSError, ValueError):
                continue
            if isinstance(m, dict):
                msgs[str(m.get("id") or p.name)] = m
    out = empty()
    seen = False
    for m in msgs.values():
        tk = m.get("tokens") if isinstance(m, dict) else None
        if not isinstance(tk, dict):
            continue
        seen = True
        cache = tk.get("cache") if isinstance(tk.get("cache"), dict) else {}
        out["input_tokens"] += _int(tk.get("input"))
        out["output_tokens"] += _int(tk.get("output"))
        out["reasoning_tokens"] += _int(tk.get("reasoning"))
        out["cache_read_tokens"] += _int(cache.get("read"))
        out["cache_write_tokens"] += _int(cache.get("write"))
    return out if seen else None
