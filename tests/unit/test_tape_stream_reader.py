"""``reader.stream_events`` / ``reader.verify_stream`` (a big tape of a tape directory read as a
stream) give ``read_tape``'s events, and refuse what it refuses with its error -- message and
line -- whatever the pieces the stream is cut into (here a few bytes: lines span many pieces)."""

from __future__ import annotations

import pytest
import xxhash
import zstandard

from engram.errors import CorruptTape
from engram.tape import reader, writer

META = b'{"k":"meta","harness":"claude_code","session":"s","t":"2026-01-01T00:00:00Z"}'
MSG = b'{"k":"msg.in","t":"2026-01-01T00:00:01Z","text":"hello there, a few words"}'
EDIT = (b'{"k":"code.edit","file":"/r/a.py","after_range":[1,2],"after_text":"x = 1\\ny = 2\\n",'
        b'"before_text":""}')
LONG = b'{"k":"msg.out","text":"' + b"word " * 400 + b'"}'


def _tape(tmp_path, raw: bytes, name: str | None = None, declare: bool = True):
    data = zstandard.ZstdCompressor(write_content_size=declare).compress(raw)
    p = tmp_path / f"{name or xxhash.xxh3_128_hexdigest(raw)}{writer.SUFFIX}"
    p.write_bytes(data)
    return p


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch):
    monkeypatch.setattr(reader, "_PIECE", 7)
    monkeypatch.setattr(reader, "_READ", 13)


GOOD = {
    "plain": b"\n".join([META, MSG, EDIT, LONG]) + b"\n",
    "no final newline": b"\n".join([META, MSG, LONG]),
    "blank lines": b"\n".join([META, b"", MSG, b"", b"", EDIT]) + b"\n\n",
    "unknown kind": b"\n".join([META, b'{"k":"x.new","anything":[1,{"a":2}]}']) + b"\n",
}

BAD = {
    "bad JSON after a bad event": b"\n".join([META, b'{"k":"code.edit","after_range":["1",2]}',
                                              MSG, b'{"k":"msg.in",']) + b"\n",
    "not an object": b"\n".join([META, MSG, b"[1, 2]"]) + b"\n",
    "first line not a meta": b"\n".join([MSG, META]) + b"\n",
    "a second meta": b"\n".join([META, MSG, META]) + b"\n",
    "type-confused event": b"\n".join([META, MSG, MSG, b'{"k":"code.read","range":[1,"2"]}',
                                       EDIT]) + b"\n",
    "k not a string": b"\n".join([META, b'{"k":5}']) + b"\n",
    "only blank lines": b"\n\n\n",
    "empty": b"",
    "meta after blank lines": b"\n\n" + b"\n".join([MSG]) + b"\n",
}


@pytest.mark.parametrize("declare", [True, False])
@pytest.mark.parametrize("case", sorted(GOOD))
def test_a_good_tape_streams_as_read_tape_reads_it(tmp_path, case, declare):
    p = _tape(tmp_path, GOOD[case], declare=declare)
    whole = reader.read_tape(p)
    assert list(reader.stream_events(p)) == whole
    seen: list[dict] = []
    assert reader.verify_stream(p, seen.append) == len(whole) and seen == whole
    lines = [line for _ev, line in reader.stream_events(p, lines=True)]
    assert lines == [ln for ln in GOOD[case].split(b"\n") if ln]
    assert reader.content_bound(p) == (len(GOOD[case]) if declare else writer.size_limit(p.stat().st_size))


def _refusal(fn) -> tuple[str, int | None]:
    with pytest.raises(CorruptTape) as e:
        fn()
    return e.value.message, e.value.line


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_tape_is_refused_with_read_tapes_error(tmp_path, case):
    p = _tape(tmp_path, BAD[case])
    want = _refusal(lambda: reader.read_tape(p))
    assert _refusal(lambda: reader.verify_stream(p)) == want
    _refusal(lambda: list(reader.stream_events(p)))   # (at its first bad line or event)


def test_content_that_is_not_what_its_name_says_is_refused_before_its_lines(tmp_path, monkeypatch):
    raw = GOOD["plain"]
    p = _tape(tmp_path, raw.replace(b"hello", b"HELLO"), name=xxhash.xxh3_128_hexdigest(raw))
    want = _refusal(lambda: reader.read_tape(p))
    assert "does not match the tape's name" in want[0]
    got: list[dict] = []
    assert _refusal(lambda: reader.verify_stream(p, got.append)) == want
    assert got == []   # (checked before any line is parsed)
    # a bomb of one endless line: refused by its size, no line gathered
    monkeypatch.setattr(reader, "_PIECE", 1 << 20)
    zeros = _tape(tmp_path, b"\0" * (3 << 20), name="ab" * 16, declare=False)
    gathered = []
    monkeypatch.setattr(reader, "stream_lines", lambda path: gathered.append(path) or iter(()))
    monkeypatch.setattr(reader, "size_limit", lambda n: 1 << 20)
    assert "zstd bomb" in _refusal(lambda: reader.verify_stream(zeros))[0]
    assert gathered == []


def test_a_truncated_frame_is_refused(tmp_path):
    p = _tape(tmp_path, GOOD["plain"] * 50)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    message, _line = _refusal(lambda: reader.verify_stream(p))
    assert "zstd" in message
    assert "zstd" in _refusal(lambda: reader.read_tape(p))[0]
