"""The one file watcher (``engram.ingest.watcher``) and ``engram watch``: real watchdog observers
on real files, a real ``engram watch`` process. Every wait is on a condition, with a deadline."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from engram.engine import Engine
from engram.ingest.watcher import Watcher, watch_forever

DATA = Path(__file__).resolve().parents[1] / "data" / "harness" / "claude_code"
LOG = DATA / "codemie__4c2ddfdc__v2.0.64.jsonl"
SESSION = "4c2ddfdc-b619-4525-8d03-1950fb1b0257"
HELLO = 'def main():\n    print("Hello, World!")\n\nif __name__ == "__main__":\n    main()\n'
OTHER_HARNESSES = ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider")

def _interruptible() -> None:
    """The child takes ^C (SIGINT) as a terminal's user would send it, even when this test run
    was started in the background by a shell, whose children inherit SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)



class Calls:
    """What the watcher's callbacks received, and a way to wait for it."""

    def __init__(self):
        self.cond = threading.Condition()
        self.batches: list[list[str]] = []
        self.sweeps = 0
        self.errors: list[BaseException] = []
        self.running = 0
        self.overlapped = False

    def _enter(self):
        self.running += 1
        self.overlapped |= self.running > 1

    def batch(self, paths):  # enters and leaves in two steps: an overlapping call would be seen
        with self.cond:
            self._enter()
        with self.cond:
            self.batches.append(list(paths))
            self.running -= 1
            self.cond.notify_all()

    def sweep(self):
        with self.cond:
            self._enter()
        with self.cond:
            self.sweeps += 1
            self.running -= 1
            self.cond.notify_all()

    def error(self, exc):
        with self.cond:
            self.errors.append(exc)
            self.cond.notify_all()

    def seen(self) -> set[str]:
        return {p for b in self.batches for p in b}

    def wait(self, pred, timeout=10.0, what="the watcher"):
        with self.cond:
            assert self.cond.wait_for(pred, timeout), f"timed out waiting for {what}: {self.batches}"


@pytest.fixture
def start():
    watchers = []

    def make(paths, calls: Calls, **kw) -> Watcher:
        kw.setdefault("sweep_s", None)
        w = Watcher(paths, calls.batch, on_sweep=calls.sweep, on_error=calls.error, **kw)
        w.start()
        watchers.append(w)
        return w

    yield make
    for w in watchers:
        w.stop()
        w.join(timeout=5)


def test_a_burst_is_one_batch_of_distinct_paths_without_ignored_or_temporary_files(tmp_path, start):
    logs = tmp_path / "logs"
    (logs / "index").mkdir(parents=True)
    calls = Calls()
    start([logs], calls, ignore=[logs / "index"], debounce_s=0.3)
    (logs / "index" / "index.sqlite").write_text("ours")
    (logs / "index" / "index.sqlite-wal").write_text("ours")
    (logs / "a.jsonl.tmp").write_text("half-written")
    (logs / "notes~").write_text("an editor's backup")
    a, b = logs / "a.jsonl", logs / "store.vscdb-wal"  # a store's WAL: ingest maps it to the store
    with open(a, "w") as f:
        for i in range(200):  # one event per flushed line
            f.write(f"line {i}\n")
            f.flush()
    b.write_text("other\n")
    calls.wait(lambda: {str(a), str(b)} <= calls.seen(), what="a and b")
    assert calls.seen() == {str(a), str(b)}  # the index dir and the temporary files are left out
    assert all(len(batch) == len(set(batch)) for batch in calls.batches)
    assert len(calls.batches) <= 3, calls.batches  # debounced (one, on an unloaded machine)


def test_a_steady_stream_is_reported_every_debounce_not_starved(tmp_path, start):
    """A batch is handed over ``debounce_s`` after its first event, however long the stream."""
    calls = Calls()
    start([tmp_path], calls, debounce_s=0.1)
    log = tmp_path / "live.jsonl"
    with open(log, "w") as f:
        f.write("first\n")
        f.flush()
        while True:  # keep appending until a batch arrives mid-stream
            f.write("more\n")
            f.flush()
            with calls.cond:
                if calls.cond.wait_for(lambda: calls.batches, 0.01):
                    break
    assert calls.batches[0] == [str(log)]


