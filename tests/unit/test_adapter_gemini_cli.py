"""Gemini CLI adapter: real legacy JSON chats, logs.json, and the JSONL form."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.adapters import gemini_cli
from engram.errors import UnsupportedLog

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("tests/data/harness/gemini_cli")
GOLDEN = ROOT / "tests" / "golden" / "tapes" / "gemini_cli"
S1 = DATA / "codemie__session-2025-12-01T21-45-5b959dae.json"
S2 = DATA / "codemie__session-2026-01-16T11-01-file-ops-37b7abef.json"
LOGS = DATA / "codemie__logs.json"
A = gemini_cli.ADAPTER


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _events(path, **kw):
    out = A.parse_source(path, **kw)
    assert len(out.sessions) == 1, out.errors
    return out.sessions[0].events


def _tape(events):
    return "".join(json.dumps(e, sort_keys=True, ensure_ascii=False) + "\n" for e in events)


@pytest.mark.parametrize("case", [S1, S2], ids=lambda p: p.stem)
def test_golden(case, golden_compare):
    golden_compare(GOLDEN / f"{case.stem}.jsonl", _tape(_events(case)))


def test_meta():
    m = _events(S2)[0]
    assert m["harness"] == "gemini_cli" and m["session"] == "37b7abef-713d-4522-85f0-8ff15a4e6d17"
    assert m["model"] == "gemini-3-pro" and m["harness_version"] is None
    assert m["log_format"] == "json" and m["t"] == "2026-01-16T11:01:22.281Z"
    # cwd inferred: "hello.md" was echoed as an absolute path in write_file's result
    assert m["cwd"] == "/Users/Nikita_Levyankov/repos/EPMCDME/codemie-ai/codemie-code"


def test_write_file_edits_located_against_known_content():
    ev = _events(S2)
    edits = [e for e in ev if e["k"] == "code.edit" and e["rel"] == "hello.md"]
    assert [(e["before_range"], e["after_range"]) for e in edits] == [
        ([1, 0], [1, 1]),   # created
        ([2, 1], [2, 6]),   # 5 lines appended after the read of "# Hello World"
        ([2, 3], [2, 1])]   # "remove 2 and 3 line"
    assert edits[2]["before_text"] == ("The quick brown fox jumps over the lazy dog.\n"
                                       "A wizard's job is to vex chumps quickly in fog.\n")
    assert edits[2]["after_text"] == ""
    reads = [e for e in ev if e["k"] == "code.read" and e["rel"] == "SECURITY.md"]
    assert reads[0]["range"][0] == 1 and reads[0]["text"].startswith("# Security Policy")


def test_replace_edit_located():
    ev = _events(S1)
    rep = [e for e in ev if e["k"] == "code.edit" and e["file"].endswith("lead_gemini.txt")]
    assert len(rep) == 2
    created, replaced = rep
    assert created["before_text"] == "" and created["after_range"] == [1, 122]
    # the replace's old_string is the whole file (known from the write and the read)
    assert replaced["before_range"] == [1, 122] and "range_known" not in replaced
    assert replaced["after_text"].startswith(
        "## Core Function\n\nSupport Team Lead with feedback and Jira tasks using Memory MCP.")
    reasoning = [e for e in ev if e.get("reasoning")]
    assert reasoning and all(e["k"] == "msg.out" for e in reasoning)


def test_replace_without_known_original(tmp_path):
    rec = {"sessionId": "abc", "startTime": "2026-01-01T00:00:00Z", "messages": [
        {"id": "m1", "type": "gemini", "timestamp": "2026-01-01T00:00:01Z", "content": "",
         "toolCalls": [{"id": "r1", "name": "replace", "status": "success",
                        "args": {"file_path": "a.py", "old_string": "x = 1\n",
                                 "new_string": "x = 2\n"}}]}]}
    p = tmp_path / "session-x.json"
    p.write_text(json.dumps(rec))
    e = next(e for e in _events(p) if e["k"] == "code.edit")
    assert e["range_known"] is False and e["before_text"] == "x = 1\n"


def test_result_display_filediff(tmp_path):
    rec = {"sessionId": "abc", "messages": [
        {"id": "m1", "type": "gemini", "timestamp": "2026-01-01T00:00:01Z", "content": "",
         "toolCalls": [{"id": "r1", "name": "replace", "status": "success",
                        "args": {"file_path": "/r/a.py", "old_string": "b", "new_string": "B"},
                        "resultDisplay": {"fileDiff": "", "originalContent": "a\nb\nc\n",
                                          "newContent": "a\nB\nc\n"}}]}]}
    p = tmp_path / "session-y.json"
    p.write_text(json.dumps(rec))
    e = next(e for e in _events(p) if e["k"] == "code.edit")
    assert (e["before_range"], e["before_text"], e["after_text"]) == ([2, 2], "b\n", "B\n")


def test_logs_json_text_only_unless_chat_exists(tmp_path):
    out = A.parse_source(LOGS)
    s = out.sessions[0]
    assert [e["text"] for e in s.events if e["k"] == "msg.in"][:2] == ["hi", "Explain what this is"]
    assert s.events[0]["coverage"]["grade"] == "degraded"
    proj = tmp_path / "proj"
    (proj / "chats").mkdir(parents=True)
    shutil.copy(LOGS, proj / "logs.json")
    shutil.copy(S1, proj / "chats" / "session-2025-12-01T21-45-5b959dae.json")
    assert A.parse_source(proj / "logs.json").sessions == []
    assert sorted(p.name for p in A.discover(tmp_path)) == [
        "logs.json", "session-2025-12-01T21-45-5b959dae.json"]


def _jsonl(tmp_path, lines, name="session-2026-04-10T10-00-abcd1234.jsonl"):
    p = tmp_path / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


_HEAD = {"sessionId": "abcd1234-0000", "projectHash": "h", "startTime": "2026-04-10T10:00:00Z",
         "lastUpdated": "2026-04-10T10:00:00Z", "kind": "main"}


def _m(i, typ, text, **kw):
    return dict({"id": i, "type": typ, "timestamp": f"2026-04-10T10:00:0{len(i)}Z",
                 "content": [{"text": text}]}, **kw)


def test_jsonl_dedupe_set_and_rewind(tmp_path):
    p = _jsonl(tmp_path, [
        _HEAD, _m("u1", "user", "first"), _m("g1", "gemini", "draft"),
        _m("g1", "gemini", "final answer"),  # re-appended on update: last write wins
        {"$set": {"lastUpdated": "2026-04-10T10:01:00Z", "summary": "S"}},
        _m("u2", "user", "second"), _m("g2", "gemini", "reply 2"),
        {"$rewindTo": "u2"}, _m("u3", "user", "third")])
    ev = _events(p)
    assert [(e["k"], e["text"]) for e in ev[1:]] == [
        ("msg.in", "first"), ("msg.out", "final answer"), ("msg.in", "third")]
    assert ev[0]["log_format"] == "jsonl" and ev[0]["summary"] == "S"


def test_jsonl_checkpoint_set_messages(tmp_path):
    p = _jsonl(tmp_path, [_HEAD, _m("u1", "user", "old"),
                          {"$set": {"messages": [_m("u9", "user", "kept")]}},
                          _m("g9", "gemini", "after")])
    assert [e["text"] for e in _events(p)[1:]] == ["kept", "after"]


def test_strict_rejects_non_chat(tmp_path):
    p = tmp_path / "session-z.json"
    p.write_text('{"foo": 1}')
    with pytest.raises(UnsupportedLog):
        A.parse_source(p, mode="strict")
    out = A.parse_source(p)
    assert out.sessions == [] and out.errors[0]["error"]["code"] == "E_ADAPTER_PARSE"
    A.parse_source(S1, mode="strict")


def test_deterministic():
    assert A.parse_source(S1).sessions[0].events == A.parse_source(S1).sessions[0].events


def test_prefix_stable_jsonl(tmp_path):
    lines = [_HEAD, _m("u1", "user", "a"), _m("g1", "gemini", "b"), _m("u2", "user", "c")]
    full = _events(_jsonl(tmp_path, lines, "session-full.jsonl"))
    for cut in range(2, len(lines)):
        part = _events(_jsonl(tmp_path, lines[:cut], f"session-{cut}.jsonl"))
        assert part[1:] == full[1:len(part)]


_VALID = [_HEAD, _m("u1", "user", "fix a.py"),
          _m("g1", "gemini", "ok", toolCalls=[
              {"id": "w1", "name": "write_file", "status": "success",
               "args": {"file_path": "a.py", "content": "x = 1\n"},
               "result": [{"functionResponse": {"response": {
                   "output": "Successfully created and wrote to new file: /r/a.py."}}}]}]),
          _m("g2", "gemini", "done")]
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                         max_size=3),
                     max_leaves=8)
_junk = st.one_of(
    st.dictionaries(st.text(max_size=8).filter(lambda k: k not in ("id", "$set", "$rewindTo",
                                                                    "sessionId")),
                    _json, max_size=4).map(json.dumps),
    st.sampled_from([json.dumps(r) for r in _VALID]).map(lambda s: s[: max(1, len(s) // 2)]),
    st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=20))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, len(_VALID)), _junk), max_size=6))
def test_property_junk_never_loses_valid_events(tmp_path, inserts):
    valid = [json.dumps(r) for r in _VALID]
    mixed = list(valid)
    for pos, junk in sorted(inserts, key=lambda x: -x[0]):
        mixed.insert(pos, junk)
    base_ev = _events(_jsonl(tmp_path, valid, "session-v.jsonl"))
    got = _events(_jsonl(tmp_path, mixed, "session-m.jsonl"))
    it = iter(got[1:])
    assert all(any(e == g for g in it) for e in base_ev[1:])
    assert "code.edit" in {e["k"] for e in base_ev}
