"""A big single-session log is parsed, taped and prepared as a stream (``worker.stream``): it
must leave exactly the index and the tape files of the ingest that holds the session whole —
tape ids are content addresses shared between machines — in the worker and in-process, with
parts small enough to cut every session many times; a corrupt tape already there under its
name is repaired from the log."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from engram.cli import main
from engram.engine import Engine
from engram.index import store
from engram.ingest import ingestor, worker

HARNESS = Path(__file__).resolve().parents[1] / "data" / "harness"
TABLES = ("tapes", "events", "blocks", "refs", "fingerprints", "block_lines", "boilerplate",
          "edges", "tombstones", "continuations", "live_events", "cursors", "errors", "fts")


def _index(root: Path, home: Path) -> dict:
    eng = Engine(root)
    try:
        conn = eng.conn()
        out = {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}"))) for t in TABLES}
    finally:
        eng.close()
    out["cursors"] = [c.split(", '20")[0] for c in out["cursors"]]  # (the time of the run)
    out["tape files"] = {p.name: p.read_bytes() for p in (home / "tapes").glob("*.zst")}
    return out


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    logs = tmp_path / "logs"
    logs.mkdir()
    for p in sorted((HARNESS / "claude_code").glob("*.jsonl")):
        shutil.copy(p, logs / p.name)
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    (root / ".engram" / "config.yml").write_text(
        f"harnesses:\n  claude_code:\n    paths: [{logs}]\n" + "".join(
            f"  {h}: false\n" for h in ("codex", "gemini_cli", "opencode", "cursor", "openclaw",
                                         "aider")))
    return root, logs


def _run(home: Path, capsys, args=("ingest", "--rebuild", "--seal"), clean=True) -> dict:
    if clean:
        shutil.rmtree(home / "tapes", ignore_errors=True)
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_streamed_sessions_index_what_whole_sessions_index(tmp_path, monkeypatch, capsys):
    root, _logs = _setup(tmp_path)
    monkeypatch.chdir(root)
    home = Path(os.environ["ENGRAM_HOME"])
    streamed = []
    real = worker.stream
    monkeypatch.setattr(worker, "stream", lambda *a: streamed.append(a[1]) or real(*a))

    # boilerplate counts from 2 blocks: the table is not empty, and its counts are compared
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["sessions"] == 8 and res["tapes_written"] == 8
    plain = _index(root, home)
    assert not streamed and plain["boilerplate"]

    # in-process, cut into parts of 3 events (every call's events kept together)
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", 3)
    monkeypatch.setattr(store, "BOILERPLATE_DEFER", 1)   # counts updated after every part
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["sessions"] == 8 and res["tapes_written"] == 8
    assert len(streamed) == 8 and res["streamed"] == 8
    assert _index(root, home) == plain

    # in the parse worker (its own process: its parts of the default size)
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 0)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["sessions"] == 8 and res["tapes_written"] == 8
    assert res["streamed"] == 8 and len(streamed) == 8
    assert _index(root, home) == plain
    assert not list(home.rglob("*.tmp"))  # the prepared parts and the tapes' temp files


def _streamed(tmp_path, monkeypatch, capsys) -> tuple[Path, Path, dict]:
    """The fixtures ingested as streams in this process: (repo, home, their index)."""
    root, _logs = _setup(tmp_path)
    monkeypatch.chdir(root)
    home = Path(os.environ["ENGRAM_HOME"])
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    _run(home, capsys)
    return root, home, _index(root, home)


def test_a_corrupt_tape_is_written_again_from_its_streamed_log(tmp_path, monkeypatch, capsys):
    root, home, good = _streamed(tmp_path, monkeypatch, capsys)
    victim = sorted((home / "tapes").glob("*.zst"))[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    res = _run(home, capsys, clean=False)   # --rebuild: every tape is checked against its name
    assert res["error_count"] == 0 and res.get("tapes_repaired") == 1
    assert _index(root, home) == good


def test_a_tape_already_there_is_checked_as_a_stream(tmp_path, monkeypatch, capsys):
    """An index made afresh beside the tapes (``--rebuild``): each tape already there under its
    name is checked before it is indexed (a corrupt one is repaired: above) — as a stream, never
    held whole (``reader.check_raw``; ``read_raw`` held a 1.5 GB session's tape, ~1 GB)."""
    from engram.tape import reader

    root, home, good = _streamed(tmp_path, monkeypatch, capsys)
    checked = []
    real = reader.check_raw
    monkeypatch.setattr(reader, "check_raw", lambda p: checked.append(p) or real(p))

    def whole(path):
        raise AssertionError(f"{path} read whole")

    monkeypatch.setattr(reader, "read_raw", whole)
    res = _run(home, capsys, clean=False)
    assert res["error_count"] == 0 and not res.get("tapes_repaired")
    assert len(checked) == res["sessions"] == len(good["tape files"])
    assert _index(root, home) == good
