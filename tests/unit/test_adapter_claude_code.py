"""Claude Code adapter, tested against real session logs (tests/data/harness/claude_code/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.adapters import base, get
from engram.adapters.claude_code import ADAPTER, MAX_TOOL_OUTPUT
from engram.digest import text_hash
from engram.errors import UnsupportedLog

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("tests/data/harness/claude_code")  # relative: goldens must not name this machine
GOLDEN = ROOT / "tests" / "golden" / "tapes" / "claude_code"
CASES = sorted(p.name for p in (ROOT / DATA).glob("*.jsonl"))

V1 = "gitai__example-claude-code__v1.0.111.jsonl"
THINK = "gitai__claude-code-with-thinking__v2.0.69.jsonl"
MAIN64 = "codemie__4c2ddfdc__v2.0.64.jsonl"
SIDE = "codemie__agent-36541525__sidechain_v2.0.64.jsonl"
V214 = "codemie__session-9eda1058__v2.1.4.jsonl"
V217 = "codemie__incremental-subagents-turn-1__v2.1.7.jsonl"
COMPACT = "codemie__session-624a4a58__compaction.jsonl"


@pytest.fixture(autouse=True)
def _in_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def parse(name: str, **kw) -> base.ParseOutput:
    return ADAPTER.parse_source(DATA / name, **kw)


def events(name: str) -> list[dict]:
    out = parse(name)
    assert out.errors == []
    assert len(out.sessions) == 1
    return out.sessions[0].events


def records(name: str) -> list[dict]:
    return [json.loads(ln) for ln in (ROOT / DATA / name).read_text(encoding="utf-8").splitlines()]


def dump(evs: list[dict]) -> str:
    return "".join(json.dumps(ev, sort_keys=True, ensure_ascii=False) + "\n" for ev in evs)


def write_log(path: Path, recs: list) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for r in recs:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


def by_call(evs: list[dict], call_id: str, k: str) -> list[dict]:
    return [e for e in evs if e["k"] == k and e.get("call_id") == call_id]


# --------------------------------------------------------------------------------------------
# golden tapes and determinism


@pytest.mark.parametrize("case", CASES)
def test_golden_tape(case, golden_compare):
    evs = events(case)
    assert evs[0]["k"] == "meta" and evs[0]["source_path"] == str(DATA / case)
    golden_compare(GOLDEN / case, dump(evs))


@pytest.mark.parametrize("case", [V1, COMPACT, V214])
def test_deterministic(case):
    assert dump(events(case)) == dump(events(case))


def test_registry_and_contract():
    assert get("claude_code") is ADAPTER
    assert ADAPTER.name == "claude_code" and ADAPTER.tier == "agent"
    assert ADAPTER.versions.min == "1.0.111" and ADAPTER.versions.max_tested == "2.1.7"


@pytest.mark.parametrize("case", CASES)
def test_every_event_is_well_formed(case):
    evs = events(case)
    assert evs[0]["k"] == "meta" and all(e["k"] != "meta" for e in evs[1:])
    kinds = {"msg.in", "msg.out", "tool.call", "tool.result", "code.read", "code.edit"}
    for e in evs:
        assert e["t"] and e["t"].endswith("Z")
        if e["k"] != "meta":
            assert e["k"] in kinds
            assert e["uuid"] or e.get("queued")  # events keep their record's uuid
        if e["k"] == "code.edit":
            assert e["before_hash"] == text_hash(e["before_text"])
            assert e["after_hash"] == text_hash(e["after_text"])


@pytest.mark.parametrize("case", [V1, V214, MAIN64, V217])
def test_prefix_stable(case, tmp_path):
    """Parsing the first n lines gives a prefix of the full parse's events (meta aside)."""
    full = events(case)[1:]
    raw = (ROOT / DATA / case).read_bytes().splitlines(keepends=True)
    for n in range(1, len(raw)):
        p = tmp_path / "prefix.jsonl"
        p.write_bytes(b"".join(raw[:n]))
        out = ADAPTER.parse_source(p)
        part = out.sessions[0].events[1:] if out.sessions else []
        assert dump(part) == dump(full[: len(part)]), f"line {n}"


