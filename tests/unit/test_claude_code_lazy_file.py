"""The Claude Code parser applies an edit's ``structuredPatch`` to the file's content only when a
later edit without one needs that content (applying it split the whole file on every edit): the
same events either way."""

from __future__ import annotations

import orjson

from engram.adapters import base
from engram.adapters.claude_code import ADAPTER

ENV = {"sessionId": "s1", "version": "2.0.64", "cwd": "/repo", "timestamp": "2025-12-10T19:37:45.343Z"}
ORIGINAL = "".join(f"line_{i} = {i}\n" for i in range(1, 41))


def _call(uuid: str, tid: str, name: str, inp: dict) -> dict:
    return {**ENV, "type": "assistant", "uuid": uuid, "message": {
        "id": "m" + uuid, "role": "assistant",
        "content": [{"type": "tool_use", "id": tid, "name": name, "input": inp}]}}


def _result(uuid: str, tid: str, result: dict | None) -> dict:
    rec = {**ENV, "type": "user", "uuid": uuid, "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tid, "content": "ok"}]}}
    if result is not None:
        rec["toolUseResult"] = result
    return rec


def _session(tmp_path, hunk_lines: list[str]) -> list[dict]:
    patched = {"filePath": "/repo/x.py", "originalFile": ORIGINAL, "structuredPatch": [
        {"oldStart": 10, "oldLines": 1, "newStart": 10, "newLines": 1, "lines": hunk_lines}]}
    recs = [
        _call("u1", "t1", "Edit", {"file_path": "/repo/x.py", "old_string": "line_10 = 10",
                                   "new_string": "line_10 = 100"}),
        _result("u2", "t1", patched),
        # no toolUseResult: the edit is located in the content the first one left
        _call("u3", "t2", "Edit", {"file_path": "/repo/x.py", "old_string": "line_20 = 20",
                                   "new_string": "line_20 = 200"}),
        _result("u4", "t2", None),
    ]
    p = tmp_path / "s.jsonl"
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return ADAPTER.parse_source(p).sessions[0].events


def _second(events: list[dict]) -> dict:
    return [e for e in events if e["k"] == "code.edit" and e.get("call_id") == "t2"][0]


def test_a_later_edit_reads_the_patched_content(tmp_path):
    e = _second(_session(tmp_path, ["-line_10 = 10", "+line_10 = 100"]))
    after = base.apply_hunks(ORIGINAL, [{"oldStart": 10, "lines": ["-line_10 = 10", "+line_10 = 100"]}])
    assert "line_10 = 100\n" in after
    # located in the patched file: its line, the range known
    assert e["before_text"] == "line_20 = 20\n" and e["after_text"] == "line_20 = 200\n"
    assert e["before_range"] == [20, 20] and "range_known" not in e


def test_a_patch_that_does_not_apply_leaves_the_file_unknown(tmp_path):
    e = _second(_session(tmp_path, ["-not in the file", "+x"]))
    assert e["range_known"] is False  # the content is unknown: the strings alone
    assert e["before_text"] == "line_20 = 20" and e["after_text"] == "line_20 = 200"
