"""``engram/annotate``: the whole file's line annotation (per line the session that wrote it)."""

from __future__ import annotations

import json

import pytest
from claude_log import write_record
from lsp_helpers import open_doc, plain, request, wait_indexed
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

pytestmark = pytest.mark.e2e

SECOND = '''def checksum_of_rows(rows):
    """Add up every cell of every row, skipping cells that are not numbers."""
    total = 0
    for row in rows:
        for cell in row:
            if isinstance(cell, (int, float)):
                total += cell
    return total
'''

HAND = '''def typed_by_a_person(alpha, beta):
    gamma = alpha ** 3 - beta // 7
    return [gamma, alpha, beta, "written by hand"]
'''


def _second_session(ws) -> None:
    """A second Claude Code session (its own log) that wrote ``SECOND`` to ``rows.py``."""
    record = write_record(ws.cwd, "second-session-0001", "rows.py", SECOND,
                          text="Adding a checksum helper.", timestamp="2025-12-11T10:00:00.000Z")
    record["message"]["id"] = "msg_second"
    prompt = {"type": "user", "cwd": ws.cwd, "sessionId": "second-session-0001",
              "version": "2.0.64", "uuid": "u-second-1", "parentUuid": None,
              "timestamp": "2025-12-11T09:59:00.000Z",
              "message": {"role": "user", "content": "write a checksum helper for rows"}}
    record["parentUuid"] = "u-second-1"
    use_id = record["message"]["content"][-1]["id"]
    path = f"{ws.cwd}/rows.py"
    result = {"type": "user", "cwd": ws.cwd, "sessionId": "second-session-0001",
              "version": "2.0.64", "uuid": "u-second-2", "parentUuid": record["uuid"],
              "timestamp": "2025-12-11T10:00:01.000Z",
              "message": {"role": "user", "content": [
                  {"tool_use_id": use_id, "type": "tool_result",
                   "content": f"File created successfully at: {path}"}]},
              "toolUseResult": {"type": "create", "filePath": path, "content": SECOND,
                                "structuredPatch": [], "originalFile": None}}
    log = ws.log.parent / "second-session-0001.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in (prompt, record, result)))


QUOTED = '''def merge_overlapping_ranges(ranges):
    ordered = sorted(ranges, key=lambda pair: (pair[0], pair[1]))
    merged = [list(ordered[0])] if ordered else []
    for start, stop in ordered[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return [tuple(pair) for pair in merged]
'''


def _quoting_session(ws) -> None:
    """A third session that only quotes ``QUOTED`` (the user pastes it, the agent answers in
    prose, nothing is written): blame gives its lines to this session as a reader, and the
    annotation leaves them unmarked."""
    base = {"cwd": ws.cwd, "sessionId": "quoting-session-0001", "version": "2.0.64",
            "isSidechain": False, "userType": "external"}
    prompt = {**base, "type": "user", "uuid": "u-quote-1", "parentUuid": None,
              "timestamp": "2025-12-12T10:00:00.000Z",
              "message": {"role": "user", "content": "why is this slow?\n\n" + QUOTED}}
    answer = {**base, "type": "assistant", "uuid": "u-quote-2", "parentUuid": "u-quote-1",
              "timestamp": "2025-12-12T10:00:05.000Z",
              "message": {"model": "claude-sonnet-4-5", "id": "msg_quote", "type": "message",
                          "role": "assistant", "stop_reason": "end_turn",
                          "content": [{"type": "text", "text": "It sorts once; it is not slow."}]}}
    log = ws.log.parent / "quoting-session-0001.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in (prompt, answer)))


def _marked(result) -> dict[int, int]:
    """{0-based line: session index} of every line in a run."""
    out = {}
    for run in result["runs"]:
        for line in range(run["start"], run["end"] + 1):
            out[line] = run["session"]
    return out


