"""OpenClaw adapter. The three fixtures are **synthetic** schema samples (jazzyalex, see
tests/data/harness/openclaw/SOURCES.md); the edit/read transcript written below is synthetic too,
following the pi coding-agent tool schemas."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.adapters.openclaw import ADAPTER
from engram.errors import UnsupportedLog

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("tests/data/harness/openclaw")
GOLDEN = ROOT / "tests/golden/tapes/openclaw"
CASES = ["small", "large", "schema_drift"]


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _dump(sessions) -> str:
    return "".join(json.dumps(ev, sort_keys=True, ensure_ascii=False) + "\n"
                   for s in sessions for ev in s.events)


@pytest.mark.parametrize("case", CASES)
def test_golden(case, golden_compare):
    out = ADAPTER.parse_source(DATA / f"synthetic__jazzyalex__{case}.jsonl")
    assert out.errors == []
    golden_compare(GOLDEN / f"{case}.jsonl", _dump(out.sessions))
    assert out.sessions[0].events[0]["tier"] == "orchestrator"


def test_large_content():
    [s] = ADAPTER.parse_source(DATA / "synthetic__jazzyalex__large.jsonl").sessions
    meta, *evs = s.events
    assert (meta["session"], meta["model"], meta["cwd"], meta["format_version"]) == (
        "openclaw-stage0-large", "openclaw-large", "/tmp/large", 3)
    assert meta["label"] == "Open /tmp/large and run status" and meta["variant"] is None
    assert meta["coverage"]["grade"] == "full"
    assert evs[0]["custom_type"] == "openclaw.runtime-context"
    res = [e for e in evs if e["k"] == "tool.result"]
    assert res[0]["stdout"] == "M file1\nM file2" and res[0]["call_id"] == "tc-status"
    [edit] = [e for e in evs if e["k"] == "code.edit"]
    assert (edit["file"], edit["rel"], edit["after_text"]) == ("/tmp/large/notes.md", "notes.md",
                                                               "note")


def test_schema_drift_degrades_and_strict_fails():
    path = DATA / "synthetic__jazzyalex__schema_drift.jsonl"
    [s] = ADAPTER.parse_source(path).sessions
    cov = s.events[0]["coverage"]
    assert cov["grade"] == "degraded"
    assert cov["reasons"] == ["unknown message role 'system'", "unknown entry type 'compact'"]
    kept = [e for e in s.events if e.get("role") == "system"]
    assert kept[0]["text"] == "diagnostic summary updated"
    assert [e["stdout"] for e in s.events if e["k"] == "tool.result"] == ["PASS\n"]
    with pytest.raises(UnsupportedLog) as ei:
        ADAPTER.parse_source(path, mode="strict")
    assert ei.value.line == 6
    ADAPTER.parse_source(DATA / "synthetic__jazzyalex__small.jsonl", mode="strict")  # no raise


def test_discover_variants(tmp_path):
    sessions = tmp_path / "agents/main/sessions"
    sessions.mkdir(parents=True)
    src = DATA / "synthetic__jazzyalex__small.jsonl"
    names = ["a.jsonl", "a.jsonl.reset.2026-02-24T09-00-00.000Z", "b.jsonl.deleted.2026-01-01",
             "c.jsonl.bak.2026-01-02"]
    for n in names:
        shutil.copy(src, sessions / n)
    (sessions / "sessions.json").write_text("{}")
    found = list(ADAPTER.discover(tmp_path))
    assert [p.name for p in found] == sorted(names)
    assert list(ADAPTER.discover(sessions)) == found
    metas = {p.name: ADAPTER.parse_source(p).sessions[0].events[0] for p in found}
    assert metas["a.jsonl"]["variant"] is None and metas["a.jsonl"]["agent_id"] == "main"
    m = metas["a.jsonl.reset.2026-02-24T09-00-00.000Z"]
    assert (m["variant"], m["variant_stamp"]) == ("reset", "2026-02-24T09-00-00.000Z")
    assert metas["b.jsonl.deleted.2026-01-01"]["variant"] == "deleted"
    assert metas["c.jsonl.bak.2026-01-02"]["variant"] == "bak"


def _line(**kw) -> str:
    return json.dumps(kw) + "\n"


def _session_lines() -> list[str]:
    ts = "2026-03-01T10:00:0{}Z"
    call = lambda i, name, args: _line(type="message", id=f"a{i}", timestamp=ts.format(i),
                                       message={"role": "assistant", "content": [
                                           {"type": "thinking", "thinking": f"step {i}"},
                                           {"type": "toolCall", "id": f"t{i}", "name": name,
                                            "arguments": args}]})
    res = lambda i, name, text, err=False: _line(
        type="message", id=f"r{i}", timestamp=ts.format(i),
        message={"role": "toolResult", "toolCallId": f"t{i}", "toolName": name,
                 "content": [{"type": "text", "text": text}], "isError": err})
    return [
        _line(type="session", version=3, id="sess-1", timestamp=ts.format(0), cwd="/repo"),
        _line(type="message", id="u1", timestamp=ts.format(0),
              message={"role": "user", "content": "tidy util.py"}),
        call(1, "read", {"path": "/repo/util.py"}),
        res(1, "read", "def f():\n    return 1\n\ndef g():\n    return 2\n"),
        call(2, "edit", {"path": "/repo/util.py", "edits": [{"oldText": "return 2",
                                                             "newText": "return 3"}]}),
        res(2, "edit", "Successfully replaced text"),
        call(3, "read", {"path": "/repo/big.py", "offset": 40, "limit": 2}),
        res(3, "read", "x = 1\ny = 2\n\n[Showing lines 40-41 of 90. Use offset=42 to continue]"),
        call(4, "write", {"path": "/repo/util.py", "content": "oops"}),
        res(4, "write", "EACCES", err=True),
        _line(type="compaction", id="c1", timestamp=ts.format(5), summary="Tidied util.py",
              firstKeptEntryId="u1", tokensBefore=1000),
    ]


def test_edits_and_reads(tmp_path):
    f = tmp_path / "sess-1.jsonl"
    f.write_text("".join(_session_lines()))
    [s] = ADAPTER.parse_source(f).sessions
    evs = s.events
    reads = [e for e in evs if e["k"] == "code.read"]
    assert reads[0]["range"] == [1, 5] and reads[0]["rel"] == "util.py"
    assert reads[1]["range"] == [40, 41] and reads[1]["text"] == "x = 1\ny = 2\n"
    [edit] = [e for e in evs if e["k"] == "code.edit"]  # the failed write gives none
    assert (edit["before_range"], edit["before_text"], edit["after_text"]) == (
        [5, 5], "    return 2\n", "    return 3\n")
    err = [e for e in evs if e.get("call_id") == "t4" and e["k"] == "tool.result"][0]
    assert (err["stdout"], err["stderr"], err["exit"]) == (None, "EACCES", 1)
    assert evs[-1]["summary"] is True and evs[-1]["text"] == "Tidied util.py"
    assert [e["text"] for e in evs if e.get("reasoning")] == ["step 1", "step 2", "step 3",
                                                              "step 4"]


def test_prefix_stable_and_malformed_lines(tmp_path):
    lines = _session_lines()
    full = tmp_path / "full.jsonl"
    full.write_text("".join(lines[:5]) + "{broken json\n" + "".join(lines[5:]))
    out = ADAPTER.parse_source(full)
    assert [e["error"]["line"] for e in out.errors] == [6]
    assert out.errors[0]["error"]["code"] == "E_ADAPTER_PARSE"
    full_events = out.sessions[0].events
    for n in range(2, len(lines)):
        part = tmp_path / "part.jsonl"
        part.write_text("".join(lines[:n]))
        evs = ADAPTER.parse_source(part).sessions[0].events
        assert full_events[1:len(evs)] == evs[1:]  # everything but meta is a prefix


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda ch: st.lists(ch, max_size=4)
                     | st.dictionaries(st.sampled_from(["type", "role", "message", "content",
                                                        "id", "text", "x"]), ch, max_size=4),
                     max_leaves=12)
_valid = st.builds(lambda i, text: {"type": "message", "id": f"v{i}", "message": {
    "role": "user", "content": [{"type": "text", "text": text}]}},
    st.integers(0, 999), st.text(min_size=1, max_size=30))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(_valid.map(lambda v: ("valid", v)), _json.map(lambda v: ("any", v)),
                          st.binary(max_size=20).map(lambda v: ("raw", v))), max_size=12))
def test_property_never_crashes_and_keeps_valid_lines(items):
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "x.jsonl"
        with open(f, "wb") as fh:
            fh.write(_line(type="session", version=3, id="s", cwd="/r").encode())
            for kind, v in items:
                raw = v.replace(b"\n", b" ") if kind == "raw" else json.dumps(v).encode()
                fh.write(raw + b"\n")
            fh.write(b'{"type": "mess')
        out = ADAPTER.parse_source(f)
        texts = [e.get("text") for s in out.sessions for e in s.events]
        for kind, v in items:
            if kind == "valid":
                assert v["message"]["content"][0]["text"] in texts


def test_default_paths(monkeypatch, tmp_path):
    assert ADAPTER.default_paths()[0] == Path.home() / ".openclaw"
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path))
    assert ADAPTER.default_paths() == [tmp_path]
