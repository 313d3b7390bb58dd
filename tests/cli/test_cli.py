"""End-to-end CLI tests on the real Claude Code fixtures (main([...]) in-process)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engram.cli import main
from engram.paths import index_dir

DATA = Path(__file__).resolve().parents[1] / "data" / "harness" / "claude_code"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "explain"
HELLO = ('#!/usr/bin/env python3\n\n# Simple hello world program\ndef main():\n'
         '    print("Hello, World!")\n\nif __name__ == "__main__":\n    main()\n')


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A repo whose config points Claude Code at a copy of the real fixtures."""
    logs = tmp_path / "logs"
    shutil.copytree(DATA, logs, ignore=shutil.ignore_patterns("*.md"))
    for p in logs.iterdir():
        p.touch()  # just written, as by a running agent: live until sealed
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    (root / ".engram" / "config.yml").write_text(
        "harnesses:\n  claude_code:\n    paths: [%s]\n" % logs)
    for name in ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider"):
        with open(root / ".engram" / "config.yml", "a") as f:
            f.write(f"  {name}: false\n")
    (root / "hello.py").write_text(HELLO)
    monkeypatch.chdir(root)
    return root


def strip_timing(obj):
    obj = json.loads(json.dumps(obj))
    obj["stats"].pop("elapsed_ms", None)
    return obj


