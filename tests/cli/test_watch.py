"""engram watch: appended log lines are ingested within a couple of seconds."""

from __future__ import annotations

import io
import shutil
import threading
import time
from pathlib import Path

from engram.engine import Engine
from engram.ingest.watcher import ChangeCollector, watch_forever

DATA = Path(__file__).resolve().parents[1] / "data" / "harness" / "claude_code"


def test_collector_debounces_and_dedupes():
    c = ChangeCollector(debounce=0.05)
    for _ in range(100):
        c.add("/a")
    c.add("/b")
    assert c.take(timeout=1.0) == ["/a", "/b"]
    assert c.take(timeout=0.05) == []


def test_watch_ingests_appends(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    (root / ".engram" / "config.yml").write_text(
        "harnesses:\n  claude_code:\n    paths: [%s]\n" % logs
        + "".join(f"  {h}: false\n" for h in ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider")))
    eng = Engine(root)
    stop = threading.Event()
    monkeypatch.setattr("sys.stdout", io.StringIO())
    th = threading.Thread(target=watch_forever, args=(eng,), kwargs={"stop": stop}, daemon=True)
    th.start()
    time.sleep(1.0)
    src = (DATA / "codemie__4c2ddfdc__v2.0.64.jsonl").read_text().splitlines(keepends=True)
    target = logs / "4c2ddfdc.jsonl"
    with open(target, "w") as f:
        for line in src:  # a burst of appends, as an agent writes them
            f.write(line)
            f.flush()
    deadline = time.monotonic() + 10
    found = []
    while time.monotonic() < deadline:
        res = eng.explain_text('def main():\n    print("Hello, World!")\n\nif __name__ == "__main__":\n    main()\n')
        found = res["sessions"]
        if found:
            break
        time.sleep(0.2)
    stop.set()
    th.join(timeout=5)
    eng.close()
    assert found and found[0]["session"] == "4c2ddfdc-b619-4525-8d03-1950fb1b0257"
    assert found[0]["live"] is True
