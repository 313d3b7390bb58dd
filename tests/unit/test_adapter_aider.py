"""Aider adapter: real chat histories (v0.86.1 diff-fenced, v0.86.2 whole) and edit grammars."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.adapters import aider
from engram.errors import UnsupportedLog

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("tests/data/harness/aider")
GOLDEN = ROOT / "tests" / "golden" / "tapes" / "aider"
MOZ = DATA / "mozgoslav__.aider.chat.history.md"
ZEN = DATA / "zen-mcp-server__.aider.chat.history.md"
A = aider.ADAPTER


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _tape(sessions):
    return "".join(json.dumps(e, sort_keys=True, ensure_ascii=False) + "\n"
                   for s in sessions for e in s.events)


def test_golden_zen(golden_compare):
    golden_compare(GOLDEN / "zen-mcp-server.jsonl", _tape(A.parse_source(ZEN).sessions))


def test_sessions_and_banner():
    out = A.parse_source(ZEN)
    assert out.errors == []
    # 5 "chat started" runs; the ones that ended before any input are dropped
    assert [s.key for s in out.sessions] == ["2025-10-20 21:49:22", "2025-10-23 17:04:56"]
    m = out.sessions[1].events[0]
    assert m["harness"] == "aider" and m["harness_version"] == "0.86.1"
    assert m["model"] == "gemini/gemini-2.5-pro-preview-06-05"
    assert m["edit_format"] == "diff-fenced" and m["weak_model"].startswith("gemini/")
    assert m["t"] == "2025-10-23T17:04:56Z" and m["local_time"] is True
    assert m["cwd"] == str(DATA)


def test_input_history_times_and_multiline_prompt():
    ev = A.parse_source(ZEN).sessions[1].events
    ins = [e for e in ev if e["k"] == "msg.in"]
    assert ins[0]["text"].startswith("/add /home/dragonfsky/git/github/zen-mcp-server/utils/"
                                     "file_utils.py\n  /home/")
    assert ins[0]["t"] == "2025-10-23T17:05:03.519Z"  # from .aider.input.history
    calls = [e for e in ev if e["k"] == "tool.call"]
    assert calls[0]["tool"] == "/add" and len(calls[0]["args"]["args"]) == 8
    notes = [e for e in ev if e["k"] == "tool.result"]
    assert any("Added config.py to the chat" in n["stdout"] for n in notes)
    assert all(n["tool"] == "aider" for n in notes)


def test_whole_format_edits_follow_aider_parsing():
    sessions = A.parse_source(MOZ).sessions
    s = sessions[-1]
    assert s.events[0]["model"] == "lm_studio/qwen3.6-35b-a3b-uncensored-hauhaucs-aggressive"
    assert s.events[0]["edit_format"] == "whole"
    edits = [e for e in s.events if e["k"] == "code.edit"]
    files = [e["file"] for e in edits]
    # exactly the files Aider reported ("Applied edit to …"), including its mis-parsed names
    assert files == ["Topology", "-> Swift binary отправляет CGEvent/AX в ОС",
                     "./analyzer-report-dictation-hotkey.md"]
    rep = edits[2]
    assert rep["rel"] == "analyzer-report-dictation-hotkey.md"
    assert rep["after_text"].startswith(
        "# Анализ проблемы дублирования текста при диктовке (Hotkey / Push-to-Talk)\n")
    assert rep["after_text"].endswith("## Topology\n")  # the inner fence ended Aider's block
    assert rep["whole_file"] is True and rep["created"] is True
    assert rep["after_range"] == [1, 9] and rep["before_text"] == ""
    # the edit comes after the reply and after its "Applied edit" note
    i = s.events.index(rep)
    assert s.events[i - 1]["k"] in ("code.edit", "tool.result")


def test_thinking_split_and_confirmations():
    s = A.parse_source(MOZ).sessions[1]
    think = [e for e in s.events if e.get("reasoning")]
    assert think and think[0]["text"].startswith("Here's a thinking process:")
    assert not any("<thinking-content" in e.get("text", "") for e in s.events)
    conf = [e for e in s.events if e.get("confirmation")]
    assert conf and conf[0]["answer"] == "all"


def test_search_replace_blocks(tmp_path):
    hist = tmp_path / ".aider.chat.history.md"
    hist.write_text(
        "\n# aider chat started at 2026-01-02 03:04:05\n\n> Aider v0.86.1  \n"
        "> Main model: gpt-5 with diff edit format  \n\n#### rename x  \n\n"
        "Here you go.\n\nsrc/a.py\n```python\n<<<<<<< SEARCH\nx = 1\n=======\ny = 1\n"
        ">>>>>>> REPLACE\n```\n\n```\nsrc/b.py\n<<<<<<< SEARCH\nold\n=======\nnew\n"
        ">>>>>>> REPLACE\n```\n\n> Applied edit to src/a.py  \n> Applied edit to src/b.py  \n")
    (tmp_path / ".aider.input.history").write_text(
        "\n# 2026-01-02 03:04:09.123456\n+rename x\n")
    ev = A.parse_source(hist).sessions[0].events
    edits = [e for e in ev if e["k"] == "code.edit"]
    assert [(e["file"], e["before_text"], e["after_text"], e["range_known"]) for e in edits] == [
        ("src/a.py", "x = 1\n", "y = 1\n", False), ("src/b.py", "old\n", "new\n", False)]
    assert edits[0]["rel"] == "src/a.py"
    assert next(e for e in ev if e["k"] == "msg.in")["t"] == "2026-01-02T03:04:09.123Z"
    assert [p.name for p in A.discover(tmp_path)] == [".aider.chat.history.md"]


def test_unapplied_edit_not_emitted(tmp_path):
    hist = tmp_path / ".aider.chat.history.md"
    hist.write_text("\n# aider chat started at 2026-01-02 03:04:05\n\n> Aider v0.86.1  \n\n"
                    "#### go  \n\nsrc/a.py\n```\n<<<<<<< SEARCH\nx\n=======\ny\n"
                    ">>>>>>> REPLACE\n```\n\n> The LLM did not conform to the edit format.  \n")
    ev = A.parse_source(hist).sessions[0].events
    assert not [e for e in ev if e["k"] == "code.edit"]


def test_version_modes(tmp_path):
    hist = tmp_path / ".aider.chat.history.md"
    hist.write_text("\n# aider chat started at 2026-01-02 03:04:05\n\n> Aider v0.40.0  \n\n"
                    "#### hi  \n\nHello.\n")
    with pytest.raises(UnsupportedLog):
        A.parse_source(hist, mode="strict")
    m = A.parse_source(hist).sessions[0].events[0]
    assert m["coverage"]["grade"] == "degraded" and "0.40.0" in m["coverage"]["reasons"][0]
    A.parse_source(ZEN, mode="strict")
    A.parse_source(MOZ, mode="strict")


def test_deterministic_and_prefix_stable(tmp_path):
    full = A.parse_source(ZEN).sessions
    assert _tape(full) == _tape(A.parse_source(ZEN).sessions)
    text = ZEN.read_text()
    shutil.copy(DATA / "zen-mcp-server__.aider.input.history",
                tmp_path / "zen__.aider.input.history")
    cut = text.index("#### /copy-context")  # after the first real exchange of session 2
    p = tmp_path / "zen__.aider.chat.history.md"
    p.write_text(text[:cut])
    part = A.parse_source(p).sessions
    strip = lambda evs: [{k: v for k, v in e.items() if k not in ("source_path", "coverage", "cwd")}  # noqa: E731
                         for e in evs]
    assert len(part) == 2
    assert strip(part[1].events) == strip(full[1].events[:len(part[1].events)])


_VALID = ("\n# aider chat started at 2026-01-02 03:04:05\n\n> Aider v0.86.1  \n"
          "> Model: m with whole edit format  \n\n#### make it  \n\nsrc/a.py\n```\nx = 1\n```\n\n"
          "> Applied edit to src/a.py  \n")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(alphabet=st.characters(blacklist_characters="\n#>`<=\r",
                                                         blacklist_categories=("Cs",)),
                                  max_size=30),
                          st.dictionaries(st.text(max_size=5), st.integers(), max_size=3).map(
                              json.dumps)), max_size=5))
def test_property_junk_never_loses_valid_events(tmp_path, junk):
    hist = tmp_path / ".aider.chat.history.md"
    hist.write_text(_VALID)
    base_ev = A.parse_source(hist).sessions[0].events
    # junk lines before the session (prose outside a session) and after it (assistant noise)
    hist.write_text("\n".join(junk) + "\n" + _VALID + "\n".join(junk) + "\n")
    out = A.parse_source(hist)
    got = next(s for s in out.sessions if s.key == "2026-01-02 03:04:05").events
    it = iter(got[1:])
    assert all(any(e == g for g in it) for e in base_ev[1:])
    assert "code.edit" in {e["k"] for e in base_ev}
