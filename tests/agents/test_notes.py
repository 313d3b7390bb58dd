"""Notes tied to code: written as tapes, found by explain by fingerprint (after the code moves),
stale once the lines change, tombstones once they are gone; bad input is one clear line."""

from __future__ import annotations

import os
import stat

import pytest
from conftest import NET, run, run_json

from engram.tape import read_tape

WARNING = "retries must stay 3: the load balancer drops a 4th connection attempt"


def _note_sessions(res):
    return [s for s in res["sessions"] if s.get("note")]


def test_note_is_a_private_redacted_tape_and_explain_shows_it_first(world, capsys):
    secret = "sk-ant-api03-" + "Zx9kQ2vLm8pR4tW7" * 5
    res = run_json(capsys, "note", "net.py:4-12", "--kind", "warning", f"{WARNING} (key {secret})")
    assert res["note"]["kind"] == "warning" and res["note"]["stale"] is False
    tape = res["path"]
    assert stat.S_IMODE(os.stat(tape).st_mode) == 0o600
    events = read_tape(tape)
    assert events[0]["harness"] == "engram" and events[0]["tier"] == "human"
    assert events[1]["k"] == "code.read" and "def connect(host, port, retries=3):" in events[1]["text"]
    assert secret not in repr(events) and "[REDACTED:" in events[0]["note"]["text"]

    out = run_json(capsys, "explain", "net.py:4-12")
    first = out["sessions"][0]
    assert first["harness"] == "engram" and first["note"]["kind"] == "warning"
    assert first["note"]["text"].startswith(WARNING)
    assert first["note"]["stale"] is False and first["note"]["at"] == [4, 12]
    # the session that wrote the code is still there, after the warning
    assert any(s["harness"] == "claude_code" for s in out["sessions"][1:])


def test_note_follows_moved_code_and_goes_stale_then_tombstone(world, capsys):
    run_json(capsys, "note", "net.py:4-12", "--kind", "decision", "three retries, chosen with ops")
    net = world.root / "net.py"
    # unrelated lines above: the code moves down 4 lines
    net.write_text("# header\nimport os\nimport sys\n\n" + NET)
    out = run_json(capsys, "explain", "net.py:8-16")
    note = _note_sessions(out)[0]["note"]
    assert note["stale"] is False and note["at"] == [8, 16] and note["range"] == [4, 12]

    # moved into another file: still found there by fingerprint
    (world.root / "client.py").write_text(NET.split("\n\n\n")[1] + "\n")
    moved = run_json(capsys, "explain", "client.py:1-10")
    assert _note_sessions(moved) and _note_sessions(moved)[0]["note"]["stale"] is False

    # a line of it changed: stale, with what changed
    net.write_text(NET.replace("timeout=5.0", "timeout=30.0"))
    out = run_json(capsys, "explain", "net.py:4-12")
    note = _note_sessions(out)[0]["note"]
    assert note["stale"] is True and note["tombstone"] is False
    assert "-            return socket.create_connection((host, port), timeout=5.0)" in note["changed"]["diff"]
    assert note["changed"]["lines_kept"] == 8

    # the code is gone from the file: a tombstone in brief
    net.write_text(NET.split("def connect")[0] + "def checksum" + NET.split("def checksum")[1])
    res = run_json(capsys, "brief", "net.py", "--json")
    item = next(i for i in res["items"] if i["kind"] == "decision")
    assert item["tombstone"] is True and item["stale"] is True


def test_no_note_on_unrelated_span(world, capsys):
    run_json(capsys, "note", "net.py:4-12", "--kind", "warning", WARNING)
    out = run_json(capsys, "explain", "net.py:16-20")
    assert _note_sessions(out) == []


def test_related_names_an_indexed_tape_event(world, capsys):
    tapes = run_json(capsys, "tapes")
    tid = tapes[0]["tape_id"]
    res = run_json(capsys, "note", "net.py:16-20", "--kind", "discovery", "checksum is a Java-ish hash",
                   "--related", f"{tid[:12]}#2")
    assert res["note"]["related"] == {"tape_id": tid, "event": 2}


@pytest.mark.parametrize("argv, message", [
    (["note", "nope.py:1-2", "text"], "nope.py: no such file"),
    (["note", "net.py:90-95", "text"], "line 90 is past the end of the file (19 lines)"),
    (["note", "net.py:4-6", "   "], "a note needs text"),
    (["note", "net.py:4-6", "x" * 1_048_576], "note text is 1048576 characters; at most 4000"),
    (["note", "net.py:4-6", "text", "--related", "abcdef123456#1"], "no indexed tape 'abcdef123456'"),
    (["note", "net.py:4-6", "text", "--related", "zz#x"], "--related wants TAPE#EVENT"),
])
def test_bad_notes_are_one_line_errors_and_write_nothing(world, capsys, argv, message):
    before = sorted((world.root / ".engram" / "tapes").glob("*.zst"))
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert err.startswith("Error: ") and err.count("\n") == 1 and message in err, err
    assert sorted((world.root / ".engram" / "tapes").glob("*.zst")) == before


def test_related_event_out_of_range(world, capsys):
    tid = run_json(capsys, "tapes")[0]["tape_id"]
    code, _out, err = run(capsys, "note", "net.py:4-6", "text", "--related", f"{tid}#9999")
    assert code == 1 and "has events 0-" in err


def test_one_line_span_is_stored_with_its_block(world, capsys):
    res = run_json(capsys, "note", "net.py:12", "--kind", "todo", "return a sentinel instead")
    events = read_tape(res["path"])
    assert events[0]["note"]["range"] == [12, 12]
    assert events[0]["note"]["stored_range"][0] <= 4 and "def connect" in events[1]["text"]
    out = run_json(capsys, "explain", "net.py:12")
    assert _note_sessions(out)[0]["note"]["kind"] == "todo"


def test_a_look_alike_span_does_not_show_the_note_and_reindenting_is_not_a_change(world, capsys):
    twin = NET.split("\n\n\n")[1].replace("def connect(", "def connect_again(") + "\n"
    (world.root / "net.py").write_text(NET + "\n\n" + twin)
    run_json(capsys, "note", "net.py:4-12", "--kind", "warning", WARNING)
    # the twin holds the same tokens but is not the noted code: no note there
    out = run_json(capsys, "explain", "net.py:22-30")
    assert _note_sessions(out) == []
    assert _note_sessions(run_json(capsys, "explain", "net.py:4-12"))
    # the noted code indented into a class: the same lines, not stale
    body = NET.split("\n\n\n")[1]
    (world.root / "net.py").write_text(
        "import socket\n\n\nclass Client:\n" + "\n".join("    " + ln for ln in body.split("\n")) + "\n")
    out = run_json(capsys, "explain", "net.py:5-13")
    note = _note_sessions(out)[0]["note"]
    assert note["stale"] is False and note["at"] == [5, 13]


def test_a_note_is_indexed_as_an_ingest_would_index_it(world, capsys):
    res = run_json(capsys, "note", "net.py:4-12", "--kind", "warning", WARNING)
    assert run_json(capsys, "ingest")["tapes_indexed"] == 0  # already there: nothing to add
    before = run_json(capsys, "explain", "net.py:4-12")
    run_json(capsys, "ingest", "--rebuild", "--seal")
    after = run_json(capsys, "explain", "net.py:4-12")
    for r in (before, after):
        r["stats"].pop("elapsed_ms", None)
    assert after == before and after["sessions"][0]["tape_id"] == res["tape_id"]
