"""The Claude Code parse's tool calls (``_Parser.calls``, what a result reads of its call) give the
same events whether they stay in memory or are spilled to a temp file past ``_Calls.IN_MEMORY``:
results that come long after their calls, in another order, twice, for an id set twice, or for
no known call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram.adapters import claude_code

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "harness" / "claude_code"
CASES = sorted(p.name for p in DATA.glob("*.jsonl"))


def _events(path: Path, stream: bool) -> list:
    if stream:
        st = claude_code.ADAPTER.stream_source(path)
        events = list(st)
        return [st.output.sessions[0].events[0] if st.output.sessions else None] + events
    return [s.events for s in claude_code.ADAPTER.parse_source(path).sessions]


def _late_results_log(path: Path, n: int = 40) -> None:
    """``n`` edits (no structured patch: the change is rebuilt from the call's input) and ``n``
    whole-file reads, every call first, then the results in reverse order; one call id set twice
    (the last call wins), one result given twice, one result of no call."""
    recs, k = [], 0

    def rec(typ, message, **extra):
        nonlocal k
        k += 1
        r = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/r",
             "sessionId": "s-calls", "version": "2.0.64", "gitBranch": "main", "type": typ,
             "message": message, "uuid": f"u-{k}", "timestamp": f"2026-01-05T09:{k // 60:02d}:{k % 60:02d}Z"}
        r.update(extra)
        recs.append(r)

    rec("user", {"role": "user", "content": "start"})
    calls = []
    for i in range(n):
        body = "".join(f"line {j} of file {i}\n" for j in range(5))
        calls.append((f"toolu_r{i}", "Read", {"file_path": f"/r/f{i}.py"},
                      {"type": "text", "file": {"filePath": f"/r/f{i}.py", "content": body, "numLines": 5,
                                                "startLine": 1, "totalLines": 5}}, body))
        args = {"file_path": f"/r/f{i}.py", "old_string": f"line 2 of file {i}\n",
                "new_string": f"line 2 changed {i}\nand one more\n"}
        calls.append((f"toolu_e{i}", "Edit", args, {"filePath": f"/r/f{i}.py"}, "updated"))
    calls.append(("toolu_e0", "Edit", {"file_path": "/r/f0.py", "old_string": "line 3 of file 0\n",
                                       "new_string": "line 3 set twice\n"}, {"filePath": "/r/f0.py"}, "updated"))
    for cid, tool, args, _tur, _text in calls:
        rec("assistant", {"model": "m", "id": f"msg_{cid}", "type": "message", "role": "assistant",
                          "content": [{"type": "tool_use", "id": cid, "name": tool, "input": args}]})
    for cid, _tool, _args, tur, text in [*reversed(calls), calls[3], ("toolu_none", "", {}, {}, "x")]:
        rec("user", {"role": "user", "content": [{"tool_use_id": cid, "type": "tool_result", "content": text}]},
            toolUseResult=tur)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.mark.parametrize("stream", [False, True])
def test_late_results_same_events_spilled_or_not(tmp_path, monkeypatch, stream):
    log = tmp_path / "late.jsonl"
    _late_results_log(log)
    held = _events(log, stream)
    monkeypatch.setattr(claude_code._Calls, "IN_MEMORY", 1)
    spilled = _events(log, stream)
    assert spilled == held
    flat = [e for evs in held for e in (evs if isinstance(evs, list) else [evs]) if isinstance(e, dict)]
    kinds = [e.get("k") for e in flat]
    # the results found their calls: every read and edit made its code event
    assert kinds.count("code.read") >= 40 and kinds.count("code.edit") >= 40


def test_calls_spill_answers_as_a_dict(monkeypatch):
    monkeypatch.setattr(claude_code._Calls, "IN_MEMORY", 3)
    calls, plain = claude_code._Calls(), {}
    for i in range(50):
        kept = claude_code._call("Edit" if i % 2 else "Bash", {"file_path": f"/f{i}", "n": i, "s": "\ud800x"})
        calls[f"id{i % 37}"] = kept
        plain[f"id{i % 37}"] = kept
    assert calls.spilled is not None and len(calls.spilled.keys) + len(calls.spilled.recent) > 0
    assert len(calls.recent) <= 4
    for i in range(60):
        assert calls.get(f"id{i}") == plain.get(f"id{i}")
    assert calls.get("") is None


@pytest.mark.parametrize("name", CASES)
def test_corpus_same_events_spilled_or_not(name, monkeypatch):
    held = _events(DATA / name, False)
    monkeypatch.setattr(claude_code._Calls, "IN_MEMORY", 1)
    assert _events(DATA / name, False) == held