# --------------------------------------------------------------------------------------------
# meta


def test_meta_v1_0_111():
    m = events(V1)[0]
    assert m["session"] == "cb947e5b-246e-4253-a953-631f7e464c6b"
    assert m["harness"] == "claude_code" and m["harness_version"] == "1.0.111"
    assert m["model"] == "claude-sonnet-4-20250514"
    assert m["cwd"] == "/Users/aidancunniffe/Desktop/ghq"
    assert m["repo_head"] is None and m["git_branch"] == "main"
    assert m["label"] == "Make the colors green and yellow"
    assert m["t"] == "2025-09-11T13:28:05.638Z"
    assert m["coverage"] == {"grade": "full", "reasons": [], "redactions": 0}
    assert parse(V1).sessions[0].key == m["session"]


def test_usage_totals_count_each_message_once():
    """Streaming repeats a message's usage on every line: the last one per message.id counts."""
    last: dict[str, dict] = {}
    for r in records(V1):
        msg = r.get("message") or {}
        if r.get("type") == "assistant":
            last[msg["id"]] = msg["usage"]
    u = events(V1)[0]["usage"]
    assert u["messages"] == len(last) == 13
    assert u["output_tokens"] == sum(x["output_tokens"] for x in last.values())
    assert u["input_tokens"] == sum(x["input_tokens"] for x in last.values())


def test_summaries_are_titles_not_events():
    m = events(V214)[0]
    assert len(m["summaries"]) == 16
    assert m["summaries"][0] == {"text": "Analyzing missing user message in session file",
                                 "leaf_uuid": "48bcbb7e-4f4b-44bb-9d00-5053474791a0"}
    assert m["label"] == "show tools and store response in file"  # the request, not a summary
    assert not any("Analyzing missing user message" in (e.get("text") or "")
                   for e in events(V214)[1:])


def test_label_falls_back_to_summary(tmp_path):
    recs = records(THINK)
    recs = [r for r in recs if not (r.get("type") == "user" and isinstance(
        r["message"]["content"], str))]
    m = ADAPTER.parse_source(write_log(tmp_path / "s.jsonl", recs)).sessions[0].events[0]
    assert m["label"] == "Add Hello World Header Comment to index.ts"


def test_sidechain_file():
    out = parse(SIDE)
    s = out.sessions[0]
    m = s.events[0]
    assert s.key == "4c2ddfdc-b619-4525-8d03-1950fb1b0257:36541525"
    assert m["session"] == "4c2ddfdc-b619-4525-8d03-1950fb1b0257"  # the parent's session id
    assert m["sidechain"] is True and m["agent_id"] == "36541525"
    assert [e["k"] for e in s.events] == ["meta", "msg.in", "msg.out"]
    assert "sidechain" not in events(MAIN64)[0]


# --------------------------------------------------------------------------------------------
# messages, tools, streaming


def test_streamed_blocks_are_events_in_file_order():
    evs = events(V1)
    assert [e["k"] for e in evs[1:6]] == ["msg.in", "msg.out", "tool.call", "tool.result",
                                          "tool.call"]
    # the first two assistant lines share one message.id: two events, same message_id
    assert evs[2]["message_id"] == evs[3]["message_id"] == "msg_01CGPMn2gKuNSisSxM4ym5nf"
    assert evs[3]["tool"] == "Glob" and evs[3]["args"] == {"pattern": "**/*.css"}
    assert evs[2]["uuid"] == "8ccb9f70-accd-458d-8a64-ea12d9af298d"
    assert evs[2]["parent_uuid"] == "43fb86de-0e88-4ef6-89be-2eca3efe589d"


