"""Bad input: each case gets a clear error naming the file (and line); the rest is still ingested;
nothing already indexed is lost. Plus kill -9 mid-ingest and two concurrent ingests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import wait_until

from engram.cli import main
from engram.engine import Engine

DATA = Path(__file__).resolve().parents[1] / "data" / "harness" / "claude_code"
HELLO_LOG = "codemie__4c2ddfdc__v2.0.64.jsonl"
HELLO = ('#!/usr/bin/env python3\n\n# Simple hello world program\ndef main():\n'
         '    print("Hello, World!")\n\nif __name__ == "__main__":\n    main()\n')


@pytest.fixture
def repo(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(DATA / HELLO_LOG, logs / HELLO_LOG)
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    cfg = "harnesses:\n  claude_code:\n    paths: [%s]\n" % logs
    cfg += "".join(f"  {h}: false\n" for h in ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider"))
    (root / ".engram" / "config.yml").write_text(cfg)
    (root / "hello.py").write_text(HELLO)
    monkeypatch.chdir(root)
    return root


def ingest(capsys, *extra):
    code = main(["ingest", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def top_session(capsys):
    assert main(["explain", "hello.py:4-5", "--brief"]) == 0
    res = json.loads(capsys.readouterr().out)
    return res["sessions"][0]["session"] if res["sessions"] else None


SID = "4c2ddfdc-b619-4525-8d03-1950fb1b0257"


def test_malformed_json_lines_name_file_and_line(repo, capsys):
    log = repo.parent / "logs" / HELLO_LOG
    lines = log.read_text().splitlines(keepends=True)
    lines.insert(3, "{this is not json\n")
    lines.insert(6, "[1, 2, 3]\n")
    log.write_text("".join(lines))
    res = ingest(capsys, "--seal")
    errs = [e["error"] for e in res["errors"]]
    assert {e["line"] for e in errs} >= {4, 7}
    assert all(e["path"] == str(log) and e["code"] == "E_ADAPTER_PARSE" for e in errs)
    assert top_session(capsys) == SID  # the rest of the file was still ingested


def test_truncated_last_line_is_waited_for(repo, capsys):
    log = repo.parent / "logs" / HELLO_LOG
    with open(log, "a") as f:
        f.write('{"type": "user", "message": {"role": "user", "content": "half a li')
    res = ingest(capsys, "--seal")
    assert res["error_count"] == 0  # an unterminated last line may still be being written
    assert top_session(capsys) == SID


def test_binary_junk_log(repo, capsys):
    junk = repo.parent / "logs" / "junk.jsonl"
    junk.write_bytes(os.urandom(20000).replace(b"\n", b"") + b"\n" + os.urandom(300) + b"\n")
    res = ingest(capsys, "--seal")
    assert any(e["error"]["path"] == str(junk) for e in res["errors"])
    assert top_session(capsys) == SID


def test_corrupt_and_mismatched_tapes_in_a_tape_dir(repo, capsys):
    ingest(capsys, "--seal")
    tapes = repo / ".engram" / "tapes"
    tapes.mkdir(parents=True, exist_ok=True)
    good = next((Path(os.environ["ENGRAM_HOME"]) / "tapes").glob("*.jsonl.zst"))
    bad_name = tapes / ("f" * 32 + ".jsonl.zst")
    bad_name.write_bytes(good.read_bytes())
    truncated = tapes / ("e" * 32 + ".jsonl.zst")
    truncated.write_bytes(good.read_bytes()[:40])
    res = ingest(capsys)
    paths = {e["error"]["path"]: e["error"]["message"] for e in res["errors"]}
    assert "does not match" in paths[str(bad_name)]
    assert "zstd" in paths[str(truncated)] or "truncated" in paths[str(truncated)]
    assert top_session(capsys) == SID  # nothing already indexed was lost


def test_vanished_source(repo, capsys):
    ingest(capsys, "--seal")
    eng = Engine(repo)
    from engram.adapters import get
    from engram.ingest.ingestor import Ingestor, Source

    conn = eng.conn()
    ing = Ingestor(repo, eng.config, conn)
    gone = repo.parent / "logs" / "gone.jsonl"
    ing.sources = lambda only=None: [Source(get("claude_code"), gone)]  # listed, then deleted
    res = ing.run(seal=True)
    eng.close()
    assert res["error_count"] == 1 and res["errors"][0]["error"]["path"] == str(gone)
    assert top_session(capsys) == SID


def test_huge_tool_output(repo, capsys):
    """A 500 MB tool output is ingested without blowing up; the tape keeps a bounded copy."""
    log = repo.parent / "logs" / "huge.jsonl"
    big = "x" * (500 * 1024 * 1024)
    base = {"sessionId": "99999999-0000-0000-0000-000000000000", "cwd": "/w", "version": "2.0.64",
            "timestamp": "2025-12-11T10:00:00.000Z", "isSidechain": False, "userType": "external"}
    with open(log, "w") as f:
        f.write(json.dumps({**base, "type": "user", "uuid": "u1", "parentUuid": None,
                            "message": {"role": "user", "content": "run the big command"}}) + "\n")
        f.write(json.dumps({**base, "type": "assistant", "uuid": "u2", "parentUuid": "u1",
                            "message": {"id": "m1", "role": "assistant", "model": "claude-x",
                                        "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                     "input": {"command": "yes x"}}]}}) + "\n")
        f.write('{"type":"user","uuid":"u3","parentUuid":"u2","sessionId":"%s","cwd":"/w",'
                '"version":"2.0.64","timestamp":"2025-12-11T10:00:01.000Z","message":{"role":"user",'
                '"content":[{"type":"tool_result","tool_use_id":"t1","content":"' % base["sessionId"])
        f.write(big)
        f.write('"}]}}\n')
    del big
    res = ingest(capsys, "--seal")
    assert res["error_count"] == 0 and res["sealed"] == 2
    tape_sizes = [p.stat().st_size for p in (Path(os.environ["ENGRAM_HOME"]) / "tapes").glob("*.zst")]
    assert max(tape_sizes) < 5 * 1024 * 1024
    assert top_session(capsys) == SID


def _many_logs(repo: Path, n: int) -> None:
    src = (DATA / "codemie__session-624a4a58__compaction.jsonl").read_text()
    logs = repo.parent / "logs"
    for i in range(n):
        sid = f"00000000-0000-0000-0000-{i:012d}"
        (logs / f"{sid}.jsonl").write_text(src.replace("624a4a58", f"{i:08d}"))


def _engram(repo: Path, *args) -> subprocess.Popen:
    env = dict(os.environ, ENGRAM_NO_PROGRESS="1")
    return subprocess.Popen([sys.executable, "-m", "engram.cli", *args], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_kill_9_mid_ingest_leaves_a_consistent_index(repo, capsys):
    _many_logs(repo, 12)
    p = _engram(repo, "ingest", "--seal")
    tape_dirs = (Path(os.environ["ENGRAM_HOME"]) / "tapes", repo / ".engram" / "tapes")

    def first_tape_or_exit():
        return p.poll() is not None or any(any(d.glob("*.zst")) for d in tape_dirs if d.is_dir())

    # mid-ingest: the first tape of the run is on disk (or, on a very fast machine, the run ended)
    wait_until(first_tape_or_exit, 120, message="the ingest to write its first tape")
    p.send_signal(signal.SIGKILL)
    p.wait()
    res = ingest(capsys, "--seal")  # picks up where it stopped
    assert res["error_count"] == 0
    eng = Engine(repo)
    conn = eng.conn()
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n_tapes = conn.execute("SELECT count(*) FROM tapes").fetchone()[0]
    dup = conn.execute("SELECT count(*) FROM (SELECT tape_id FROM tapes GROUP BY tape_id"
                       " HAVING count(*) > 1)").fetchone()[0]
    orphans = conn.execute("SELECT count(*) FROM events WHERE tape NOT IN (SELECT id FROM tapes)").fetchone()[0]
    eng.close()
    assert n_tapes == 13 and dup == 0 and orphans == 0
    assert top_session(capsys) == SID
    again = ingest(capsys)
    assert again["nothing_to_do"]


def test_two_concurrent_ingests(repo, capsys):
    _many_logs(repo, 6)
    a, b = _engram(repo, "ingest", "--seal"), _engram(repo, "ingest", "--seal")
    outs = [p.communicate(timeout=300) for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, outs
    eng = Engine(repo)
    conn = eng.conn()
    assert conn.execute("SELECT count(*) FROM tapes").fetchone()[0] == 7
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    eng.close()
    assert top_session(capsys) == SID
