"""``engram.tape.check``: the shape a tape's events must have before they are indexed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram.errors import CorruptTape
from engram.tape import reader, writer
from engram.tape.check import check_event

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "tapes"

META = {"t": None, "k": "meta", "harness": "claude_code", "session": "s", "cwd": "/w", "label": "x",
        "tier": "agent", "adapter": "claude_code", "adapter_version": "1", "source_path": "/w/a.jsonl",
        "coverage": {"grade": "full", "reasons": [], "redactions": 0}}
EDIT = {"t": "2026-01-01T00:00:00Z", "k": "code.edit", "file": "a.py", "rel": "a.py",
        "before_range": [1, 0], "after_range": [1, 2], "before_text": "", "after_text": "a\nb\n",
        "before_hash": "0", "after_hash": "1", "call_id": "c1"}


def test_every_golden_tape_event_has_the_format_shape():
    n = 0
    for g in sorted(GOLDEN.rglob("*.jsonl")):  # a golden file holds one or more sessions
        offset = 0
        for ev in (json.loads(line) for line in g.read_text(encoding="utf-8").splitlines() if line):
            offset = 0 if ev["k"] == "meta" else offset + 1
            check_event(ev, offset, g)
            n += 1
    assert n > 500


@pytest.mark.parametrize("event,field", [
    ({**EDIT, "t": 5}, "'t'"),
    ({**EDIT, "after_range": ["1", 2]}, "'after_range'"),
    ({**EDIT, "before_range": [1]}, "'before_range'"),
    ({**EDIT, "after_text": None}, "'after_text'"),
    ({**EDIT, "call_id": ["c1"]}, "'call_id'"),
    ({**EDIT, "file": {"a": 1}}, "'file'"),
    ({**EDIT, "after_range": [1, 2**63]}, "'after_range'"),
    ({"t": None, "k": "msg.in", "text": ["hi"]}, "'text'"),
    ({"t": None, "k": "msg.out", "text": "x", "reasoning": "yes"}, "'reasoning'"),
    ({"t": None, "k": "tool.result", "tool": "Bash", "exit": 1.5, "stdout": "x"}, "'exit'"),
    ({"t": None, "k": 7}, "'k'"),
    (META, "a meta event after the first line"),
])
def test_a_field_of_another_type_is_a_corrupt_tape_at_its_line(event, field):
    with pytest.raises(CorruptTape) as e:
        check_event(event, 4, "x.jsonl.zst")
    assert field in e.value.message and e.value.line == 5


def test_what_the_format_allows_passes():
    check_event(META, 0, "x")
    check_event({**EDIT, "before_range": None, "after_range": None, "rel": None, "t": None}, 1, "x")
    check_event({**EDIT, "extra": {"any": [1, "thing"]}}, 1, "x")  # unknown keys are kept
    check_event({"t": None, "k": "future.kind", "range": "anything", "text": 5}, 1, "x")  # unknown kind
    check_event({"t": None, "k": "tool.call", "tool": "Bash", "call_id": None, "args": [1, 2]}, 1, "x")
    check_event({"t": None, "k": "code.read", "file": "a", "rel": None, "range": None, "text": "",
                 "truncated": None}, 1, "x")


def test_read_tape_refuses_a_well_named_tape_with_a_bad_event(tmp_path):
    ref = writer.write_tape(tmp_path, [META, {**EDIT, "before_range": "1-2"}])
    with pytest.raises(CorruptTape) as e:
        reader.read_tape(ref.path)
    assert e.value.line == 2 and "'before_range'" in e.value.message
    ok = writer.write_tape(tmp_path, [META, EDIT])
    assert reader.read_tape(ok.path)[1] == EDIT
