"""What one streamed session's indexing transaction holds is bounded, and bounding it changes no
row: ``store.BlockIds`` holds the ids of at most ``RECENT`` blocks already in the table in its dict
and ``MEMO`` in its sorted arrays (``_seen``), forgetting the others (looked up again when seen
again), and the parts' boilerplate keys wait as 32-bit keys. Streamed in parts of
3 events with a memo of one block, the index and the tapes are those of the plain ingest."""

from __future__ import annotations

import os
from pathlib import Path

from test_ingest_stream import _index, _run, _setup

from engram.index import store
from engram.ingest import ingestor, worker


def test_a_forgetful_block_memo_changes_no_row(tmp_path, monkeypatch, capsys):
    root, _logs = _setup(tmp_path)
    monkeypatch.chdir(root)
    home = Path(os.environ["ENGRAM_HOME"])
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["sessions"] == 8
    plain = _index(root, home)
    assert plain["boilerplate"] and plain["blocks"]

    held, seen, looked = [], [], []
    real_id = store.BlockIds._id

    def watched(self, h, text, keep):
        was = h in self.ids or self._seen.get(h) is not None
        bid = real_id(self, h, text, keep)
        looked.append(was)
        held.append(len(self.ids) - len(self.new))   # ids of blocks not queued, in the dict
        seen.append(len(self._seen.ids))             # ... and in the arrays
        return bid

    monkeypatch.setattr(store.BlockIds, "_id", watched)
    monkeypatch.setattr(store.BlockIds, "MEMO", 1)
    monkeypatch.setattr(store.BlockIds, "RECENT", 1)
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", 3)
    monkeypatch.setattr(store, "BOILERPLATE_DEFER", 5)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["streamed"] == 8
    assert held and max(held) <= 1     # never more than RECENT blocks not queued ...
    assert max(seen) <= 1 and any(seen)  # ... nor MEMO in the arrays (which were used) ...
    assert looked.count(False) > len(plain["blocks"])   # ... so blocks were looked up again
    assert _index(root, home) == plain
