"""The price table: USD per million tokens, versioned, with its date and source.

``PRICES_VERSION`` / ``PRICES_DATE`` / ``SOURCES`` name the table; a model is priced only when
its id is a key of ``TABLE`` exactly or the key followed by a date suffix (``-20250929``): a model
the table does not name gives ``None`` — never the price of a neighbour. Only models whose prices
were read from the vendor's own pricing page are listed (Anthropic's, as read on
``PRICES_DATE``); OpenAI and Google models are unknown here until someone reads theirs.

Cost = input × ``input`` + output × ``output`` + cache read × ``cache_read`` + cache write ×
``cache_write`` (5-minute writes: Claude Code's default) — per million. Long-context surcharges and
batch discounts are not modelled (the logs do not say which applied).
"""

from __future__ import annotations

import re

PRICES_VERSION = 1
PRICES_DATE = "2026-11-25"
SOURCES = {"anthropic": "https://platform.claude.com/docs/en/about-claude/pricing (Model pricing)"}

_OPUS_NEW = {"input": 5.0, "output": 25.0, "cache_write": 6.25, "cache_read": 0.50}
_OPUS_OLD = {"input": 15.0, "output": 75.0, "cache_write": 18.75, "cache_read": 1.50}
_SONNET = {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.30}
_SONNET_5 = {"input": 2.0, "output": 10.0, "cache_write": 2.50, "cache_read": 0.20}

TABLE: dict[str, dict] = {
    "claude-opus-5": _OPUS_NEW,
    "claude-opus-4-8": _OPUS_NEW,
    "claude-opus-4-7": _OPUS_NEW,
    "claude-opus-4-6": _OPUS_NEW,
    "claude-opus-4-5": _OPUS_NEW,
    "claude-opus-4-1": _OPUS_OLD,
    "claude-opus-4": _OPUS_OLD,
    "claude-3-opus": _OPUS_OLD,
    "claude-sonnet-5": _SONNET_5,
    "claude-sonnet-4-6": _SONNET,
    "claude-sonnet-4-5": _SONNET,
    "claude-sonnet-4": _SONNET,
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_write": 1.25, "cache_read": 0.10},
    "claude-3-7-sonnet": _SONNET,
    "claude-3-5-sonnet": _SONNET,
    "claude-3-5-haiku": {"input": 0.80, "output": 4.0, "cache_write": 1.0, "cache_read": 0.08},
    "claude-3-haiku": {"input": 0.25, "output": 1.25, "cache_write": 0.30, "cache_read": 0.03},
}
_DATED = re.compile(r"-\d{8}$")


def price_of(model: str | None) -> dict | None:
    if not model:
        return None
    m = model.strip().lower()
    if m in TABLE:
        return TABLE[m]
    base = _DATED.sub("", m)
    return TABLE.get(base)


def cost(model: str | None, usage: dict | None) -> float | None:
    """USD for ``usage`` (``engram.commits.usage`` keys) on ``model``; None when either is unknown."""
    p = price_of(model)
    if p is None or usage is None:
        return None
    usd = (usage.get("input_tokens", 0) * p["input"] + usage.get("output_tokens", 0) * p["output"]
           + usage.get("cache_read_tokens", 0) * p["cache_read"]
           + usage.get("cache_write_tokens", 0) * p["cache_write"]) / 1e6
    return round(usd, 6)


def describe() -> dict:
    return {"version": PRICES_VERSION, "date": PRICES_DATE, "sources": SOURCES,
            "models": sorted(TABLE)}