def test_tool_results_pair_with_calls():
    evs = events(V1)
    calls = {e["call_id"]: e for e in evs if e["k"] == "tool.call"}
    results = [e for e in evs if e["k"] == "tool.result"]
    assert len(results) == 13
    for r in results:
        assert r["tool"] == calls[r["call_id"]]["tool"]
        assert r["exit"] == 0
    glob_res = results[0]
    assert glob_res["tool"] == "Glob"
    assert glob_res["stdout"].startswith("/Users/aidancunniffe/Desktop/ghq/node_modules/")


def test_thinking_is_reasoning():
    evs = events(THINK)
    reasoning = [e for e in evs if e["k"] == "msg.out" and e.get("reasoning")]
    assert len(reasoning) == 2
    assert reasoning[0]["text"].startswith("The user wants me to add another \"hello world\"")
    assert "signature" not in reasoning[0]


def test_bash_result_and_interrupt():
    evs = events(MAIN64)
    bash = [e for e in evs if e["k"] == "tool.result" and e["tool"] == "Bash"]
    assert bash[0]["stdout"] == "" and bash[0]["exit"] == 0
    call = by_call(evs, bash[0]["call_id"], "tool.call")[0]
    assert call["args"]["command"] == "rm hello.js"
    assert any(e["k"] == "msg.in" and e.get("interrupted") for e in events(V1))


def test_task_results_carry_agent_id():
    evs = events(V214)
    tasks = [e for e in evs if e["k"] == "tool.result" and e["tool"] == "Task"]
    assert [t["agent_id"] for t in tasks] == ["a693a87", "a46b9c3"]
    evs = events(V217)
    assert [e["agent_id"] for e in evs if e["k"] == "tool.result" and e["tool"] == "Task"] == [
        "a485154"]


def test_rejected_write_makes_no_edit():
    evs = events(V214)
    res = [e for e in evs if e["k"] == "tool.result" and e["tool"] == "Write"][0]
    assert res["is_error"] is True and res["exit"] == 1
    assert res["stdout"].startswith("The user doesn't want to proceed with this tool use.")
    assert not [e for e in evs if e["k"] == "code.edit"]


def test_compaction():
    evs = events(COMPACT)
    comp = [e for e in evs if e.get("compaction")]
    assert [e["k"] for e in comp] == ["msg.in", "msg.in"]
    boundary, summary = comp
    assert boundary["text"] == "Conversation compacted"
    assert boundary["trigger"] == "auto" and boundary["pre_tokens"] == 155979
    assert boundary["logical_parent_uuid"] == "c199c148-d599-4171-a83b-3589965168df"
    assert boundary["parent_uuid"] is None
    assert summary["text"].startswith("This session is being continued from a previous conversation")
    assert len(summary["text"]) > 10000
    assert evs[0]["compactions"] == 1
    # injected caveat kept but marked; queued user input kept
    caveat = [e for e in evs if e.get("meta") is True]
    assert len(caveat) == 1 and caveat[0]["text"].startswith("Caveat: The messages below")
    queued = [e for e in evs if e.get("queued")]
    assert [q["text"] for q in queued] == ["no, add conversationId field, but set value from sessionId"]
    assert evs[0]["label"].startswith("@src/providers/plugins/sso/ARCHITECTURE-REFACTORING.md review")


# --------------------------------------------------------------------------------------------
# code events


def test_v1_edit_on_globals_css():
    evs = events(V1)
    e = by_call(evs, "toolu_01Sq3QikthL6hZC6Hpk6wrAs", "code.edit")
    assert len(e) == 1
    e = e[0]
    assert e["file"] == "/Users/aidancunniffe/Desktop/ghq/src/app/globals.css"
    assert e["rel"] == "src/app/globals.css" and e["tool"] == "Edit"
    assert e["before_text"] == "" and e["before_range"] == [8, 7]
    assert e["after_text"] == "  --green: #7cff7c;\n  --yellow: #ffff7c;\n"
    assert e["after_range"] == [8, 9]


