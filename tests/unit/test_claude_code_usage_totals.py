"""A session's usage totals are the same whether its usage rows stayed in ``KeyMap``'s dict (the
common case, summed in Python) or were merged into its arrays (summed from numpy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.adapters import claude_code
from engram.sortedset import KeyMap

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "harness" / "claude_code"
CASES = sorted(p.name for p in DATA.glob("*.jsonl"))


class _MergingKeyMap(KeyMap):
    def __init__(self, width: int = 0, merge_at: int = 1 << 14):
        super().__init__(width, merge_at=2)  # merged into arrays every two keys


@pytest.mark.parametrize("name", CASES)
def test_usage_totals_the_same_merged_or_not(name, monkeypatch):
    plain = [s.events[0].get("usage") for s in claude_code.ADAPTER.parse_source(DATA / name).sessions]
    monkeypatch.setattr(claude_code, "KeyMap", _MergingKeyMap)
    merged = [s.events[0].get("usage") for s in claude_code.ADAPTER.parse_source(DATA / name).sessions]
    assert merged == plain


def test_usage_totals_counted():
    usage = [s.events[0]["usage"] for name in CASES
             for s in claude_code.ADAPTER.parse_source(DATA / name).sessions if "usage" in s.events[0]]
    assert sum(u["messages"] for u in usage) > 20 and sum(u["output_tokens"] for u in usage) > 0
