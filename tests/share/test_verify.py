"""``engram.share.verify.verify_stream``: a foreign tape's name against its content, streamed and
capped, on real tapes written by ``engram.tape.writer``."""

from __future__ import annotations

import io
import os

import pytest
import xxhash
import zstandard

from engram.errors import CorruptTape
from engram.share.verify import MAX_TAPE_BYTES, cap_for, verify_stream
from engram.tape.writer import RATIO_FLOOR, encode_events, write_tape


def _events(n: int = 50) -> list[dict]:
    return [{"k": "meta", "t": "2026-01-01T00:00:00Z", "harness": "claude_code", "session": "s"}] + [
        {"k": "msg.in", "t": "2026-01-01T00:00:01Z", "text": f"line {i} " + "x" * (i % 40)}
        for i in range(n)]


def _check(data: bytes, tape_id: str, **kw) -> dict:
    return verify_stream(io.BytesIO(data), len(data), tape_id, name="t", **kw)


def test_a_real_tape_passes_and_is_copied_whole(tmp_path):
    ref = write_tape(tmp_path, _events())
    data = ref.path.read_bytes()
    sink = io.BytesIO()
    res = verify_stream(io.BytesIO(data + b"next object"), len(data), ref.tape_id, name="t",
                        sink=sink)
    assert sink.getvalue() == data  # exactly the tape's bytes, not what follows in the pipe
    assert res["raw_bytes"] == ref.raw_bytes and res["meta"]["session"] == "s"


def test_the_source_is_read_to_the_end_of_the_tape_even_when_refused(tmp_path):
    ref = write_tape(tmp_path, _events())
    data = ref.path.read_bytes()
    src = io.BytesIO(data + b"NEXT")
    with pytest.raises(CorruptTape, match="does not match"):
        verify_stream(src, len(data), "0" * 32, name="t")
    assert src.read() == b"NEXT"  # a ``git cat-file --batch`` pipe stays in step


@pytest.mark.parametrize("cut", [1, 3, 10, 0.5, -1])
def test_truncated(tmp_path, cut):
    ref = write_tape(tmp_path, _events(2000))
    data = ref.path.read_bytes()
    n = int(len(data) * cut) if isinstance(cut, float) else (cut if cut > 0 else len(data) + cut)
    with pytest.raises(CorruptTape, match="truncated|not zstd|empty"):
        _check(data[:n], ref.tape_id)


def test_garbage_and_misnamed(tmp_path):
    ref = write_tape(tmp_path, _events())
    with pytest.raises(CorruptTape, match="not zstd"):
        _check(os.urandom(4096), ref.tape_id)
    with pytest.raises(CorruptTape, match="does not match the tape's name"):
        _check(ref.path.read_bytes(), "f" * 32)
    with pytest.raises(CorruptTape, match="32 hex"):
        _check(ref.path.read_bytes(), "../../etc/passwd")


def test_meta_must_come_first():
    raw = b'{"k":"msg.in","t":"x"}\n'
    data = zstandard.ZstdCompressor().compress(raw)
    with pytest.raises(CorruptTape, match="meta"):
        _check(data, xxhash.xxh3_128_hexdigest(raw))


def test_declared_bomb_is_refused_before_decompressing():
    raw = b'{"k":"meta"}\n' + bytes(RATIO_FLOOR + 1)
    data = zstandard.ZstdCompressor(level=1).compress(raw)
    with pytest.raises(CorruptTape, match="declares"):
        _check(data, xxhash.xxh3_128_hexdigest(raw))


def test_undeclared_bomb_stops_at_the_cap():
    head = b'{"k":"meta"}\n'
    c = zstandard.ZstdCompressor(level=1, write_content_size=False)
    buf = io.BytesIO()
    with c.stream_writer(buf, closefd=False) as w:
        w.write(head)
        for _ in range(100):
            w.write(bytes(1 << 20))
    data = buf.getvalue()
    assert cap_for(len(data)) == RATIO_FLOOR  # a small file may not make more than the floor
    with pytest.raises(CorruptTape, match="more than the 67108864 bytes"):
        _check(data, "a" * 32)


def test_the_cap_is_configurable(tmp_path):
    ref = write_tape(tmp_path, _events(3000))
    data = ref.path.read_bytes()
    assert _check(data, ref.tape_id, max_tape_bytes=ref.raw_bytes)["raw_bytes"] == ref.raw_bytes
    with pytest.raises(CorruptTape, match=f"more than the {ref.raw_bytes - 1}"):
        _check(data, ref.tape_id, max_tape_bytes=ref.raw_bytes - 1)
    assert MAX_TAPE_BYTES == 512 << 20


def test_same_verdict_as_the_local_reader(tmp_path):
    """What pull accepts, ingest's reader accepts too (same name, same content)."""
    from engram.tape.reader import read_raw

    ref = write_tape(tmp_path, _events(500))
    assert xxhash.xxh3_128_hexdigest(read_raw(ref.path)) == ref.tape_id
    assert _check(ref.path.read_bytes(), ref.tape_id)["raw_bytes"] == len(encode_events(_events(500)))
