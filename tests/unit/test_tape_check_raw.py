"""``reader.check_raw``: ``read_raw``'s checks of a tape with none of its content held — it
refuses every tape ``read_raw`` refuses (a byte flipped anywhere, cut short, junk, empty, a
frame past its file's limit, content that is not what the name says) and passes every tape it
reads; and on a big tape it holds a few MiB where ``read_raw`` holds the content."""

from __future__ import annotations

import os
import tracemalloc

import pytest
import xxhash
import zstandard

from engram.errors import CorruptTape
from engram.tape import reader, write_tape
from engram.tape.writer import encode_events

META = {"k": "meta", "t": "2026-01-01T00:00:00Z", "harness": "claude_code", "session": "s1"}


def _verdict(fn, path) -> str:
    try:
        fn(path)
    except CorruptTape:
        return "refused"
    return "read"


def _tapes(tmp_path):
    ok = write_tape(tmp_path, [META] + [{"k": "msg.out", "t": None, "text": f"line {i} " * 40}
                                        for i in range(400)]).path
    yield "sound", ok
    data = ok.read_bytes()
    for at in (0, 5, 12, len(data) // 3, len(data) // 2, len(data) - 9, len(data) - 1):
        p = tmp_path / "flip" / f"{at}" / ok.name
        p.parent.mkdir(parents=True)
        flipped = bytearray(data)
        flipped[at] ^= 0x5A
        p.write_bytes(bytes(flipped))
        yield f"flipped at {at}", p
    for n in (0, 4, len(data) // 2, len(data) - 1):
        p = tmp_path / "cut" / f"{n}" / ok.name
        p.parent.mkdir(parents=True)
        p.write_bytes(data[:n])
        yield f"cut to {n}", p
    junk = tmp_path / "junk" / ok.name
    junk.parent.mkdir()
    junk.write_bytes(os.urandom(4096))
    yield "junk", junk
    other = tmp_path / ("0" * 32 + ".jsonl.zst")
    other.write_bytes(data)
    yield "misnamed", other
    trailing = tmp_path / "trailing" / ok.name
    trailing.parent.mkdir()
    trailing.write_bytes(data + b"\0" * 64)
    yield "trailing bytes", trailing
    raw = encode_events([META]) + b"\n" * (80 << 20)    # past the 64 MiB a file this small may hold
    bomb = tmp_path / f"{xxhash.xxh3_128_hexdigest(raw)}.jsonl.zst"
    bomb.write_bytes(zstandard.ZstdCompressor(level=1).compress(raw))
    del raw
    yield "bomb", bomb
    nosize = encode_events([META, {"k": "msg.in", "t": None, "text": "hi"}])
    p = tmp_path / f"{xxhash.xxh3_128_hexdigest(nosize)}.jsonl.zst"
    p.write_bytes(zstandard.ZstdCompressor(write_content_size=False).compress(nosize))
    yield "no size in the frame", p
    yield "missing", tmp_path / ("b" * 32 + ".jsonl.zst")


def test_check_raw_refuses_what_read_raw_refuses(tmp_path):
    seen = {}
    for what, path in _tapes(tmp_path):
        seen[what] = _verdict(reader.read_raw, path)
        assert _verdict(reader.check_raw, path) == seen[what], what
    assert seen["sound"] == seen["no size in the frame"] == seen["trailing bytes"] == "read"
    assert seen["misnamed"] == seen["bomb"] == seen["junk"] == seen["missing"] == "refused"
    assert sum(v == "refused" for v in seen.values()) >= 14


@pytest.mark.slow
def test_check_raw_holds_none_of_a_big_tape(tmp_path):
    body = [{"k": "msg.out", "t": None, "text": os.urandom(3000).hex()} for _ in range(8000)]
    path = write_tape(tmp_path, [META] + body).path     # ~48 MB of content
    del body
    peaks = {}
    for fn in (reader.check_raw, reader.read_raw):
        tracemalloc.start()
        fn(path)
        peaks[fn.__name__] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks["read_raw"] > 40 << 20
    assert peaks["check_raw"] < 8 << 20, peaks