def test_v1_edit_history_log():
    e = by_call(events(V1), "toolu_01A4gL6DmbUmYMWtEHy8mYjy", "code.edit")
    assert len(e) == 1
    assert e[0]["rel"] == "src/game/HistoryLog.tsx"
    assert e[0]["before_text"] == (
        '        color: player === "RED" ? "var(--red)" : "var(--blue)",\n'
        '        fill: player === "RED" ? "var(--red)" : "var(--blue)",\n')
    assert e[0]["after_text"] == (
        '        color: player === "RED" ? "var(--green)" : "var(--yellow)",\n'
        '        fill: player === "RED" ? "var(--green)" : "var(--yellow)",\n')
    assert e[0]["before_range"] == [383, 384] and e[0]["after_range"] == [383, 384]


def test_v1_multiedit():
    evs = events(V1)
    e = by_call(evs, "toolu_01WjJZBWBwRe4EMgwU4AWMLh", "code.edit")
    assert len(e) >= 2 and all(x["tool"] == "MultiEdit" for x in e)
    assert all(x["rel"] == "src/app/globals.css" for x in e)
    after = "".join(x["after_text"] for x in e)
    before = "".join(x["before_text"] for x in e)
    for s in (".stripe-green-yellow {", ".stripe-green-transparent {",
              ".stripe-yellow-transparent {", ".stripe-yellow-transparent-sm {",
              "color: #73da5f;"):
        assert s in after and s not in before
    assert ".stripe-red-blue {" in before and "color: #da5f73;" in before
    # regions are ordered and do not overlap
    starts = [x["before_range"][0] for x in e]
    assert starts == sorted(starts)


def test_write_create_is_one_whole_file_edit():
    evs = events(MAIN64)
    content = ('#!/usr/bin/env python3\n\ndef main():\n    print("Hello, World!")\n\n'
               'if __name__ == "__main__":\n    main()\n')
    e = by_call(evs, "toolu_bdrk_01QRsKSkDDpcbN5DcZGF6N69", "code.edit")
    assert len(e) == 1
    assert e[0]["created"] is True and e[0]["tool"] == "Write"
    assert e[0]["file"] == "/tmp/private/hello.py" and e[0]["rel"] == "hello.py"
    assert e[0]["before_text"] == "" and e[0]["before_range"] == [1, 0]
    assert e[0]["after_text"] == content and e[0]["after_range"] == [1, 7]


def test_read_is_raw_code():
    evs = events(MAIN64)
    r = [e for e in evs if e["k"] == "code.read"]
    assert len(r) == 1
    assert r[0]["file"] == "/tmp/private/hello.py" and r[0]["rel"] == "hello.py"
    assert r[0]["text"].startswith("#!/usr/bin/env python3\n\ndef main():")
    assert "→" not in r[0]["text"] and r[0]["range"] == [1, 7]
    # the tool.result keeps what the harness showed the model (with the gutter)
    res = by_call(evs, r[0]["call_id"], "tool.result")[0]
    assert "     1→#!/usr/bin/env python3" in res["stdout"]


def test_read_without_structured_result_strips_gutter(tmp_path):
    recs = records(MAIN64)
    for r in recs:
        if r.get("uuid") == "fe215010-5a2f-4ce0-995d-931072824cfd":
            del r["toolUseResult"]
    out = ADAPTER.parse_source(write_log(tmp_path / "s.jsonl", recs))
    r = [e for e in out.sessions[0].events if e["k"] == "code.read"][0]
    assert r["text"].startswith('#!/usr/bin/env python3\n\ndef main():\n    print("Hello, World!")')
    assert "→" not in r["text"] and "system-reminder" not in r["text"]
    assert r["range"][0] == 1


