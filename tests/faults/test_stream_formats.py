"""Gemini CLI's legacy ``session-*.json`` documents and Aider's chat histories are read as
streams: memory does not follow the log's size, the events (and tape ids) are those of the
whole-document parse, and every value the tape encoder cannot write is made writable and reported
with its position, nothing else lost.

The reference for a Gemini CLI document is what the adapter made of it before it streamed: the
whole text read by ``base.loads_json_text`` (the standard library's parser, values made
encodable) and handed to ``GeminiCliAdapter._session`` (the whole-record path the JSONL form still
uses). Logs are made in ``tmp_path`` from the real fixture logs of ``tests/data/harness``.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import re
import tracemalloc
from pathlib import Path

import orjson
import pytest

from engram.adapters import aider, base, gemini_cli, redact
from engram.adapters.base import ParseOutput
from engram.errors import UnsupportedLog
from engram.tape import writer

HARNESS = Path(__file__).resolve().parents[1] / "data" / "harness"
S2 = HARNESS / "gemini_cli" / "codemie__session-2026-01-16T11-01-file-ops-37b7abef.json"
S1 = HARNESS / "gemini_cli" / "codemie__session-2025-12-01T21-45-5b959dae.json"
AIDER = sorted((HARNESS / "aider").glob("*.aider.chat.history.md"))
G = gemini_cli.ADAPTER
A = aider.ADAPTER


def _digest(events: list[dict]) -> bytes:
    return b"".join(orjson.dumps(e, option=orjson.OPT_NON_STR_KEYS) + b"\n" for e in events)


def _reference(path: Path) -> tuple[list[dict], list[str]]:
    """Events and rewrite notes of the whole-document parse (the adapter before it streamed)."""
    rec, notes = base.loads_json_text(path.read_bytes().decode("utf-8-sig", "replace"))
    msgs = [m for m in rec["messages"] if isinstance(m, dict) and isinstance(m.get("type"), str)]
    out = ParseOutput()
    G._session(out, path, rec, msgs, "json")
    return out.sessions[0].events, notes


def _streamed(adapter, path: Path) -> tuple[list[dict], ParseOutput]:
    st = adapter.stream_source(path)
    rest = list(st)
    out = st.output
    return ([out.sessions[0].events[0]] + rest if out.sessions else rest), out


def _parsed(adapter, path: Path) -> tuple[list[dict], ParseOutput]:
    out = adapter.parse_source(path)
    assert len(out.sessions) == 1, out.errors
    return out.sessions[0].events, out


def _same_as_reference(path: Path) -> ParseOutput:
    ref, _notes = _reference(path)
    got, out = _parsed(G, path)
    streamed, sout = _streamed(G, path)
    assert _digest(got) == _digest(ref)
    assert _digest(streamed) == _digest(ref)
    assert sout.errors == out.errors
    d = Path(str(path) + ".tapes")
    assert writer.write_tape(d / "a", got).tape_id == writer.write_tape(d / "b", ref).tape_id
    return out


def _doc_with(tmp_path: Path, name: str, placeholder_json: str, where: str = "content") -> Path:
    """S2 with the first message's ``content`` (or a tool call's args ``extra``) replaced by raw
    JSON text ``placeholder_json``, indented as Gemini CLI writes it."""
    rec = json.loads(S2.read_text())
    if where == "content":
        rec["messages"][0]["content"] = "@V@"
    else:
        tc = next(tc for m in rec["messages"] for tc in m.get("toolCalls") or [])
        tc["args"]["extra"] = "@V@"
    p = tmp_path / f"session-{name}.json"
    p.write_bytes(json.dumps(rec, indent=2).replace('"@V@"', placeholder_json)
                  .encode("utf-8", "surrogatepass"))
    return p


def _errors(out: ParseOutput) -> list[dict]:
    return [e["error"] for e in out.errors]


# -- the same events as the whole-document parse ------------------------------------------------


@pytest.mark.parametrize("src", [S1, S2], ids=lambda p: p.stem)
def test_real_documents_stream_to_the_same_events(src, tmp_path):
    p = tmp_path / src.name
    p.write_bytes(src.read_bytes())
    out = _same_as_reference(p)
    assert out.errors == []
    assert G.streams_source(p)


@pytest.mark.parametrize("piece", [1, 5, 64, 4096])
def test_any_piece_size_gives_the_same_events(piece, tmp_path, monkeypatch):
    """The cleaner cuts pieces only after a quote, a comma or a newline: tiny reads change
    nothing (surrogates, constants, escaped quotes and a compact document included)."""
    rec = json.loads(S2.read_text())
    rec["messages"][0]["content"] = "@V@"
    text = json.dumps(rec).replace(
        '"@V@"', '"a \\\\\\"NaN\\\\ \\ud83d x \\ud83d\\ude00 \\\\ud800 \\udc00", "k": [NaN, -Infinity]')
    p = tmp_path / "session-compact.json"
    p.write_text(text)
    monkeypatch.setattr(gemini_cli, "_PIECE", piece)
    _same_as_reference(p)


# -- values the tape encoder cannot write --------------------------------------------------------


@pytest.mark.parametrize("raw,count", [
    ('"half \\ud83d emoji"', 1),           # a high surrogate alone
    ('"lone \\udc00 low"', 1),             # a low surrogate alone
    ('"x \\ud83d\\ud83d\\ude00 y"', 1),     # a high, then a pair
    ('"\\ud83d\\ude00 a pair"', 0),         # half and half: an emoji
    ('"literal \\\\ud83d text"', 0),        # an escaped backslash, then plain text
    ('{"k\\udc01": "in a key"}', 1),
])
def test_lone_surrogates_replaced_and_reported_at_their_line(raw, count, tmp_path):
    p = _doc_with(tmp_path, "surrogate", raw)
    out = _same_as_reference(p)
    if not count:
        assert out.errors == []
        return
    (err,) = _errors(out)
    line = next(i for i, ln in enumerate(p.read_text(errors="surrogatepass").split("\n"), 1)
                if "\\ud" in ln.lower() or "\\udc" in ln.lower())
    assert err["code"] == base.VALUE_REWRITTEN and err["line"] == line
    assert f"{count} lone UTF-16 surrogate(s)" in err["message"]
    assert f"line(s) {line}" in err["message"]
    if not raw.startswith("{"):   # (an object's keys never reach an event)
        assert "\ufffd" in json.dumps(_parsed(G, p)[0], ensure_ascii=False)


def test_wide_integers_kept_as_decimal_strings_with_their_message(tmp_path):
    p = _doc_with(tmp_path, "wide", "[123456789012345678901234567890, -98765432109876543210987]",
                  where="args")
    out = _same_as_reference(p)
    (err,) = _errors(out)
    assert "2 integer(s) beyond 64 bits" in err["message"] and "message " in err["message"]
    calls = [e for e in _parsed(G, p)[0] if e["k"] == "tool.call" and "extra" in e["args"]]
    assert calls[0]["args"]["extra"] == ["123456789012345678901234567890",
                                          "-98765432109876543210987"]


@pytest.mark.parametrize("depth", [250, 300, 3000])
def test_deep_nesting_kept_as_json_text(depth, tmp_path):
    """250 levels inside a tool call's arguments are ~256 in the document: deeper than the tape
    encoder writes, as the whole-document parse counted them."""
    p = _doc_with(tmp_path, f"deep{depth}", "[" * depth + "]" * depth, where="args")
    out = _same_as_reference(p)
    (err,) = _errors(out)
    assert "nested deeper than 254 levels" in err["message"]


def test_nan_and_infinity_read_as_json_loads_reads_them(tmp_path):
    p = _doc_with(tmp_path, "nan", '[NaN, Infinity, -Infinity, 1.5, 1e999, "NaN", "x: NaN,"]',
                  where="args")
    out = _same_as_reference(p)
    assert out.errors == []
    call = next(e for e in _parsed(G, p)[0] if e["k"] == "tool.call" and "extra" in e["args"])
    v = call["args"]["extra"]
    assert math.isnan(v[0]) and v[1:5] == [math.inf, -math.inf, 1.5, math.inf]
    assert v[5:] == ["NaN", "x: NaN,"]


def test_a_byte_order_mark_and_invalid_utf8(tmp_path):
    p = tmp_path / "session-bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + S2.read_bytes().replace(b"the ", b"th\xff\xfe ", 3))
    out = _same_as_reference(p)
    assert out.errors == []


# -- a document cut short ------------------------------------------------------------------------


def test_a_truncated_document_keeps_every_complete_message(tmp_path):
    data = S2.read_bytes()
    full = json.loads(data)["messages"]
    p = tmp_path / "session-cut.json"
    p.write_bytes(data[: len(data) * 2 // 3])
    # the messages (indented 4: each ends in a line "    }," but the last) complete before it
    kept = full[:data[: len(data) * 2 // 3].count(b"\n    },")]
    assert 0 < len(kept) < len(full)
    events, out = _parsed(G, p)
    (err,) = _errors(out)
    assert err["code"] == "E_ADAPTER_PARSE" and err["line"] == p.read_bytes().count(b"\n") + 1
    assert f"the {len(kept)} complete message(s) before it kept" in err["message"]
    ref_doc = dict(json.loads(data), messages=kept)
    ref_path = tmp_path / "session-ref.json"
    ref_path.write_text(json.dumps(ref_doc, indent=2))
    assert _digest(events[1:]) == _digest(_reference(ref_path)[0][1:])
    streamed, sout = _streamed(G, p)
    assert _digest(streamed) == _digest(events) and sout.errors == out.errors
    with pytest.raises(UnsupportedLog):
        G.parse_source(p, mode="strict")


def test_junk_and_not_a_record(tmp_path):
    junk = tmp_path / "session-junk.json"
    junk.write_bytes(b"\x00\x01 not json at all")
    out = G.parse_source(junk)
    assert out.sessions == [] and _errors(out)[0]["line"] == 1
    arr = tmp_path / "session-array.json"
    arr.write_text(json.dumps([json.loads(S2.read_text())]))
    out = G.parse_source(arr)
    assert out.sessions == [] and "no messages list" in _errors(out)[0]["message"]
    st = G.stream_source(arr)
    assert list(st) == [] and st.output.sessions == []


# -- memory: one message at a time ---------------------------------------------------------------


def _big_gemini(path: Path, target: int) -> int:
    rec = json.loads(S2.read_text())
    msgs = rec.pop("messages")
    head = json.dumps(rec, indent=2)[:-2]
    n = 0
    with open(path, "w") as f:
        f.write(head + ',\n  "messages": [')
        while f.tell() < target:
            for m in msgs:
                m = copy.deepcopy(m)
                m["id"] = f"{m['id']}-{n}"
                body = json.dumps(m, indent=2).replace("hello", f"hello{n}")
                f.write(("\n" if n == 0 else ",\n") + body)
                n += 1
        f.write("\n  ]\n}\n")
    return n


@pytest.fixture
def no_redaction_memo(monkeypatch):
    """Redaction's memo of long texts is bounded by its own cap (32 M characters): taken out
    here, so what is measured is what the parse itself holds."""
    monkeypatch.setattr(redact, "_redact_cached", redact._redact)
    monkeypatch.setattr(redact, "_redact_short", redact._redact)


def _peak_while(fn) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _drain(adapter, path: Path) -> int:
    n = 0
    st = adapter.stream_source(path)
    for _ev in st:
        n += 1
    assert st.output.sessions
    return n


def test_a_big_gemini_document_streams_in_bounded_memory(tmp_path, no_redaction_memo):
    """A 12 MB document: the whole-file read alone would allocate 12 MB (then its text and the
    parsed document, ~4x); the stream peaks under 3 MB (the same at 40 MB: ijson's buffers, one
    message, what the session keeps — the text of each file it knows)."""
    p = tmp_path / "session-2026-01-16T11-01-big00000.json"
    n = _big_gemini(p, 12_000_000)
    size = p.stat().st_size
    assert G.streams_source(p)
    events = []
    peak = _peak_while(lambda: events.append(_drain(G, p)))
    assert events[0] > n
    assert peak < 3_000_000 < size // 4, (peak, size)


def _big_aider(path: Path, target: int) -> None:
    bodies = []
    for h in AIDER:
        parts = re.split(r"(?m)^# aider chat started at .*\n", h.read_text())
        bodies.extend(x for x in parts if x.strip())
    n = 0
    with open(path, "w") as f:
        f.write("# aider chat started at 2026-01-16 11:01:00\n")
        while f.tell() < target:
            for b in bodies:
                f.write(b.replace("the ", f"the{n} "))
            n += 1


def test_a_big_aider_session_streams_in_bounded_memory_and_the_same_events(tmp_path,
                                                                          no_redaction_memo):
    d = tmp_path / "proj"
    d.mkdir()
    p = d / ".aider.chat.history.md"
    _big_aider(p, 12_000_000)
    size = p.stat().st_size
    assert A.streams_source(p)
    counts = []
    peak = _peak_while(lambda: counts.append(_drain(A, p)))
    assert counts[0] > 1000
    # the same at 2 and 8 MB: a 256 KiB read and its lines, one run of lines
    assert peak < 4_000_000 < size // 3, (peak, size)
    streamed, sout = _streamed(A, p)
    got, out = _parsed(A, p)
    assert _digest(streamed) == _digest(got) and sout.errors == out.errors


def _sessions_streamed(path: Path) -> tuple[list[bytes], ParseOutput]:
    """``stream_sessions``: each session's ``meta`` and events, digested; the source's output."""
    src = A.stream_sessions(path)
    got = []
    for st in src:
        rest = list(st)
        if st.output.sessions:
            got.append(_digest([st.output.sessions[0].events[0]] + rest))
    return got, src.output


def _many_same_as_whole(path: Path) -> ParseOutput:
    out = A.parse_source(path)
    got, sout = _sessions_streamed(path)
    assert got == [_digest(s.events) for s in out.sessions]
    assert sout.errors == out.errors
    assert [s.key for s in sout.sessions] == [s.key for s in out.sessions]
    return out


def test_aider_histories_of_many_sessions_stream_a_session_at_a_time(tmp_path):
    """Every history streams (``stream_sessions``): the real ones (several sessions each, with
    their input histories: prompt times matched before the next header), one with text before
    its first header, NUL bytes, a start-up without an exchange between sessions, an unknown
    version after a known one — the same sessions, events, keys and errors as parsed whole."""
    for h in AIDER:
        assert A.streams_source(h)
        d = tmp_path / h.name.split("__")[0]
        d.mkdir()
        p = d / ".aider.chat.history.md"
        p.write_bytes(h.read_bytes())
        inp = h.with_name(h.name.replace("chat.history.md", "input.history"))
        (d / ".aider.input.history").write_bytes(inp.read_bytes())
        assert len(_many_same_as_whole(p).sessions) >= 2
        text = h.read_text()
        p.write_text("stray text\n" + text.replace("\n#### ", "\n#### \x00", 1)
                     + "# aider chat started at 2026-01-16 11:01:00\n\n"   # (no exchange)
                     + text.replace("Aider v", "Aider v9"))
        out = _many_same_as_whole(p)
        assert out.errors and len(out.sessions) >= 5
        (d / ".aider.input.history").unlink()
        _many_same_as_whole(p)


def test_a_big_history_of_many_sessions_streams_in_bounded_memory(tmp_path, no_redaction_memo):
    """5 MB of sessions (each real session, again and again, under a header of its own):
    parsed whole, every session's events are held at once (past the history's size in Python
    allocations); streamed a session at a time, under 4 MB (one session, 170 kB at most; a 256
    KiB read; the metas)."""
    d = tmp_path / "proj"
    d.mkdir()
    p = d / ".aider.chat.history.md"
    bodies = []
    for h in AIDER:
        bodies.extend(x for x in re.split(r"(?m)^(?=# aider chat started at )", h.read_text())
                      if x.strip())
    n = 0
    with open(p, "w") as f:
        while f.tell() < 5_000_000:
            for b in bodies:
                f.write(re.sub(r"(?m)^(# aider chat started at \S+ \d\d:\d\d):\d\d",
                               rf"\g<1>:{n % 60:02d}", b).replace("the ", f"the{n} "))
                n += 1
    size = p.stat().st_size

    def drain():
        src = A.stream_sessions(p)
        for st in src:
            for _ev in st:
                pass
        assert len(src.output.sessions) > 50

    whole = _peak_while(lambda: A.parse_source(p))
    streamed = _peak_while(drain)
    assert whole > size, (whole, size)
    assert streamed < 4_000_000, streamed


# -- the real ingest: streamed and whole give the same index and tape files ---------------------


def test_streamed_gemini_and_aider_ingests_index_what_whole_ones_index(tmp_path, monkeypatch,
                                                                        capsys):
    """``engram ingest --rebuild --seal`` over the real Gemini CLI documents (and one as JSONL),
    one-session Aider histories and the real histories of several sessions: parsed whole, then
    as streams in-process (parts of 3 events; a session at a time), then in the parse worker —
    the same index rows and the same tape files."""
    import os
    import shutil

    from test_ingest_stream import _index, _run

    from engram.index import store
    from engram.ingest import ingestor, worker

    chats = tmp_path / "gemini" / "proj" / "chats"
    chats.mkdir(parents=True)
    for p in (S1, S2):
        shutil.copy(p, chats / p.name.split("__")[-1])
    rec = json.loads(S2.read_text())   # the JSONL form: a message updated in place, a rewind
    msgs = rec.pop("messages")
    rec["sessionId"] = "37b7abef-0000-4000-8000-00000000j5o1"
    jsonl = chats.parent.parent / "proj2" / "chats"
    jsonl.mkdir(parents=True)
    (jsonl / "session-2026-01-16T11-01-37b7abef.jsonl").write_text("".join(
        json.dumps(x) + "\n" for x in [rec] + msgs + [dict(msgs[1], content="updated"),
                                                     {"$rewindTo": msgs[-1]["id"]}]))
    one = 0
    for h in AIDER:
        for i, body in enumerate(re.split(r"(?m)^(?=# aider chat started at )", h.read_text())):
            if body.strip():
                d = tmp_path / "aider" / f"{h.name.split('__')[0]}-{i}"
                d.mkdir(parents=True)
                (d / ".aider.chat.history.md").write_text(body)
                one += 1
        d = tmp_path / "aider" / f"{h.name.split('__')[0]}-all"   # the history of many sessions
        d.mkdir(parents=True)
        shutil.copy(h, d / ".aider.chat.history.md")
        shutil.copy(h.with_name(h.name.replace("chat.history.md", "input.history")),
                    d / ".aider.input.history")
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    (root / ".engram" / "config.yml").write_text(
        f"harnesses:\n  gemini_cli:\n    paths: [{tmp_path / 'gemini'}]\n"
        f"  aider:\n    paths: [{tmp_path / 'aider'}]\n" + "".join(
            f"  {h}: false\n" for h in ("claude_code", "codex", "opencode", "cursor", "openclaw")))
    monkeypatch.chdir(root)
    home = Path(os.environ["ENGRAM_HOME"])

    def index(home: Path) -> dict:   # (rows name their tape by its path under the home)
        return {k: [r.replace(str(home), "~") for r in v] if isinstance(v, list) else v
                for k, v in _index(root, home).items()}

    streamed = []
    real = worker.stream
    monkeypatch.setattr(worker, "stream", lambda *a: streamed.append(a[1]) or real(*a))
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 1 << 62)
    res = _run(home, capsys)
    n = res["sessions"]
    assert res["error_count"] == 0 and n >= 4 and res["tapes_written"] == n
    plain = index(home)
    assert not streamed

    # each run on an index of its own: a source sealed before is not streamed again
    home = tmp_path / "home-streamed"
    monkeypatch.setenv("ENGRAM_HOME", str(home))
    monkeypatch.setattr(ingestor, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(worker, "STREAM_CHUNK_EVENTS", 3)
    monkeypatch.setattr(store, "BOILERPLATE_DEFER", 1)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["sessions"] == n and res["tapes_written"] == n
    # (empty starts: no session)
    assert len(streamed) == 3 + one + len(AIDER) and res["streamed"] == n
    assert index(home) == plain

    home = tmp_path / "home-worker"   # (the worker's own process: ``streamed`` does not see it)
    monkeypatch.setenv("ENGRAM_HOME", str(home))
    monkeypatch.setattr(ingestor, "PROCESS_MIN_BYTES", 0)
    res = _run(home, capsys)
    assert res["error_count"] == 0 and res["streamed"] == n and res["tapes_written"] == n
    assert index(home) == plain
    assert not list(home.rglob("*.tmp"))
