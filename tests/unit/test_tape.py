"""Tapes: content-addressed, atomic, never overwritten, verified on read, unknown keys kept."""

from __future__ import annotations

import os

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.errors import CorruptTape
from engram.tape import read_tape, write_tape
from engram.tape.writer import encode_events

META = {"k": "meta", "t": "2026-01-01T00:00:00Z", "harness": "claude_code", "session": "s1"}


def test_round_trip_and_unknown_keys(tmp_path):
    events = [META, {"k": "msg.in", "t": "2026-01-01T00:00:01Z", "text": "hi", "x_future": {"a": [1, 2]}}]
    ref = write_tape(tmp_path, events)
    assert ref.created and ref.path.name == f"{ref.tape_id}.jsonl.zst"
    assert read_tape(ref.path) == events
    assert read_tape(ref.path)[1]["x_future"] == {"a": [1, 2]}


def test_same_content_same_name_never_rewritten(tmp_path):
    ref1 = write_tape(tmp_path, [META])
    mtime = os.stat(ref1.path).st_mtime_ns
    ref2 = write_tape(tmp_path, [dict(reversed(list(META.items())))])  # key order is canonicalised
    assert ref2.tape_id == ref1.tape_id and not ref2.created
    assert os.stat(ref1.path).st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [ref1.path.name]  # no temp files left


def test_first_event_must_be_meta(tmp_path):
    with pytest.raises(ValueError):
        write_tape(tmp_path, [{"k": "msg.in", "text": "x"}])


def test_name_must_match_content(tmp_path):
    ref = write_tape(tmp_path, [META])
    other = tmp_path / ("0" * 32 + ".jsonl.zst")
    other.write_bytes(ref.path.read_bytes())
    with pytest.raises(CorruptTape, match="does not match") as e:
        read_tape(other)
    assert str(other) in str(e.value)


def test_truncated_zstd(tmp_path):
    ref = write_tape(tmp_path, [META] + [{"k": "msg.out", "t": None, "text": "x" * 5000 + str(i)} for i in range(50)])
    data = ref.path.read_bytes()
    ref.path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptTape) as e:
        read_tape(ref.path)
    assert ref.path.name in str(e.value)


def test_binary_junk(tmp_path):
    p = tmp_path / ("a" * 32 + ".jsonl.zst")
    p.write_bytes(os.urandom(4096))
    with pytest.raises(CorruptTape, match="zstd"):
        read_tape(p)


def test_bad_json_line_names_the_line(tmp_path):
    import xxhash

    raw = encode_events([META]) + b"{not json\n"
    tid = xxhash.xxh3_128_hexdigest(raw)
    p = tmp_path / f"{tid}.jsonl.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(raw))
    with pytest.raises(CorruptTape) as e:
        read_tape(p)
    assert e.value.line == 2


def test_vanished_file(tmp_path):
    with pytest.raises(CorruptTape, match="vanished"):
        read_tape(tmp_path / ("b" * 32 + ".jsonl.zst"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=40),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda s: s not in ("k",)),
                                json_values, max_size=5), max_size=8))
def test_round_trip_property(tmp_path_factory, bodies):
    d = tmp_path_factory.mktemp("tapes")
    events = [META] + [{**b, "k": "msg.out"} for b in bodies]
    ref = write_tape(d, events)
    assert read_tape(ref.path) == events
    assert write_tape(d, events).tape_id == ref.tape_id