@pytest.mark.parametrize("case", CASES)
def test_edits_reproduce_the_harness_patch(case):
    """Applying a call's code.edit events to ``originalFile`` gives exactly what the harness's
    ``structuredPatch`` gives, and every before_text is the original's text at before_range."""
    evs = events(case)
    checked = 0
    for r in records(case):
        tur = r.get("toolUseResult")
        if not isinstance(tur, dict) or not tur.get("structuredPatch"):
            continue
        original = tur.get("originalFile", tur.get("originalFileContents"))
        if original is None:
            continue
        block = next(b for b in r["message"]["content"] if b.get("type") == "tool_result")
        edits = by_call(evs, block["tool_use_id"], "code.edit")
        assert edits
        lines = base.lines_of(original)
        for e in edits:
            s, t = e["before_range"]
            assert base.join_lines(lines[s - 1:t]) == e["before_text"]
        for e in sorted(edits, key=lambda e: -e["before_range"][0]):
            s, t = e["before_range"]
            lines[s - 1:t] = base.lines_of(e["after_text"])
        expected = base.apply_hunks(original, tur["structuredPatch"])
        assert expected is not None
        assert base.join_lines(lines) == base.join_lines(base.lines_of(expected))
        # after ranges point into the new file
        new_lines = base.lines_of(expected)
        for e in edits:
            s, t = e["after_range"]
            assert base.join_lines(new_lines[s - 1:t]) == e["after_text"]
        checked += 1
    if case in (V1, MAIN64, THINK, COMPACT):
        assert checked > 0


def test_edit_fallback_locates_old_string_in_known_file(tmp_path):
    """Without toolUseResult, the input's old/new strings are located in the last full Read."""
    recs = records(MAIN64)
    for r in recs:
        if r.get("uuid") == "5ef7f557-fafe-4a70-85aa-3c619a510389":  # the Edit's result
            del r["toolUseResult"]
    out = ADAPTER.parse_source(write_log(tmp_path / "s.jsonl", recs))
    e = by_call(out.sessions[0].events, "toolu_bdrk_01WC6KiMbojN1sDscXqkkFWe", "code.edit")
    assert len(e) == 1
    assert e[0]["before_text"] == "" and e[0]["before_range"] == [3, 2]
    assert e[0]["after_text"] == "# Simple hello world program\n" and e[0]["after_range"] == [3, 3]
    assert "range_known" not in e[0]


def test_edit_fallback_without_known_file(tmp_path):
    recs = list(records(THINK))
    for r in recs:
        r.pop("toolUseResult", None)
    out = ADAPTER.parse_source(write_log(tmp_path / "s.jsonl", recs))
    e = [x for x in out.sessions[0].events if x["k"] == "code.edit"]
    assert len(e) == 1 and e[0]["range_known"] is False
    assert e[0]["after_text"].count("console.log('hello world');") == 6
    assert e[0]["rel"] == "index.ts"


