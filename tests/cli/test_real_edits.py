"""Every real edit in the harness fixtures (all seven harnesses, as the harnesses wrote them) is
attributed to the session that made it: explaining the code an edit wrote ranks that edit's session
first, with the edit in one of its transcript windows (the first window is anchored on the edit that
wrote most of the lines: an edit's after-text also holds context lines other edits wrote)."""

from __future__ import annotations

import json
from pathlib import Path

from engram.engine import Engine
from engram.index import queries, schema
from engram.index.access import TapeAccess

HARNESS = Path(__file__).resolve().parents[1] / "data" / "harness"
MIN_LINES = 3          # edits that wrote at least this many lines ...
MIN_CHARS = 12         # ... of more than this many characters (not ``}`` or ``return x``)


def _config() -> str:
    cfg = "harnesses:\n"
    for h in ("claude_code", "codex", "gemini_cli", "cursor", "openclaw", "aider"):
        files = [str(f) for f in sorted((HARNESS / h).iterdir())
                 if not f.name.endswith(("SOURCES.md", ".aider.input.history"))]
        cfg += f"  {h}: {{paths: {json.dumps(files)}}}\n"
    oc = [str(HARNESS / "opencode/sqlite/gitai__opencode.db"), str(HARNESS / "opencode/storage_v2")]
    return cfg + f"  opencode: {{paths: {json.dumps(oc)}}}\n"


def test_every_real_edit_is_attributed_to_its_session(tmp_path):
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    (root / ".engram" / "config.yml").write_text(_config())
    eng = Engine(root=root)
    summary = eng.ingest(seal=True)
    assert summary["error_count"] == 0
    conn = eng.conn()
    edits = conn.execute(
        "SELECT e.tape, e.ofs, t.harness FROM events e JOIN tapes t ON t.id = e.tape"
        " WHERE e.kind = ? ORDER BY t.tape_id, e.ofs", (schema.KIND_CODE["code.edit"],)).fetchall()
    access = TapeAccess(conn)
    checked, harnesses, wrong = 0, set(), []
    for tape, ofs, harness in edits:
        t = queries.tapes(conn, [tape])[tape]
        (_o, ev), = access.read(t, range(ofs, ofs + 1))
        after = ev.get("after_text") or ""
        if sum(len(line.strip()) > MIN_CHARS for line in after.split("\n")) < MIN_LINES:
            continue
        checked += 1
        harnesses.add(harness)
        res = eng.explain_text(after)
        top = res["sessions"][0] if res["sessions"] else None
        shown = {e["offset"] for w in top["windows"] for e in w["events"]} if top else set()
        if top is None or top["tape_id"] != t.tape_id or ofs not in shown:
            wrong.append((harness, t.tape_id[:12], ofs, top and top["tape_id"][:12], sorted(shown)))
        elif top["windows"][0]["kind"] != "code.edit":
            wrong.append((harness, t.tape_id[:12], ofs, "first window", top["windows"][0]["kind"]))
    assert checked >= 40 and len(harnesses) >= 5, (checked, harnesses)
    assert not wrong, wrong
