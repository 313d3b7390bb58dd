"""Accuracy that holds when a machine has many sessions (issue 22, item 3).

* A compaction summary quotes code that other sessions of a busy project hold too (they read or
  edited the file): the earlier part the session continues, which ended just before it started,
  is chosen over a session whose tail holds more of the quoted code.
* Explain crosses the continuation of a producing session even when more tapes read the span than
  the walk's budget of tapes crossed (``walk.CROSS_TAPES``).
"""

from __future__ import annotations

from claude_log import World, run_json
from test_lineage import SUMMARY, _chat

from engram.engine import Engine
from engram.query import walk

CODE = '''def shard_budget(tenant, shards, floor=64):
    """Split a tenant's cache budget across its shards, never below floor entries each."""
    per = max(floor, tenant.budget // max(1, len(shards)))
    plan = {}
    for name in sorted(shards):
        plan[name] = per if shards[name].hot else per // 2
    return plan


def rebalance(plan, shards, moved=0):
    """Move budget from cold shards to hot ones until every hot shard has its share."""
    hot = [n for n in sorted(plan) if shards[n].hot]
    cold = [n for n in sorted(plan) if not shards[n].hot]
    while cold and hot and moved < len(cold) * 8:
        donor = cold[moved % len(cold)]
        taker = hot[moved % len(hot)]
        if plan[donor] <= 1:
            cold.remove(donor)
            continue
        plan[donor] -= 1
        plan[taker] += 1
        moved += 1
    return plan, moved
'''
NEW = CODE.replace("per // 2", "max(floor, per // 2)")
P1 = "c1000001-0000-0000-0000-000000000001"
BUSY = "b1000001-0000-0000-0000-000000000001"
S2 = "c1000002-0000-0000-0000-000000000002"


def _world(w: World, readers: int = 0) -> None:
    # a session of the same project that wrote the code (its tail holds all of it)
    w.session(session_id=BUSY).user("add the shard budget helper").write("budget.py", CODE).save()
    for i in range(readers):  # sessions that read it since
        w.session(session_id=f"r{i:07d}-0000-0000-0000-000000000001").user(
            "how is the budget split?").read("budget.py").say("It reads:\n" + CODE).save()
    w.tick(1200)  # twenty minutes later
    p1 = w.session(session_id=P1)
    p1.user("Shards that are cold get half the budget, which can drop below the floor; fix it")
    said = _chat(p1, "coldshards", 3)
    p1.save()
    s2 = w.session(session_id=S2)
    s2.user(SUMMARY + "Request: cold shards drop below the floor.\n" + " ".join(said[-2:])
            + "\nRelevant code:\n```python\n" + CODE + "```\n", compact_summary=True)
    s2.say("Continuing with the fix.").edit("budget.py", CODE, NEW).save()
    w.checkout()
    eng = Engine(w.root)
    try:
        eng.ingest(seal=True)
    finally:
        eng.close()


def _continuations(w: World) -> list[tuple[str, str, list]]:
    eng = Engine(w.root)
    try:
        return [(a[:8], b[:8], m) for a, b, m in eng.conn().execute(
            "SELECT a.session, b.session, c.markers FROM continuations c"
            " JOIN tapes a ON a.id=c.from_tape JOIN tapes b ON b.id=c.to_tape")]
    finally:
        eng.close()


def test_summary_continues_the_part_that_just_ended_not_the_busier_session(world):
    _world(world)
    rows = [r for r in _continuations(world) if r[1] == S2[:8]]
    assert [r[0] for r in rows] == [P1[:8]], rows
    assert "immediate" in rows[0][2] and "summary" in rows[0][2]


def test_producers_continuation_crossed_past_the_budget_of_tapes(world, capsys, monkeypatch):
    _world(world, readers=3)
    monkeypatch.setattr(walk, "CROSS_TAPES", 1)  # fewer than the tapes that read the span
    res = run_json(capsys, "explain", "budget.py:1-7", "--brief")
    by = {s["session"]: s for s in res["sessions"]}
    assert by[S2]["via"] == "direct" and by[BUSY]["via"] == "direct"  # the two producers
    assert by[P1]["via"] == "continuation"
