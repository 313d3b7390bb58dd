"""What a streamed session's index transaction holds from part to part (``Batch._commit_parts``)
does not grow with the session: the hashes whose k-grams the ingest cache keeps (``keep``) are let
go once their blocks are inserted, and the waiting boilerplate keys are made distinct in place
(``_drained``) — the same index and the same kept prints as before."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
from test_ingest_stream import _setup  # the real Claude Code fixture logs in a repo of their own

from engram.cli import main
from engram.engine import Engine
from engram.index import store
from engram.ingest import ingestor, worker
from engram.lineage import cache as lcache
from engram.sortedset import uniq

TABLES = ("tapes", "events", "blocks", "refs", "fingerprints", "block_lines", "boilerplate",
          "edges", "tombstones", "continuations")


def test_drained_is_the_distinct_union_and_empties_the_list():
    rng = np.random.default_rng(5)
    for n_parts in (1, 2, 7):
        parts = [rng.integers(-2**31, 2**31 - 1, rng.integers(0, 500), dtype=np.int64).astype(np.int32)
                 for _ in range(n_parts)]
        parts += [parts[0][:10].copy()]   # repeats across parts
        want = uniq(np.concatenate(parts))
        got = store._drained(parts)
        assert parts == []
        assert got.dtype == np.int32 and np.array_equal(got, want)
    assert np.array_equal(store._drained([np.array([3], np.int32)]), [3])


def _ingest(root: Path, home: Path, capsys) -> tuple[dict, list]:
    shutil.rmtree(home / "tapes", ignore_errors=True)
    kept: list[bytes] = []
    real = lcache.IngestCache.keep_prints

    def spy(self, key, hashes, kgrams):
        kept.append(key)
        return real(self, key, hashes, kgrams)

    lcache.IngestCache.keep_prints = spy
    try:
        assert main(["ingest", "--rebuild", "--seal"]) == 0
    finally:
        lcache.IngestCache.keep_prints = real
    res = json.loads(capsys.readouterr().out)
    assert res["error_count"] == 0 and res["streamed"] == res["sessions"] > 0
    eng = Engine(root)
    try:
        conn = eng.conn()
        tables = {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}"))) for t in TABLES}
    finally:
        eng.close()
    return tables, kept


def test_keep_is_let_go_part_by_part_with_the_same_index_and_kept_prints(tmp_path, monkeypatch, capsys):
    root, _logs = _setup(tmp_path)
    monkeypatch.chdir(root)
    home = Path(os.environ["ENGRAM_HOME"])
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", 3)   # many parts a session
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)
    monkeypatch.setattr(store, "BOILERPLATE_DEFER", 7)

    held = []
    real = store._pending_only

    def pruned(keep, queued):
        real(keep, queued)
        held.append((len(keep), len(queued)))

    monkeypatch.setattr(store, "_pending_only", pruned)
    after, kept_after = _ingest(root, home, capsys)
    assert held and all(n <= q for n, q in held)   # only hashes of blocks still queued stay

    monkeypatch.setattr(store, "_pending_only", lambda keep, queued: None)   # keep held whole
    before, kept_before = _ingest(root, home, capsys)
    assert after == before and after["boilerplate"]
    assert kept_after == kept_before and kept_after
