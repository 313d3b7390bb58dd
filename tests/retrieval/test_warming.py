"""A long-running server loads the embedding model in the background: while it loads, explain
answers at once without semantic sessions and says ``warming up``; once it is loaded, the server's
answers are the CLI's (``--semantic``). Real model (bundled, CPU), real index."""

from __future__ import annotations

import pytest
from claude_log import World, run_json

from engram.embed.model import available


@pytest.mark.skipif(not available()[0], reason="embed extra not installed")
def test_explain_says_warming_up_then_matches_the_cli(tmp_path, monkeypatch, capsys):
    from engram.embed import hybrid, run
    from engram.engine import Engine

    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    code = ('def settle_invoice(invoice, payments):\n    """Mark an invoice paid once the payments '
            'cover its total, oldest payment first."""\n    covered = 0\n    for p in sorted('
            'payments, key=lambda p: p.date):\n        covered += p.amount\n        if covered >= '
            'invoice.total:\n            invoice.paid_on = p.date\n            return True\n'
            '    return False\n')
    s = w.session(name="writer")
    s.user("add invoice settlement")
    s.write("billing.py", code)
    s.say("Added it.").save()
    d = w.session(name="design")
    d.user("How should we decide that a bill is settled when customers pay in instalments?")
    d.say("Walk the instalments from the earliest, add them up, and mark the bill as paid on the "
          "date the running sum reaches what is owed; if it never does, it stays open.").save()
    w.checkout()
    with open(w.root / ".engram" / "config.yml", "a") as f:
        f.write("embedding:\n  device: cpu\n")
    run_json(capsys, "ingest", "--seal")
    assert run_json(capsys, "embed")["embedded"] > 0

    run._embedders.clear()  # this process has not loaded the model, as a fresh server
    eng = Engine(w.root, semantic=True)
    try:
        th = hybrid.preload(eng)  # loading takes seconds; the explain below takes milliseconds
        assert th is not None and hybrid.warming(eng)
        early = eng.explain("billing.py", 1, 9, brief=True)
        assert early["stats"]["semantic"].startswith("warming up")
        assert not any(x["via"] == "semantic" for x in early["sessions"])
        th.join(120)
        assert not hybrid.warming(eng)
        late = eng.explain("billing.py", 1, 9, brief=True)
    finally:
        eng.close()
    assert "semantic" not in late["stats"]
    cli = run_json(capsys, "explain", "billing.py:1-9", "--brief", "--semantic")
    assert [(x["session"], x["via"]) for x in late["sessions"]] == \
        [(x["session"], x["via"]) for x in cli["sessions"]]
    sem = [x for x in cli["sessions"] if x["via"] == "semantic"]
    for x in sem:  # the semantic tier is scored like search results
        assert x["signals"]["semantic"] is not None and x["score"] > 0
        assert set(x["signals"]["salience"]) == {"raw", "effective"}
    assert [x["score"] for x in sem] == sorted((x["score"] for x in sem), reverse=True)
