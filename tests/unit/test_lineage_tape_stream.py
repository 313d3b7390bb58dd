"""A large tape whose lines the ingest run did not keep (its kept lines had reached
``MAX_LINES_BYTES``) is read by the lineage pass as a stream (``cache.TapeStream``), never held
whole: the events it gives are those a whole read gives, in any order of asking, a tape that is
not what its name says is refused before any event is used, and an ingest that keeps nothing
writes the same tables as one that keeps every line."""

from __future__ import annotations

import random

import pytest
from claude_log import run_json
from test_lineage_bounded import _indexed, _tables

from engram.errors import CorruptTape
from engram.lineage import cache
from engram.tape import reader, write_tape

META = {"k": "meta", "t": "2026-01-01T00:00:00Z", "harness": "claude_code", "session": "s1"}


def test_takes_give_what_a_whole_read_gives(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "_PIECE", 4096)    # (lines cut across many pieces)
    events = [META] + [{"k": "msg.out", "t": None, "text": f"{i} " + "x" * (i * 37 % 3000)}
                       for i in range(600)]
    path = str(write_tape(tmp_path, events).path)
    lines = reader.raw_lines_cached(path)
    rng = random.Random(38)
    stream = cache.TapeStream(path)
    for _ in range(60):
        offs = sorted(rng.sample(range(-3, 640), rng.randrange(0, 40)))
        assert stream.take(offs) == reader.events_at(lines, [o for o in offs if o >= 0], path)
    for start in (0, 100, 599, 600):                # in order, as the lineage pass asks
        offs = list(range(start, min(start + 50, 601)))
        assert stream.take(offs) == reader.events_at(lines, offs, path)
    assert stream.take([5, 5, 6]) == reader.events_at(lines, [5, 5, 6], path)


def test_a_tape_not_what_its_name_says_is_refused_first(tmp_path):
    path = write_tape(tmp_path, [META] + [{"k": "msg.in", "t": None, "text": "y" * 9000}]).path
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptTape):
        cache.TapeStream(str(path))


def test_tables_as_with_every_line_kept(world, capsys, monkeypatch):
    whole, _answer = _indexed(world, capsys)
    made = []
    real = cache.TapeStream.__init__

    def counted(self, path):
        made.append(path)
        real(self, path)

    monkeypatch.setattr(cache.TapeStream, "__init__", counted)
    monkeypatch.setattr(cache, "MAX_LINES_BYTES", 0)           # nothing kept
    monkeypatch.setattr(reader, "STREAM_CHECK_BYTES", 0)       # every tape large
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert made and _tables(world) == whole
