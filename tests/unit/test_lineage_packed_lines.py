"""A streamed session's kept lines travel from the parse worker to the ingest cache as
``cache.PackedLines`` (one buffer and three arrays) instead of a dict with a bytes object a line:
it answers as that dict answers (``in``, ``[]``, iteration in offset order, ``len``), pickles as
it was, and the cache keeps the same lines and heads from it — held or spilled — as from the dict
of ``orjson.Fragment`` lines it replaces."""

from __future__ import annotations

import pickle
import random

import orjson
import pytest

from engram.lineage import cache
from engram.tape.writer import encode_event


def _events(n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    out = [{"k": "meta", "session": "s", "t": "2026-11-26T00:00:00Z"}]
    for i in range(1, n):
        r = rng.random()
        if r < 0.4:
            out.append({"k": "code.edit", "t": f"2026-11-26T00:{i % 60:02d}:00Z", "file": f"f{i % 5}.py",
                        "before_text": f"x_{i} = 'ü{i}'\n" * rng.randrange(0, 9),
                        "after_text": "\x00\n" * rng.randrange(0, 3)})
        elif r < 0.5:
            out.append({"k": "span.link", "t": "2026-11-26T00:00:00Z", "span": [i, i + 1]})
        else:
            out.append({"k": "msg.in" if r < 0.7 else "msg.out", "t": "2026-11-26T00:00:00Z",
                        "text": f"prompt {i} " * rng.randrange(1, 30)})
    return out


def _packed(events: list[dict], order=None) -> tuple[cache.PackedLines, dict[int, bytes]]:
    """The wanted events' lines gathered as the worker gathers them (offsets 1.. in order, the
    meta's last), and the dict the worker gave before."""
    want = [o for o, ev in enumerate(events) if cache.wanted(o, ev)]
    g = cache.PackedLines.gather()
    for o in (order or [o for o in want if o] + [o for o in want if not o]):
        g.add(o, encode_event(events[o]))
    return g.packed(), {o: encode_event(events[o]) for o in want}


def _same(m, d: dict[int, bytes]) -> None:
    assert len(m) == len(d)
    assert list(m) == sorted(d)
    for o, line in d.items():
        assert o in m and m[o] == line and type(m[o]) is bytes
    for o in (-1, max(d) + 1, 10**30, "1", 1.0, None):
        assert o not in m
        with pytest.raises(KeyError):
            m[o]
    assert dict(m.items()) == d


def test_packed_lines_answer_as_the_dict():
    events = _events(400)
    packed, d = _packed(events)
    _same(packed, d)
    _same(pickle.loads(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)), d)
    assert packed.nbytes == sum(len(b) for b in d.values())
    # any order of adding; an offset given twice keeps its last line, as a dict does
    rng = random.Random(5)
    order = list(d)
    rng.shuffle(order)
    g = cache.PackedLines.gather()
    g.add(order[0], b"an older line")
    for o in order:
        g.add(o, d[o])
    _same(g.packed(), d)
    empty = cache.PackedLines.gather().packed()
    assert len(empty) == 0 and list(empty) == [] and 0 not in empty and empty.nbytes == 0


@pytest.mark.parametrize("in_memory", [True, False])
def test_cache_keeps_the_same_lines_and_head_from_packed_lines(monkeypatch, tmp_path, in_memory):
    monkeypatch.setattr(cache.paths, "user_tapes_dir", lambda: tmp_path)
    if not in_memory:
        monkeypatch.setattr(cache, "LINES_IN_MEMORY", 0)
    events = _events(600, seed=11)
    packed, d = _packed(events)
    old, new = cache.IngestCache(), cache.IngestCache()
    old.keep_tape("t", events, {o: orjson.Fragment(b) for o, b in d.items()})
    new.keep_tape("t", events, pickle.loads(pickle.dumps(packed)))
    assert isinstance(new.lines["t"], cache.PackedLines if in_memory else cache.SpilledLines)
    assert old.lines_bytes == new.lines_bytes and old._lines_in_memory == new._lines_in_memory
    _same(new.lines["t"], dict(old.lines["t"].items()))
    assert new.heads == old.heads and "t" in new.heads
    old.close()
    new.close()


def test_a_head_line_missing_is_not_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(cache.paths, "user_tapes_dir", lambda: tmp_path)
    events = _events(50, seed=2)
    events[1] = {"k": "msg.in", "t": "2026-11-26T00:00:00Z", "text": "the task"}
    packed, d = _packed(events, order=[o for o, ev in enumerate(events) if cache.wanted(o, ev) and o != 1])
    c = cache.IngestCache()
    c.keep_tape("t", events, packed)
    assert "t" not in c.heads and 1 not in c.lines["t"]   # (the head read back from the tape)


def test_lines_handed_over_leave_the_parse_answer_empty(monkeypatch, tmp_path):
    """``Ingestor._keep_taped`` takes the lines over (``PackedLines.take``): the cache keeps the
    same lines, and the parse answer still holding the given object holds none of them."""
    import types

    from engram.ingest.ingestor import Ingestor

    monkeypatch.setattr(cache.paths, "user_tapes_dir", lambda: tmp_path)
    events = _events(300, seed=7)
    for limit in (cache.LINES_IN_MEMORY, 0):
        monkeypatch.setattr(cache, "LINES_IN_MEMORY", limit)
        packed, d = _packed(events)
        answer = ("ok", None, [], None, (None, None, packed))   # (what holds it until the commit)
        c = cache.IngestCache()
        Ingestor._keep_taped(types.SimpleNamespace(cache=c), "t", events, answer[4][2])
        assert len(packed) == 0 and packed.nbytes == 0 and len(packed.buf) == 0 and 1 not in packed
        _same(c.lines["t"], d)
        c.close()
    packed, _d = _packed(events)
    Ingestor._keep_taped(types.SimpleNamespace(cache=None), "t", events, packed)   # (no lineage)
    assert len(packed) == 0 and len(packed.buf) == 0
