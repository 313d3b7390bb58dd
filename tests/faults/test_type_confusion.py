"""Type confusion in real harness logs: one value of one record replaced by a value of another JSON
type (a string where an object was, a list where a string was, ``null``, a float, an integer
wider than 64 bits, an impossible timestamp, ...), as a new harness version or a hand-edited log
may write it.

For every harness whose fixtures are JSON (Claude Code, Codex CLI, OpenClaw, Cursor: JSONL;
Gemini CLI: a session document; OpenCode: a storage tree of JSON files), seeded mutations at
every depth of the records. The adapter must not raise: a record it cannot read is skipped and
reported with its file and line (never an error without a line in a JSONL log), every event it
returns can be written to a tape, and the session survives (a mutation loses at most the mutated
record's own events and what refers to it, never the rest of the log).
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from engram.adapters import claude_code, codex, cursor, gemini_cli, openclaw, opencode
from engram.tape.writer import encode_events

HARNESS = Path(__file__).resolve().parents[1] / "data" / "harness"
MUTATIONS = 40  # per fixture file (seeded: the same mutations every run)
ODD = [None, 0, -1, 1.5, "", "x", [], {}, True, [None], {"a": None}, ["x", 1], 2**70,
       "2025-13-99T99:99:99Z", "\ud800"]
JSONL = [(claude_code.ADAPTER, "claude_code"), (codex.ADAPTER, "codex"),
         (openclaw.ADAPTER, "openclaw"), (cursor.ADAPTER, "cursor")]


def value_paths(value, at=(), depth=0):
    """Every path into ``value`` (keys and the first list items), the root's ``()`` first."""
    yield at
    if depth >= 6:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from value_paths(v, at + (k,), depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):
            yield from value_paths(v, at + (i,), depth + 1)


def replaced(value, at: tuple, new):
    """A copy of ``value`` with the value at path ``at`` replaced by ``new``."""
    if not at:
        return new
    value = json.loads(json.dumps(value))
    cur = value
    for k in at[:-1]:
        cur = cur[k]
    cur[at[-1]] = new
    return value


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=True)  # a lone surrogate as its escape, as logs have it


def events_of(out) -> int:
    return sum(len(s.events) for s in out.sessions)


def event_set(out) -> Counter:
    return Counter(json.dumps(e, sort_keys=True) for s in out.sessions for e in s.events[1:])


def ids_in(value) -> set[str]:
    """The ids a record gives its events or refers to (a tool call's, a message's)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str) and (k in ("id", "uuid") or k.endswith(("_id", "Id"))):
                found.add(v)
            found |= ids_in(v)
    elif isinstance(value, list):
        for v in value:
            found |= ids_in(v)
    return found


def check(adapter, src: Path, base_sessions: int, base_events: int, lost_at_most: int, jsonl: bool,
          base=None, ids: frozenset = frozenset()):
    """Parse ``src`` (whole, and as a stream where the adapter streams it): no exception, errors
    with a line, events a tape can hold, the session kept, and no event lost but the mutated
    record's own (at most ``lost_at_most``) and those of its calls and messages (``ids``)."""
    out = adapter.parse_source(src)
    for err in out.errors:
        e = err["error"]
        assert e["path"] and e["message"], err
        if jsonl:
            assert isinstance(e["line"], int) and e["line"] >= 1, err
    for s in out.sessions:
        encode_events(s.events)  # raises on a value the tape writer cannot write
    assert len(out.sessions) >= base_sessions, (src, out.errors)
    if base is not None:
        gone = event_set(base) - event_set(out)
        elsewhere = sum(n for e, n in gone.items() if json.loads(e).get("call_id") not in ids)
        assert elsewhere <= lost_at_most, (src, elsewhere, lost_at_most, list(gone)[:3])
    if adapter.streams_source(src):
        stream = adapter.stream_source(src)
        encode_events(list(stream))
        assert stream.output is not None


