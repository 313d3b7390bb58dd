"""A tape written while its session is read (``writer.Streamed``: the ``meta`` line last) has
exactly the bytes, id and file of the tape written from the whole session (``write_tape``):
tape ids are content addresses shared between machines."""

from __future__ import annotations

import random

import pytest

from engram.tape import reader, writer


def _events(n: int, seed: int = 3, label_len: int = 40) -> list[dict]:
    rng = random.Random(seed)
    meta = {"t": "2026-11-25T10:00:00Z", "k": "meta", "harness": "claude_code",
            "label": "x" * label_len, "source_path": "/logs/a.jsonl",
            "coverage": {"grade": "full", "reasons": [], "redactions": 0}}
    out = [meta]
    for i in range(n):
        text = " ".join(rng.choice(["alpha", "beta", "gamma", "δέλτα", "🙂"])
                        for _ in range(rng.randint(1, 400)))
        out.append({"t": f"2026-11-25T10:{i % 60:02d}:00Z", "k": "msg.out", "text": text, "n": i})
    return out


def _streamed(tmp_path, events):
    enc = writer.Streamed(tmp_path)
    for ev in events[1:]:
        enc.add(ev)
    enc.finish(events[0])
    return enc


@pytest.mark.parametrize("spill, reserve, label_len", [
    (writer.SPILL_BYTES, writer.META_RESERVE, 40),   # held in memory
    (4096, writer.META_RESERVE, 40),                  # spilled, the meta in the room left for it
    (4096, 64, 300),                                  # spilled, a meta longer than that room
])
def test_streamed_tape_is_byte_identical(tmp_path, monkeypatch, spill, reserve, label_len):
    spills = spill < writer.SPILL_BYTES
    monkeypatch.setattr(writer, "SPILL_BYTES", spill)
    monkeypatch.setattr(writer, "META_RESERVE", reserve)
    events = _events(3000, label_len=label_len)
    whole = writer.write_tape(tmp_path / "whole", events)
    (tmp_path / "s").mkdir()
    enc = _streamed(tmp_path / "s", events)
    assert enc.tape_id == whole.tape_id
    assert enc.size == whole.raw_bytes and enc.n_events == whole.n_events == len(events)
    assert (enc.spill is not None) == spills
    assert enc.raw() == writer.encode_events(events)
    ref, tmp = writer.write_streamed(enc)
    assert ref.tape_id == whole.tape_id and tmp is not None
    with open(tmp, "rb") as f:
        assert f.read() == whole.path.read_bytes()
    stager = writer.TapeStager()
    staged = stager.adopt(ref, tmp)
    assert staged.created
    stager.flush()
    assert staged.path.read_bytes() == whole.path.read_bytes()
    assert reader.read_tape(staged.path) == events


def test_streamed_big_tape_pages_dropped_same_bytes(tmp_path, monkeypatch):
    """A spilled tape past 2 x SPILL_BYTES is compressed with its mapped pages dropped as zstd
    goes (``_compress_file``): the same frame as one call over the bytes."""
    monkeypatch.setattr(writer, "SPILL_BYTES", 1 << 16)
    monkeypatch.setattr(writer, "DROP_EVERY_S", 0.0005)
    events = _events(8000, seed=5)
    enc = _streamed(tmp_path, events)
    assert enc.spill is not None and enc.size > 4 * writer.SPILL_BYTES
    assert enc.compressed() == writer._compress(writer.encode_events(events))
    enc.close()


def test_streamed_refuses_a_first_event_not_meta(tmp_path):
    enc = writer.Streamed(tmp_path)
    enc.add({"k": "msg.in", "text": "hi", "t": None})
    with pytest.raises(ValueError):
        enc.finish({"k": "msg.in"})
    assert enc.spill is None and not enc.buf


def test_a_streamed_sessions_prepared_parts_are_swept_once_their_writer_is_gone(tmp_path):
    """The parts file ``worker.stream`` leaves for the ingest is named as a tape temp file of
    its writer: a kill -9 between the two leaves it to ``sweep_temp``, never for good."""
    import os
    import subprocess
    import sys

    from engram.index import store

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    mine = store.PreparedSpill.create(tmp_path, f".{'a' * 32}.{os.getpid()}-"
                                                f"{writer._host_tag()}.prepared.tmp")
    mine.write(([[]], None))
    mine.close()
    gone = store.PreparedSpill.create(tmp_path, f".{'b' * 32}.{p.pid}-"
                                                f"{writer._host_tag()}.prepared.tmp")
    gone.close()
    assert oct(os.stat(mine.path).st_mode & 0o777) == "0o600"
    assert writer.sweep_temp(tmp_path) == [tmp_path / os.path.basename(gone.path)]
    assert list(mine.parts()) == [([[]], None)]
    mine.discard()
    assert not os.path.exists(mine.path)
