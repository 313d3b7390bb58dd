"""Lore: notes as team memory. Notes are recalled by ``engram search --kind note`` (semantically
when vectors exist), carry the feedback confidence model (``--min-confidence``), and two notes of
one category whose texts embed ≥ 0.92 alike are recalled as one (both sources kept, confidence
+0.10). Real notes (Engine.add_note), real model on CPU."""

from __future__ import annotations

import pytest
from claude_log import World, run_json

from engram.embed.model import available

CODE = ("def retry_upload(client, blob, attempts=5):\n    for i in range(attempts):\n"
        "        try:\n            return client.put(blob)\n        except TimeoutError:\n"
        "            client.sleep(2 ** i)\n    raise RuntimeError('upload failed')\n")


@pytest.mark.skipif(not available()[0], reason="embed extra not installed")
def test_notes_recall_merge_and_confidence(tmp_path, monkeypatch, capsys):
    from engram.engine import Engine

    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    s = w.session(name="writer")
    s.user("add a retrying upload")
    s.write("upload.py", CODE)
    s.say("Added retry_upload with exponential backoff.").save()
    w.checkout()
    with open(w.root / ".engram" / "config.yml", "a") as f:
        f.write("embedding:\n  device: cpu\n")
    run_json(capsys, "ingest", "--seal")
    eng = Engine(w.root)
    try:
        a = eng.add_note("upload.py", 1, 7, "decision",
                         "Uploads retry with exponential backoff because the storage API times out "
                         "under load.")
        b = eng.add_note("upload.py", 1, 7, "decision",
                         "Uploads retry with an exponential backoff: the storage API times out "
                         "under load.", t="2026-01-05T10:00:00.000Z")  # cosine 0.98 to a's
        c = eng.add_note("upload.py", 1, 7, "warning",
                         "Uploads retry with exponential backoff because the storage API times out "
                         "under load.", t="2026-01-05T11:00:00.000Z")
    finally:
        eng.close()
    assert len({a["tape_id"], b["tape_id"], c["tape_id"]}) == 3
    assert run_json(capsys, "embed")["embedded"] > 0

    res = run_json(capsys, "search", "why do uploads back off and retry", "--kind", "note")
    notes = res["results"]
    assert res["semantic"].startswith("on (") and all(r["harness"] == "engram" for r in notes)
    decisions = [r for r in notes if r["label"].startswith("[decision]")]
    warnings = [r for r in notes if r["label"].startswith("[warning]")]
    assert len(decisions) == 1 and len(warnings) == 1  # the two decisions are one lore item
    merged = decisions[0]["merged"]
    assert len(merged) == 1 and {decisions[0]["tape_id"], merged[0]["tape_id"]} == \
        {a["tape_id"], b["tape_id"]}
    assert decisions[0]["confidence"] == pytest.approx(0.6)  # 0.5 + 0.10
    assert "merged" not in warnings[0] and warnings[0]["confidence"] == 0.5

    # the confidence model: two helpful verdicts lift the warning to 0.66
    run_json(capsys, "feedback", c["tape_id"], "helpful")
    run_json(capsys, "feedback", c["tape_id"], "helpful")
    top = run_json(capsys, "search", "why do uploads back off and retry", "--kind", "note",
                   "--min-confidence", "0.65")["results"]
    assert [r["tape_id"] for r in top] == [c["tape_id"]]
    assert top[0]["confidence"] == pytest.approx(0.66) and top[0]["validations"] == 2
