"""The scoring signals (engram/retrieval/signals.py) and the feedback replay: pure functions."""

from __future__ import annotations

import random

import pytest

from engram.retrieval import feedback, signals


def test_entropy_is_zero_without_spread_and_one_when_all_differ():
    assert signals.normalised_entropy([]) == 0.0
    assert signals.normalised_entropy([0.7]) == 0.0
    assert signals.normalised_entropy([0.5, 0.5, 0.5]) == 0.0
    assert signals.normalised_entropy([0.1, 0.2, 0.3, 0.4]) == 1.0
    mid = signals.normalised_entropy([0.5, 0.5, 0.5, 0.9])
    assert 0.0 < mid < 1.0


def test_dampening_removes_a_signal_with_no_spread():
    cands = [{"similarity": s, "keyword": False, "salience": 1.0, "authority": 1.0,
              "confidence": 0.5, "type_intent": 0.6} for s in (0.9, 0.8, 0.7)]
    out = signals.score(cands)
    for c in out:
        assert c["signals"]["confidence"] == {"raw": 0.5, "effective": 1.0}
        assert c["signals"]["type_intent"] == {"raw": 0.6, "effective": 1.0}
        assert c["score"] == pytest.approx(c["similarity"])
    # one candidate with other feedback: the signal varies, so it counts
    cands[0]["confidence"] = 0.35
    out = signals.score([dict(c) for c in cands])
    d = out[0]["signals"]["dampening"]["confidence"]
    assert 0 < d < 1
    assert out[0]["signals"]["confidence"]["effective"] == pytest.approx(d * 0.35 + 1 - d, abs=1e-6)
    assert out[1]["signals"]["confidence"]["effective"] == pytest.approx(d * 0.5 + 1 - d, abs=1e-6)


def test_keyword_boost_is_added_after_the_product_and_floor_drops():
    cands = [{"similarity": 0.5, "keyword": True, "salience": 0.25, "authority": 1.0,
              "confidence": 0.5, "type_intent": 1.0},
             {"similarity": -0.31, "keyword": False, "salience": 1.0, "authority": 1.0,
              "confidence": 0.5, "type_intent": 1.0}]
    out = signals.score(cands, intent="general")
    assert len(out) == 1  # below -0.3: dropped
    assert out[0]["score"] == pytest.approx(0.5 * 0.25 + 0.04)
    # debugging weighs salience harder (w_sal 1.5), planning softer (0.8)
    dbg = signals.score([dict(cands[0])], intent="debugging")[0]
    assert dbg["score"] == pytest.approx(0.5 * 0.25 ** 1.5 + 0.04, abs=1e-6)
    plan = signals.score([dict(cands[0])], intent="planning")[0]
    assert plan["score"] == pytest.approx(0.5 * 0.25 ** 0.8 + 0.04, abs=1e-6)


def test_salience_decays_per_week_gains_per_use_and_is_clamped():
    t0 = "2026-01-01T00:00:00Z"
    assert signals.salience(t0, [], t0) == 1.0
    assert signals.salience(t0, [], "2026-01-08T00:00:00Z") == pytest.approx(0.975)
    assert signals.salience(t0, [], "2030-01-01T00:00:00Z") == signals.SALIENCE_FLOOR
    ten_weeks = "2026-03-12T00:00:00Z"
    used = signals.salience(t0, [ten_weeks], ten_weeks)
    assert used == pytest.approx(0.975 ** 10 + 0.1, abs=1e-6)
    assert signals.salience(t0, [t0, t0, t0], t0) == 1.0  # capped
    # the decay restarts at the last use
    later = "2026-03-19T00:00:00Z"
    assert signals.salience(t0, [ten_weeks], later) == pytest.approx((0.975 ** 10 + 0.1) * 0.975,
                                                                     abs=1e-6)


def test_authority_is_off_by_default_and_orders_tiers_when_on():
    assert {signals.authority(t, False) for t in ("human", "orchestrator", "agent")} == {1.0}
    assert signals.authority("human", True) > signals.authority("orchestrator", True) > \
        signals.authority("agent", True)


def test_type_intent_matrix_covers_every_intent_and_role():
    for intent in signals.INTENTS:
        assert set(signals.TYPE_INTENT[intent]) == set(signals.ROLES)
        assert all(0 < v <= 1 for v in signals.TYPE_INTENT[intent].values())
    assert signals.type_intent("edit", "history") > signals.type_intent("read", "history")
    assert signals.type_intent("nonsense", "general") == 1.0


def _ev(t, session, verdict, span=None):
    ev = {"t": t, "k": "feedback", "target_session": session, "verdict": verdict}
    if span:
        ev["span"] = span
    return ev


