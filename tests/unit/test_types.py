"""The TypedDicts of the tape events and of the explain result say what the data really holds:
every required key is present and every key present is declared (adapters may add keys of their
own, so for events that direction is reported only for the kinds' own keys)."""

from __future__ import annotations

import json
import typing
from collections import defaultdict
from pathlib import Path

from engram.query.result import ExplainResult, Session, Stats, Window
from engram.tape.events import Event

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _kinds() -> dict[str, type]:
    return {typing.get_args(t.__annotations__["k"])[0]: t for t in typing.get_args(Event)}


def test_every_golden_event_has_the_keys_of_its_kind():
    kinds = _kinds()
    seen = defaultdict(int)
    for tape in sorted((GOLDEN / "tapes").rglob("*.jsonl")):
        for n, line in enumerate(tape.read_text().splitlines()):
            ev = json.loads(line)
            assert ev["k"] in kinds, f"{tape.name}:{n}: kind {ev['k']!r} has no TypedDict"
            td = kinds[ev["k"]]
            missing = td.__required_keys__ - ev.keys()
            assert not missing, f"{tape.name}:{n}: {ev['k']} lacks {sorted(missing)}"
            seen[ev["k"]] += 1
    assert set(seen) >= {"meta", "msg.in", "msg.out", "tool.call", "tool.result", "code.edit"}


def _check(d: dict, td: type, where: str) -> None:
    missing = td.__required_keys__ - d.keys()
    extra = d.keys() - td.__required_keys__ - td.__optional_keys__
    assert not missing, f"{where}: lacks {sorted(missing)}"
    assert not extra, f"{where}: undeclared {sorted(extra)}"


def test_golden_explain_results_match_the_result_types():
    files = sorted((GOLDEN / "explain").glob("*.json"))
    assert files
    for f in files:
        r = json.loads(f.read_text())
        _check(r, ExplainResult, f.name)
        _check(r["stats"], Stats, f"{f.name} stats")
        for i, s in enumerate(r["sessions"]):
            _check(s, Session, f"{f.name} session {i}")
            for j, w in enumerate(s["windows"]):
                _check(w, Window, f"{f.name} session {i} window {j}")
