"""A streamed session's events as the indexing reads them travel in a temp file a part at a time
(``worker.SpilledEvents``), not as one dict per event held by the parse worker and again by the
ingest: a sequence read in order, pickled as its path, private, swept once its writer is gone."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

from engram.ingest import worker
from engram.tape import writer


def _name(c: str, pid: int) -> str:
    return f".{c * 32}.{pid}-{writer._host_tag()}.events.tmp"


def test_spilled_events_read_as_the_list_they_were_written_from(tmp_path):
    events = [{"k": "msg.in", "t": f"2026-01-01T00:00:{i:02d}Z", "text": f"hello {i}"}
              for i in range(10)]
    sp = worker.SpilledEvents.create(tmp_path, _name("a", os.getpid()))
    for part in (events[:3], events[3:4], events[4:9], events[9:]):
        sp.write(part)
    sp.close()
    sp.meta = {"k": "meta", "session": "s"}
    whole = [sp.meta, *events]
    assert oct(os.stat(sp.path).st_mode & 0o777) == "0o600"
    assert len(sp) == 11 and list(sp) == whole
    assert [sp[i] for i in range(11)] == whole                 # in order, a part at a time
    assert [sp[i] for i in (7, 2, 10, 0, 5, -1)] == [whole[i] for i in (7, 2, 10, 0, 5, -1)]
    with pytest.raises(IndexError):
        sp[11]
    # across the pipe: the path, the meta and the count, not the events
    again = pickle.loads(pickle.dumps(sp))
    assert len(pickle.dumps(sp)) < 400 and list(again) == whole and again[4] == whole[4]
    again.discard()
    assert not os.path.exists(sp.path)
    worker.discard_spilled(again)   # twice: nothing to do
    worker.discard_spilled([{"k": "meta"}])   # a list: nothing to do


def test_spilled_events_are_swept_once_their_writer_is_gone(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    mine = worker.SpilledEvents.create(tmp_path, _name("a", os.getpid()))
    mine.close()
    gone = worker.SpilledEvents.create(tmp_path, _name("b", p.pid))
    gone.close()
    assert writer.sweep_temp(tmp_path) == [tmp_path / os.path.basename(gone.path)]
    assert os.path.exists(mine.path)
    mine.discard()


def test_a_streamed_log_comes_back_as_spilled_events(tmp_path, monkeypatch):
    """``worker.stream`` of a real Claude Code log: its events are a ``SpilledEvents`` whose
    items are those of the whole-session parse, cut to what the indexing reads."""
    from pathlib import Path

    from engram import adapters
    from engram.index import store

    data = Path(__file__).resolve().parents[1] / "data" / "harness"
    logs = sorted(p for p in data.rglob("*.jsonl") if "claude" in str(p).lower())
    assert logs
    log = max(logs, key=lambda p: p.stat().st_size)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", 2)
    res = worker.stream("claude_code", str(log), "permissive", str(tmp_path))
    assert res[0] == "ok", res
    out, spills, staged = res[1], res[2], res[4]
    try:
        events = out.sessions[0].events
        assert isinstance(events, worker.SpilledEvents)
        whole = adapters.get("claude_code").parse_source(log, mode="permissive").sessions[0].events
        assert len(events) == len(whole) > 3
        assert list(events)[1:] == [store.light_event(ev) for ev in whole[1:]]
        assert events[0] == whole[0]
    finally:
        worker.discard_spilled(out.sessions[0].events)
        for sp in spills:
            sp.discard()
        if staged and staged[1]:
            os.unlink(staged[1])
    assert not os.path.exists(events.path)
