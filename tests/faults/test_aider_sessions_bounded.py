"""An Aider history of many sessions is indexed a session at a time (issue 21): each session, as
the stream completes it, is taped, indexed and committed on its own (``Ingestor._ingest_parts``),
the history's cursor last; neither the parse worker nor the ingest keeps the sessions already
handed on. The index and the tape files are those of the ingest that parses the history whole,
in-process and in the worker; an ingest killed part of the way leaves the sessions committed so
far and no cursor, and the next ingest finishes the work: the same tapes and index."""

from __future__ import annotations

import gc
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import apsw
import pytest
from test_ingest_stream import _index, _run

from engram.adapters import aider, redact
from engram.engine import Engine
from engram.index import store
from engram.ingest import ingestor, worker

HARNESS = Path(__file__).resolve().parents[1] / "data" / "harness"
AIDER = sorted((HARNESS / "aider").glob("*.aider.chat.history.md"))
_HEAD = re.compile(r"(?m)^(# aider chat started at \S+ \d\d):\d\d:\d\d")


def _bodies() -> list[str]:
    out = []
    for h in AIDER:
        out.extend(x for x in re.split(r"(?m)^(?=# aider chat started at )", h.read_text())
                   if x.strip())
    return out


def _history(path: Path, sessions: int) -> None:
    """``sessions`` real sessions, again and again, each under a header of its own (its minutes
    and seconds those of its number) with its words varied."""
    bodies = _bodies()
    with open(path, "w") as f:
        for n in range(sessions):
            b = _HEAD.sub(rf"\g<1>:{n // 60 % 60:02d}:{n % 60:02d}", bodies[n % len(bodies)])
            f.write(b.replace("the ", f"the{n} "))


def _setup(tmp_path: Path, sessions: int) -> tuple[Path, Path]:
    d = tmp_path / "aider" / "proj"
    d.mkdir(parents=True)
    _history(d / ".aider.chat.history.md", sessions)
    inp = AIDER[0].with_name(AIDER[0].name.replace("chat.history.md", "input.history"))
    shutil.copy(inp, d / ".aider.input.history")   # (prompt times: the headers' first pass)
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    (root / ".engram" / "config.yml").write_text(
        f"harnesses:\n  aider:\n    paths: [{tmp_path / 'aider'}]\n" + "".join(
            f"  {h}: false\n" for h in ("claude_code", "codex", "gemini_cli", "opencode", "cursor",
                                         "openclaw")))
    return root, d / ".aider.chat.history.md"


def _index_of(root: Path, home: Path) -> dict:
    """The index's rows (the packed fingerprints included) and the tape files."""
    out = {k: [r.replace(str(home), "~") for r in v] if isinstance(v, list) else v
           for k, v in _index(root, home).items()}
    eng = Engine(root)
    try:
        out["packed"] = sorted(map(repr, eng.conn().execute("SELECT * FROM packed")))
    finally:
        eng.close()
    assert out["packed"] and out["tapes"]
    return out


def _whole(tmp_path: Path, root: Path, monkeypatch, capsys) -> tuple[dict, dict]:
    """The history parsed whole (no stream, no worker): the summary and the index."""
    home = tmp_path / "home-whole"
    monkeypatch.setenv("ENGRAM_HOME", str(home))
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and not res.get("streamed")
    return res, _index_of(root, home)


def test_each_session_of_a_history_is_committed_as_it_completes_the_cursor_last(
        tmp_path, monkeypatch, capsys):
    """In-process and in the worker (its sessions two at a time at most between the two
    processes), one session a commit and three: every session is committed before the cursor
    (each commit of sessions finds no cursor in the index), and the index and tape files are
    those of the history parsed whole."""
    root, _p = _setup(tmp_path, 40)
    monkeypatch.chdir(root)
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)
    whole, plain = _whole(tmp_path, root, monkeypatch, capsys)
    n = whole["sessions"]
    assert n >= 25

    commits: list[tuple[int, int]] = []   # (sessions committed, cursors then in the index)
    real = ingestor.Ingestor._commit

    def commit(self, batch, pending, summary):
        if len(batch):
            cursors = self.conn.execute("SELECT count(*) FROM cursors").fetchone()[0]
            commits.append((len(batch), cursors))
        return real(self, batch, pending, summary)

    monkeypatch.setattr(ingestor.Ingestor, "_commit", commit)
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", 3)
    monkeypatch.setattr(worker.Parts, "MAX", 2)
    for i, (process, together) in enumerate(((False, 1), (True, 1), (True, 3))):
        home = tmp_path / f"home-{i}"
        monkeypatch.setenv("ENGRAM_HOME", str(home))
        monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 0 if process else 1 << 62)
        monkeypatch.setattr(ingestor, "STREAM_COMMIT_SESSIONS", together)
        commits.clear()
        res = _run(home, capsys)
        assert res["error_count"] == 0 and res["streamed"] == n and res["tapes_written"] == n
        assert sum(c[0] for c in commits) == n and {c[1] for c in commits} == {0}
        assert max(c[0] for c in commits) == together and len(commits) >= n // together
        assert _index_of(root, home) == plain
        assert not list(home.rglob("*.tmp")) and not list(tmp_path.rglob("*.pickle*"))


