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


def test_windows_for_the_top_sessions_only(world, capsys):
    """The default result carries transcript windows for the top 3 sessions; the others list
    their anchor (no events, no tape read). ``--windows N`` and ``window.sessions`` change how
    many, ``--windows 0`` leaves only anchors, and the ranking is the same whatever N is."""
    w = world.session(session_id="eeee0000-0000-0000-0000-000000000000")
    w.user("write parse_duration in util.py").write("util.py", CODE).say("Done.")
    w.save()
    for i in range(1, 6):
        world.tick(600)
        r = world.session(session_id=f"eeee000{i}-0000-0000-0000-000000000000")
        r.user(f"review {i}: is parse_duration right?").read("util.py").say("It looks right.")
        r.save()
    world.checkout()
    run_json(capsys, "ingest", "--seal")
    span = f"{world.root / 'util.py'}:1-{CODE.count(chr(10))}"

    def shape(res):
        return [(s["session"], [("events" in win, win["anchor"]) for win in s["windows"]])
                for s in res["sessions"]]

    default = shape(run_json(capsys, "explain", span))
    assert len(default) == 6
    assert default[0][0].startswith("eeee0000")  # the writer first
    assert [all(has for has, _a in ws) for _s, ws in default] == [True] * 3 + [False] * 3
    everything = shape(run_json(capsys, "explain", span, "--windows", "10"))
    assert [all(has for has, _a in ws) for _s, ws in everything] == [True] * 6
    assert [(s, [a for _h, a in ws][:1]) for s, ws in everything] == \
        [(s, [a for _h, a in ws][:1]) for s, ws in default]  # same sessions, order and anchors
    from engram.cli import main

    assert main(["explain", span, "--pretty"]) == 0
    assert "Sessions 4-6 are listed with their anchor only" in capsys.readouterr().out
    none = shape(run_json(capsys, "explain", span, "--windows", "0"))
    assert [s for s, _ws in none] == [s for s, _ws in default]
    assert not any(has for _s, ws in none for has, _a in ws)
    cfg = world.root / ".engram" / "config.yml"
    cfg.write_text(cfg.read_text() + "window: {sessions: 1}\n")
    one = shape(run_json(capsys, "explain", span))
    assert [all(has for has, _a in ws) for _s, ws in one] == [True] + [False] * 5
