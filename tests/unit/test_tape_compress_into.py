"""A spilled tape is compressed straight into its temp file (``writer._compress_file_into``: the
output file mapped, its pages dropped as they are written) rather than into memory: the file must
be byte for byte the frame ``_compress`` makes of the JSONL in memory — tape ids and bytes are
shared between machines — padding included, and where that cannot be done (no room to reserve on
the disk) the tape is written as before."""

from __future__ import annotations

import errno
import os
import random

import pytest
from test_tape_streamed import _streamed

from engram.tape import reader, writer


def _events(n: int, seed: int = 11) -> list[dict]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "δέλτα", "🙂", "def", "return", "x = 1"]
    out = [{"t": "2026-11-26T03:00:00Z", "k": "meta", "harness": "claude_code", "label": "l",
            "source_path": "/logs/a.jsonl",
            "coverage": {"grade": "full", "reasons": [], "redactions": 0}}]
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 600)))
        out.append({"t": f"2026-11-26T03:{i % 60:02d}:00Z", "k": "msg.out", "text": text, "n": i})
    return out


def _into(enc, tmp_path) -> bytes | None:
    path = tmp_path / "out.zst"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        n = enc.compress_into(fd)
    finally:
        os.close(fd)
    data = path.read_bytes()
    os.unlink(path)
    if n is not None:
        assert n == len(data)
    return None if n is None else data


def test_compress_into_is_the_in_memory_frame(tmp_path, monkeypatch):
    """Past zstd's 2 MiB window (~7 MB of JSONL), with pages dropped every few microseconds."""
    monkeypatch.setattr(writer, "SPILL_BYTES", 1 << 16)
    monkeypatch.setattr(writer, "DROP_EVERY_S", 0.0005)
    events = _events(6000)
    raw = writer.encode_events(events)
    assert len(raw) > 3 * (2 << 20)
    for enc in (writer._Encoded(tmp_path, events), _streamed(tmp_path, events)):
        assert enc.spill is not None
        got = _into(enc, tmp_path)
        if got is None:
            pytest.skip("no cffi backend of zstandard here: tapes are compressed in memory")
        assert got == writer._compress(raw) == enc.compressed()
        enc.close()


def test_compress_into_pads_as_compress_does(tmp_path, monkeypatch):
    """A tape that compresses better than ``MAX_RATIO`` gets the same skippable frame after it."""
    monkeypatch.setattr(writer, "SPILL_BYTES", 1 << 16)
    monkeypatch.setattr(writer, "RATIO_FLOOR", 1 << 16)
    events = _events(1)
    events += [{"t": "2026-11-26T03:00:00Z", "k": "msg.out", "text": "a" * 4000, "n": 0}] * 3000
    raw = writer.encode_events(events)
    expected = writer._compress(raw)
    assert len(expected) > len(writer.zstandard.ZstdCompressor(level=writer.ZSTD_LEVEL)
                               .compress(raw))   # padded
    enc = writer._Encoded(tmp_path, events)
    got = _into(enc, tmp_path)
    enc.close()
    if got is None:
        pytest.skip("no cffi backend of zstandard here")
    assert got == expected


def test_no_room_to_reserve_falls_back_to_memory(tmp_path, monkeypatch):
    """``posix_fallocate`` refused (a full disk, ``ulimit -f``): nothing is left in the file and
    the tape is written from memory, the same bytes."""
    monkeypatch.setattr(writer, "SPILL_BYTES", 1 << 16)
    events = _events(2000)

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    whole = writer.write_tape(tmp_path / "a", events)
    monkeypatch.setattr(os, "posix_fallocate", full)
    enc = writer._Encoded(tmp_path, events)
    assert _into(enc, tmp_path) is None
    enc.close()
    again = writer.write_tape(tmp_path / "b", events)
    assert again.tape_id == whole.tape_id
    assert again.path.read_bytes() == whole.path.read_bytes() == writer._compress(
        writer.encode_events(events))
    assert reader.read_tape(again.path) == events
    assert oct(again.path.stat().st_mode & 0o777) == "0o600"
