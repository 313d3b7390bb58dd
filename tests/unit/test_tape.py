"""Tapes: content-addressed, atomic, never overwritten, verified on read, unknown keys kept."""

from __future__ import annotations

import os

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.errors import CorruptTape
from engram.tape import check, read_tape, write_tape
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


TYPED = {"k", "t", "text", "reasoning", *check._COMMON}  # fields whose type a reader checks
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=40),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda s: s not in TYPED),
                                json_values, max_size=5), max_size=8))
def test_round_trip_property(tmp_path_factory, bodies):
    """Any keys beside the typed ones (``engram.tape.check``, tested on its own) come back as written."""
    d = tmp_path_factory.mktemp("tapes")
    events = [META] + [{**b, "k": "msg.out", "text": "x"} for b in bodies]
    ref = write_tape(d, events)
    assert read_tape(ref.path) == events
    assert write_tape(d, events).tape_id == ref.tape_id


# -- untrusted tapes: bombs, size limits, names ------------------------------------------------

def rle_bomb(total: int, declare: bool) -> bytes:
    """A zstd frame of ``total`` zero bytes made of RLE blocks (4 bytes per 128 KiB): 4 GiB in a
    128 KiB file. ``declare``: the frame header states the size (as Engram's writer does)."""
    out = bytearray(b"\x28\xb5\x2f\xfd")
    out += bytes([0xE0]) + total.to_bytes(8, "little") if declare else bytes([0x00, 0x38])
    block = 1 << 17
    n = total // block
    for i in range(n):
        out += ((block << 3) | (1 << 1) | (i == n - 1)).to_bytes(3, "little") + b"\x00"
    return bytes(out)


def test_rle_bomb_is_a_valid_zstd_frame():
    for declare in (True, False):
        small = rle_bomb(1 << 20, declare)
        assert zstandard.ZstdDecompressor().decompressobj().decompress(small) == bytes(1 << 20)


_BOMB_READER = """
import resource, sys, time
from engram.errors import CorruptTape
from engram.tape.reader import read_tape
t0 = time.process_time()  # CPU, not wall: the work done, not the waits for a core on a busy machine
try:
    read_tape(sys.argv[1])
    what = "read"
except CorruptTape as e:
    what = "CorruptTape: " + str(e)
print(time.process_time() - t0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB
print(what)
"""


