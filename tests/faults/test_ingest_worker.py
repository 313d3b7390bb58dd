"""The parse worker's answers: pickles streamed in frames (never held whole), an answer that
cannot be pickled replaced by crash reports, a worker gone half-way through an answer; and the
compact form a big session travels in (events cut to what the index reads, plus their canonical
JSON) gives the very tape the whole events give."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

from engram import adapters
from engram.cli import main
from engram.engine import Engine
from engram.index import store
from engram.ingest import ingestor, worker
from engram.tape import writer

HARNESS = Path(__file__).resolve().parents[1] / "data" / "harness"


def _pipe(*answers, fallback=lambda: "fallback") -> io.BufferedReader:
    out = io.BytesIO()
    for a in answers:
        worker._write_answer(out, a, fallback)
    return io.BufferedReader(io.BytesIO(out.getvalue()))


def test_answers_stream_in_frames_and_come_back_whole(monkeypatch):
    monkeypatch.setattr(worker, "FRAME_BYTES", 4096)  # many frames, pickler frames cut across
    big = [bytes([i % 251]) * (i * 997 % 20000) for i in range(300)]
    arr = np.arange(100_000, dtype=np.int64)
    f = _pipe(("ok", big, arr), {"small": 1})
    first = worker._read_answer(f)
    assert first[0] == "ok" and first[1] == big and np.array_equal(first[2], arr)
    assert worker._read_answer(f) == {"small": 1}
    assert worker._read_answer(f) is worker._END


def test_an_answer_that_cannot_be_pickled_is_replaced():
    f = _pipe(["ok", lambda: None], ["next"], fallback=lambda: ["crash"])
    assert worker._read_answer(f) == ["crash"]
    assert worker._read_answer(f) == ["next"]


def test_a_worker_gone_half_way_through_an_answer():
    out = io.BytesIO()
    worker._write_answer(out, ["ok", b"x" * 100_000], lambda: None)
    cut = io.BufferedReader(io.BytesIO(out.getvalue()[:50_000]))
    with pytest.raises(EOFError):
        worker._read_answer(cut)


@pytest.mark.skipif(not hasattr(orjson, "Fragment"), reason="this orjson has no Fragment")
@pytest.mark.parametrize("harness", ["claude_code", "codex", "openclaw", "cursor"])
def test_compact_sessions_give_the_same_tape_and_index_fields(harness):
    for log in sorted((HARNESS / harness).glob("*.jsonl")):
        whole = adapters.get(harness).parse_source(log)
        res = worker.parse_many([(harness, str(log))], "permissive", compact=True)[0]
        assert res[0] == "ok" and res[3] is not None
        for sess, full, lines in zip(res[1].sessions, whole.sessions, res[3]):
            tape = [sess.events[0]] + [orjson.Fragment(b) for b in lines[1:]]
            assert writer.encode_events(tape) == writer.encode_events(full.events)
            assert [store.light_event(e) for e in full.events[1:]] == sess.events[1:]
            assert lines == [writer.encode_event(e) for e in full.events]


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


@pytest.mark.skipif(not hasattr(orjson, "Fragment"), reason="this orjson has no Fragment")
@pytest.mark.parametrize("seal", [True, False], ids=["sealed", "live"])
def test_compact_groups_index_what_whole_events_index(tmp_path, monkeypatch, capsys, seal):
    """The ingest through the worker with every group compact (tapes written from the events'
    canonical JSON, live rows from it, the index from the cut-down events) leaves the index and
    the tapes of the ingest that parses in-process."""
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
    monkeypatch.chdir(root)
    home = Path(__import__("os").environ["ENGRAM_HOME"])
    args = ["ingest", "--rebuild"] + (["--seal"] if seal else [])

    def run() -> dict:
        shutil.rmtree(home / "tapes", ignore_errors=True)
        assert main(args) == 0
        res = json.loads(capsys.readouterr().out)
        assert res["error_count"] == 0 and res["sessions"] == 8
        return _index(root, home)

    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    plain = run()
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(ingestor, "COMPACT_MIN_BYTES", 0)
    compact = run()
    assert compact == plain
    # parsed and prepared in the worker, not compact: the batch holds the events light
    monkeypatch.setattr(ingestor, "COMPACT_MIN_BYTES", 1 << 62)
    lightened = []
    light = store.light_event
    monkeypatch.setattr(store, "light_event", lambda ev: lightened.append(1) or light(ev))
    assert run() == plain
    assert lightened
    assert (len(plain["tape files"]) == 8) is seal and (len(plain["live_events"]) > 0) is not seal



ORPHAN_PARENT = """
import subprocess, sys, time
from engram.ingest import worker
p = worker.ParseProcess()
# another process holds the worker's request pipe open, as the worker's own long request would
# keep it from reading the end of the pipe: only its parent's death can tell it to stop
holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                          pass_fds=(p.proc.stdin.fileno(),))
print(p.proc.pid, holder.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # exited, not yet reaped
    except FileNotFoundError:
        return True


def test_a_worker_whose_ingest_is_killed_exits():
    """kill -9 of the process that started a parse worker: the worker goes too, within about a
    second, even when the end of its request pipe does not reach it (a worker busy with a long
    request reads it only when it is done, having parsed what was sent ahead for nobody)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", ORPHAN_PARENT], stdout=subprocess.PIPE,
                              cwd=str(Path(worker.__file__).resolve().parents[2]))
    pid, holder = (int(x) for x in parent.stdout.readline().split())
    try:
        assert not _gone(pid)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(pid), "the parse worker outlived its ingest by 5 s"
    finally:
        for p in (pid, holder):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
