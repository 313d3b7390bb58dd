"""Transcript windows read from a live session (rows in the index) and from its sealed tape: the
same events and the same user request, however the live side finds them."""

from __future__ import annotations

import pytest
from claude_log import World, run_json

from engram.engine import Engine

CODE = '''def parse_duration(text):
    """'1h30m' -> seconds; raises ValueError on anything else."""
    units = {"h": 3600, "m": 60, "s": 1}
    total, num = 0, ""
    for ch in text:
        if ch.isdigit():
            num += ch
        elif ch in units and num:
            total, num = total + int(num) * units[ch], ""
        else:
            raise ValueError(f"bad duration: {text!r}")
    return total
'''


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    return w


def _windows(eng: Engine, file: str) -> list:
    res = eng.explain(file, 1, CODE.count("\n"), text=CODE)
    return [(s["session"], w) for s in res["sessions"] for w in s["windows"]]


def test_live_and_sealed_windows_agree(world, capsys):
    s = world.session(session_id="dddd0001-0000-0000-0000-000000000001")
    s.user("we need durations like 1h30m in the config").say("I'll add a parser.")
    for i in range(30):  # earlier, unrelated turns: the request is found by looking back
        s.say(f"step {i}: checking the config loader")
    s.user("write parse_duration in util.py").write("util.py", CODE).say("Done.")
    s.save()
    world.checkout()
    file = str(world.root / "util.py")
    live = run_json(capsys, "ingest")
    assert live["sealed"] == 0
    eng = Engine(world.root)
    try:
        got_live = _windows(eng, file)
        again = _windows(eng, file)        # memoised while the index is unchanged
    finally:
        eng.close()
    assert got_live and got_live == again
    assert got_live[0][1]["request"]["text"] == "write parse_duration in util.py"
    run_json(capsys, "ingest", "--seal")
    eng = Engine(world.root)
    try:
        assert _windows(eng, file) == got_live
    finally:
        eng.close()