@pytest.mark.parametrize("adapter,folder", JSONL, ids=[f for _a, f in JSONL])
def test_jsonl_logs_survive_type_confusion(adapter, folder, tmp_path):
    files = sorted((HARNESS / folder).glob("*.jsonl"))
    assert files
    rng = random.Random(f"type-confusion/{folder}")
    tried = 0
    for log in files:
        base = adapter.parse_source(log)
        lines = log.read_text(encoding="utf-8").splitlines()
        records = [(i, json.loads(line)) for i, line in enumerate(lines) if line.startswith("{")]
        # what one record can take with it: its own events and those of the records that refer
        # to it (a tool call's output, a session's first line): bounded by the largest record's
        # events, measured as the events the log has without that record
        own = {}
        for i, _rec in records:
            dst = tmp_path / log.name
            dst.write_text("\n".join(lines[:i] + lines[i + 1:]) + "\n", encoding="utf-8")
            own[i] = events_of(base) - events_of(adapter.parse_source(dst))
        for _ in range(MUTATIONS):
            i, rec = rng.choice(records)
            at = rng.choice(list(value_paths(rec)))
            mutated = list(lines)
            mutated[i] = dumps(replaced(rec, at, rng.choice(ODD)))
            dst = tmp_path / log.name
            dst.write_text("\n".join(mutated) + "\n", encoding="utf-8")
            # a session needs its first record to be known as one: mutating that may end it
            sessions = 0 if i == records[0][0] else len(base.sessions)
            check(adapter, dst, sessions, events_of(base) if sessions else 0,
                  max(own[i], 0) + 1, jsonl=True, base=base if sessions else None,
                  ids=frozenset(ids_in(rec)))
            tried += 1
    assert tried == MUTATIONS * len(files)


def test_gemini_session_documents_survive_type_confusion(tmp_path):
    files = sorted((HARNESS / "gemini_cli").glob("*session-*.json"))
    assert files
    rng = random.Random("type-confusion/gemini_cli")
    chats = tmp_path / "proj" / "chats"
    chats.mkdir(parents=True)
    for log in files:
        doc = json.loads(log.read_text(encoding="utf-8"))
        base = gemini_cli.ADAPTER.parse_source(log)
        assert base.sessions
        paths = list(value_paths(doc))
        inside = [p for p in paths if len(p) >= 3 and p[0] == "messages"]  # a message's field
        for n in range(MUTATIONS):
            at = rng.choice(inside if n % 2 else paths)
            dst = chats / log.name.split("__")[-1]
            dst.write_text(dumps(replaced(doc, at, rng.choice(ODD))), encoding="utf-8")
            out = gemini_cli.ADAPTER.parse_source(dst)  # a whole document: a bad one is one error
            for s in out.sessions:
                encode_events(s.events)
            assert out.sessions or out.errors
            if len(at) >= 3 and at[0] == "messages":  # one odd message never loses the session
                assert len(out.sessions) == len(base.sessions), (at, out.errors)


def test_opencode_storage_survives_type_confusion(tmp_path):
    src = HARNESS / "opencode" / "storage_v2"
    files = sorted(src.rglob("*.json"))
    assert files
    base = opencode.ADAPTER.parse_source(src)
    assert base.sessions
    rng = random.Random("type-confusion/opencode")
    for _ in range(MUTATIONS * 2):
        root = tmp_path / "storage"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(src, root)
        f = rng.choice(files)
        doc = json.loads(f.read_text(encoding="utf-8"))
        (root / f.relative_to(src)).write_text(
            dumps(replaced(doc, rng.choice(list(value_paths(doc))), rng.choice(ODD))), encoding="utf-8")
        out = opencode.ADAPTER.parse_source(root)
        for s in out.sessions:
            encode_events(s.events)
        assert out.sessions or out.errors
        if f.relative_to(src).parts[0] in ("message", "part"):  # one odd message or part
            assert len(out.sessions) == len(base.sessions), (f, out.errors)