def test_replay_moves_confidence_by_fixed_amounts_and_clamps():
    items = [(f"tape{i}", _ev(f"2026-01-01T00:00:{i:02d}Z", "s1", "helpful")) for i in range(10)]
    st = feedback.replay(items)["s1"]
    assert st.confidence == 1.0 and st.validations == 10  # 0.5 + 10 × 0.08, clamped
    assert st.last_validated == "2026-01-01T00:00:09Z"
    items = [(f"tape{i}", _ev(f"2026-01-01T00:00:{i:02d}Z", "s2", "incorrect")) for i in range(5)]
    items.append(("tapeX", _ev("2026-01-01T00:01:00Z", "s2", "helpful")))
    st = feedback.replay(items)["s2"]
    assert st.confidence == pytest.approx(0.08)  # clamped at 0, then +0.08
    st = feedback.replay([("t", _ev("2026-01-01T00:00:00Z", "s3", "not_relevant"))])["s3"]
    assert st.confidence == 0.5 and st.verdicts["not_relevant"] == 1


def test_replay_is_independent_of_input_order():
    verdicts = ["helpful", "incorrect", "not_relevant"]
    items = [(f"{i:04x}", _ev(f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z", f"s{i % 3}",
                              verdicts[i * 7 % 3])) for i in range(120)]
    ref = {k: v.summary() for k, v in feedback.replay(items).items()}
    rng = random.Random(7)
    for _ in range(5):
        rng.shuffle(items)
        assert {k: v.summary() for k, v in feedback.replay(items).items()} == ref


def test_incorrect_for_a_span_matches_its_fingerprints_only():
    a = feedback.span_hashes("def parse_amount(text):\n    value = float(text.strip().replace(',', ''))\n"
                             "    if value < 0:\n        raise ValueError('negative amount')\n"
                             "    return round(value, 2)\n")
    b = feedback.span_hashes("class Ledger:\n    def __init__(self):\n        self.entries = []\n"
                             "    def add(self, who, amount):\n        self.entries.append((who, amount))\n")
    span = {"file": "calc.py", "start": 1, "end": 5,
            "fingerprints": [format(h & 0xFFFFFFFFFFFFFFFF, "016x") for h in a]}
    states = feedback.replay([("t", _ev("2026-01-01T00:00:00Z", "s1", "incorrect", span))])
    assert feedback.incorrect_sessions(states, a) == {"s1"}
    assert feedback.incorrect_sessions(states, b) == set()
    assert feedback.incorrect_sessions(states, a[: len(a) // 2 + 1]) == {"s1"}  # most of it
    assert feedback.incorrect_sessions(states, a + list(range(1, 3 * len(a)))) == set()  # around it


def test_bad_verdict_and_span_are_clear_errors():
    with pytest.raises(feedback.BadFeedback, match="verdict must be one of"):
        feedback.feedback_events("s", "great")
    with pytest.raises(feedback.BadFeedback, match="FILE:START-END"):
        feedback.parse_span("calc.py")
    with pytest.raises(feedback.BadFeedback, match="bad line range"):
        feedback.parse_span("calc.py:9-3")


def test_incorrect_for_a_span_stays_with_its_lines_and_follows_moved_code():
    code = ("def parse_amount(text):\n    value = float(text.strip().replace(',', ''))\n"
            "    if value < 0:\n        raise ValueError('negative amount')\n"
            "    return round(value, 2)\n")
    a = feedback.span_hashes(code)
    span = {"file": "calc.py", "start": 1, "end": 5,
            "fingerprints": [format(h & 0xFFFFFFFFFFFFFFFF, "016x") for h in a]}
    states = feedback.replay([("t", _ev("2026-01-01T00:00:00Z", "s1", "incorrect", span))])
    files = {"calc.py": code}
    read = files.get
    assert feedback.incorrect_sessions(states, a, "calc.py", (1, 5), read) == {"s1"}
    assert feedback.incorrect_sessions(states, a, "calc.py", (2, 5), read) == {"s1"}  # 4/5 lines
    # the same code nested differently (lines 1-3 of 5), or copied elsewhere: the original stands
    assert feedback.incorrect_sessions(states, a, "calc.py", (1, 3), read) == set()
    assert feedback.incorrect_sessions(states, a, "copy.py", (1, 5), read) == set()
    # the original is gone: the copy is where the code moved
    files["calc.py"] = "\n\n\n\n\n"
    assert feedback.incorrect_sessions(states, a, "copy.py", (1, 5), read) == {"s1"}