async def test_annotate_marks_each_session_and_leaves_hand_written_lines(lsp, ws):
    _second_session(ws)
    client = await lsp(ws)
    await wait_indexed(client)
    hello = ws.files["hello.py"]
    text = hello + "\n" + HAND + "\n" + SECOND
    (ws.root / "mixed.py").write_text(text)
    uri = open_doc(client, ws, "mixed.py")
    result = plain(await request(client, "engram/annotate", {"textDocument": {"uri": uri}}))
    assert result["uri"] == uri and result["version"] == 1
    assert result["lines"] == text.count("\n")
    sessions = result["sessions"]
    # in the order they first appear in the file: hello.py's session, then the second one
    assert [s["label"] for s in sessions] == ["create hello.py, md and js",
                                              "write a checksum helper for rows"]
    assert sessions[0]["harness"] == "claude_code" and sessions[0]["tape_id"]
    marked = _marked(result)
    n_hello = hello.count("\n")
    hand_start = n_hello + 1
    second_start = hand_start + HAND.count("\n") + 1
    for i, line in enumerate(text.split("\n")[:-1]):
        if not line.strip():
            continue  # blank lines take their neighbours' answer (or none)
        if i < n_hello:
            assert marked.get(i) == 0, (i, line)
        elif i < second_start - 1:
            assert i not in marked, f"hand-written line {i} marked: {line!r}"
        else:
            assert marked.get(i) == 1, (i, line)
    assert sessions[0]["lines"] == sum(1 for v in marked.values() if v == 0)
    assert sessions[1]["lines"] == sum(1 for v in marked.values() if v == 1)
    # runs are maximal and in file order
    runs = result["runs"]
    assert all(a["end"] < b["start"] for a, b in zip(runs, runs[1:], strict=False))
    # the same buffer asked again: the same answer
    again = plain(await request(client, "engram/annotate", {"textDocument": {"uri": uri}}))
    assert again == result


async def test_annotate_follows_the_unsaved_buffer(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, "hello.py")
    first = plain(await request(client, "engram/annotate", {"textDocument": {"uri": uri}}))
    assert first["runs"] and first["sessions"][0]["label"] == "create hello.py, md and js"
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=HAND)],
        )
    )
    after = plain(await request(client, "engram/annotate", {"textDocument": {"uri": uri}}))
    assert after["version"] == 2
    assert after["runs"] == [] and after["sessions"] == []
    assert after["lines"] == HAND.count("\n")


async def test_annotate_file_on_disk_and_empty_file(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    # not opened in the editor: read from disk
    on_disk = plain(await request(client, "engram/annotate",
                                  {"textDocument": {"uri": ws.uri("hello.js")}}))
    assert on_disk["version"] is None and on_disk["runs"]
    (ws.root / "empty.py").write_text("")
    uri = open_doc(client, ws, "empty.py")
    empty = plain(await request(client, "engram/annotate", {"textDocument": {"uri": uri}}))
    assert empty["lines"] == 0 and empty["runs"] == [] and empty["sessions"] == []


async def test_annotate_bad_params_are_invalid_params(lsp, ws):
    client = await lsp(ws)
    with pytest.raises(JsonRpcInvalidParams, match="textDocument"):
        await request(client, "engram/annotate", {})
    with pytest.raises(JsonRpcInvalidParams, match="neither open nor on disk"):
        await request(client, "engram/annotate",
                      {"textDocument": {"uri": ws.uri("no-such-file.py")}})


def test_engine_annotate_is_the_annotation_of_blame(ws, monkeypatch):
    """``Engine.annotate`` (runs built on arrays) gives what the per-line blame entries give:
    files two sessions wrote (through their logged edits), those files edited by hand, a mixed
    file nobody logged, code a session only quoted (blame: a reader; the annotation computes
    producers only), and the empty and one-blank-line buffers; a real index of the real Claude
    Code fixture logs, in process."""
    from engram.engine import Engine
    from engram_lsp.features.annotate import annotation

    _second_session(ws)
    _quoting_session(ws)
    for k, v in ws.env().items():
        monkeypatch.setenv(k, v)
    for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(ws.root)
    (ws.root / "rows.py").write_text(SECOND)
    eng = Engine(ws.root, semantic=False)
    try:
        eng.ingest(seal=True)
        files = {**ws.files, "rows.py": SECOND}
        cases = []
        for rel, text in sorted(files.items()):
            lines = text.split("\n")
            cases += [(rel, text), (rel, "\n".join(lines[:2] + [HAND] + lines[2:]))]
        cases += [("mixed.py", ws.files["hello.py"] + "\n" + HAND + "\n" + SECOND), ("e.py", ""),
                  ("b.py", "\n"), ("quoted.py", QUOTED), ("both.py", SECOND + "\n" + QUOTED)]
        via = set()
        read_only = 0
        for rel, text in cases:
            path = str(ws.root / rel)
            got = eng.annotate(path, text)
            n = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            blamed = eng.blame(path, text=text, earlier=False) if text else {}
            sessions, runs = annotation(blamed) if text else ([], [])
            assert got == {"lines": n, "sessions": sessions, "runs": runs}, rel
            via |= {r["via"] for r in runs}
            read_only += sum(1 for ln in blamed.get("lines", []) if ln["tape_id"] and not ln.get("produced"))
        assert via == {"log", "direct"}  # both rules were exercised
        assert read_only >= 8  # lines blame gives a session that only quoted them: not marked
    finally:
        eng.close()