LAYOUT = {"claude_code": "claude/-work-proj", "codex": "codex/2026/05/11",
          "openclaw": "openclaw/agents/main/sessions", "cursor": "cursor/work-proj/agent-transcripts"}
HARNESSES = ("claude_code", "codex", "openclaw", "cursor", "gemini_cli", "opencode", "aider")


def make_repo(repo: Path, harness: str | None = None, logs: Path | None = None,
              sources: Path | None = None) -> Path:
    """A repository whose config reads ``harness``'s logs under ``logs`` (every other harness
    off) and the tapes of ``sources``."""
    (repo / ".git").mkdir(parents=True)
    (repo / ".engram").mkdir()
    cfg = f"sources: [{sources}]\n" if sources is not None else ""
    cfg += "harnesses:\n"
    if harness is not None:
        cfg += f"  {harness}:\n    paths: [{logs}]\n"
    cfg += "".join(f"  {h}: false\n" for h in HARNESSES if h != harness)
    (repo / ".engram" / "config.yml").write_text(cfg)
    return repo


INGESTS = 60  # whole ingests (the CLI, a fresh index each): ~0.15 s each


def test_type_confused_logs_are_ingested_and_indexed(tmp_path, monkeypatch, capsys):
    """The whole ingest (redaction, the tape, the index, lineage) of a type-confused log: exit 0,
    no traceback, no adapter crash, the session sealed and indexed."""
    from engram.cli import main

    rng = random.Random("type-confusion/ingest")
    for n in range(INGESTS):
        harness = sorted(LAYOUT)[n % len(LAYOUT)]
        log = rng.choice(sorted((HARNESS / harness).glob("*.jsonl")))
        lines = log.read_text(encoding="utf-8").splitlines()
        records = [(i, json.loads(line)) for i, line in enumerate(lines) if line.startswith("{")]
        i, rec = rng.choice(records[1:])  # not the first: a session needs it to be one
        mutated = list(lines)
        mutated[i] = dumps(replaced(rec, rng.choice(list(value_paths(rec))), rng.choice(ODD)))
        root = tmp_path / f"run{n}"
        logs = root / LAYOUT[harness]
        logs.mkdir(parents=True)
        name = log.name if harness != "codex" else "rollout-" + log.name.split("rollout-")[-1]
        (logs / name).write_text("\n".join(mutated) + "\n", encoding="utf-8")
        repo = make_repo(root / "repo", harness, root / LAYOUT[harness].split("/")[0])
        monkeypatch.setenv("ENGRAM_HOME", str(root / "home"))
        monkeypatch.chdir(repo)
        code = main(["ingest", "--seal"])
        out, err = capsys.readouterr()
        assert code == 0 and "Traceback" not in err, (log.name, i + 1, err)
        res = json.loads(out)
        assert not [e for e in res["errors"] if e["error"]["code"] == "E_ADAPTER_CRASH"], res["errors"]
        for e in res["errors"]:
            assert e["error"]["line"], e
        assert res["sealed"] >= 1 and res["tapes_indexed"] >= 1, (log.name, i + 1, res)


# -- a teammate's tape: well formed (its name is its content's hash), any content ----------------

TAPES = 40  # seeded type-confused tapes, each ingested beside the 7 untouched ones


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    from engram.cli import main

    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _fixture_tapes(tmp_path, monkeypatch, capsys) -> list[list[dict]]:
    """The events of the tapes a clean ingest makes of the Claude Code fixture logs."""
    from engram.tape import reader

    base = tmp_path / "base"
    logs = base / "logs" / "-work-proj"
    logs.mkdir(parents=True)
    for p in sorted((HARNESS / "claude_code").glob("*.jsonl")):
        shutil.copy(p, logs / p.name)
    repo = make_repo(base / "repo", "claude_code", base / "logs")
    monkeypatch.setenv("ENGRAM_HOME", str(base / "home"))
    monkeypatch.chdir(repo)
    code, _out, err = _run(["ingest", "--seal"], capsys)
    assert code == 0, err
    tapes = sorted((base / "home").rglob("*.jsonl.zst"))
    assert len(tapes) >= 6
    # in a fixed order (a tape's name hashes its meta, which holds this run's temporary paths)
    return sorted((reader.read_tape(t) for t in tapes),
                  key=lambda evs: json.dumps([evs[0].get("session"), evs[0].get("agent_id"), len(evs)]))