def normalise_tape_ids(obj):
    """Tape ids hash the log's absolute path (a tmp dir here): name them by first appearance."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)
    import re

    ids: dict[str, str] = {}
    for m in re.finditer(r'"([0-9a-f]{32})"', text):
        ids.setdefault(m.group(1), f"<tape-{len(ids) + 1}>")
    for tid, name in ids.items():
        text = text.replace(tid, name)
    return text + "\n"


def test_ingest_incremental_and_explain(repo, capsys):
    first = run_json(capsys, "ingest", "--seal")
    assert first["parsed"] == 8 and first["sealed"] == 8 and first["error_count"] == 0
    assert first["tapes_written"] == 8
    again = run_json(capsys, "ingest")
    assert again["nothing_to_do"] and again["parsed"] == 0 and again["skipped"] == 8
    code, out, _ = run(capsys, "ingest", "--pretty")
    assert "Nothing new" in out

    res = run_json(capsys, "explain", "hello.py:4-5")
    top = res["sessions"][0]
    # the session's own sessionId, the Write that produced the function
    assert top["session"] == "4c2ddfdc-b619-4525-8d03-1950fb1b0257"
    assert top["harness"] == "claude_code" and top["via"] == "direct" and top["tier"] == "agent"
    assert top["confidence"] >= 0.9
    w = top["windows"][0]
    assert w["kind"] == "code.edit" and w["file"] == "/tmp/private/hello.py"
    assert w["request"]["text"] == "create hello.py, md and js"
    anchor = [e for e in w["events"] if e["offset"] == w["anchor"]][0]
    assert 'print("Hello, World!")' in anchor["after_text"]
    assert res["span"] == {"file": "hello.py", "start": 4, "end": 5, "requested": [4, 5]}
    assert set(res) == {"span", "sessions", "lineage", "tombstones", "truncated", "stats"}


def test_explain_golden(repo, capsys, golden_compare):
    run_json(capsys, "ingest", "--seal")
    res = strip_timing(run_json(capsys, "explain", "hello.py:1-8", "--before", "2", "--after", "2"))
    golden_compare(GOLDEN / "claude_code_hello_py.json", normalise_tape_ids(res))


def test_comment_line_attributed_to_the_edit(repo, capsys):
    run_json(capsys, "ingest", "--seal")
    res = run_json(capsys, "explain", "hello.py:3-3", "--brief")
    # a single short line is expanded to its enclosing block; the session that edited it is found
    assert res["sessions"] and res["sessions"][0]["session"] == "4c2ddfdc-b619-4525-8d03-1950fb1b0257"


def test_determinism_after_deleting_cache(repo, capsys):
    run_json(capsys, "ingest", "--seal")
    a = strip_timing(run_json(capsys, "explain", "hello.py:1-8"))
    shutil.rmtree(index_dir())
    run_json(capsys, "ingest", "--seal")
    b = strip_timing(run_json(capsys, "explain", "hello.py:1-8"))
    assert a == b
    # and from tapes alone (the logs are gone): tapes are the truth
    shutil.rmtree(index_dir())
    shutil.rmtree(repo.parent / "logs")
    user_tapes = list((Path.home() / ".." ).glob("nothing"))  # noqa: F841 (tapes live in ENGRAM_HOME)
    run_json(capsys, "ingest")
    c = strip_timing(run_json(capsys, "explain", "hello.py:1-8"))
    assert c == a


def test_no_evidence_is_not_an_error(repo, capsys):
    run_json(capsys, "ingest", "--seal")
    (repo / "other.py").write_text("def unrelated_function(alpha, beta):\n    return alpha ** beta - 17\n")
    res = run_json(capsys, "explain", "other.py:1-2")
    assert res["sessions"] == []


def test_live_sessions_are_provisional_then_sealed(repo, capsys):
    live = run_json(capsys, "ingest")
    assert live["live"] == 8 and live["tapes_written"] == 0
    res = run_json(capsys, "explain", "hello.py:4-5", "--brief")
    assert res["sessions"][0]["live"] is True
    assert res["sessions"][0]["tape_id"].startswith("live-")
    status = run_json(capsys, "status")
    assert status["counts"]["live_sessions"] == 8
    sealed = run_json(capsys, "ingest", "--seal")
    assert sealed["sealed"] == 8
    res = run_json(capsys, "explain", "hello.py:4-5", "--brief")
    assert res["sessions"][0]["live"] is False and not res["sessions"][0]["tape_id"].startswith("live-")
    assert run_json(capsys, "status")["counts"]["live_sessions"] == 0


def test_appended_lines_after_sealing_continue_in_a_new_tape(repo, capsys):
    run_json(capsys, "ingest", "--seal")
    log = repo.parent / "logs" / "codemie__4c2ddfdc__v2.0.64.jsonl"
    last = json.loads(log.read_text().splitlines()[-1])
    rec = {"type": "user", "sessionId": last["sessionId"], "cwd": last.get("cwd"),
           "version": last.get("version"), "uuid": "11111111-2222-3333-4444-555555555555",
           "parentUuid": last.get("uuid"), "timestamp": "2025-12-10T20:00:00.000Z",
           "message": {"role": "user", "content": "now explain the pelican migration plan"}}
    with open(log, "a") as f:
        f.write(json.dumps(rec) + "\n")
    res = run_json(capsys, "ingest", "--seal")
    assert res["parsed"] == 1 and res["sealed"] == 1 and res["tapes_written"] == 1
    tapes = run_json(capsys, "tapes")
    cont = [t for t in tapes if t["continues"]]
    assert len(cont) == 1 and cont[0]["events"] == 2  # meta + the new message
    assert cont[0]["session"] == "4c2ddfdc-b619-4525-8d03-1950fb1b0257"
    found = run_json(capsys, "search", "pelican migration")
    assert found["results"][0]["tape_id"] == cont[0]["tape_id"]


def test_view_show_tapes(repo, capsys):
    run_json(capsys, "ingest", "--seal")
    tapes = run_json(capsys, "tapes")
    assert len(tapes) == 8 and all(t["coverage"] in ("full", "degraded") for t in tapes)
    hello = [t for t in tapes if t["label"] == "create hello.py, md and js"][0]
    v = run_json(capsys, "view", hello["tape_id"][:10], "--at", "7", "--before", "1", "--after", "1")
    assert [e["offset"] for e in v["events"]] == [6, 7, 8] and v["at"] == 7
    raw_code, raw, _ = run(capsys, "show", hello["tape_id"], "--raw")
    lines = [json.loads(x) for x in raw.splitlines()]
    assert lines[0]["k"] == "meta" and lines[0]["session"] == "4c2ddfdc-b619-4525-8d03-1950fb1b0257"
    code, out, _ = run(capsys, "view", hello["tape_id"], "--at", "7", "--pretty")
    assert "→ #7" in out


def test_errors_are_clear(repo, capsys):
    code, out, err = run(capsys, "explain", "missing.py:1-3")
    assert code == 1 and err.startswith("Error: missing.py") and out == ""
    code, _, err = run(capsys, "explain", "hello.py:9-3")
    assert code == 1 and "bad line range" in err
    code, _, err = run(capsys, "view", "deadbeefdeadbeef")
    assert code == 1 and "no indexed tape" in err


@pytest.mark.parametrize("argv, message", [
    (["explain", "hello.py:3-5", "--min-confidence", "2"], "--min-confidence: expected a number in [0, 1], got 2"),
    (["explain", "hello.py:3-5", "--min-confidence", "high"], "--min-confidence: expected a number in [0, 1]"),
    (["explain", "hello.py:3-5", "--before", "-1"], "--before: expected a number ≥ 0, got -1"),
    (["explain", "hello.py:3-5", "--expand-until", "x"], "--expand-until: expected a whole number, got 'x'"),
    (["view", "deadbeef", "--at", "-3"], "--at: expected a number ≥ 0, got -3"),
    (["search", "hello", "--limit", "-1"], "--limit: expected a number ≥ 0, got -1"),
])
def test_bad_option_values_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_pretty_outputs(repo, capsys):
    run_json(capsys, "ingest", "--seal")
    code, out, _ = run(capsys, "explain", "hello.py:4-5", "--pretty")
    assert code == 0 and "claude_code" in out and "user: create hello.py, md and js" in out
    code, out, _ = run(capsys, "tapes", "--pretty")
    assert "harness" in out.splitlines()[0]
    code, out, _ = run(capsys, "status", "--pretty")
    assert "tapes" in out


def test_help_mentions_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("ingest", "explain", "view", "show", "tapes", "search", "status", "trace", "blame",
                "record", "adapters", "init", "watch", "gc"):
        assert cmd in out


def test_subagent_sidechains_are_not_continuations(repo, capsys):
    """The two real `agent-*.jsonl` warmup sidechains share the parent's sessionId and overlap it
    in time: they must not be reported as continuations of the session that wrote hello.py."""
    run_json(capsys, "ingest", "--seal")
    res = run_json(capsys, "explain", "hello.py:1-8", "--brief")
    assert [s["via"] for s in res["sessions"]] == ["direct"]
    assert not any(e.get("kind") == "continuation" for e in res["lineage"])
