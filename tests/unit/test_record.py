"""Generic recording: ``record_stdin`` and ``record_command`` (real commands in temp repos)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import pytest

from engram.ingest import record
from engram.ingest.record import record_command, record_stdin

T = "2026-03-01T12:00:00.000Z"


def _strip(evs):
    return [{k: v for k, v in e.items() if k != "t"} for e in evs]


def test_stdin_plain_transcript():
    text = ("user: why does login time out?\nit hangs after 30s\n"
            "assistant: The pool is too small.\n\n> raise it to 20\nassistant: Done.\n")
    evs = record_stdin(io.StringIO(text), t=T)
    meta, *msgs = evs
    assert meta["harness"] == "generic" and meta["adapter"] == "generic"
    assert meta["label"] == "why does login time out? it hangs after 30s"
    assert meta["t_source"] == "argument" and meta["source_path"] == "<stdin>"
    assert [(e["k"], e["text"]) for e in msgs] == [
        ("msg.in", "why does login time out?\nit hangs after 30s"),
        ("msg.out", "The pool is too small."), ("msg.in", "raise it to 20"),
        ("msg.out", "Done.")]
    assert all(e["t"] == T for e in evs)
    assert record_stdin(io.StringIO(text), t=T) == evs  # deterministic


def test_stdin_whole_text_and_jsonl_and_label():
    evs = record_stdin(io.BytesIO(b"just some notes\nabout the bug\n"), t=0, label="notes")
    assert [(e["k"], e["text"]) for e in evs[1:]] == [("msg.in", "just some notes\nabout the bug")]
    assert evs[0]["label"] == "notes" and evs[0]["t"] == "1970-01-01T00:00:00.000Z"
    jl = "\n".join(json.dumps(x) for x in [{"role": "user", "text": "a"},
                                           {"role": "assistant", "content": "b"},
                                           {"role": "system", "text": "c"}])
    evs = record_stdin(jl, t=T)
    assert evs[0]["format"] == "jsonl"
    assert _strip(evs[1:]) == [{"k": "msg.in", "text": "a"}, {"k": "msg.out", "text": "b"},
                               {"k": "msg.in", "text": "c", "role": "system"}]
    forced = record_stdin("not json", fmt="jsonl", t=T)
    assert forced[0]["coverage"]["grade"] == "degraded" and forced[1]["text"] == "not json"


def test_stdin_default_time_is_process_start_and_secrets_are_redacted():
    key = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    evs = record_stdin(f"user: my token is {key}\n")
    assert evs[0]["t_source"] == "process_start"
    assert evs[0]["t"] == record._iso(None)[0]
    assert key not in evs[1]["text"] and "[REDACTED:github-token]" in evs[1]["text"]
    assert key not in evs[0]["label"]  # the label is redacted too
    assert evs[0]["coverage"]["redactions"] == 2


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
                   cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q")
    (r / "app.py").write_text("import os\n\ndef timeout():\n    return 30\n")
    (r / "old.txt").write_text("bye\n")
    (r / ".gitignore").write_text("ignored.log\n")
    (r / "blob.bin").write_bytes(b"\x00\x01\x02")
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "init")
    return r


def test_record_command_edits_a_file(repo, capfd):
    cmd = ["sh", "-c", "echo patching; sed -i.orig 's/return 30/return 60/' app.py; rm app.py.orig;"
           " printf 'x = 1\\n' > new.py; rm old.txt; echo noise > ignored.log; exit 3"]
    code, evs = record_command(cmd, repo, t=T)
    assert code == 3
    assert "patching" in capfd.readouterr().out  # passed through to the real stdout
    meta, msg, call, res, *edits = evs
    assert meta["cwd"] == str(repo.resolve()) and len(meta["repo_head"]) == 40
    assert meta["label"].startswith("sh -c 'echo patching;") and meta["command"] == cmd
    assert msg["k"] == "msg.in" and msg["text"].startswith("sh -c 'echo patching;")
    assert call["k"] == "tool.call" and call["args"]["argv"] == cmd
    assert res["k"] == "tool.result" and res["stdout"] == "patching\n" and res["exit"] == 3
    assert [(e["rel"], e["before_range"], e["after_range"], e["before_text"], e["after_text"])
            for e in edits] == [
        ("app.py", [4, 4], [4, 4], "    return 30\n", "    return 60\n"),
        ("new.py", [1, 0], [1, 1], "", "x = 1\n"),
        ("old.txt", [1, 1], [1, 0], "bye\n", ""),
    ]
    assert edits[1]["created"] is True and edits[2]["deleted"] is True
    assert all(e["t"] == T for e in evs)
    assert meta["coverage"]["grade"] == "full"


def test_record_command_is_deterministic(tmp_path):
    runs = []
    for _ in range(2):  # same tree, same command, same t → byte-identical events
        (tmp_path / "f.txt").write_text("1\n")
        code, evs = record_command(["sh", "-c", "echo 2 >> f.txt; echo ok"], tmp_path, t=T,
                                   passthrough=False)
        runs.append(json.dumps(evs, sort_keys=True))
        assert code == 0
    assert runs[0] == runs[1]


def test_record_command_walk_skips_vendored_dirs_and_binary(tmp_path):
    (tmp_path / "node_modules").mkdir()
    (tmp_path / ".venv").mkdir()
    (tmp_path / "src").mkdir()
    code, evs = record_command(
        ["sh", "-c", "echo a > node_modules/x.js; echo b > .venv/y; echo c > src/z.py;"
                     " printf '\\000\\001' > bin.dat"], tmp_path, t=T, passthrough=False)
    edits = [e for e in evs if e["k"] == "code.edit"]
    assert [e["rel"] for e in edits] == ["src/z.py"]
    assert evs[0]["coverage"]["reasons"] == [
        "1 changed file(s) not diffed (binary or over 1000000 bytes): bin.dat"]


def test_record_command_caps_output_and_reports_missing_command(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "OUTPUT_CAP", 100)
    code, evs = record_command([sys.executable, "-c", "print('x' * 5000)"], tmp_path, t=T,
                               passthrough=False)
    res = evs[3]
    assert code == 0 and len(res["stdout"]) == 100 and res["truncated"] is True
    assert res["output_bytes"] >= 5000
    code, evs = record_command(["/nonexistent/tool"], tmp_path, t=T, passthrough=False)
    assert code == 127 and "/nonexistent/tool" in evs[3]["stderr"]
