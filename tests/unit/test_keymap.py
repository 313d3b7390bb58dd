"""``sortedset.KeyMap``: what a parse remembers of a whole session (record ids, blocks, usage per
message) in sorted arrays rather than Python sets and dicts — it must answer exactly as the dict
it replaces, across its merges; and the Claude Code parser's usage totals stay exact for counts a
signed 64-bit integer cannot hold."""

from __future__ import annotations

import json
import random

import xxhash

from engram.adapters import claude_code
from engram.sortedset import KeyMap


def _k(i: int) -> bytes:
    return KeyMap.key(xxhash.xxh3_128_digest(str(i).encode()))


def test_keymap_answers_as_a_dict_across_merges():
    rng = random.Random(5)
    m, ref = KeyMap(2, merge_at=7), {}
    for i in range(4000):
        k = _k(rng.randrange(1500))
        assert (k in m) == (k in ref)
        assert m.get(k) == ref.get(k)
        row = (rng.randrange(-5, 100), i)
        m[k] = row
        ref[k] = row   # the last row set wins
    assert len(m) == len(ref)
    assert sorted(map(tuple, m.rows().tolist())) == sorted(ref.values())


def test_keymap_set_and_trailing_zero_bytes():
    s = KeyMap(merge_at=3)
    zero = KeyMap.key(bytes(16))           # a digest ending in zero bytes is a key like any other
    assert zero != bytes(16) and len(zero) == 16
    for i in range(10):
        s.add(_k(i))
    s.add(zero)
    assert zero in s and all(_k(i) in s for i in range(10)) and _k(10) not in s
    assert len(s) == 11


def _log(tmp_path, usages) -> str:
    lines = []
    for i, (mid, usage) in enumerate(usages):
        lines.append(json.dumps({
            "type": "assistant", "uuid": f"u{i}", "sessionId": "s", "version": "2.0.64",
            "timestamp": f"2026-11-26T03:{i:02d}:00.000Z", "cwd": "/p",
            "message": {"id": mid, "role": "assistant", "model": "m", "usage": usage,
                        "content": [{"type": "text", "text": f"t{i}"}]}}))
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_usage_totals_exact_past_int64(tmp_path):
    big = (1 << 63) + 5   # an integer the tape still holds (orjson: up to 64 bits), past int64
    path = _log(tmp_path, [("a", {"input_tokens": 5, "output_tokens": 1}),
                           ("b", {"input_tokens": big, "output_tokens": 2}),
                           ("a", {"input_tokens": 7, "output_tokens": 3}),    # a's last usage
                           ("c", {"input_tokens": big, "cache_read_input_tokens": 4}),
                           ("c", {"input_tokens": 1})])                      # c fits again
    out = claude_code.ADAPTER.parse_source(path)
    usage = out.sessions[0].events[0]["usage"]
    assert usage["input_tokens"] == 7 + big + 1
    assert usage["output_tokens"] == 3 + 2
    assert usage["cache_read_input_tokens"] == 0
    assert usage["messages"] == 3
