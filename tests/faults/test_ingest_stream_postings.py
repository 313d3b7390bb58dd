"""The ingest cache decides up front whether a streamed session's fingerprint rows are kept for the
lineage pass: its prepared parts count the rows of their texts (``store.PreparedSpill.rows``, at
least as many as its commit inserts), and when those would not fit in ``MAX_POSTINGS`` beside the
rows kept already, none of the session's are kept (``IngestCache.expect_postings``) rather than
up to ``MAX_POSTINGS`` of them held until the cache gives up part of the way through. The lineage
pass then reads them from the index: the same rows, so the same tables."""

from __future__ import annotations

import os
from pathlib import Path

from test_ingest_stream import _index, _run, _setup

from engram.engine import Engine
from engram.index import store
from engram.ingest import ingestor
from engram.lineage import cache


def _packed(root: Path) -> list:
    eng = Engine(root)
    try:
        return sorted(eng.conn().execute("SELECT * FROM packed"))
    finally:
        eng.close()


def _watch(monkeypatch) -> list[dict]:
    """Per streamed session committed: its ``rows`` bound, the rows its commit inserted, and
    the rows the cache kept before and at most during it, and whether it kept any at the end."""
    seen: list[dict] = []
    real_parts, real_keep = store.Batch._commit_parts, cache.IngestCache.keep_postings

    def parts(self, rec, tape_row, next_event, blocks, keep, stats):
        before = stats["fingerprints"]
        c = self.cache
        s = {"bound": rec.prepared.rows, "kept_before": c._post_rows if c._post else 0, "max_kept": 0}
        seen.append(s)
        out = real_parts(self, rec, tape_row, next_event, blocks, keep, stats)
        s["inserted"] = stats["fingerprints"] - before
        s["kept_after"] = c._post is not None
        return out

    def keep(self, keys, blocks, lines, lo, hi):
        real_keep(self, keys, blocks, lines, lo, hi)
        if seen and self._post is not None:
            seen[-1]["max_kept"] = max(seen[-1]["max_kept"], self._post_rows)

    monkeypatch.setattr(store.Batch, "_commit_parts", parts)
    monkeypatch.setattr(cache.IngestCache, "keep_postings", keep)
    return seen


def test_a_streamed_session_that_cannot_be_kept_is_not_held(tmp_path, monkeypatch, capsys):
    root, _logs = _setup(tmp_path)
    monkeypatch.chdir(root)
    home = Path(os.environ["ENGRAM_HOME"])
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    seen = _watch(monkeypatch)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["streamed"] == 8
    whole, packed = _index(root, home), _packed(root)
    assert whole["edges"] and whole["tombstones"] and packed
    # the bound holds for every session, and with room for all, every row was kept
    assert all(s["bound"] >= s["inserted"] for s in seen)
    assert sum(s["inserted"] for s in seen) > 0 and all(s["kept_after"] for s in seen)

    # room for one row less than the last session with rows would need by its bound: it does
    # not fit (or an earlier one already did not), and nothing of it is held on the way
    last = max(i for i, s in enumerate(seen) if s["bound"])
    room = seen[last]["kept_before"] + seen[last]["bound"] - 1
    monkeypatch.setattr(cache, "MAX_POSTINGS", room)
    seen.clear()
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["streamed"] == 8
    gave_up = [i for i, s in enumerate(seen) if not s["kept_after"]]
    assert gave_up, "the cache kept every row: the test's room is too large"
    first = gave_up[0]
    assert first <= last and gave_up == list(range(first, len(seen)))
    assert all(s["max_kept"] == 0 for s in seen[first:])
    assert all(s["kept_before"] + s["bound"] <= room for s in seen[:first])
    assert _index(root, home) == whole and _packed(root) == packed


def test_expect_postings():
    import numpy as np

    c = cache.IngestCache()
    one = np.arange(3, dtype=np.int64)
    c.expect_postings(cache.MAX_POSTINGS)          # fits exactly: kept
    c.keep_postings(one, one + 10, one, 10, 12)
    assert c.kept_postings() is not None and c._post_rows == 3
    c.expect_postings(cache.MAX_POSTINGS - 3)      # still fits
    assert c.kept_postings() is not None
    c.expect_postings(cache.MAX_POSTINGS - 2)      # one row too many: nothing kept from now on
    assert c.kept_postings() is None and c.post_range is None
    c.keep_postings(one, one + 13, one, 13, 15)
    assert c.kept_postings() is None
