"""engram hooks install|uninstall: the harnesses' own configuration files, marker-wrapped and
idempotent, the user's hooks never touched; a hook never fails the agent (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run, run_json

from engram.agents.hooks import MARK, TOML_BEGIN

USER_HOOK = {"matcher": "Bash", "hooks": [{"type": "command", "command": "./lint.sh"}]}


def _settings(root: Path, harness: str) -> dict:
    return json.loads((root / f".{harness}" / "settings.json").read_text())


@pytest.mark.parametrize("harness, after_tool", [("claude", "PostToolUse"), ("gemini", "AfterTool")])
def test_json_hooks_install_idempotent_and_uninstall_only_ours(world, capsys, harness, after_tool):
    cfg = world.root / f".{harness}" / "settings.json"
    cfg.parent.mkdir()
    user = {"model": "opus", "hooks": {"SessionStart": [USER_HOOK], after_tool: [USER_HOOK]}}
    cfg.write_text(json.dumps(user, indent=2))
    res = run_json(capsys, "hooks", "install", harness, "--post-tool")
    assert res["changed"] is True
    s = _settings(world.root, harness)
    assert s["model"] == "opus" and s["hooks"]["SessionStart"][0] == USER_HOOK
    ours = s["hooks"]["SessionStart"][1]["hooks"][0]
    assert ours["command"] == f"engram brief --hook  {MARK}"
    assert ours["timeout"] == (2000 if harness == "gemini" else 3)
    assert s["hooks"][after_tool][1]["hooks"][0]["command"].startswith("engram hook-ingest")
    text = cfg.read_text()
    assert run_json(capsys, "hooks", "install", harness, "--post-tool")["changed"] is False
    assert cfg.read_text() == text
    assert run_json(capsys, "hooks", "uninstall", harness)["changed"] is True
    assert _settings(world.root, harness) == user
    assert run_json(capsys, "hooks", "uninstall", harness)["changed"] is False


def test_invalid_settings_are_left_alone(world, capsys):
    cfg = world.root / ".claude" / "settings.json"
    cfg.parent.mkdir()
    cfg.write_text('{"hooks": {,}')
    code, out, err = run(capsys, "hooks", "install", "claude")
    assert code == 1 and err.count("\n") == 1 and "not valid JSON (line 1" in err
    assert cfg.read_text() == '{"hooks": {,}'


def test_codex_notify_block_and_a_users_own_notify(world, capsys):
    cfg = world.root / ".codex" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text('model = "o4"\n\n[profiles.fast]\nmodel = "o4-mini"\n')
    assert run_json(capsys, "hooks", "install", "codex")["changed"] is True
    import tomllib

    parsed = tomllib.loads(cfg.read_text())
    assert parsed["notify"] == ["engram", "hook-ingest", "--codex"]
    assert parsed["profiles"]["fast"]["model"] == "o4-mini" and parsed["model"] == "o4"
    assert run_json(capsys, "hooks", "install", "codex")["changed"] is False
    assert run_json(capsys, "hooks", "uninstall", "codex")["changed"] is True
    assert cfg.read_text() == 'model = "o4"\n\n[profiles.fast]\nmodel = "o4-mini"\n'
    cfg.write_text('notify = ["my-notifier"]\n')
    code, _out, err = run(capsys, "hooks", "install", "codex")
    assert code == 1 and "already has a `notify` of your own" in err
    assert cfg.read_text() == 'notify = ["my-notifier"]\n' and TOML_BEGIN not in cfg.read_text()


def _engram(*argv, cwd, stdin="", timeout=30):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "engram.cli", *argv], cwd=cwd, input=stdin,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_hook_commands_never_fail_the_agent(world, tmp_path):
    # the SessionStart hook prints the brief (Claude Code adds it to the context)
    p = _engram("brief", "--hook", cwd=world.root)
    assert p.returncode == 0 and p.stdout.startswith("# Engram brief") and p.stderr == ""
    # PostToolUse: the transcript named on stdin is ingested
    payload = json.dumps({"session_id": "x", "transcript_path": str(world.project / "none.jsonl"),
                          "hook_event_name": "PostToolUse"})
    p = _engram("hook-ingest", cwd=world.root, stdin=payload)
    assert p.returncode == 0, p.stderr
    # garbage on stdin, an unreadable index: exit 0 and one line on stderr
    p = _engram("hook-ingest", cwd=world.root, stdin="{not json")
    assert p.returncode == 0 and p.stderr.count("\n") == 1 and p.stderr.startswith("engram: ")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    p = _engram("brief", "--hook", "--index", str(bad), cwd=world.root)
    assert p.returncode == 0 and p.stdout == "" and p.stderr.startswith("engram: engram brief skipped")


def test_hook_stops_after_two_seconds(world):
    from engram.agents import hooks

    t0 = time.monotonic()
    assert hooks.run_guarded(lambda: time.sleep(10), what="slow thing", timeout=0.3) == 0
    assert time.monotonic() - t0 < 2.0


def test_git_hooks_go_through_the_commits_part(world, capsys):
    subprocess.run(["git", "init", "-q"], cwd=world.root, check=True)
    res = run_json(capsys, "hooks", "install", "git")
    hook = Path(res["file"])
    assert res["changed"] is True and hook.exists() and os.access(hook, os.X_OK)
    assert run_json(capsys, "hooks", "uninstall", "git")["changed"] is True
    assert not hook.exists()
    assert run_json(capsys, "hooks", "uninstall", "git")["changed"] is False
