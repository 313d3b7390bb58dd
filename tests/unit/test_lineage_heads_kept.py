"""Every new tape's head input kept at ingest (issues 21, 22): ``IngestCache.keep_head`` gives what
the continuation pass reads back from the tape, past the lines' cap too; the pass answers from it
without reading a head, drops a tape's head arrays once its continuation is computed, and writes
the same rows either way."""

from __future__ import annotations

import orjson
from test_continuation_pass import _tape_rows
from test_scale_accuracy import _world

from engram.engine import Engine
from engram.lineage import cache as lcache
from engram.lineage import continuations
from engram.lineage.cache import CachedAccess, IngestCache
from engram.lineage.rules import HEAD_EVENTS, head_input
from engram.tape import reader


def _events(t) -> list[dict]:
    return [orjson.loads(x) for x in reader.raw_lines_cached(t.path)[:t.n_events]]


def test_kept_head_equals_the_tape_read(world):
    _world(world, readers=3)
    eng = Engine(world.root)
    try:
        conn = eng.conn()
        kept = 0
        for t in _tape_rows(conn):
            want = continuations.TapeText(CachedAccess(conn, IngestCache()), IngestCache())._head(t)
            events = _events(t)
            lines = reader.raw_lines_cached(t.path)
            for src in (events, {o: orjson.Fragment(lines[o]) for o in range(len(events))}):
                c = IngestCache()
                c.keep_head(t.tape_id, events, src)
                assert c.heads[t.tape_id] == want, t.tape_id
            kept += bool(want[0])
        assert kept >= 4   # heads with input texts were compared
    finally:
        eng.close()


def test_kept_head_of_odd_heads_equals_head_input_of_every_event():
    """No ``msg.in`` past the meta (every head event's blocks then), flagged and compaction input,
    a head longer than ``HEAD_EVENTS``: the same as ``head_input`` of every head event."""
    meta = {"k": "meta", "meta": True, "session": "s"}
    heads = [
        [meta, {"k": "tool.result", "text": "def f():\n    return 1\n"}, {"k": "msg.out", "text": "done"}],
        [meta, {"k": "msg.in", "text": "system prompt", "boilerplate": True},
         {"k": "msg.in", "text": "This session is being continued from a previous conversation x",
          "compaction": True}, {"k": "msg.in", "text": "fix the bug in f"}],
        [meta] + [{"k": "msg.in", "text": f"request {i}"} for i in range(HEAD_EVENTS + 5)],
        [meta, {"k": "msg.in", "text": "   "}, {"k": "msg.out", "text": "ok"}],
        [meta],
    ]
    for n, events in enumerate(heads):
        c = IngestCache()
        c.keep_head(f"t{n}", events, events)
        parsed = [(o, orjson.loads(orjson.dumps(ev, option=orjson.OPT_SORT_KEYS)))
                  for o, ev in enumerate(events[:HEAD_EVENTS + 1])]
        assert c.heads[f"t{n}"] == head_input(parsed)[:3], n
    assert c.heads_bytes > 0


def test_heads_kept_past_the_lines_cap_and_handed_to_the_worker(monkeypatch):
    monkeypatch.setattr(lcache, "MAX_LINES_BYTES", 1)
    c = IngestCache()
    for n in range(3):
        events = [{"k": "meta", "meta": True}, {"k": "msg.in", "text": f"task {n}"}]
        c.keep_tape(f"t{n}", events)
    assert list(c.lines) == ["t0"]   # the lines' cap ran out after the first
    assert sorted(c.heads) == ["t0", "t1", "t2"]
    got = IngestCache.from_worker_part(c.for_worker())
    assert got.heads == c.heads and not got.lines


def test_heads_capped_per_tape_and_in_all(monkeypatch):
    monkeypatch.setattr(lcache, "HEAD_TEXT_BYTES", 100)
    c = IngestCache()
    big = [{"k": "meta"}, {"k": "msg.in", "text": "x" * 200}]
    c.keep_head("big", big, big)
    assert "big" not in c.heads   # read back from its tape instead
    monkeypatch.setattr(lcache, "MAX_HEADS_BYTES", 1)
    small = [{"k": "meta"}, {"k": "msg.in", "text": "y"}]
    c.keep_head("a", small, small)
    c.keep_head("b", small, small)
    assert "a" in c.heads and "b" not in c.heads


def test_pass_with_kept_heads_reads_no_head_and_writes_the_same_rows(world, monkeypatch):
    _world(world, readers=5)
    eng = Engine(world.root)
    try:
        conn = eng.conn()
        tapes = _tape_rows(conn)

        def run(cache: IngestCache) -> list:
            ops: list = []
            stats = {"continuations": 0, "dispatch": 0}
            continuations.compute(conn, tapes, CachedAccess(conn, cache), stats, cache,
                                  write=lambda sql, args: ops.append((sql, args)))
            return ops

        want = run(IngestCache())
        assert any("INSERT" in sql for sql, _ in want)   # a continuation row is among them
        kept = IngestCache()
        for t in tapes:
            events = _events(t)
            kept.keep_head(t.tape_id, events, events)
        reads: list = []
        real = CachedAccess.read
        monkeypatch.setattr(CachedAccess, "read", lambda self, t, offs: reads.append(
            (t.id, list(offs))) or real(self, t, offs))
        dropped: list = []
        real_done = continuations.TapeText.done
        monkeypatch.setattr(continuations.TapeText, "done", lambda self, t, keep: dropped.append(
            (t.id, t.id in self.cache)) or real_done(self, t, keep))
        monkeypatch.setattr(continuations, "PREFETCH_TAPES", 2)   # several batches
        monkeypatch.setattr(continuations, "TABLE_MIN_TAPES", 1)
        assert run(kept) == want
        heads = [r for r in reads if r[1] == list(range(min(len(r[1]), HEAD_EVENTS + 1)))]
        assert not heads   # no head read back
        assert sorted(t for t, _ in dropped) == sorted(t.id for t in tapes)
        assert all(held for _, held in dropped)   # each had its arrays until then
    finally:
        eng.close()


def test_head_not_kept_when_the_workers_kept_lines_lack_it(monkeypatch):
    """A tape made by the parse worker comes with only the lines it kept (offset → line): a head
    whose input line is not among them is left to the lineage pass to read back (no error), one
    whose lines are there is kept as from the whole tape."""
    events = [{"k": "meta", "meta": True}, {"k": "msg.in", "text": "fix f"},
              {"k": "msg.out", "text": "done"}]
    lines = {o: orjson.Fragment(orjson.dumps(ev, option=orjson.OPT_SORT_KEYS))
             for o, ev in enumerate(events)}
    monkeypatch.setattr(lcache, "MAX_LINES_BYTES", 0)   # past the lines' cap, as at 16k sessions
    c = IngestCache()
    c.keep_tape("partial", events, {})    # the worker's cap ran out too: no lines handed over
    c.keep_tape("partial2", events, {0: lines[0], 2: lines[2]})
    assert "partial2" not in c.heads
    assert "partial" not in c.heads
    c.keep_tape("whole", events, lines)
    whole = IngestCache()
    whole.keep_head("whole", events, events)
    assert c.heads["whole"] == whole.heads["whole"]
