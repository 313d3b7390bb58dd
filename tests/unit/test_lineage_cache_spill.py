"""The ingest cache holds only ``LINES_IN_MEMORY`` bytes of kept lines and ``PRINTS_IN_MEMORY``
of fingerprint arrays in memory; past that it keeps them in a private temp file
(``spill.SpillFile``) and reads them back when asked. What it answers is the same either way, and
so are the lineage rows of a run that spilled everything."""

from __future__ import annotations

import os

import numpy as np
from claude_log import run_json
from test_lineage import PARSE_V3, explain
from test_lineage_bounded import _indexed, _tables, _untimed

from engram import fingerprint
from engram.digest import text_key
from engram.lineage import cache
from engram.spill import SpillFile
from engram.tape.writer import encode_event


def test_spill_file_reads_back_what_was_appended(tmp_path):
    spill = SpillFile(tmp_path)
    a = spill.append(b"first line\n")
    arr = np.arange(1000, dtype=np.int64) * 7919
    b = spill.append(arr, arr[::-1].copy())
    c = spill.append(b"")
    d = spill.append("ünïcode\n".encode())
    assert spill.read(a, 11) == b"first line\n"
    back = np.empty(2000, np.int64)
    spill.read_into(b, back)
    assert (back[:1000] == arr).all() and (back[1000:] == arr[::-1]).all()
    assert c == d and spill.read(d, len("ünïcode\n".encode())).decode() == "ünïcode\n"
    assert os.listdir(tmp_path) == []   # no name: nothing left behind, even after a kill
    spill.close()


def _events(n: int) -> list[dict]:
    out = [{"k": "meta", "session": "s", "t": "2026-11-26T00:00:00Z"}]
    for i in range(1, n):
        if i % 3:
            out.append({"k": "code.edit", "t": f"2026-11-26T00:00:{i % 60:02d}Z", "file": f"f{i}.py",
                        "before_text": f"x_{i} = {i}\n" * (i % 7), "after_text": f"y_{i} = {i}\n"})
        else:
            out.append({"k": "msg.user", "t": "2026-11-26T00:00:00Z", "text": f"prompt {i}"})
    return out


def test_spilled_lines_and_prints_answer_as_held_ones(monkeypatch):
    events = _events(300)
    texts = [f"value_{i} = compute(item, {i})\n" * (20 + i) for i in range(60)]
    held, spilled = cache.IngestCache(), cache.IngestCache()
    monkeypatch.setattr(cache, "LINES_IN_MEMORY", 0)
    monkeypatch.setattr(cache, "PRINTS_IN_MEMORY", 0)
    spilled.keep_tape("t1", events)
    spilled.prefetch(texts[:30])            # kept as the fingerprint made them, then made distinct
    monkeypatch.undo()
    held.keep_tape("t1", events)
    held.prefetch(texts[:30])

    assert isinstance(spilled.lines["t1"], cache.SpilledLines) and not spilled.prints
    assert spilled.lines_bytes == held.lines_bytes and spilled.prints_bytes == held.prints_bytes
    assert dict(spilled.lines["t1"]) == held.lines["t1"]
    assert set(spilled.lines["t1"]) == {o for o, ev in enumerate(events) if cache.wanted(o, ev)}
    skipped = next(o for o, ev in enumerate(events) if not cache.wanted(o, ev))
    assert skipped not in spilled.lines["t1"] and "1" not in spilled.lines["t1"]
    assert 1 in spilled.lines["t1"] and 10_000 not in spilled.lines["t1"]
    assert spilled.lines["t1"][1] == encode_event(events[1])
    assert spilled.for_worker()["head_input"] == held.for_worker()["head_input"]
    for t in texts:   # kept (raw, then distinct: the spilled entry replaced), and not kept
        for _ in range(2):
            (sw, sk), (hw, hk) = spilled.text_prints(t), held.text_prints(t)
            assert (sw == hw).all() and (sk == hk).all() and sw.dtype == hw.dtype == np.int64
    assert spilled.prints_bytes == held.prints_bytes
    made = [fingerprint.fingerprint_batch([t], keep_kgrams=[True])[0] for t in texts[:2]]
    assert (spilled.text_prints(texts[0])[0] == np.unique(made[0].hashes)).all()
    got = spilled.texts_prints(texts[25:35] + texts[:3])
    want = held.texts_prints(texts[25:35] + texts[:3])
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(got, want))
    spilled.close()
    assert not spilled.lines and spilled.text_prints(texts[0])[0].tolist() == want[-3][0].tolist()


def test_prints_cap_counts_spilled_arrays(monkeypatch):
    """``MAX_PRINTS_BYTES`` bounds what is kept, spilled or not: past it, a text is not kept (its
    arrays are made again when asked for) and a replaced entry leaves the count."""
    texts = [f"name_{i} = other(thing, {i})\n" * 50 for i in range(10)]
    monkeypatch.setattr(cache, "PRINTS_IN_MEMORY", 0)
    one = cache.IngestCache()
    one.prefetch(texts[:1])
    size = one.prints_bytes
    monkeypatch.setattr(cache, "MAX_PRINTS_BYTES", size * 3)
    kept = cache.IngestCache()
    kept.prefetch(texts)
    assert kept.prints_bytes <= size * 3
    assert sum(kept._has_print(text_key(t)) for t in texts) == 3
    for t in texts:
        w, k = kept.text_prints(t)
        f = fingerprint.fingerprint_batch([t], keep_kgrams=[True])[0]
        assert (w == np.unique(f.hashes)).all() and (k == np.unique(f.kgrams)).all()
    assert kept.prints_bytes <= size * 3


def test_a_run_that_spills_everything_writes_the_same_rows(world, capsys, monkeypatch):
    w = world
    whole, answer = _indexed(w, capsys)
    monkeypatch.setattr(cache, "LINES_IN_MEMORY", 0)
    monkeypatch.setattr(cache, "PRINTS_IN_MEMORY", 0)
    spills = []
    real = cache.SpillFile

    def counted(directory):
        spills.append(directory)
        return real(directory)

    monkeypatch.setattr(cache, "SpillFile", counted)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert spills   # (what makes this test matter)
    assert _tables(w) == whole
    assert _untimed(explain(capsys, w, "parsers.py", PARSE_V3)) == answer
