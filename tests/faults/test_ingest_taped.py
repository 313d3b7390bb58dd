"""A source sealed whole as new tapes (no cursor, quiet) has its tapes made by the parse
(``worker._taped``: compressed into temp files of their directories, adopted by the ingest), its
events cut to what the index reads: it must leave exactly the index and the tape files of the
ingest that stages the tapes itself — in the worker, parsed in-process by the indexing process
(``steal``), with a corrupt tape already there under a session's name (repaired from the log), and
when a tape cannot be made by the parse (the ingest then stages it, and reports what fails)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from test_ingest_stream import _index  # every table and tape file
from test_ingest_stream import _setup as _stream_setup

from engram import adapters
from engram.cli import main
from engram.index import store
from engram.ingest import ingestor, worker
from engram.lineage.cache import wanted
from engram.tape import writer

HARNESS = Path(__file__).resolve().parents[1] / "data" / "harness"


def _setup(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """The Claude Code fixture logs as a repository's only source (``test_ingest_stream``'s)."""
    root, _logs = _stream_setup(tmp_path)
    monkeypatch.chdir(root)
    return root, Path(os.environ["ENGRAM_HOME"])


def _run(home: Path, capsys, clean: bool = True) -> dict:
    if clean:
        shutil.rmtree(home / "tapes", ignore_errors=True)
    assert main(["ingest", "--rebuild", "--seal"]) == 0
    return json.loads(capsys.readouterr().out)


def test_parse_many_makes_the_tapes_the_ingest_would_stage(tmp_path):
    logs = sorted((HARNESS / "claude_code").glob("*.jsonl"))
    items = [("claude_code", str(p)) for p in logs]
    res = worker.parse_many(items, "permissive", tapes=(str(tmp_path), [True] * len(items), True))
    n = 0
    for log, r in zip(logs, res):
        whole = adapters.get("claude_code").parse_source(log)
        assert r[0] == "ok" and len(r) == 5 and r[3] is None
        for sess, full, (ref, tmp, kept) in zip(r[1].sessions, whole.sessions, r[4]):
            d = tmp_path / "own"
            own = writer.write_tape(d, full.events)
            assert (ref.tape_id, ref.n_events, ref.raw_bytes) == (own.tape_id, own.n_events, own.raw_bytes)
            assert Path(tmp).read_bytes() == own.path.read_bytes()   # the very file
            assert Path(tmp).stat().st_mode & 0o777 == 0o600
            assert sess.events[0] == full.events[0]
            assert sess.events[1:] == [store.light_event(e) for e in full.events[1:]]
            assert kept == {o: writer.encode_event(e) for o, e in enumerate(full.events)
                            if wanted(o, e)}
            os.unlink(tmp)
            n += 1
    assert n >= 8
    # not asked for (a cursor, or not quiet): whole events, no tapes
    res = worker.parse_many(items[:1], "permissive", tapes=(str(tmp_path), [False], True))
    assert len(res[0]) == 4 and res[0][1].sessions[0].events[1] == adapters.get(
        "claude_code").parse_source(logs[0]).sessions[0].events[1]


def test_a_tape_that_cannot_be_made_by_the_parse_is_staged_by_the_ingest(tmp_path, monkeypatch):
    log = sorted((HARNESS / "claude_code").glob("*.jsonl"))[0]
    made = []
    real = writer.write_streamed

    def fail_second(enc, directory=None):
        if made:
            enc.close()
            raise OSError(28, "No space left on device", str(directory))
        made.append(1)
        return real(enc, directory)

    monkeypatch.setattr(writer, "write_streamed", fail_second)
    two = [("claude_code", str(log))] * 2
    res = worker.parse_many(two, "permissive", tapes=(str(tmp_path), [True, True], False))
    assert len(res[0]) == 5 and len(res[1]) == 4      # the second: whole events, no tape
    assert res[1][1].sessions[0].events[1] == adapters.get("claude_code").parse_source(
        log).sessions[0].events[1]
    tmps = [t for _r, t, _k in res[0][4] if t]
    assert len(tmps) == 1 and not res[0][4][0][2]      # (keep False: no lines)
    assert list(Path(os.environ["ENGRAM_HOME"]).rglob("*.tmp")) == [Path(tmps[0])]


def test_tapes_made_by_the_parse_index_what_the_ingest_stages(tmp_path, monkeypatch, capsys):
    root, home = _setup(tmp_path, monkeypatch)
    made = []
    real = worker._taped
    monkeypatch.setattr(worker, "_taped", lambda *a: made.append(1) or real(*a))
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)    # a boilerplate table to compare
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)   # in-process: staged here
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["sessions"] == 8 and res["tapes_written"] == 8
    plain = _index(root, home)
    assert not made and len(plain["tape files"]) == 8 and plain["boilerplate"]

    # in the worker (the first groups), and in this process while the worker is busy
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(ingestor, "GROUP_SOURCES", 1)
    for ahead in (1 << 30, 1):   # all sent to the worker / one at a time, the rest stolen
        monkeypatch.setattr(ingestor, "PROCESS_AHEAD_BYTES", ahead)
        made.clear()
        res = _run(home, capsys)
        assert res["error_count"] == 0 and res["sessions"] == 8 and res["tapes_written"] == 8
        assert _index(root, home) == plain
    assert made   # (in this process: the worker's calls are not seen here)
    assert not list(home.rglob("*.tmp"))

    # a corrupt tape already there under a session's name: written again from its log
    victim = sorted((home / "tapes").glob("*.zst"))[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    res = _run(home, capsys, clean=False)
    assert res["error_count"] == 0 and res.get("tapes_repaired") == 1
    assert _index(root, home) == plain
    assert not list(home.rglob("*.tmp"))


def test_the_last_batches_shrink_and_index_the_same(tmp_path, monkeypatch, capsys):
    """With a worker, once what is left is less than the batch, a batch is committed at
    ``TAIL_MIN_BYTES``: the last ones halve (the last commit is short); the same index."""
    root, home = _setup(tmp_path, monkeypatch)
    sizes = []
    real = ingestor.Ingestor._commit
    monkeypatch.setattr(ingestor.Ingestor, "_commit",
                        lambda self, batch, *a: sizes.append(len(batch.sessions)) or real(self, batch, *a))
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    _run(home, capsys)
    plain = _index(root, home)
    assert sizes[:1] == [8]
    sizes.clear()
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(ingestor, "TAIL_MIN_BYTES", 1)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["sessions"] == 8
    assert _index(root, home) == plain
    got = [n for n in sizes if n]
    assert sum(got) == 8 and len(got) >= 2, sizes   # (not one batch of 8)
