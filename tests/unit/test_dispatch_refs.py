"""A dispatch's candidate refs read in one statement (``continuations._dispatch_refs``: refs, their
events and tapes joined, filtered on role, tier and tape in SQL) are the rows that the loop of
``_dispatch_of`` kept when it made an event and a tape row in Python for every ref of the blocks
(issue 22, ingest throughput): the same rows, in the same (block, event, role) order."""

from __future__ import annotations

from claude_log import World, run_json
from test_dispatch_any_tier import AGENT, ORCH, READERS, RETRY, TASK, TYPED

from engram.engine import Engine
from engram.index import queries, schema
from engram.lineage import continuations, rules

KEPT_ROLES = (schema.ROLE_MSG_OUT, schema.ROLE_TOOL_CALL, schema.ROLE_MSG_IN)


def _as_before(conn, blocks, agent):
    """What ``_dispatch_of`` iterated over before (its skips on the event, tape, role and tier)."""
    refs = queries.refs_for_blocks(conn, blocks)
    ev = queries.events(conn, {r[1] for r in refs})
    trows = queries.tapes(conn, {e.tape for e in ev.values()})
    out = []
    for b, eid, role, _l in refs:
        e = ev.get(eid)
        if e is None or e.tape == agent or role not in KEPT_ROLES:
            continue
        o = trows[e.tape]
        if o.tier != "orchestrator" and role == schema.ROLE_MSG_IN:
            continue  # (the loop skipped these after its time and similarity checks)
        out.append((b, eid, role, e.tape, e.t, e.ofs, o.tier))
    return out


def test_dispatch_refs_equal_the_rows_made_in_python(world: World, capsys, monkeypatch):
    w = world
    w.session(session_id=ORCH).user("harden the network layer; get an agent to do it") \
        .say("Dispatching a coding agent with this task:\n\n" + TASK).save()
    w.session(session_id=TYPED).user(TASK).say("I'll leave this for later.").save()
    w.session(session_id=AGENT).user(TASK).write("net.py", RETRY).save()
    for sid in READERS:
        w.session(session_id=sid).user("how does the retry helper work?").read("net.py") \
            .say("It reads:\n" + RETRY).save()
    w.checkout()
    run_json(capsys, "ingest", "--seal")
    eng = Engine(w.root)
    try:
        conn = eng.conn()
        # one tape that was given the task as input becomes an orchestrator's: its input counts
        conn.execute("UPDATE tapes SET tier='orchestrator' WHERE session=?", (TYPED,))
        blocks = [b for (b,) in conn.execute("SELECT DISTINCT block FROM refs")]
        tapes = [t for (t,) in conn.execute("SELECT id FROM tapes ORDER BY id")]
        tier = dict(conn.execute("SELECT id, tier FROM tapes"))
        checked = dropped = kept_input = 0
        for agent in [*tapes, -1]:
            got = continuations._dispatch_refs(conn, blocks, agent)
            want = _as_before(conn, blocks, agent)
            assert got == want
            checked += len(got)
            kept_input += sum(r[2] == schema.ROLE_MSG_IN for r in got)
            assert all(r[3] != agent for r in got)
            assert all(tier[r[3]] == "orchestrator" for r in got if r[2] == schema.ROLE_MSG_IN)
            dropped += len(queries.refs_for_blocks(conn, blocks)) - len(got)
        # the filter did something either way: rows kept, input of orchestrators kept, others left
        assert checked and kept_input and dropped
        # chunked like the other carray reads: the same rows when the blocks come in many chunks
        monkeypatch.setattr(continuations, "_chunks", lambda v: rules._chunks(v, 2))
        assert continuations._dispatch_refs(conn, blocks, -1) == _as_before(conn, blocks, -1)
    finally:
        eng.close()
