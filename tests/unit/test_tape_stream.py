"""The tape writer encodes events one at a time and never holds a tape's JSONL twice, yet writes
exactly the bytes (and so the tape id) of the one-call encoding: ``xxh3_128`` of the canonical
JSONL, one zstd frame of it made in one call. Tape ids are content addresses shared between
machines, so this is checked byte for byte, on both sides of the spill threshold and of zstd's
2 MiB window (past which a frame made piece by piece differs)."""

from __future__ import annotations

import os
import random
import tracemalloc

import pytest
import xxhash
import zstandard

from engram.tape import reader, writer
from engram.tape.writer import TapeStager, encode_events, write_tape

META = {"k": "meta", "t": "2025-01-01T00:00:00Z", "harness": "test", "session": "s"}
WORDS = "parse header value name item text line data node tree index key path file".split()


def _events(n_bytes: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out = [META]
    size = 0
    while size < n_bytes:
        text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
                         + f" {rng.randint(0, 10**6)}" for _ in range(rng.randint(1, 60)))
        out.append({"k": rng.choice(["msg.out", "tool.result", "msg.in"]), "t": None,
                    "text": text, "n": len(out), "ü": "ß"})
        size += len(text) + 40
    return out


def _one_call(events: list[dict]) -> tuple[str, bytes]:
    raw = encode_events(events)
    return xxhash.xxh3_128_hexdigest(raw), zstandard.ZstdCompressor(level=writer.ZSTD_LEVEL).compress(raw)


@pytest.mark.parametrize("n_bytes", [0, 100_000, 3_000_000, 5_000_000, 12_000_000])
def test_the_same_bytes_as_the_one_call_encoding(tmp_path, n_bytes, monkeypatch):
    events = _events(n_bytes)
    tape_id, data = _one_call(events)
    monkeypatch.setattr(writer, "SPILL_BYTES", 1 << 20)  # spilled from 1 MiB on
    ref = write_tape(tmp_path / "a", iter(events))  # a generator: read once
    assert ref.tape_id == tape_id and ref.created and ref.n_events == len(events)
    assert ref.raw_bytes == len(encode_events(events))
    assert ref.path.read_bytes() == data
    stager = TapeStager()
    sref = stager.stage(tmp_path / "b", (ev for ev in events))
    assert stager.flush() == 1
    assert sref.tape_id == tape_id and sref.path.read_bytes() == data
    assert reader.read_tape(sref.path) == events
    # nothing else is left in the directories (the spill file has no name)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [f"{tape_id}.jsonl.zst"]


def test_fragments_of_canonical_json_give_the_same_tape(tmp_path):
    """Ingest writes a big session's tape from the lines the parse worker encoded."""
    import orjson

    events = _events(200_000)
    frags = [events[0]] + [orjson.Fragment(writer.encode_event(ev)) for ev in events[1:]]
    assert write_tape(tmp_path, frags).tape_id == _one_call(events)[0]


def test_an_existing_tape_is_not_compressed_again(tmp_path, monkeypatch):
    events = _events(50_000)
    first = write_tape(tmp_path, events)

    def no(_raw):
        raise AssertionError("compressed again")

    monkeypatch.setattr(writer, "_compress", no)
    again = write_tape(tmp_path, events)
    assert (again.tape_id, again.created) == (first.tape_id, False)
    staged = TapeStager().stage(tmp_path, events)
    assert not staged.created


def test_the_jsonl_is_never_held_on_the_heap(tmp_path, monkeypatch):
    """A 40 MB tape written from a generator: until it is compressed, Python's heap never grows
    by more than the spill buffer (not by the JSONL, once or, as before, twice), and zstd reads
    the JSONL from the mapped spill file, not from a copy on the heap. (zstd's output buffer is
    allocated at its bound, mostly untouched: only the frame's pages become resident.)"""
    rng = random.Random(3)
    block = "\n".join(f"{rng.choice(WORDS)}_{i} = {rng.choice(WORDS)}({i})" for i in range(2000))

    def gen():
        yield META
        for i in range(1000):  # ~40 MB of JSONL, made one event at a time
            yield {"k": "tool.result", "t": None, "stdout": f"{i}\n{block}"}

    seen = []
    compress = writer._compress

    def spy(raw):
        seen.append((type(raw).__name__, len(raw), tracemalloc.get_traced_memory()[1]))
        return compress(raw)

    into = writer._compress_file_into

    def spy_into(fd, start, size, out_fd):   # (zstd writes the frame into the tape's file)
        seen.append(("file", size, tracemalloc.get_traced_memory()[1]))
        return into(fd, start, size, out_fd)

    monkeypatch.setattr(writer, "_compress", spy)
    monkeypatch.setattr(writer, "_compress_file_into", spy_into)
    tracemalloc.start()
    try:
        ref = write_tape(tmp_path, gen())
    finally:
        tracemalloc.stop()
    assert ref.raw_bytes > 40_000_000
    [(kind, n, peak)] = seen
    # a view of the mapped spill, or the spill file compressed into the tape's
    assert kind in ("mmap", "memoryview", "file") and n == ref.raw_bytes
    assert peak < writer.SPILL_BYTES + (4 << 20), peak
    assert len(reader.read_raw(ref.path)) == ref.raw_bytes


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    """A write that fails (disk full) removes its temp file; the spill has no name to leave."""
    events = _events(6_000_000)

    def full(_fd, _data):
        raise OSError(28, "No space left on device")

    stager = TapeStager()
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left") as e:
        stager.stage(tmp_path, events)
    assert e.value.filename == str(tmp_path)  # the spill's failure names the tape directory
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    assert stager.flush() == 0


def test_no_meta_first_is_refused(tmp_path):
    with pytest.raises(ValueError, match="meta"):
        write_tape(tmp_path, [{"k": "msg.in", "t": None, "text": "x"}])
    with pytest.raises(ValueError, match="meta"):
        write_tape(tmp_path, iter([]))


def test_disk_full_while_spilling_stops_the_ingest_with_one_line(world, capsys, monkeypatch):
    """A big session's spill failing (disk full) is the run's error, as any failed tape write:
    not its log's 'cannot read', and nothing is indexed or lost (the next run writes it)."""
    import errno

    from engram.cli import main

    world.session(session_id="aaaa0201-0000-0000-0000-000000000001").user("write it") \
        .write("big.py", "value = compute(item)\n" * 2000).save()
    world.checkout()

    def full(self, directory):
        raise OSError(errno.ENOSPC, "No space left on device", str(directory))

    spill = writer._Encoded._spill
    monkeypatch.setattr(writer, "SPILL_BYTES", 1)
    monkeypatch.setattr(writer._Encoded, "_spill", full)
    assert main(["ingest", "--seal"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "disk full while writing it" in err[0] and "tapes" in err[0], err
    monkeypatch.setattr(writer._Encoded, "_spill", spill)  # (the disk has room again)
    assert main(["ingest", "--seal"]) == 0
    res = __import__("json").loads(capsys.readouterr().out)
    assert res["sealed"] == 1 and res["error_count"] == 0
