"""The held-out prose of bench/bench_prose.py: two disjoint sets (calibration, report), each
discussion about one function, none quoting its function's code (4-word runs)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROSE = ROOT / "bench" / "prose"
CORPUS = ROOT / "bench" / "corpus" / "full"


def _bench_prose():
    spec = importlib.util.spec_from_file_location("bench_prose", ROOT / "bench" / "bench_prose.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(name: str) -> list[dict]:
    return json.loads((PROSE / name).read_text())


def test_sets_are_disjoint_and_complete():
    cal, rep = _load("heldout.json"), _load("report.json")
    assert len(cal) == 40 and len(rep) == 40
    for it in cal + rep:
        assert set(it) == {"file", "symbol", "user", "assistant"}
        assert it["user"].strip() and it["assistant"].strip()
    keys = [(x["file"], x["symbol"]) for x in cal + rep]
    assert len(set(keys)) == 80  # no function discussed twice, within or across the sets
    bp = _bench_prose()
    ids = {bp.session_id(x) for x in cal + rep}
    assert len(ids) == 80


def test_shares_4_words_finds_a_quoted_run():
    bp = _bench_prose()
    code = "def first(iterable, default=_marker):\n    return next(iter(iterable), default)\n"
    assert bp.shares_4_words("we call return next iter iterable here", code) == ["return next iter iterable"]
    assert bp.shares_4_words("the helper that grabs the leading element", code) == []


@pytest.mark.skipif(not (CORPUS / "truth.json").is_file(), reason="bench corpus not generated")
def test_no_discussion_quotes_its_code():
    bp = _bench_prose()
    truth = {(x["file"], x["symbol"]): x for x in json.loads((CORPUS / "truth.json").read_text())}
    leaks = {}
    for it in _load("heldout.json") + _load("report.json"):
        t = truth[(it["file"], it["symbol"])]
        code = "\n".join((CORPUS / "repo" / it["file"]).read_text().split("\n")[t["start"] - 1:t["end"]])
        shared = bp.shares_4_words(it["user"] + " " + it["assistant"], code)
        if shared:
            leaks[it["symbol"]] = shared
    assert leaks == {}