def test_type_confused_foreign_tapes_cost_only_their_own_session(tmp_path, monkeypatch, capsys):
    """A tape in a configured tape source (a teammate's, a pulled one) whose name matches its
    content but one of whose events holds a value of another type (or lacks a field, or is of
    another kind): the ingest exits 0 and indexes every other tape; the bad tape is either harmless
    (indexed) or refused as ``corrupt-tape`` naming its file and line; explain, search and tapes
    answer without a traceback."""
    from engram.errors import CorruptTape
    from engram.tape import reader, writer

    fixtures = _fixture_tapes(tmp_path, monkeypatch, capsys)
    rng = random.Random("type-confusion/tapes")
    kinds = ["meta", "msg.in", "msg.out", "tool.call", "tool.result", "code.read", "code.edit",
             "span.link", "x"]
    refused = indexed = 0
    for n in range(TAPES):
        work = tmp_path / f"w{n}"
        team = work / "team"
        repo = make_repo(work / "repo", sources=team)
        (repo / "hello.py").write_text("def main():\n    print('Hello, World!')\n")
        k = rng.randrange(len(fixtures))
        events = json.loads(json.dumps(fixtures[k]))
        j = rng.randrange(len(events))
        at = rng.choice(list(value_paths(events[j])))
        if at and n % 5 == 4:  # a field missing
            cur = events[j]
            for key in at[:-1]:
                cur = cur[key]
            del cur[at[-1]]
        else:
            writable = [v for v in ODD if v != "\ud800" and v != 2**70]
            events[j] = replaced(events[j], at, rng.choice(writable + kinds))
        if not isinstance(events[j], dict):
            events[j] = {"k": events[j]}
        if j == 0:  # a first line that is not a meta is refused before any of this (test_hostile)
            events[0]["k"] = "meta"
        bad = writer.write_tape(team, events)
        for i, evs in enumerate(fixtures):
            if i != k:
                writer.write_tape(team, evs)
        monkeypatch.setenv("ENGRAM_HOME", str(work / "home"))
        monkeypatch.chdir(repo)
        code, out, err = _run(["ingest", "--seal"], capsys)
        assert code == 0 and "Traceback" not in err, (n, j, at, err)
        res = json.loads(out)
        try:
            reader.read_tape(bad.path)
            harmless = True
        except CorruptTape:
            harmless = False
        mine = [e["error"] for e in res["errors"] if e["error"]["path"] == str(bad.path)]
        if harmless:
            assert not mine, mine
            indexed += 1
        else:
            assert mine and mine[0]["code"] == "corrupt-tape" and mine[0]["line"] >= 1, res["errors"]
            refused += 1
        code, out, err = _run(["tapes"], capsys)
        assert code == 0, err
        ids = {t["tape_id"] for t in json.loads(out)}
        others = {writer.write_tape(team, evs).tape_id for i, evs in enumerate(fixtures) if i != k}
        assert others <= ids and (bad.tape_id in ids) == harmless
        for argv in (["explain", "hello.py:1-2"], ["search", "hello world"], ["status"]):
            code, out, err = _run(argv, capsys)
            assert code == 0 and "Traceback" not in err, (argv, err)
    assert refused >= TAPES // 4 and indexed >= TAPES // 4, (refused, indexed)  # both ways tried
