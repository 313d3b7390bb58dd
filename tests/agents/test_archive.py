"""engram gc --older-than: old sessions leave the hot index (tapes stay, explain --all still finds
them), warnings and decisions never age out, and a later ingest does not bring them back."""

from __future__ import annotations

from conftest import run, run_json

from engram.engine import Engine

OLD = "2025-01-02T03:04:05.000Z"


def _harnesses(res):
    return [(s["harness"], s.get("archived", False)) for s in res["sessions"]]


def test_archive_moves_old_sessions_out_and_keeps_warnings(world, capsys):
    eng = Engine(world.root)
    try:
        eng.add_note("net.py", 4, 12, "warning", "old but still true", t=OLD)
        eng.add_note("net.py", 4, 12, "discovery", "old and dull", t=OLD)
    finally:
        eng.close()
    tapes_before = sorted(p.name for p in (world.root / ".engram" / "tapes").iterdir())
    before = run_json(capsys, "explain", "net.py:4-12")
    assert {h for h, _a in _harnesses(before)} == {"engram", "claude_code"}

    plan = run_json(capsys, "gc", "--older-than", "90d", "--dry-run")["archive"]
    assert plan["dry_run"] is True and plan["archived"] == 2
    assert sorted(s["harness"] for s in plan["sessions"]) == ["claude_code", "engram"]
    assert run_json(capsys, "explain", "net.py:4-12")["sessions"] == before["sessions"]

    res = run_json(capsys, "gc", "--older-than", "90d")
    assert res["archive"]["archived"] == 2 and res["orphan_blocks_removed"] > 0
    hot = run_json(capsys, "explain", "net.py:4-12")
    assert [(s["harness"], s["note"]["kind"]) for s in hot["sessions"]] == [("engram", "warning")]
    every = run_json(capsys, "explain", "net.py:4-12", "--all")
    assert ("claude_code", True) in _harnesses(every) and ("engram", True) in _harnesses(every)
    assert every["sessions"][0]["note"]["kind"] == "warning"

    # tapes stay, are still listed and open; an ingest does not put them back
    assert sorted(p.name for p in (world.root / ".engram" / "tapes").iterdir()) == tapes_before
    assert len(run_json(capsys, "tapes")) == 3
    claude = next(t for t in run_json(capsys, "tapes") if t["harness"] == "claude_code")
    assert run_json(capsys, "show", claude["tape_id"])["events"]
    run_json(capsys, "ingest")
    assert _harnesses(run_json(capsys, "explain", "net.py:4-12")) == [("engram", False)]
    # nothing older left: a second run archives nothing
    assert run_json(capsys, "gc", "--older-than", "90d")["archive"]["archived"] == 0


def test_bad_age_is_one_line(world, capsys):
    code, out, err = run(capsys, "gc", "--older-than", "soon")
    assert code == 1 and out == "" and "--older-than wants a duration like 90d" in err