def test_multiedit_and_notebook_fallback(tmp_path):
    cwd = "/repo"
    env = {"sessionId": "s1", "version": "2.0.64", "cwd": cwd, "timestamp": "2025-12-10T19:37:45.343Z"}
    content = "a = 1\nb = 2\nc = 3\n"
    recs = [
        {**env, "type": "assistant", "uuid": "u1", "message": {"id": "m1", "role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Write",
             "input": {"file_path": "/repo/x.py", "content": content}}]}},
        {**env, "type": "user", "uuid": "u2", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "File created successfully at: /repo/x.py"}]},
         "toolUseResult": {"type": "create", "filePath": "/repo/x.py", "content": content,
                           "structuredPatch": [], "originalFile": None}},
        {**env, "type": "assistant", "uuid": "u3", "message": {"id": "m2", "role": "assistant", "content": [
            {"type": "tool_use", "id": "t2", "name": "MultiEdit", "input": {"file_path": "/repo/x.py", "edits": [
                {"old_string": "a = 1", "new_string": "a = 10"}, {"old_string": "c = 3", "new_string": "c = 30"}]}}]}},
        {**env, "type": "user", "uuid": "u4", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t2", "content": "Applied 2 edits"}]}},
        {**env, "type": "assistant", "uuid": "u5", "message": {"id": "m3", "role": "assistant", "content": [
            {"type": "tool_use", "id": "t3", "name": "NotebookEdit", "input": {
                "notebook_path": "/repo/n.ipynb", "cell_id": "c1", "new_source": "print(1)\n",
                "edit_mode": "replace"}}]}},
        {**env, "type": "user", "uuid": "u6", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t3", "content": "Updated cell c1"}]}},
    ]
    evs = ADAPTER.parse_source(write_log(tmp_path / "s.jsonl", recs)).sessions[0].events
    me = by_call(evs, "t2", "code.edit")
    assert [(e["before_range"], e["before_text"], e["after_text"]) for e in me] == [
        ([1, 1], "a = 1\n", "a = 10\n"), ([3, 3], "c = 3\n", "c = 30\n")]
    nb = by_call(evs, "t3", "code.edit")
    assert nb[0]["rel"] == "n.ipynb" and nb[0]["after_text"] == "print(1)\n"
    assert nb[0]["cell_id"] == "c1" and nb[0]["range_known"] is False


# --------------------------------------------------------------------------------------------
# robustness


ENV = {"sessionId": "s1", "version": "2.0.64", "cwd": "/repo", "timestamp": "2025-12-10T19:37:45.343Z"}


def test_malformed_lines_are_errors_and_the_rest_parses(tmp_path):
    good = records(MAIN64)
    lines = [json.dumps(good[1]), "{not json", "[1, 2, 3]", '"a string"',
             json.dumps({**ENV, "type": "assistant", "uuid": "x1"}),  # no message
             json.dumps({**ENV, "type": "user", "uuid": "x2", "message": {"content": 42}})]
    p = tmp_path / "s.jsonl"
    with open(p, "wb") as f:
        for ln in lines:
            f.write(ln.encode() + b"\n")
        f.write(b"\x00\xff\xfe binary \x89PNG junk\n")
        for r in good[2:6]:
            f.write(json.dumps(r).encode() + b"\n")
        f.write(b'{"type": "user", "message": {"content": "trunc')  # still being written
    out = ADAPTER.parse_source(p)
    errs = [e["error"] for e in out.errors]
    assert all(e["code"] == "E_ADAPTER_PARSE" and e["path"] == str(p) for e in errs)
    assert [e["line"] for e in errs] == [2, 3, 4, 5, 6, 7]
    evs = out.sessions[0].events
    assert [e["k"] for e in evs] == ["meta", "msg.in", "msg.out", "tool.call", "tool.call",
                                     "tool.call"]
    assert evs[0]["coverage"]["grade"] == "degraded"
    assert "6 malformed record(s) skipped" in evs[0]["coverage"]["reasons"]
    assert out.end_offset == p.stat().st_size - len(b'{"type": "user", "message": {"content": "trunc')


def test_huge_tool_output_is_capped_but_code_is_not(tmp_path):
    big = "x = 1\n" * (MAX_TOOL_OUTPUT // 3)  # 2 MB
    gutter = "".join(f"{i + 1:6}→x = 1\n" for i in range(MAX_TOOL_OUTPUT // 3))
    recs = [
        {**ENV, "type": "assistant", "uuid": "u1", "message": {"id": "m1", "content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "yes"}},
            {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/repo/big.py"}}]}},
        {**ENV, "type": "user", "uuid": "u2", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "y\n" * MAX_TOOL_OUTPUT}]}},
        {**ENV, "type": "user", "uuid": "u3", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t2", "content": gutter}]}},
    ]
    evs = ADAPTER.parse_source(write_log(tmp_path / "s.jsonl", recs)).sessions[0].events
    bash = by_call(evs, "t1", "tool.result")[0]
    assert bash["truncated"] is True and len(bash["stdout"]) == MAX_TOOL_OUTPUT
    assert bash["stdout_chars"] == 2 * MAX_TOOL_OUTPUT
    read = by_call(evs, "t2", "code.read")[0]
    assert read["text"] == big and read["range"] == [1, MAX_TOOL_OUTPUT // 3]
    assert by_call(evs, "t2", "tool.result")[0]["truncated"] is True


def test_version_matrix_strict_and_permissive(tmp_path):
    recs = records(THINK)
    for r in recs:
        if "version" in r:
            r["version"] = "9.9.9"
    p = write_log(tmp_path / "s.jsonl", recs)
    with pytest.raises(UnsupportedLog) as ei:
        ADAPTER.parse_source(p, mode="strict")
    assert ei.value.code == "unsupported-log" and "9.9.9" in ei.value.message
    m = ADAPTER.parse_source(p).sessions[0].events[0]
    assert m["coverage"]["grade"] == "degraded"
    assert any("9.9.9" in r for r in m["coverage"]["reasons"])
    # a tested version is fine in strict mode
    assert ADAPTER.parse_source(DATA / THINK, mode="strict").sessions


def test_redaction(tmp_path):
    ant = "sk-ant-api03-" + "Zx9Qw2Er7Ty1Ui8Op3As6Df0Gh4Jk5Lm" * 3
    bearer = "Authorization: Bearer " + "eyQ9fAk3LmZ0pR7sT2vW8xY1bC4dE6gH"
    pem = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq9Yc3xPz\nq8Rt5Lm2Nv4Ws6Xy"
           "\n-----END RSA PRIVATE KEY-----")
    fake = "const key = 'sk-ant-' + 'a'.repeat(95);"
    recs = [
        {**ENV, "type": "user", "uuid": "u1", "message": {"content": f"use {ant} please"}},
        {**ENV, "type": "assistant", "uuid": "u2", "message": {"id": "m1", "content": [
            {"type": "text", "text": f"curl -H '{bearer}' https://api.example.com"},
            {"type": "text", "text": pem},
            {"type": "text", "text": fake}]}},
    ]
    evs = ADAPTER.parse_source(write_log(tmp_path / "s.jsonl", recs)).sessions[0].events
    texts = [e["text"] for e in evs[1:]]
    assert texts[0] == "use [REDACTED:anthropic-key] please"
    assert "[REDACTED:bearer-token]" in texts[1] and "eyQ9fAk3" not in texts[1]
    assert texts[2] == "[REDACTED:private-key]"
    assert texts[3] == fake  # code that builds a fake key is not a secret
    assert evs[0]["coverage"]["redactions"] == 3
    assert ant not in dump(evs)


@pytest.mark.parametrize("case", CASES)
def test_real_logs_have_no_false_positive_redactions(case):
    assert events(case)[0]["coverage"]["redactions"] == 0


def test_stray_records_first_in_a_log_change_nothing(tmp_path):
    # what the fuzz test below once found: a user record without a message object, first in the
    # log, set the session's cwd and so every event's repo-relative path
    recs = records(V1)
    stray = [{"type": "user", "cwd": "0", "sessionId": None, "uuid": None},
             {"type": "system", "cwd": "/elsewhere", "gitBranch": "other"}]
    out = ADAPTER.parse_source(write_log(tmp_path / "mixed.jsonl", stray + recs))
    assert [(e["error"]["code"], e["error"]["line"]) for e in out.errors] == [("E_ADAPTER_PARSE", 1)]
    (session,) = out.sessions
    clean = events(V1)
    assert session.events[0]["cwd"] == clean[0]["cwd"] == recs[0]["cwd"]
    assert session.events[0]["git_branch"] == clean[0]["git_branch"]
    assert dump(session.events[1:]) == dump(clean[1:])


def test_records_that_name_no_session_still_give_its_cwd(tmp_path):
    recs = [{k: v for k, v in r.items() if k != "sessionId"} for r in records(V1)]
    (session,) = ADAPTER.parse_source(write_log(tmp_path / "anon.jsonl", recs)).sessions
    clean = events(V1)
    assert session.events[0]["cwd"] == clean[0]["cwd"]
    assert [e.get("rel") for e in session.events] == [e.get("rel") for e in clean]
    assert any(e.get("rel") for e in clean)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=12), ch, max_size=4),
    max_leaves=20)
record_like = st.fixed_dictionaries(
    {}, optional={
        "type": st.sampled_from(["user", "assistant", "system", "summary", "queue-operation",
                                 "file-history-snapshot", "x"]) | st.text(max_size=5),
        "message": json_values | st.fixed_dictionaries({}, optional={
            "id": json_values, "model": json_values, "usage": json_values,
            "content": json_values | st.lists(st.fixed_dictionaries({}, optional={
                "type": st.sampled_from(["text", "thinking", "tool_use", "tool_result", "image"]),
                "text": json_values, "thinking": json_values, "id": json_values,
                "name": json_values, "input": json_values, "tool_use_id": json_values,
                "content": json_values, "is_error": json_values}), max_size=3)}),
        "toolUseResult": json_values, "uuid": json_values, "parentUuid": json_values,
        "timestamp": json_values, "sessionId": json_values, "version": json_values,
        "cwd": json_values, "isSidechain": json_values, "agentId": json_values,
        "subtype": json_values, "content": json_values, "compactMetadata": json_values,
        "summary": json_values, "isMeta": json_values, "isCompactSummary": json_values,
        "operation": json_values})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.lists(st.tuples(st.integers(0, 37), record_like | st.dictionaries(
    st.text(max_size=8), json_values, max_size=5)), max_size=8))
def test_arbitrary_objects_never_crash_nor_lose_valid_events(tmp_path, junk):
    valid = (ROOT / DATA / V1).read_text(encoding="utf-8").splitlines()
    mixed = list(valid)
    for pos, obj in sorted(junk, key=lambda x: -x[0]):
        mixed.insert(pos, json.dumps(obj))
    p = tmp_path / "mixed.jsonl"
    p.write_text("\n".join(mixed) + "\n", encoding="utf-8")
    out = ADAPTER.parse_source(p)
    assert all(set(e) == {"error"} and e["error"]["code"] == "E_ADAPTER_PARSE" for e in out.errors)
    want = [json.dumps(e, sort_keys=True) for e in events(V1)[1:]]
    got = [json.dumps(e, sort_keys=True) for s in out.sessions for e in s.events[1:]]
    it = iter(got)
    assert all(w in it for w in want)  # the valid events are a subsequence of the mixed parse


# --------------------------------------------------------------------------------------------
# discovery


def test_default_paths(monkeypatch, tmp_path):
    assert [str(p) for p in ADAPTER.default_paths()] == [str(Path.home() / ".claude/projects")]
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    assert ADAPTER.default_paths()[0] == tmp_path / "cfg" / "projects"


def test_discover_layouts(tmp_path):
    proj = tmp_path / "-Users-me-repo"
    files = [proj / "4c2d.jsonl", proj / "agent-36541525.jsonl",
             proj / "4c2d" / "subagents" / "agent-a485154.jsonl",
             proj / "4c2d" / "subagents" / "workflows" / "wf1" / "agent-b1.jsonl"]
    ignored = [proj / "4c2d" / "subagents" / "agent-a485154.meta.json",
               proj / "4c2d" / "subagents" / "workflows" / "wf1" / "journal.jsonl",
               proj / "4c2d" / "workflows" / "wf1.json"]
    for f in files + ignored:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("")
    assert list(ADAPTER.discover(tmp_path)) == sorted(files)