def test_the_worker_keeps_no_session_it_handed_on(tmp_path, monkeypatch):
    """``worker.stream`` with ``emit``: every session goes out as it completes (its files the
    receiver's), the answer holds none; what the parse holds does not grow with the number of
    sessions (a history 4x as long: the same peak, within a quarter; before, every session's
    staged tape and lines were kept to the end)."""
    monkeypatch.setattr(redact, "_redact_cached", redact._redact)   # (its memo: its own cap)
    monkeypatch.setattr(redact, "_redact_short", redact._redact)
    peaks = []
    for sessions in (60, 240):
        d = tmp_path / f"h{sessions}"
        d.mkdir()
        p = d / ".aider.chat.history.md"
        _history(p, sessions)
        got = []

        def emit(item, got=got):
            got.append((item[0].key, len(item[0].events)))
            worker.discard_part(item)

        def run(p=p, emit=emit):
            res = worker.stream("aider", str(p), "permissive", str(tmp_path), emit)
            assert res[0] == "ok" and res[1].sessions == [] and res[2] == [] and res[4] is None
        gc.collect()
        tracemalloc.start()
        try:
            run()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        whole = aider.ADAPTER.parse_source(p).sessions
        assert [(w.key, len(w.events)) for w in whole] == got and len(got) > sessions // 2
    assert peaks[1] < peaks[0] * 1.25, peaks
    assert not list(tmp_path.rglob("*.tmp")) and not list(Path(os.environ["ENGRAM_HOME"]).rglob("*.tmp"))


_KILLED = """
import os, sys, time
from engram.ingest import ingestor
ingestor.STREAM_MIN_BYTES = 0
ingestor.STREAM_COMMIT_SESSIONS = 4
ingestor.PROCESS_MIN_BYTES = 0 if sys.argv[2] == "worker" else 1 << 62
real = ingestor.Ingestor._take_part
taken = [0]
def take(self, *a):
    real(self, *a)
    taken[0] += 1
    if taken[0] == int(sys.argv[1]):
        open(os.environ["ENGRAM_HOME"] + "/../taken", "w").close()
        time.sleep(600)
ingestor.Ingestor._take_part = take
from engram.cli import main
sys.exit(main(["ingest", "--seal"]))
"""


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("where", ["worker", "here"])
def test_an_ingest_killed_mid_history_is_finished_by_the_next(tmp_path, monkeypatch, capsys,
                                                              where):
    """kill -9 once 20 sessions of 29 are taken in (committed 4 at a time): the index holds 20
    sessions and no cursor for the history; the next ingest (plain) then gives the tapes and
    index of one uninterrupted."""
    root, _p = _setup(tmp_path, 40)
    monkeypatch.chdir(root)
    whole, plain = _whole(tmp_path, root, monkeypatch, capsys)

    home = tmp_path / "home-killed"
    home.mkdir()
    flag = tmp_path / "taken"
    env = {**os.environ, "ENGRAM_HOME": str(home), "ENGRAM_NO_PROGRESS": "1",
           "PYTHONPATH": str(Path(ingestor.__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, "20", where], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the ingest never got 25 sessions in"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # the parse worker ends with its ingest (its temp files are then the next run's to sweep)
        deadline = time.monotonic() + 30
        while _alive(proc.pid):
            assert time.monotonic() < deadline, "the parse worker outlived its ingest"
            time.sleep(0.05)
    finally:
        if _alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()
        proc.stderr.close()
    conn = apsw.Connection(str(home / "index" / "index.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        tapes = conn.execute("SELECT count(*) FROM tapes").fetchone()[0]
        cursors = conn.execute("SELECT count(*) FROM cursors").fetchone()[0]
    finally:
        conn.close()
    assert tapes == 20 < whole["sessions"] and cursors == 0, (tapes, cursors)

    monkeypatch.setenv("ENGRAM_HOME", str(home))
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    res = _run(home, capsys, args=("ingest", "--seal"), clean=False)
    assert res["error_count"] == 0 and res["sessions"] == whole["sessions"]
    assert res["tapes_written"] <= whole["sessions"] - 20
    assert _index_of(root, home) == plain
    assert not list(home.rglob("*.tmp"))


def test_parts_wait_for_the_ingest_and_drop_what_it_abandons(tmp_path):
    """``worker.Parts``: sessions come out in order; the putting side waits while ``MAX`` are
    waiting; ``end`` makes ``get`` answer None once drained; after ``abandon``, what waited and
    what is put later is removed (its temp file), and nothing waits."""
    import threading
    from types import SimpleNamespace

    def item(i: int) -> tuple:
        tmp = tmp_path / f"{i}.tmp"
        tmp.write_bytes(b"x")
        return (SimpleNamespace(events=[{"k": "meta"}]), None, (None, str(tmp), {}))

    box = worker.Parts()
    box.MAX = 2
    put = threading.Thread(target=lambda: [box.put(item(i)) for i in range(6)] and box.end())
    put.start()
    time.sleep(0.3)
    assert len(box._items) == 2 and put.is_alive()   # (waiting on the ingest)
    got = [box.get() for _ in range(3)]
    assert [Path(g[2][1]).name for g in got] == ["0.tmp", "1.tmp", "2.tmp"]
    box.abandon()
    put.join(10)
    assert not put.is_alive() and box.get() is None
    assert sorted(p.name for p in tmp_path.glob("*.tmp")) == ["0.tmp", "1.tmp", "2.tmp"]