def _read_in_process(path) -> tuple[float, int, str]:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _BOMB_READER, str(path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout.splitlines()
    return float(out[0]), int(out[1]) * 1024, out[2]


@pytest.mark.parametrize("declare", [True, False], ids=["size-declared", "size-not-declared"])
def test_zstd_bomb_fails_fast_in_bounded_memory(tmp_path, declare):
    """4 GiB of zeros in a 128 KiB file, named by the hash of its content (so only the size limit
    stands in the way): refused in well under a second of CPU, the process growing by less than 128 MiB
    (the limit for a file this small is 64 MiB; a declared size is refused before any output)."""
    import xxhash

    total = 4 << 30
    h = xxhash.xxh3_128()
    zeros = bytes(1 << 24)
    for _ in range(total // len(zeros)):
        h.update(zeros)
    bomb = tmp_path / f"{h.hexdigest()}.jsonl.zst"
    bomb.write_bytes(rle_bomb(total, declare))
    assert bomb.stat().st_size < 200_000
    ok = write_tape(tmp_path, [META]).path
    _t, base_rss, what = _read_in_process(ok)
    assert what == "read"
    seconds, rss, what = _read_in_process(bomb)
    assert what.startswith("CorruptTape: ") and "zstd bomb" in what and bomb.name in what
    assert seconds < 1.0
    assert rss - base_rss < 128 << 20, f"grew by {(rss - base_rss) >> 20} MiB"


def test_declared_size_smaller_than_the_content_is_refused(tmp_path):
    """A frame that makes more than it declares fails inside the declared-size buffer."""
    import struct

    import xxhash

    raw = encode_events([META]) + b"\n" * 200_000
    data = bytearray(zstandard.ZstdCompressor().compress(raw))
    assert data[4] == 0xA0  # single segment, 4-byte content size at bytes 5..8
    data[5:9] = struct.pack("<I", 1000)
    p = tmp_path / f"{xxhash.xxh3_128_hexdigest(raw)}.jsonl.zst"
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptTape, match="zstd"):
        read_tape(p)


def test_a_frame_without_its_size_is_still_read(tmp_path):
    """Tapes written by another zstd tool (streaming: no size in the header) read as before."""
    import xxhash

    events = [META] + [{"k": "msg.out", "t": None, "text": f"line {i}"} for i in range(3000)]
    raw = encode_events(events)
    p = tmp_path / f"{xxhash.xxh3_128_hexdigest(raw)}.jsonl.zst"
    p.write_bytes(zstandard.ZstdCompressor(write_content_size=False).compress(raw))
    assert zstandard.frame_content_size(p.read_bytes()) == -1
    assert read_tape(p) == events


def test_writer_pads_a_tape_that_compresses_better_than_the_reader_allows(tmp_path, monkeypatch):
    """The writer never leaves a tape the reader would refuse: past the ratio limit it appends a
    zstd skippable frame (the tape id, a hash of the content, is unchanged)."""
    from engram.tape import writer

    monkeypatch.setattr(writer, "RATIO_FLOOR", 0)
    events = [META, {"k": "tool.result", "t": None, "stdout": "=" * 3_000_000}]
    ref = write_tape(tmp_path, events)
    bare = len(zstandard.ZstdCompressor(level=writer.ZSTD_LEVEL).compress(encode_events(events)))
    assert ref.raw_bytes > bare * writer.MAX_RATIO  # so degenerate that it needed the padding
    size = ref.path.stat().st_size
    assert size > bare and writer.size_limit(size) >= ref.raw_bytes
    assert read_tape(ref.path) == events


def test_a_session_larger_than_a_tape_may_hold_is_not_written(tmp_path, monkeypatch):
    from engram.tape import writer

    monkeypatch.setattr(writer, "MAX_TAPE_BYTES", 1000)
    with pytest.raises(writer.TapeTooLarge, match="larger than a tape may hold"):
        write_tape(tmp_path, [META, {"k": "msg.in", "t": None, "text": "x" * 2000}])
    with pytest.raises(writer.TapeTooLarge):
        writer.TapeStager().stage(tmp_path, [META, {"k": "msg.in", "t": None, "text": "x" * 2000}])
    assert list(tmp_path.iterdir()) == []


def test_every_read_checks_the_name(tmp_path):
    """There is no way to skip the check: ``read_raw``, ``read_tape`` and the cached line reader
    all refuse a tape whose name is not the hash of its content."""
    from engram.tape import reader

    ref = write_tape(tmp_path, [META])
    other = tmp_path / ("f" * 32 + ".jsonl.zst")
    other.write_bytes(ref.path.read_bytes())
    for read in (reader.read_raw, reader.read_tape, reader.raw_lines_cached):
        with pytest.raises(CorruptTape, match="does not match"):
            read(other)
    with pytest.raises(TypeError):
        reader.read_tape(other, verify=False)  # the option is gone


def test_cached_reader_on_a_missing_tape_raises_corrupt_tape(tmp_path):
    from engram.tape import reader

    with pytest.raises(CorruptTape, match="vanished"):
        reader.raw_lines_cached(tmp_path / ("c" * 32 + ".jsonl.zst"))


# -- ENGRAM_TAPE_CACHE_MB is read when used ----------------------------------------------------

def test_a_bad_cache_size_does_not_break_import(tmp_path):
    import subprocess
    import sys

    ref = write_tape(tmp_path, [META])
    code = ("import sys, engram, engram.tape.reader as r; "
            "print(len(r.raw_lines_cached(sys.argv[1])), r.cache_bytes())")
    run = subprocess.run([sys.executable, "-c", code, str(ref.path)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "ENGRAM_TAPE_CACHE_MB": "lots"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["2", str(128 << 20)]
    assert "ENGRAM_TAPE_CACHE_MB='lots' is not a whole number" in run.stderr
    assert run.stderr.count("ENGRAM_TAPE_CACHE_MB") == 1  # warned once


@pytest.mark.parametrize("value, budget", [("", 128 << 20), ("16", 16 << 20), ("0", 0),
                                           ("-4", 128 << 20), ("1.5", 128 << 20)])
def test_cache_size_values(monkeypatch, value, budget):
    from engram.tape import reader

    monkeypatch.setenv("ENGRAM_TAPE_CACHE_MB", value)
    assert reader.cache_bytes() == budget


def test_dead_helpers_are_gone():
    import engram.tape
    from engram.tape import reader

    assert not hasattr(reader, "tape_length") and not hasattr(reader, "iter_tape")
    assert "iter_tape" not in engram.tape.__all__


# -- temp files of writers that are gone ----------------------------------------------------------

def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_temp_files_name_their_writer_and_are_swept_only_when_it_is_gone(tmp_path):
    import time

    from engram.tape import writer

    tag = writer._host_tag()
    tid = "a" * 32
    live = tmp_path / f".{tid}.{os.getpid()}-{tag}.x1.tmp"          # this process: writing
    dead = tmp_path / f".{tid}.{_dead_pid()}-{tag}.x2.tmp"          # its writer is gone
    elsewhere = tmp_path / f".{tid}.{os.getpid()}-00000000.x3.tmp"  # another machine's
    old_style = tmp_path / f".{tid}.x4.tmp"                         # no writer in the name
    other = tmp_path / ".notes.tmp"                                 # not a tape temp file
    for p in (live, dead, elsewhere, old_style, other):
        p.write_bytes(b"partial")
    assert writer.sweep_temp(tmp_path) == [dead]
    assert {p.name for p in tmp_path.iterdir()} == {live.name, elsewhere.name, old_style.name,
                                                   other.name}
    hour_ago = time.time() - writer.STALE_AFTER_S - 1
    for p in (live, elsewhere, old_style, other):
        os.utime(p, (hour_ago, hour_ago))
    assert sorted(writer.sweep_temp(tmp_path)) == sorted([elsewhere, old_style])
    assert {p.name for p in tmp_path.iterdir()} == {live.name, other.name}
    assert writer.sweep_temp(tmp_path / "missing") == []


def test_a_reused_pid_does_not_keep_a_temp_file(tmp_path):
    """A pid alive now but started after the temp file was last written is not its writer."""
    import time

    from engram.tape import writer

    p = tmp_path / f".{'b' * 32}.{os.getppid()}-{writer._host_tag()}.x.tmp"
    p.write_bytes(b"partial")
    long_ago = time.time() - 10 * 365 * 86400  # before the parent process started
    os.utime(p, (long_ago, long_ago))
    assert writer.sweep_temp(tmp_path) == [p]


def test_the_stager_sweeps_a_directory_before_writing_into_it(tmp_path):
    from engram.tape import writer

    dead = tmp_path / f".{'c' * 32}.{_dead_pid()}-{writer._host_tag()}.x.tmp"
    dead.write_bytes(b"partial")
    st = writer.TapeStager()
    ref = st.stage(tmp_path, [META])
    assert not dead.exists()
    assert st.write_one()
    (tmp, _final), = st.pending
    assert os.path.basename(tmp).startswith(f".{ref.tape_id}.{os.getpid()}-{writer._host_tag()}.")
    assert st.flush() == 1 and read_tape(ref.path) == [META]


# -- permissions ------------------------------------------------------------------------------------

@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_tapes_and_their_directories_are_private(tmp_path, umask):
    from engram.tape import writer

    old = os.umask(umask)
    try:
        a = write_tape(tmp_path / "new" / "tapes", [META])
        st = writer.TapeStager()
        b = st.stage(tmp_path / "staged", [META, {"k": "msg.in", "t": None, "text": "x"}])
        st.flush()
    finally:
        os.umask(old)
    for d in (tmp_path / "new", tmp_path / "new" / "tapes", tmp_path / "staged"):
        assert oct(d.stat().st_mode & 0o777) == oct(0o700), d
    for f in (a.path, b.path):
        assert oct(f.stat().st_mode & 0o777) == oct(0o600), f


def test_an_existing_readable_tape_directory_is_narrowed(tmp_path):
    d = tmp_path / "tapes"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    write_tape(d, [META])
    assert oct(d.stat().st_mode & 0o777) == oct(0o700)
