"""A big tape in a tape directory (a teammate's, pulled; a configured tape source) is indexed as a
stream (``worker.prepare_tape``, ``Ingestor._index_streamed_tape``): it must leave exactly the
index that reading it whole leaves, with parts small enough to cut it many times (and a call's
events far apart, in different parts); a corrupt one -- a bad hash, a type-confused event, a line
that is not JSON, a truncated frame, found deep in the stream -- is refused with the error that
reading it whole gives, nothing of it indexed, every other tape indexed; and an ingest killed in
the middle of its commit leaves it not indexed, for the next ingest to index it whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash
import zstandard
from test_ingest_stream import _index
from test_type_confusion import _fixture_tapes, make_repo

from engram.cli import main
from engram.errors import CorruptTape
from engram.index import store
from engram.ingest import worker
from engram.tape import reader, writer

PART = 16   # events of a streamed tape prepared at a time (the default: 2048)


def _big(fixtures: list[list[dict]], session: str = "big", copies: int = 8) -> list[dict]:
    """One session of the fixture sessions' events, ``copies`` times over: a third of the copies
    with calls of their own, the others reusing the first copy's call ids (a call's events then
    lie far apart, in different parts) -- the first copy without its code events: its calls'
    reads and edits come only in later parts (what of a call's output is derived is the whole
    tape's to say)."""
    meta = dict(fixtures[0][0], session=session, source_path=f"/elsewhere/{session}.jsonl")
    out = [meta]
    for c in range(copies):
        for evs in fixtures:
            for ev in evs[1:]:
                if c == 0 and ev.get("k") in ("code.read", "code.edit"):
                    continue
                ev = json.loads(json.dumps(ev))
                if c % 3 == 1 and isinstance(ev.get("call_id"), str):
                    ev["call_id"] += f"-{c}"
                out.append(ev)
    return out


def _ingest(home: Path, monkeypatch, capsys) -> dict:
    monkeypatch.setenv("ENGRAM_HOME", str(home))
    assert main(["ingest"]) == 0
    return json.loads(capsys.readouterr().out)


def _count_parts(monkeypatch) -> list:
    """Each prepared part written by a streamed tape (``PreparedSpill.write``) and each tape
    streamed (``worker.prepare_tape``), as they happen."""
    seen: list = []
    write, prepare = store.PreparedSpill.write, worker.prepare_tape
    monkeypatch.setattr(store.PreparedSpill, "write", lambda self, part: seen.append(1) or write(self, part))
    monkeypatch.setattr(worker, "prepare_tape", lambda path, work: seen.append(path) or prepare(path, work))
    return seen


def _no_temp_files(home: Path) -> None:
    assert not [p for p in home.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture
def team(tmp_path, monkeypatch, capsys) -> tuple[Path, list[list[dict]], list[dict], Path]:
    """A tape source holding the fixture sessions' tapes and a big one made of them; the repo
    reading it (every harness off)."""
    fixtures = _fixture_tapes(tmp_path, monkeypatch, capsys)
    team = tmp_path / "team"
    for evs in fixtures:
        writer.write_tape(team, evs)
    big = _big(fixtures)
    writer.write_tape(team, big)
    repo = make_repo(tmp_path / "repo", sources=team)
    monkeypatch.chdir(repo)
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)   # the boilerplate table is compared too
    return team, fixtures, big, repo


def test_a_streamed_tape_indexes_what_the_whole_tape_indexes(team, tmp_path, monkeypatch, capsys):
    team_dir, fixtures, big, repo = team
    big_path = writer.write_tape(team_dir, big).path
    bound = reader.content_bound(big_path)
    assert bound > 2 << 20   # a few MB of JSONL
    assert all(reader.content_bound(p) < bound for p in team_dir.glob("*.zst") if p != big_path)

    monkeypatch.setattr(reader, "STREAM_MIN_BYTES", 1 << 62)   # every tape read whole
    seen = _count_parts(monkeypatch)
    res = _ingest(tmp_path / "whole", monkeypatch, capsys)
    assert res["error_count"] == 0 and res["tapes_indexed"] == len(fixtures) + 1 and not seen
    whole = _index(repo, tmp_path / "whole")
    assert whole["boilerplate"] and whole["edges"]

    # the big tape streamed, cut into parts of PART events (counts updated after every part)
    monkeypatch.setattr(reader, "STREAM_MIN_BYTES", bound)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", PART)
    monkeypatch.setattr(store, "BOILERPLATE_DEFER", 1)
    res = _ingest(tmp_path / "streamed", monkeypatch, capsys)
    assert res["error_count"] == 0 and res["tapes_indexed"] == len(fixtures) + 1
    assert [s for s in seen if s != 1] == [str(big_path)]
    assert seen.count(1) >= len(big) // (2 * PART)   # many parts
    assert _index(repo, tmp_path / "streamed") == whole
    _no_temp_files(tmp_path / "streamed")

    # every tape streamed, each committed alone
    seen.clear()
    monkeypatch.setattr(reader, "STREAM_MIN_BYTES", 0)
    res = _ingest(tmp_path / "all", monkeypatch, capsys)
    assert res["error_count"] == 0 and len([s for s in seen if s != 1]) == len(fixtures) + 1
    assert _index(repo, tmp_path / "all") == whole
    _no_temp_files(tmp_path / "all")


def _named(directory: Path, raw: bytes, name: str | None = None) -> Path:
    """``raw`` JSONL compressed as the writer compresses it, named by its hash (or ``name``)."""
    data = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(raw)
    path = directory / f"{name or xxhash.xxh3_128_hexdigest(raw)}{writer.SUFFIX}"
    path.write_bytes(data)
    return path


def test_a_corrupt_big_tape_is_refused_whole_and_costs_only_itself(team, tmp_path, monkeypatch, capsys):
    team_dir, fixtures, big, repo = team
    big_path = writer.write_tape(team_dir, big).path
    monkeypatch.setattr(reader, "STREAM_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", PART)
    assert reader.content_bound(big_path) >= reader.STREAM_MIN_BYTES

    # the good tapes alone first: what the index must hold afterwards
    res = _ingest(tmp_path / "good", monkeypatch, capsys)
    assert res["error_count"] == 0
    good = _index(repo, tmp_path / "good")

    bad: dict[Path, str] = {}   # the bad tapes, each with what its error must name
    mid = len(big) // 2
    # a type-confused event in the middle (its name is its content's hash)
    confused = json.loads(json.dumps(_big(fixtures, "confused")))
    n = next(i for i in range(mid, len(confused)) if confused[i].get("k") == "code.edit")
    confused[n]["after_range"] = ["1", "2"]
    bad[writer.write_tape(team_dir, confused).path] = "'after_range'"
    # content that does not hash to its name (one text changed in the middle)
    lines = writer.encode_events(_big(fixtures, "misnamed")).split(b"\n")
    other = lines[:]
    other[mid] = writer.encode_event(dict(json.loads(lines[mid]), t="2099-01-01T00:00:00Z"))
    bad[_named(team_dir, b"\n".join(other), "ab" * 16)] = "does not match the tape's name"
    # a line that is not JSON, deep in the tape
    broken = writer.encode_events(_big(fixtures, "broken")).split(b"\n")
    broken[mid + 3] = broken[mid + 3][:-7]
    bad[_named(team_dir, b"\n".join(broken))] = "bad JSON"
    # a truncated frame
    cut = writer.write_tape(tmp_path, _big(fixtures, "cut")).path
    data = cut.read_bytes()
    (team_dir / cut.name).write_bytes(data[:len(data) * 2 // 3])
    bad[team_dir / cut.name] = "zstd"
    for p in bad:
        assert reader.content_bound(p) >= reader.STREAM_MIN_BYTES   # each is streamed

    res = _ingest(tmp_path / "mixed", monkeypatch, capsys)
    errors = {e["error"]["path"]: e["error"] for e in res["errors"]}
    assert set(errors) == {str(p) for p in bad}
    for p, needle in bad.items():
        err = errors[str(p)]
        with pytest.raises(CorruptTape) as whole:
            reader.read_tape(p)
        assert err["code"] == "corrupt-tape" and needle in err["message"], err
        if needle != "zstd":   # (the whole read says the same; of zstd's own errors, in its words)
            assert (err["message"], err["line"]) == (whole.value.message, whole.value.line)
    assert errors[str(next(iter(bad)))]["line"] == n + 1
    mixed = _index(repo, tmp_path / "mixed")
    assert mixed.pop("errors") and good.pop("errors") == []
    assert mixed == good   # nothing of the bad tapes, everything of the others
    _no_temp_files(tmp_path / "mixed")


_KILL_IN_COMMIT = """
import os, signal, sys
from engram.index import store
from engram.ingest import worker
from engram.tape import reader
reader.STREAM_MIN_BYTES = 1 << 20
worker.STREAM_CHUNK_EVENTS = %d
store.BOILERPLATE_MIN = 2   # (as the test's own ingests)
parts = store.PreparedSpill.parts
def killed(self):
    for i, part in enumerate(parts(self)):
        if i == 5:   # in the middle of the big tape's transaction
            os.kill(os.getpid(), signal.SIGKILL)
        yield part
store.PreparedSpill.parts = killed
from engram.cli import main
sys.exit(main(["ingest"]))
""" % PART


def test_kill_9_in_a_streamed_tapes_commit_leaves_it_for_the_next_ingest(team, tmp_path, monkeypatch, capsys):
    team_dir, fixtures, big, repo = team
    big_id = writer.write_tape(team_dir, big).tape_id
    monkeypatch.setattr(reader, "STREAM_MIN_BYTES", 1 << 62)
    _ingest(tmp_path / "whole", monkeypatch, capsys)
    whole = _index(repo, tmp_path / "whole")

    home = tmp_path / "killed"
    env = {**os.environ, "ENGRAM_HOME": str(home), "ENGRAM_NO_PROGRESS": "1"}
    run = subprocess.run([sys.executable, "-c", _KILL_IN_COMMIT], cwd=repo, env=env,
                         capture_output=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()
    assert list(home.rglob("*.tmp"))   # its prepared parts and events, left behind
    monkeypatch.setenv("ENGRAM_HOME", str(home))
    assert main(["tapes"]) == 0
    ids = {t["tape_id"] for t in json.loads(capsys.readouterr().out)}
    assert big_id not in ids   # not indexed, not half indexed

    monkeypatch.setattr(reader, "STREAM_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", PART)
    res = _ingest(home, monkeypatch, capsys)
    assert res["error_count"] == 0 and res["tapes_indexed"] >= 1
    done = _index(repo, home)
    # (the fixture tapes committed before the kill: the same rows, the lineage pass run after)
    assert done == whole
    _no_temp_files(home)
