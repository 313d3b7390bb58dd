"""A streamed session's part is inserted ``PART_CHUNK_ROWS`` fingerprint rows at a time
(``Batch._commit_parts``): however a part's blocks are cut into chunks, the index is the same (the
packed rows of a key appended chunk by chunk in block order, the boilerplate counted once the part's
rows are in) and the ingest cache keeps the same prints."""

from __future__ import annotations

import os
from pathlib import Path

from test_commit_parts_bounded import _ingest
from test_ingest_stream import _setup  # the real Claude Code fixture logs in a repo of their own

from engram.index import store
from engram.ingest import ingestor, worker


def test_part_chunks_change_no_row(tmp_path, monkeypatch, capsys):
    root, _logs = _setup(tmp_path)
    monkeypatch.chdir(root)
    home = Path(os.environ["ENGRAM_HOME"])
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", 40)
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)

    chunks = []
    real = store.Batch._insert_chunk

    def counted(self, new_blocks, *a):
        chunks.append(len(new_blocks))
        return real(self, new_blocks, *a)

    monkeypatch.setattr(store.Batch, "_insert_chunk", counted)
    whole, kept_whole = _ingest(root, home, capsys)
    n_whole = len(chunks)
    monkeypatch.setattr(store, "PART_CHUNK_ROWS", 1)   # a block a chunk
    chunks.clear()
    cut, kept_cut = _ingest(root, home, capsys)
    assert len(chunks) > 3 * n_whole   # (a chunk ends at its first block with rows)
    assert cut == whole and whole["boilerplate"] and whole["blocks"]
    assert kept_cut == kept_whole and kept_whole
