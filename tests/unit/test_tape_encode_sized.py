"""``writer.encode_event`` returns its line in a bytes object of the line's own size.

orjson's result keeps the buffer it wrote into (4 KB for a short line, ~10x a long one); the lines
that are kept (the ingest cache's, a parse batch's encoded events) cost that much each in a used
heap. The bytes themselves are orjson's canonical JSON, unchanged (tape ids depend on them)."""

from __future__ import annotations

import tracemalloc

import orjson

from engram.tape import writer


def _events(n: int, chars: int) -> list[dict]:
    return [{"k": "code.edit", "t": f"2026-01-01T00:00:{i % 60:02d}Z", "file": f"src/m{i}.py",
             "after_text": "x = 1\n" * (chars // 6), "before_text": "", "n": i} for i in range(n)]


def test_same_bytes_as_orjson():
    for ev in _events(5, 900) + [{"meta": {"b": 1, "a": [1, 2]}, 3: "non-str key"}]:
        want = orjson.dumps(ev, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        assert writer.encode_event(ev) == want
    frag = orjson.Fragment(b'{"a":1}')
    assert writer.encode_event(frag) == b'{"a":1}'


def test_kept_lines_cost_their_size():
    for chars in (200, 900, 20_000):
        evs = _events(300, chars)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            lines = [writer.encode_event(ev) for ev in evs]
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        payload = sum(len(b) for b in lines)
        # the list's pointers and each object's header (~33 bytes) besides the bytes themselves
        assert held <= payload + 100 * len(lines), (chars, held, payload)
