"""Memory that does not follow the log: what a Gemini CLI session knows of its files is bounded
(``gemini_cli._Known``: the recent texts in memory, the rest in a private unnamed temp file) and
gives the same events as holding every text.

The reference is the same parse with nothing spilled (``KNOWN_MEM_CHARS`` larger than anything the
log holds: the plain dict the adapter used before). Logs are the real fixture logs of
``tests/data/harness`` and documents generated in ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from test_stream_formats import S1, S2, _digest, _parsed, _peak_while, _streamed

from engram.adapters import gemini_cli
from engram.tape import writer

G = gemini_cli.ADAPTER
NEVER = 1 << 62


def _both(path: Path, monkeypatch, cap: int) -> tuple[bytes, bytes, list]:
    monkeypatch.setattr(gemini_cli, "KNOWN_MEM_CHARS", cap)
    whole, out = _parsed(G, path)
    streamed, sout = _streamed(G, path) if G.streams_source(path) else (whole, out)
    assert sout.errors == out.errors
    return _digest(whole), _digest(streamed), out.errors


# -- a generated session that touches new files all along -----------------------------------------


def _text(rng: random.Random, n: int, tag: str) -> str:
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "über", "naïve", "→"]
    return "".join(f"{tag} {j}: " + " ".join(rng.choice(words) for _ in range(8)) + "\n"
                   for j in range(n))


def _call(i: int, name: str, args: dict, output: str) -> dict:
    return {"id": f"call-{i}-{name}", "name": name, "args": args, "status": "success",
            "timestamp": f"2026-01-16T11:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
            "result": [{"functionResponse": {"id": f"call-{i}-{name}", "name": name,
                                             "response": {"output": output}}}]}


def new_files_doc(path: Path, files: int, lines: int, seed: int = 7) -> int:
    """A legacy document whose every pass writes a new file (``lines`` lines), reads back one
    written a few passes before (every tenth pass), and ``replace``s a line in one written further back (placed
    against what the session knows of it): the texts a session knows grow with it. Returns the
    characters of the texts written."""
    rng = random.Random(seed)
    texts: list[str] = []
    msgs = [{"id": "u0", "type": "user", "timestamp": "2026-01-16T11:00:00.000Z",
             "content": [{"text": "make the files"}]}]
    for i in range(files):
        text = _text(rng, lines, f"f{i}")
        texts.append(text)
        calls = [_call(i, "write_file", {"file_path": f"/proj/src/f{i}.txt", "content": text},
                       f"Successfully created and wrote to new file: /proj/src/f{i}.txt.")]
        if i >= 3 and i % 10 == 3:
            calls.append(_call(i, "read_file", {"absolute_path": f"/proj/src/f{i - 3}.txt"},
                               texts[i - 3]))
        if i >= 6:
            j = i - 6
            old = texts[j].split("\n")[lines // 2] + "\n"
            new = old.replace(":", " (edited):")
            calls.append(_call(i, "replace", {"file_path": f"/proj/src/f{j}.txt",
                                              "old_string": old, "new_string": new},
                               f"Successfully modified file: /proj/src/f{j}.txt (1 replacements)."))
            texts[j] = texts[j].replace(old, new, 1)
        msgs.append({"id": f"m{i}", "type": "gemini", "timestamp": calls[0]["timestamp"],
                     "content": f"pass {i}", "model": "gemini-3-pro", "toolCalls": calls})
    rec = {"sessionId": "5e551011-0000-4000-8000-00000000b0de", "projectHash": "b0de",
           "startTime": "2026-01-16T11:00:00.000Z", "lastUpdated": "2026-01-16T12:00:00.000Z",
           "directories": ["/proj"], "messages": msgs}
    path.write_text(json.dumps(rec, indent=2, ensure_ascii=False))
    return sum(len(t) for t in texts)


def test_spilled_texts_give_the_same_events_on_a_session_of_new_files(tmp_path, monkeypatch):
    p = tmp_path / "session-2026-01-16T11-00-b0de0000.json"
    new_files_doc(p, 60, 40)
    ref_whole, ref_stream, ref_errors = _both(p, monkeypatch, NEVER)
    assert ref_whole == ref_stream and ref_errors == []
    edits = [e for e in _parsed(G, p)[0] if e["k"] == "code.edit"]
    located = [e for e in edits if e.get("range_known") is not False]
    assert len(located) == len(edits) >= 60 + 54   # every replace placed against a known text
    for cap in (1, 5_000, 50_000):   # everything but the last text spilled; a few kept; more
        assert _both(p, monkeypatch, cap) == (ref_whole, ref_whole, [])
    monkeypatch.setattr(gemini_cli, "KNOWN_MEM_CHARS", 1)
    d = tmp_path / "tapes"
    events = _parsed(G, p)[0]
    monkeypatch.setattr(gemini_cli, "KNOWN_MEM_CHARS", NEVER)
    assert writer.write_tape(d / "a", events).tape_id == \
        writer.write_tape(d / "b", _parsed(G, p)[0]).tape_id


@pytest.mark.parametrize("src", [S1, S2], ids=lambda p: p.stem)
def test_real_documents_with_every_text_spilled(src, tmp_path, monkeypatch):
    p = tmp_path / src.name
    p.write_bytes(src.read_bytes())
    ref = _both(p, monkeypatch, NEVER)
    assert _both(p, monkeypatch, 1) == ref


def test_the_jsonl_form_with_every_text_spilled(tmp_path, monkeypatch):
    rec = json.loads(S2.read_text())
    msgs = rec.pop("messages")
    p = tmp_path / "session-2026-01-16T11-01-37b7abef.jsonl"
    lines = [rec] + msgs + [dict(msgs[1], content="updated in place")]
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ref = _both(p, monkeypatch, NEVER)
    assert _both(p, monkeypatch, 1) == ref


def test_known_behaves_as_a_dict_under_any_cap(monkeypatch):
    """Random gets, sets and pops against a plain dict; compaction forced often."""
    monkeypatch.setattr(gemini_cli, "KNOWN_COMPACT_BYTES", 200)
    rng = random.Random(3)
    for cap in (0, 1, 30, 500):
        ref: dict[str, str] = {}
        with gemini_cli._Known(cap) as k:
            for step in range(3000):
                key = f"/p/{rng.randrange(40)}"
                op = rng.random()
                if op < 0.45:
                    v = f"{step} " + "x\ud800é" * rng.randrange(0, 60)   # (a lone surrogate too)
                    k[key] = ref[key] = v
                elif op < 0.85:
                    assert k.get(key) == ref.get(key)
                else:
                    k.pop(key, None)
                    ref.pop(key, None)
                assert k.chars <= max(cap, max(map(len, k.mem.values()), default=0))
            assert {key: k.get(key) for key in ref} == ref
            if cap < 500:
                assert k.f is not None and os.fstat(k.f.fileno()).st_mode & 0o777 == 0o600
                assert k.end - k.dead == sum(n for _o, n in k.disk.values())


def test_nothing_left_behind(tmp_path, monkeypatch):
    """The spill file has no name: nothing in the tape directory during or after the parse."""
    p = tmp_path / "session-2026-01-16T11-00-b0de0000.json"
    new_files_doc(p, 20, 40)
    monkeypatch.setattr(gemini_cli, "KNOWN_MEM_CHARS", 1)
    home = Path(os.environ["ENGRAM_HOME"])
    st = G.stream_source(p)
    it = iter(st)
    for _ in range(50):
        next(it)
    assert [x for x in home.rglob("*") if x.is_file()] == []
    list(it)
    assert [x for x in home.rglob("*") if x.is_file()] == []


def test_a_session_of_new_files_streams_in_bounded_memory(tmp_path, monkeypatch):
    """3.9 M characters of new files' texts: holding them all (the plain dict) peaks past them
    in Python allocations (~9 MB: non-ASCII texts carry their UTF-8 copies too); with
    ``KNOWN_MEM_CHARS`` at 100 k characters the same stream peaks under half the texts (~1.5 MB:
    the recent texts, one message, ijson's buffers, a name and place per spilled path)."""
    from engram.adapters import redact

    monkeypatch.setattr(redact, "_redact_cached", redact._redact)
    monkeypatch.setattr(redact, "_redact_short", redact._redact)
    p = tmp_path / "session-2026-01-16T11-00-b0de0000.json"
    chars = new_files_doc(p, 150, 500)
    assert chars > 3_800_000

    def drain():
        for _ev in G.stream_source(p):
            pass

    monkeypatch.setattr(gemini_cli, "KNOWN_MEM_CHARS", NEVER)
    unbounded = _peak_while(drain)
    monkeypatch.setattr(gemini_cli, "KNOWN_MEM_CHARS", 100_000)
    bounded = _peak_while(drain)
    assert unbounded > chars, (unbounded, chars)
    assert bounded < chars // 2, (bounded, chars)


# -- the JSONL form as a stream (two passes) ------------------------------------------------------


def _jsonl_variants(tmp_path: Path) -> list[Path]:
    """JSONL chats made of S2's messages: plain; updated in place (a message re-appended, its
    first place kept); ``$rewindTo``; a ``$set`` checkpoint with messages and one without; a
    resumed legacy record; bad lines, blank lines, a lone surrogate, a ``$set`` not an object."""
    rec = json.loads(S2.read_text())
    msgs = rec.pop("messages")
    head = dict(rec, kind="main")
    variants = {
        "plain": [head] + msgs,
        "updated": [head] + msgs + [dict(msgs[1], content="updated in place"), msgs[0]],
        "rewound": [head] + msgs + [{"$rewindTo": msgs[len(msgs) // 2]["id"]}] + msgs[-2:],
        "checkpoint": [head] + msgs[:3] + [{"$set": {"messages": msgs[1:], "summary": "s"}}]
        + [{"$set": {"lastUpdated": "2026-01-16T12:00:00.000Z"}}, dict(msgs[2], content="late")],
        "legacy": [dict(head, messages=msgs[:4])] + msgs[4:],
        "odd": [head, "@BAD@", {"$set": 3}, {"what": 1}, "@BLANK@"] + msgs[:2]
        + ["@SURROGATE@"] + msgs[2:],
    }
    out = []
    for name, lines in variants.items():
        text = []
        for x in lines:
            if x == "@BAD@":
                text.append('{"id": "broken", ')
            elif x == "@BLANK@":
                text.append("")
            elif x == "@SURROGATE@":
                text.append(json.dumps(dict(msgs[3], id="sur", content="half \ud83d emoji")))
            else:
                text.append(json.dumps(x))
        p = tmp_path / f"session-2026-01-16T11-01-{name}.jsonl"
        p.write_bytes(("\n".join(text) + "\n").encode("utf-8", "surrogatepass"))
        out.append(p)
    return out


def test_jsonl_chats_stream_to_the_same_events(tmp_path):
    for p in _jsonl_variants(tmp_path):
        assert G.streams_source(p)
        whole, out = _parsed(G, p)
        streamed, sout = _streamed(G, p)
        assert _digest(streamed) == _digest(whole), p.name
        assert sout.errors == out.errors and sout.end_offset == out.end_offset, p.name
        if "odd" in p.name:
            assert len(out.errors) == 4
    empty = tmp_path / "session-empty.jsonl"
    empty.write_text('{"what": 1}\n')
    st = G.stream_source(empty)
    assert list(st) == [] and st.output.sessions == [] and st.output.errors == \
        G.parse_source(empty).errors


def test_a_big_jsonl_chat_streams_in_bounded_memory(tmp_path):
    """A 6 MB JSONL chat (S2's messages again and again, each later updated once): parsed
    whole, every final message is held (past the log's size in Python allocations); streamed,
    an id and a place per message, one line, one message's events (2.4 MB: under half the log,
    ~720 messages)."""
    from engram.adapters import redact

    rec = json.loads(S2.read_text())
    msgs = rec.pop("messages")
    p = tmp_path / "session-2026-01-16T11-01-bigjsonl.jsonl"
    n = 0
    with open(p, "w") as f:
        f.write(json.dumps(rec) + "\n")
        while f.tell() < 6_000_000:
            for m in msgs:
                m = dict(m, id=f"{m['id']}-{n}")
                f.write(json.dumps(m) + "\n")
                f.write(json.dumps(dict(m, content=f"updated {n}")) + "\n")
                n += 1
    size = p.stat().st_size

    def drain():
        for _ev in G.stream_source(p):
            pass

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(redact, "_redact_cached", redact._redact)
        mp.setattr(redact, "_redact_short", redact._redact)
        whole = _peak_while(lambda: G.parse_source(p))
        streamed = _peak_while(drain)
    assert whole > size, (whole, size)
    assert streamed < size // 2, (streamed, size)
