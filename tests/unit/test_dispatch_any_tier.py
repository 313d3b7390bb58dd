"""Dispatch found whatever the dispatcher's harness tier: a Claude Code session (tier ``agent``)
that writes a task another agent session then starts from is that session's dispatcher, ranked
with the history of the code it produced (before the sessions that merely read the code); the same
request merely typed into another session (its input) dispatches nothing."""

from __future__ import annotations

from claude_log import World, run_json

RETRY = '''def retry_with_backoff(fn, attempts=5, base_delay=0.25, max_delay=8.0):
    """Call fn until it succeeds, sleeping exponentially longer between failures."""
    delay = base_delay
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except TransientError as exc:
            if attempt == attempts:
                raise RetryExhausted(attempts) from exc
            time.sleep(delay)
            delay = min(max_delay, delay * 2)
'''
TASK = ("Implement retry_with_backoff in net.py: exponential backoff starting at 0.25 seconds, "
        "capped at 8 seconds, five attempts, raising RetryExhausted when every attempt failed "
        "with a TransientError.")
ORCH = "0dd00001-0000-0000-0000-000000000001"
TYPED = "0dd00002-0000-0000-0000-000000000002"
AGENT = "0dd00003-0000-0000-0000-000000000003"
READERS = [f"0dd0001{i}-0000-0000-0000-00000000001{i}" for i in range(4)]


def test_claude_code_session_dispatches_and_ranks_before_readers(world: World, capsys):
    w = world
    # a Claude Code session that hands the work to another agent (tier "agent", not orchestrator)
    w.session(session_id=ORCH).user("harden the network layer; get an agent to do it") \
        .say("Dispatching a coding agent with this task:\n\n" + TASK).save()
    # the same request typed by the user into an unrelated session: input, not a dispatch
    w.session(session_id=TYPED).user(TASK).say("I'll leave this for later.").save()
    w.session(session_id=AGENT).user(TASK).write("net.py", RETRY).save()
    for sid in READERS:  # sessions that read and quote the code afterwards
        w.session(session_id=sid).user("how does the retry helper work?").read("net.py") \
            .say("It reads:\n" + RETRY).save()
    w.checkout()
    run_json(capsys, "ingest", "--seal")
    res = run_json(capsys, "explain", "net.py:1-11", "--brief")
    order = [s["session"] for s in res["sessions"]]
    by = {s["session"]: s for s in res["sessions"]}
    assert order[0] == AGENT and by[AGENT]["via"] == "direct"
    assert by[ORCH]["tier"] == "agent" and by[ORCH]["via"] == "lineage"
    assert by[ORCH]["lineage"][-1].get("kind") == "dispatch"
    assert order.index(ORCH) == 1  # right after the session it dispatched, before every reader
    assert all(order.index(r) > order.index(ORCH) for r in READERS if r in by)
    assert TYPED not in by



SHORT = ("Please update `retry_with_backoff` in net.py: retry on TimeoutError as well, and log each "
         "attempt.")


def test_a_short_task_is_dispatched_only_by_a_verbatim_hand_over(world: World, capsys):
    """A short request (4 fingerprints) is matched by sentences that restate it; only a session
    that hands it over verbatim, within a longer text of its own, dispatched it (the restating
    session, later and as similar, would win otherwise)."""
    w = world
    w.session(session_id=TYPED).user("plan the next change").say(
        "Handing this to a coding agent, with the file and the tests to run:\n\n" + SHORT
        + "\n\nRun the network tests afterwards and report what failed, if anything.").save()
    w.session(session_id=ORCH).user("review the network layer").say(
        "Earlier I said I would update `retry_with_backoff` in net.py: retry on TimeoutError as "
        "well, and log each attempt. Done, with the tests of the network layer all passing on "
        "every platform we support today, and the changelog entry written for the release.").save()
    w.session(session_id=AGENT).user(SHORT).write("net.py", RETRY).save()
    w.checkout()
    run_json(capsys, "ingest", "--seal")
    res = run_json(capsys, "explain", "net.py:1-11", "--brief")
    by = {s["session"]: s for s in res["sessions"]}
    assert by[TYPED]["via"] == "lineage" and by[TYPED]["lineage"][-1].get("kind") == "dispatch"
    assert not any(e.get("kind") == "dispatch" and e["to"]["tape_id"] == by[ORCH]["tape_id"]
                   for e in res["lineage"]) if ORCH in by else True
