"""An adapter's streamed parse (``stream_source``: events one record at a time, the meta last)
gives exactly the events, meta, errors and tape of ``parse_source`` — on the real Claude Code
logs of tests/data and on logs made to hit the parts of ``finish_session`` that depend on the
whole session (the meta's time for leading events without one, labels cut and redacted, values
rewritten, malformed lines, strict mode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram import adapters
from engram.adapters import claude_code
from engram.errors import UnsupportedLog
from engram.tape import writer

DATA = Path(__file__).resolve().parents[1] / "data" / "harness" / "claude_code"
AD = claude_code.ADAPTER


def _streamed(path: Path, mode: str = "permissive", ad=AD):
    st = ad.stream_source(path, mode=mode)
    body = list(st)
    out = st.output
    if out.sessions:
        [sess] = out.sessions
        assert len(sess.events) == 1
        sess.events = sess.events + body
    else:
        assert body == []
    return out


def _same(path: Path, mode: str = "permissive", ad=AD) -> None:
    whole = ad.parse_source(path, mode=mode)
    streamed = _streamed(path, mode, ad)
    assert streamed.errors == whole.errors
    assert streamed.end_offset == whole.end_offset
    assert [s.key for s in streamed.sessions] == [s.key for s in whole.sessions]
    for a, b in zip(streamed.sessions, whole.sessions):
        assert writer.encode_events(a.events) == writer.encode_events(b.events)


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.jsonl")))
def test_streamed_parse_of_real_logs(name):
    _same(DATA / name)


CODEX = DATA.parent / "codex"


@pytest.mark.parametrize("name", sorted(p.name for p in CODEX.iterdir()
                                        if p.is_file() and not p.name.endswith(".md")))
def test_streamed_parse_of_real_codex_logs(name):
    _same(CODEX / name, ad=adapters.get("codex"))


def test_codex_leading_events_without_a_time_wait_for_the_meta(tmp_path):
    """Records before the session's meta record: their events take its time, known later."""
    recs = [
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": "first"}]}},
        {"type": "session_meta", "timestamp": "2026-11-25T09:00:00.000Z",
         "payload": {"id": "c-1", "timestamp": "2026-11-25T09:00:00.000Z", "cwd": "/w",
                     "cli_version": "0.63.0"}},
        {"type": "response_item", "timestamp": "2026-11-25T09:00:05.000Z",
         "payload": {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": "ok"}]}},
    ]
    p = tmp_path / "rollout.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    _same(p, ad=adapters.get("codex"))
    events = adapters.get("codex").parse_source(p).sessions[0].events
    assert [e["t"] for e in events] == ["2026-11-25T09:00:00.000Z"] * 2 + [
        "2026-11-25T09:00:05.000Z"]


def _rec(i, typ="user", ts=True, **kw):
    r = {"type": typ, "uuid": f"u{i}", "parentUuid": f"u{i - 1}" if i else None,
         "sessionId": "s-1", "cwd": "/home/dev/p", "version": "2.0.64"}
    if ts:
        r["timestamp"] = f"2026-11-25T10:00:{i:02d}.000Z"
    r.update(kw)
    return r


def _write(tmp_path: Path, recs: list) -> Path:
    p = tmp_path / "proj" / "s-1.jsonl"
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8") as f:
        for r in recs:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return p


KEY = "AKIA" + "IOSFODNN7EXAMPLE"


def test_streamed_parse_of_odd_logs(tmp_path):
    long_prompt = "please fix " + " ".join(["the parser"] * 20) + f" aws_access_key_id={KEY} now"
    recs = [
        # leading records without a time: their events take the meta's (the first time seen,
        # here a record that makes no event)
        _rec(0, ts=False, message={"role": "user", "content": "<command-name>x</command-name>"}),
        _rec(1, "system", subtype="informational", content="note"),
        _rec(2, message={"role": "user", "content": long_prompt}),
        "{not json",
        _rec(3, "assistant", message={"id": "m1", "model": "claude-x", "role": "assistant",
                                      "content": [{"type": "text", "text": f"key {KEY}"}]}),
        _rec(4, ts=False, message={"role": "user", "content": "bad \ud800 surrogate"}),
        _rec(5, "assistant", message={"id": "m2", "role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"n": 1 << 70}}]}),
        {"type": "summary", "summary": "A title", "leafUuid": "u5"},
    ]
    _same(_write(tmp_path, recs))


def test_streamed_parse_without_any_time_and_without_events(tmp_path):
    _same(_write(tmp_path, [_rec(i, ts=False, message={"role": "user", "content": f"hi {i}"})
                            for i in range(4)]))
    _same(_write(tmp_path, [{"type": "summary", "summary": "only a title"}]))


def test_streamed_parse_strict_mode_refuses_as_parse_does(tmp_path):
    p = _write(tmp_path, [_rec(0, version="0.0.1", message={"role": "user", "content": "hi"})])
    with pytest.raises(UnsupportedLog):
        AD.parse_source(p, mode="strict")
    with pytest.raises(UnsupportedLog):
        _streamed(p, mode="strict")
