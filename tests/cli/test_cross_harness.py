"""The same code change made by two harnesses (a real Claude Code session and a Codex rollout that
creates the same file) is attributed to both sessions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from engram.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
HELLO = ('#!/usr/bin/env python3\n\ndef main():\n    print("Hello, World!")\n\n'
         'if __name__ == "__main__":\n    main()\n')


def test_change_by_two_harnesses_names_both(tmp_path, monkeypatch, capsys):
    cc, cx = tmp_path / "claude", tmp_path / "codex"
    cc.mkdir()
    cx.mkdir()
    shutil.copy(DATA / "harness/claude_code/codemie__4c2ddfdc__v2.0.64.jsonl", cc)
    shutil.copy(DATA / "cross_harness/rollout-2026-02-01T10-00-00-019c0000-0000-7000-8000-00000000c0de.jsonl", cx)
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    (root / ".engram" / "config.yml").write_text(
        f"harnesses:\n  claude_code: {{paths: [{cc}]}}\n  codex: {{paths: [{cx}]}}\n"
        + "".join(f"  {h}: false\n" for h in ("gemini_cli", "opencode", "cursor", "openclaw", "aider")))
    (root / "hello.py").write_text(HELLO)
    monkeypatch.chdir(root)
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()
    assert main(["explain", "hello.py:3-7", "--brief"]) == 0
    res = json.loads(capsys.readouterr().out)
    by_harness = {s["harness"]: s for s in res["sessions"]}
    assert by_harness["claude_code"]["session"] == "4c2ddfdc-b619-4525-8d03-1950fb1b0257"
    assert by_harness["codex"]["session"] == "019c0000-0000-7000-8000-00000000c0de"
    for s in by_harness.values():
        assert s["via"] == "direct" and s["confidence"] >= 0.9
        assert s["windows"][0]["kind"] == "code.edit"
    # the Codex session is the later writer of identical lines, so it owns them
    assert res["sessions"][0]["harness"] == "codex"