def test_rotation_reports_both_names_and_a_file_path_is_watched_through_its_parent(tmp_path, start):
    log = tmp_path / "session.jsonl"
    log.write_text("x\n")
    calls = Calls()
    start([log], calls, debounce_s=0.05)
    rotated = tmp_path / "session-1.jsonl"
    log.rename(rotated)
    calls.wait(lambda: {str(log), str(rotated)} <= calls.seen(), what="both names of a move")


def test_a_missing_directory_is_polled_for_and_watched_once_it_appears(tmp_path, start):
    later = tmp_path / "later" / "projects"
    calls = Calls()
    w = start([later], calls, debounce_s=0.05, poll_s=0.05)
    assert w.missing == [later]
    later.mkdir(parents=True)
    calls.wait(lambda: str(later) in calls.seen(), what="the new directory")
    assert w.missing == []
    log = later / "p" / "s.jsonl"
    log.parent.mkdir()
    log.write_text("hello\n")
    calls.wait(lambda: str(log) in calls.seen(), what="a file in the new directory")


def test_the_sweep_runs_every_sweep_s_without_events_and_callbacks_never_overlap(tmp_path, start):
    calls = Calls()
    start([tmp_path], calls, debounce_s=0.0, sweep_s=0.05)
    for i in range(20):
        (tmp_path / f"{i}.jsonl").write_text("x\n")
    calls.wait(lambda: calls.sweeps >= 3 and len(calls.seen()) == 20, what="three sweeps")
    assert not calls.overlapped


def test_a_failing_callback_is_reported_and_the_watcher_goes_on(tmp_path, start):
    calls = Calls()
    failures = []

    def flaky(paths):
        if not failures:
            failures.append(paths)
            raise RuntimeError("disk full")
        calls.batch(paths)

    w = Watcher([tmp_path], flaky, debounce_s=0.05, on_error=calls.error, sweep_s=None)
    w.start()
    try:
        (tmp_path / "one.jsonl").write_text("1\n")
        calls.wait(lambda: calls.errors, what="the error")
        assert str(calls.errors[0]) == "disk full"
        (tmp_path / "two.jsonl").write_text("2\n")
        calls.wait(lambda: str(tmp_path / "two.jsonl") in calls.seen(), what="the next batch")
    finally:
        w.stop()
        w.join(timeout=5)


def _repo(tmp_path) -> tuple[Path, Path]:
    logs = tmp_path / "logs"
    logs.mkdir()
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    (root / ".engram" / "config.yml").write_text(
        "harnesses:\n  claude_code:\n    paths: [%s]\n" % logs
        + "".join(f"  {h}: false\n" for h in OTHER_HARNESSES))
    return root, logs


def _append_session(target: Path) -> None:
    with open(target, "w") as f:
        for line in LOG.read_text().splitlines(keepends=True):  # a burst, as an agent writes it
            f.write(line)
            f.flush()


def test_watch_forever_ingests_appends_and_reports_through_its_callback(tmp_path):
    root, logs = _repo(tmp_path)
    eng = Engine(root)
    stop, ready = threading.Event(), threading.Event()
    reports: list[dict] = []
    cond = threading.Condition()

    def report(summary):
        with cond:
            reports.append(summary)
            cond.notify_all()

    th = threading.Thread(target=watch_forever, args=(eng, report, stop),
                          kwargs={"started": lambda w: ready.set()}, daemon=True)
    th.start()
    assert ready.wait(30)
    assert len(reports) == 1  # the first ingest
    _append_session(logs / "4c2ddfdc.jsonl")
    with cond:
        assert cond.wait_for(lambda: any(r.get("live") for r in reports[1:]), 20), reports
    found = eng.explain_text(HELLO)["sessions"]
    stop.set()
    th.join(timeout=10)
    assert not th.is_alive()
    eng.close()
    assert found and found[0]["session"] == SESSION and found[0]["live"] is True


def test_engram_watch_prints_one_json_line_per_ingest_and_stops_on_ctrl_c(tmp_path):
    root, logs = _repo(tmp_path)
    env = dict(os.environ, ENGRAM_NO_PROGRESS="1")
    proc = subprocess.Popen([sys.executable, "-m", "engram.cli", "watch"], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_interruptible)
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()
    try:
        first = orjson.loads(lines.get(timeout=60))  # the first ingest: the watcher runs
        assert first["index"].endswith("index.sqlite")
        shutil.copy(LOG, logs / "4c2ddfdc.jsonl")
        while True:  # each line is one complete JSON summary (stdout is flushed per ingest)
            summary = orjson.loads(lines.get(timeout=30))
            if summary.get("live"):
                break
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
