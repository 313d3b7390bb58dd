"""The lineage linker fetches postings a bounded number of rows at a time: the boilerplate hashes'
postings (dropped once fetched anyway) are not fetched at all, and the others come
``FETCH_HASHES`` hashes at a time, a key's postings never split between two fetches. Neither may
change a row: the edges and tombstones written, in the same order, are those of fetching every
hash's postings in one chunk and filtering them afterwards."""

from __future__ import annotations

import numpy as np
from claude_log import run_json
from test_lineage import PARSE_V3, explain
from test_lineage_bounded import _history, _tables, _untimed

from engram.index import queries, store
from engram.lineage import edges


def test_skipped_postings_not_fetched_and_chunks_change_no_row(world, capsys, monkeypatch):
    w = world
    _history(w)
    # a low boilerplate floor: this small history then has boilerplate hashes (shared lines)
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 3)
    fetched: list[np.ndarray] = []
    skipped: list[np.ndarray] = []
    postings, unskipped = edges.postings, edges._unskipped

    def counted_postings(conn, hashes, cache=None):
        fetched.append(np.asarray(hashes).copy())
        return postings(conn, hashes, cache)

    def counted_unskipped(hashes, skip):
        skipped.append(skip.copy())
        return unskipped(hashes, skip)

    monkeypatch.setattr(edges, "postings", counted_postings)
    # before: every hash fetched in one chunk, the skipped ones dropped after the fetch
    monkeypatch.setattr(edges, "_unskipped", lambda hashes, skip: hashes)
    monkeypatch.setattr(edges, "FETCH_HASHES", 1 << 30)
    run_json(capsys, "ingest", "--seal")
    whole = _tables(w)
    assert whole["edges"] and whole["tombstones"]
    answer = _untimed(explain(capsys, w, "parsers.py", PARSE_V3))
    before = np.concatenate(fetched)

    fetched.clear()
    monkeypatch.setattr(edges, "_unskipped", counted_unskipped)
    monkeypatch.setattr(edges, "FETCH_HASHES", 1)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    after = np.concatenate(fetched)
    skip = np.concatenate(skipped)
    assert len(skip) and len(after) < len(before)            # boilerplate there, not fetched
    assert not np.isin(queries.index_keys(after), queries.index_keys(skip)).any()
    assert len(fetched) > 1 and max(len(f) for f in fetched) == 1   # one hash a fetch
    assert _tables(w) == whole
    assert _untimed(explain(capsys, w, "parsers.py", PARSE_V3)) == answer


def test_key_chunks_never_split_a_key():
    shift = 64 - queries.INDEX_HASH_BITS
    # three hashes of one key, then two of another, then one alone (sorted, distinct)
    hashes = np.array([(5 << shift) + 1, (5 << shift) + 2, (5 << shift) + 3,
                       (9 << shift) + 1, (9 << shift) + 7, (11 << shift) + 4], dtype=np.int64)
    assert list(edges._key_chunks(hashes, 1)) == [(0, 3), (3, 5), (5, 6)]
    assert list(edges._key_chunks(hashes, 4)) == [(0, 5), (5, 6)]
    assert list(edges._key_chunks(hashes[:0], 4)) == []


def test_unskipped_drops_a_key_only_when_its_mapped_hash_is_skipped():
    shift = 64 - queries.INDEX_HASH_BITS
    lo, hi, other = (5 << shift) + 1, (5 << shift) + 2, 9 << shift
    hashes = np.array([lo, hi, other], dtype=np.int64)
    # a key's rows map back to its largest hash: skipping that one drops the whole key
    assert edges._unskipped(hashes, np.array([hi], np.int64)).tolist() == [other]
    # skipping a smaller hash of the key drops nothing (its rows would map to ``hi``, kept)
    assert edges._unskipped(hashes, np.array([lo], np.int64)).tolist() == [lo, hi, other]
    assert edges._unskipped(hashes, np.zeros(0, np.int64)).tolist() == [lo, hi, other]
