"""The retrieval loop end to end through the real CLI (``main([...])``), on real Claude Code logs
(tests/claude_log.py) and a real apsw index: feedback tapes, explain reranking for a span only,
replay from scratch, the retrieval log's contents and switch, search signals and filters, and
``engram used`` in the usage report."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
from claude_log import World, run_json

from engram.paths import index_dir

PARSE = '''def parse_amount(text):
    """Parse a money amount such as "1,234.50" into a float rounded to cents."""
    cleaned = text.strip().replace(",", "").replace("$", "")
    value = float(cleaned)
    if value < 0:
        raise ValueError("negative amount: " + text)
    return round(value, 2)
'''
FORMAT = '''def format_amount(value, currency="EUR"):
    """Format a float as money with thousands separators and the currency code."""
    whole, cents = divmod(round(value * 100), 100)
    groups = "{:,}".format(whole).replace(",", " ")
    return groups + "." + str(cents).zfill(2) + " " + currency
'''
PARSE2 = PARSE.replace('replace("$", "")', 'replace("$", "").replace("EUR", "")')


@pytest.fixture
def world(tmp_path, monkeypatch):
    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    a = w.session(name="a-writer")
    a.user("Add money helpers to calc.py: parse an amount and format one for invoices")
    a.write("calc.py", PARSE + "\n\n" + FORMAT)
    a.say("Added parse_amount and format_amount to calc.py.").save()
    b = w.session(name="b-reader")
    b.user("Explain how calc.py parses amounts, the invoice code looks wrong")
    b.read("calc.py")
    b.say("parse_amount strips commas and dollar signs, then rounds to cents.").save()
    c = w.session(name="c-fixer")
    c.user("parse_amount must also accept a trailing EUR currency code; fix the parser bug")
    c.edit("calc.py", 'replace("$", "")', 'replace("$", "").replace("EUR", "")')
    c.say("parse_amount now strips EUR as well; the debugging session found the bug.").save()
    w.checkout()
    return w


def _lines(w: World, needle: str) -> str:
    text = (w.root / "calc.py").read_text().split("\n")
    start = next(i for i, ln in enumerate(text) if needle in ln) + 1
    end = start
    while end < len(text) and text[end].strip():
        end += 1
    return f"calc.py:{start}-{end}"


def _order(capsys, span: str) -> list[str]:
    return [s["session"] for s in run_json(capsys, "explain", span, "--brief")["sessions"]]


def test_incorrect_with_span_moves_that_session_last_for_that_span_only(world, capsys):
    run_json(capsys, "ingest", "--seal")
    parse, fmt = _lines(world, "def parse_amount"), _lines(world, "def format_amount")
    before_parse, before_fmt = _order(capsys, parse), _order(capsys, fmt)
    assert len(before_parse) >= 2, before_parse
    top = before_parse[0]
    res = run_json(capsys, "feedback", top, "incorrect", "--span", parse, "--note", "wrong fix")
    assert res["confidence"] == pytest.approx(0.35) and res["verdict"] == "incorrect"
    after = run_json(capsys, "explain", parse, "--brief")["sessions"]
    assert [s["session"] for s in after] == before_parse[1:] + [top]
    assert after[-1]["feedback"]["label"] == "feedback: incorrect"
    assert after[-1]["feedback"]["confidence"] == pytest.approx(0.35)
    # the other span keeps its order (the session shows its confidence there, unlabelled)
    other = run_json(capsys, "explain", fmt, "--brief")["sessions"]
    assert [s["session"] for s in other] == before_fmt
    assert all(s.get("feedback", {}).get("label") is None for s in other)
    # the feedback is a tape in the repository, of harness engram
    tapes = [t for t in run_json(capsys, "tapes") if t["harness"] == "engram"]
    assert len(tapes) == 1 and tapes[0]["path"].startswith(str(world.root / ".engram" / "tapes"))


def test_incorrect_follows_moved_code_but_not_a_copy(world, capsys):
    run_json(capsys, "ingest", "--seal")
    parse = _lines(world, "def parse_amount")
    n = parse.split(":")[1]
    copy = world.root / "copy.py"
    copy.write_text((world.root / "calc.py").read_text().split("\n\n\n")[0] + "\n")
    a, b = map(int, n.split("-"))
    here = f"copy.py:{a}-{b}"
    before = _order(capsys, here)
    top = _order(capsys, parse)[0]
    run_json(capsys, "feedback", top, "incorrect", "--span", parse)
    assert _order(capsys, here) == before  # a copy, while the original stands: untouched
    # the original goes away (the code moved to copy.py): the feedback follows it
    (world.root / "calc.py").write_text("\n\n\n" + FORMAT)
    after = run_json(capsys, "explain", here, "--brief")["sessions"]
    assert after[-1]["session"] == top and after[-1]["feedback"]["label"] == "feedback: incorrect"


def test_replay_from_scratch_gives_byte_identical_answers(world, capsys):
    run_json(capsys, "ingest", "--seal")
    parse, fmt = _lines(world, "def parse_amount"), _lines(world, "def format_amount")
    sessions = _order(capsys, parse)
    run_json(capsys, "feedback", sessions[0], "incorrect", "--span", parse)
    run_json(capsys, "feedback", sessions[-1], "helpful")
    run_json(capsys, "feedback", sessions[-1], "helpful")

    def answers():
        out = []
        for span in (parse, fmt):
            r = run_json(capsys, "explain", span)
            r["stats"].pop("elapsed_ms")
            out.append(json.dumps(r, sort_keys=True))
        r = run_json(capsys, "search", "parse amount currency")
        r["stats"].pop("elapsed_ms")
        out.append(json.dumps(r, sort_keys=True))
        return out

    first = answers()
    shutil.rmtree(index_dir())
    run_json(capsys, "ingest", "--seal")
    assert answers() == first


def test_retrieval_log_holds_no_code_query_or_transcript_text(world, capsys):
    run_json(capsys, "ingest", "--seal")
    parse = _lines(world, "def parse_amount")
    explained = run_json(capsys, "explain", parse)
    query = "invoice code looks wrong"
    found = run_json(capsys, "search", query)
    assert found["results"]
    run_json(capsys, "used", found["results"][0]["session"])
    d = index_dir() / "retrieval_log"
    files = list(d.glob("*.jsonl"))
    assert len(files) == 1
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(files[0]).st_mode) == 0o600
    data = files[0].read_text()
    recs = [json.loads(x) for x in data.splitlines()]
    assert [r["op"] for r in recs] == ["explain", "search", "used"]
    assert all(r["client"] == "cli" for r in recs)
    assert [x["session"] for x in recs[0]["results"]] == [s["session"] for s in explained["sessions"]]
    # no line of code, no query words, no transcript sentence
    texts = [ln.strip() for ln in (world.root / "calc.py").read_text().splitlines() if len(ln.strip()) > 8]
    for s in found["results"] + explained["sessions"]:
        for w in s["windows"]:
            texts += [e["text"][:40] for e in w.get("events", []) if len(e.get("text") or "") > 8]
    texts += [query, "calc.py:", "parse_amount"]
    leaked = [t for t in texts if t in data]
    assert not leaked, leaked
    report = run_json(capsys, "stats", "--retrieval", "--no-head", "--all")["retrieval"]
    assert report["answers"] == 2 and report["used"] == 1 and report["uses"] == 1
    assert report["by_op"] == {"explain": {"answers": 1, "used": 0, "used_rate": 0.0},
                               "search": {"answers": 1, "used": 1, "used_rate": 1.0}}


def test_usage_report_counts_used_answers(world, capsys):
    from engram.engine import Engine

    run_json(capsys, "ingest", "--seal")
    eng = Engine(world.root)
    try:
        r1 = eng.search("parse amount")
        eng.search("nothing matches zzzz")
        eng.used(r1["results"][0]["session"])
        eng.brief(["calc.py"])
        rep = eng.retrieval_report()
    finally:
        eng.close()
    assert rep["answers"] == 3 and rep["used"] == 1 and rep["used_rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert rep["by_client"]["api"]["answers"] == 3 and rep["by_op"]["brief"]["answers"] == 1


def test_log_off_writes_nothing(world, capsys):
    with open(world.root / ".engram" / "config.yml", "a") as f:
        f.write("retrieval:\n  log: false\n")
    run_json(capsys, "ingest", "--seal")
    run_json(capsys, "explain", _lines(world, "def parse_amount"))
    found = run_json(capsys, "search", "parse amount")
    assert run_json(capsys, "used", found["results"][0]["session"])["recorded"] is False
    assert not (index_dir() / "retrieval_log").exists()


def test_search_scores_and_filters(world, capsys):
    run_json(capsys, "ingest", "--seal")
    res = run_json(capsys, "search", "parse_amount", "--intent", "history")
    assert res["intent"] == "history" and len(res["results"]) >= 2
    for r in res["results"]:
        sig = r["signals"]
        for name in ("similarity", "salience", "authority", "confidence", "type_intent"):
            assert set(sig[name]) == {"raw", "effective"}
        assert sig["keyword_boost"]["effective"] in (0.0, 0.04)
        assert r["confidence"] == 0.5 and r["validations"] == 0
    scores = [r["score"] for r in res["results"]]
    assert scores == sorted(scores, reverse=True)
    edits = run_json(capsys, "search", "parse_amount", "--kind", "edit")["results"]
    assert edits and all(r["windows"][0]["role"] == "edit" for r in edits)
    assert run_json(capsys, "search", "parse_amount", "--since", "2999-01-01")["results"] == []
    assert run_json(capsys, "search", "parse_amount", "--agent", "codex")["results"] == []
    assert run_json(capsys, "search", "parse_amount", "--agent", "claude_code")["results"]
    # confidence filter: only the session with two helpful verdicts (0.66) passes 0.6
    target = res["results"][-1]["session"]
    run_json(capsys, "feedback", target, "helpful")
    run_json(capsys, "feedback", target, "helpful")
    conf = run_json(capsys, "search", "parse_amount", "--min-confidence", "0.6")["results"]
    assert [r["session"] for r in conf] == [target]
    assert conf[0]["confidence"] == pytest.approx(0.66) and conf[0]["validations"] == 2


def test_feedback_errors_are_one_line(world, capsys):
    from engram.cli import main

    run_json(capsys, "ingest", "--seal")
    assert main(["feedback", "no-such-session", "helpful"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1 and "no indexed session" in err
    s = _order(capsys, _lines(world, "def parse_amount"))[0]
    assert main(["feedback", s, "incorrect", "--span", "calc.py"]) == 1
    err = capsys.readouterr().err
    assert "FILE:START-END" in err and err.count("\n") == 1
