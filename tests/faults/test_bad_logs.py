"""Fault injection on harness logs: every bad record is reported with its file and line, and
nothing else is lost (every other session of every harness is still indexed).

The base is the real logs of ``tests/data/harness/`` (Claude Code, Codex, OpenClaw, Gemini CLI,
Cursor) laid out as each harness lays them out, read by the real CLI (``engram.cli.main``, or
``python -m engram.cli`` where a process has to be killed). Each test breaks one thing in a copy:
JSON nested deeper than the tape encoder writes, lone UTF-16 surrogates, a byte order mark,
integers wider than 64 bits, truncated / malformed / binary lines, a symbolic link out of the
configured locations, unreadable logs and directories, a corrupt tape, a kill -9.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import apsw
import pytest

from engram.adapters import base
from engram.cli import main
from engram.errors import CorruptTape
from engram.paths import index_dir
from engram.tape import reader

HARNESS = Path(__file__).resolve().parents[1] / "data" / "harness"
CLAUDE = HARNESS / "claude_code"
HELLO_LOG = "codemie__4c2ddfdc__v2.0.64.jsonl"
HELLO_SID = "4c2ddfdc-b619-4525-8d03-1950fb1b0257"
HELLO = ('#!/usr/bin/env python3\n\n# Simple hello world program\ndef main():\n'
         '    print("Hello, World!")\n\nif __name__ == "__main__":\n    main()\n')
GEMINI_JSONL = "session-2026-02-01T10-00-gjsonl001.jsonl"
OFF = ("opencode", "aider")


class World:
    """A repository whose config points five harnesses at copies of their real logs."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.claude = tmp / "claude" / "-work-proj"
        self.codex = tmp / "codex" / "2026" / "05" / "11"
        self.claw = tmp / "openclaw" / "agents" / "main" / "sessions"
        self.gemini = tmp / "gemini" / "proj" / "chats"
        self.cursor = tmp / "cursor" / "work-proj" / "agent-transcripts"
        for d in (self.claude, self.codex, self.claw, self.gemini, self.cursor):
            d.mkdir(parents=True)
        for p in sorted(CLAUDE.glob("*.jsonl")):
            shutil.copy(p, self.claude / p.name)
        for p in sorted((HARNESS / "codex").glob("*.jsonl")):
            shutil.copy(p, self.codex / ("rollout-" + p.name.split("rollout-")[-1]))
        for p in sorted((HARNESS / "openclaw").glob("*.jsonl")):
            shutil.copy(p, self.claw / p.name)
        for p in sorted((HARNESS / "gemini_cli").glob("*session-*.json")):
            shutil.copy(p, self.gemini / p.name.split("__")[-1])
        (self.gemini / GEMINI_JSONL).write_text(gemini_jsonl("hello from a Gemini JSONL chat"))
        for p in sorted((HARNESS / "cursor").glob("*.jsonl")):
            shutil.copy(p, self.cursor / "c0ffee00-0000-4000-8000-000000000001.jsonl")
        self.root = tmp / "repo"
        (self.root / ".git").mkdir(parents=True)
        (self.root / ".engram").mkdir()
        cfg = "harnesses:\n"
        for name, d in (("claude_code", "claude"), ("codex", "codex"), ("openclaw", "openclaw"),
                        ("gemini_cli", "gemini"), ("cursor", "cursor")):
            cfg += f"  {name}:\n    paths: [{tmp / d}]\n"
        cfg += "".join(f"  {h}: false\n" for h in OFF)
        (self.root / ".engram" / "config.yml").write_text(cfg)
        (self.root / "hello.py").write_text(HELLO)

    def logs(self) -> list[Path]:
        return sorted(p for d in (self.claude, self.codex, self.claw, self.gemini, self.cursor)
                      for p in d.iterdir() if p.is_file())


def gemini_jsonl(text: str) -> str:
    """A Gemini CLI (v0.38+) JSONL chat: a metadata line, a user message, a reply."""
    lines = [{"sessionId": "9e0a1b2c-0000-4000-8000-00000000g001", "projectHash": "p0",
              "startTime": "2026-02-01T10:00:00.000Z", "kind": "main"},
             {"id": "m1", "type": "user", "timestamp": "2026-02-01T10:00:01.000Z",
              "content": [{"text": text}]},
             {"id": "m2", "type": "gemini", "timestamp": "2026-02-01T10:00:02.000Z",
              "content": "Hello back.", "model": "gemini-2.5-pro"}]
    return "".join(json.dumps(x) + "\n" for x in lines)


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    return w


def cli(capsys, *argv) -> dict | list:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err, err
    return json.loads(out)


def ingest(capsys, *extra) -> dict:
    return cli(capsys, "ingest", *extra)


def sessions(capsys) -> dict[tuple[str, str], dict]:
    """(harness, session) → its indexed tape (sealed or live; of several — a session and its
    subagents — the one with the most events)."""
    out: dict[tuple[str, str], dict] = {}
    for t in cli(capsys, "tapes"):
        key = (t["harness"], t["session"])
        if key not in out or t["events"] > out[key]["events"]:
            out[key] = t
    return out


def indexed(capsys) -> Counter:
    """How many tapes each (harness, session) has in the index."""
    return Counter((t["harness"], t["session"]) for t in cli(capsys, "tapes"))


@pytest.fixture
def baseline(world, capsys, tmp_path_factory, monkeypatch) -> Counter:
    """The sessions a clean ingest of the world indexes (in a throwaway home and index)."""
    home = tmp_path_factory.mktemp("baseline-home")
    old = os.environ["ENGRAM_HOME"]
    monkeypatch.setenv("ENGRAM_HOME", str(home))
    res = ingest(capsys, "--seal", "--index", str(home / "index.sqlite"))
    assert res["error_count"] == 0, res["errors"]
    code = main(["tapes", "--index", str(home / "index.sqlite")])
    got = Counter((t["harness"], t["session"]) for t in json.loads(capsys.readouterr().out))
    assert code == 0
    monkeypatch.setenv("ENGRAM_HOME", old)
    harnesses = {h for h, _ in got}
    assert harnesses == {"claude_code", "codex", "openclaw", "gemini_cli", "cursor"}
    return got


def errors_of(res: dict) -> list[dict]:
    return [e["error"] for e in res["errors"]]


def assert_reported(res: dict, path: Path, line: int | None, code: str | None = None) -> dict:
    """The one error about ``path`` (at ``line``); returns it."""
    mine = [e for e in errors_of(res) if e["path"] == str(path)]
    assert mine, f"nothing reported about {path}: {res['errors']}"
    hit = [e for e in mine if e["line"] == line and (code is None or e["code"] == code)]
    assert hit, f"{path}: expected line {line} ({code}), got {mine}"
    return hit[0]


def append(path: Path, *records) -> int:
    """Append JSONL lines (dicts or raw strings); the 1-based line number of the first."""
    with open(path, "rb") as f:
        n = f.read().count(b"\n")
    with open(path, "a", encoding="utf-8", errors="surrogatepass") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return n + 1


def claude_record(typ: str, content, uuid: str, **extra) -> dict:
    msg = {"role": typ, "content": content}
    if typ == "assistant":
        msg.update(id="msg_fault_" + uuid, model="claude-sonnet-4-5-20250929")
    return {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/work/proj",
            "sessionId": HELLO_SID, "version": "2.0.64", "type": typ, "message": msg,
            "uuid": uuid, "timestamp": "2025-12-11T10:30:00.000Z", **extra}


def deep(n: int, leaf="x") -> str:
    """JSON text of a value nested ``n`` arrays deep."""
    return "[" * n + json.dumps(leaf) + "]" * n


def tape_events(capsys, harness: str, session: str) -> list[dict]:
    t = sessions(capsys)[(harness, session)]
    assert not t["live"]
    return reader.read_tape(Path(t["path"]))


def all_indexed(capsys, baseline: Counter) -> dict:
    """Every session of the clean baseline is indexed; (harness, session) → its tape."""
    missing = baseline - indexed(capsys)
    assert not missing, f"sessions lost: {missing}"
    return sessions(capsys)


# -- values the tape encoder cannot write ---------------------------------------------------------


@pytest.mark.parametrize("depth", [300, 2000])
@pytest.mark.parametrize("seal", [True, False], ids=["sealed", "live"])
def test_deeply_nested_tool_input(world, baseline, capsys, depth, seal):
    """A tool input nested 300 / 2,000 levels deep: the record is kept, its deep part as JSON
    text; live (plain ``ingest``) and sealed, every other source is indexed."""
    log = world.claude / HELLO_LOG
    block = {"type": "tool_use", "id": "toolu_deep", "name": "Bash",
             "input": "@INPUT@"}
    rec = json.dumps(claude_record("assistant", [block], "fault-deep-1"))
    line = append(log, rec.replace('"@INPUT@"', '{"command": "true", "payload": %s}' % deep(depth)))
    res = ingest(capsys, *(["--seal"] if seal else []))
    err = assert_reported(res, log, line, base.VALUE_REWRITTEN)
    assert "JSON text" in err["message"]
    assert res["error_count"] == 1
    got = all_indexed(capsys, baseline)
    assert got[("claude_code", HELLO_SID)]["live"] is (not seal)
    if seal:
        call = [e for e in tape_events(capsys, "claude_code", HELLO_SID)
                if e["k"] == "tool.call" and e.get("call_id") == "toolu_deep"]
        payload = call[0]["args"]["payload"]
        flat = payload
        while not isinstance(flat, str):
            flat = flat[0]
        assert flat.startswith("[[") and flat.rstrip("]").endswith('"x"')  # the deep part, as text
        assert "values rewritten" in " ".join(got[("claude_code", HELLO_SID)]["coverage_reasons"])


def test_lone_surrogates_in_every_jsonl_harness(world, baseline, capsys):
    """Half an emoji (``"\\ud83d"``) in a Claude Code, Codex, OpenClaw, Gemini CLI (JSONL) and
    Cursor line: the record is kept with U+FFFD, reported with its line."""
    half = '"half an emoji \\ud83d here"'
    cc = world.claude / HELLO_LOG
    cc_line = append(cc, json.dumps(claude_record("user", "@T@", "fault-sur-1")).replace(
        '"@T@"', half))
    cx = world.codex / "rollout-2026-05-11T13-28-45-019e1695.jsonl"
    cx_line = append(cx, '{"timestamp":"2026-05-11T13:40:00.000Z","type":"response_item",'
                         '"payload":{"type":"message","role":"user","content":[{"type":'
                         '"input_text","text":%s}]}}' % half)
    oc = world.claw / "synthetic__jazzyalex__small.jsonl"
    oc_line = append(oc, '{"type":"message","id":"mfault","parentId":"m2","timestamp":'
                         '"2026-02-24T09:10:00Z","message":{"role":"user","content":[{"type":'
                         '"text","text":%s}]}}' % half)
    gm = world.gemini / GEMINI_JSONL
    gm_line = append(gm, '{"id":"m3","type":"user","timestamp":"2026-02-01T10:00:03.000Z",'
                         '"content":[{"text":%s}]}' % half)
    cu = world.cursor / "c0ffee00-0000-4000-8000-000000000001.jsonl"
    cu_line = append(cu, '{"role":"user","message":{"content":[{"type":"text","text":%s}]}}'
                     % half)
    res = ingest(capsys, "--seal")
    for path, line in ((cc, cc_line), (cx, cx_line), (oc, oc_line), (gm, gm_line), (cu, cu_line)):
        err = assert_reported(res, path, line, base.VALUE_REWRITTEN)
        assert "surrogate" in err["message"]
    assert res["error_count"] == 5
    got = all_indexed(capsys, baseline)
    texts = []
    for key in (("claude_code", HELLO_SID), ("openclaw", "openclaw-stage0-small")):
        texts += [e.get("text") for e in reader.read_tape(Path(got[key]["path"]))]
    assert "half an emoji \ufffd here" in texts


def test_lone_surrogate_in_a_legacy_gemini_json_session(world, baseline, capsys):
    src = next(world.gemini.glob("session-2025-12-01*.json"))
    rec = json.loads(src.read_text())
    rec["messages"][0]["content"] = "@T@"
    src.write_text(json.dumps(rec).replace('"@T@"', '"lone \\udc00 low half"'))
    res = ingest(capsys, "--seal")
    err = assert_reported(res, src, 1, base.VALUE_REWRITTEN)   # one line: json.dumps
    assert "surrogate" in err["message"]
    got = all_indexed(capsys, baseline)
    gem = [t for (h, _s), t in got.items() if h == "gemini_cli" and t["path"]]
    texts = [e.get("text") for t in gem for e in reader.read_tape(Path(t["path"]))]
    assert "lone \ufffd low half" in texts


def test_wide_integers_in_codex_call_arguments(world, baseline, capsys):
    """2**70 in a function call's arguments (a JSON string inside the record): kept as its
    decimal string, reported with the line."""
    cx = world.codex / "rollout-2026-05-11T13-28-45-019e1695.jsonl"
    args = json.dumps({"cmd": "seq 3", "limit": 2 ** 70, "neg": -(2 ** 70)})
    line = append(cx, {"timestamp": "2026-05-11T13:40:00.000Z", "type": "response_item",
                       "payload": {"type": "function_call", "name": "exec_command",
                                   "arguments": args, "call_id": "call_wide"}})
    res = ingest(capsys, "--seal")
    err = assert_reported(res, cx, line, base.VALUE_REWRITTEN)
    assert "64 bits" in err["message"]
    got = all_indexed(capsys, baseline)
    sid = next(s for h, s in got if h == "codex" and "019e1695" in s)
    call = next(e for e in tape_events(capsys, "codex", sid) if e.get("call_id") == "call_wide")
    assert call["args"]["limit"] == str(2 ** 70) and call["args"]["neg"] == str(-(2 ** 70))


def test_byte_order_marks_lose_nothing(world, baseline, capsys):
    """A UTF-8 BOM at the start of a Claude Code log and of a line in its middle: stripped; the
    session has exactly the events of the clean log."""
    log = world.claude / HELLO_LOG
    before = ingest(capsys, "--seal")
    clean = tape_events(capsys, "claude_code", HELLO_SID)
    lines = log.read_bytes().splitlines(keepends=True)
    lines[0] = b"\xef\xbb\xbf" + lines[0]
    lines[5] = b"\xef\xbb\xbf" + lines[5]
    log.write_bytes(b"".join(lines))
    shutil.rmtree(index_dir())
    for p in (Path(os.environ["ENGRAM_HOME"]) / "tapes").glob("*"):
        p.unlink()
    res = ingest(capsys, "--seal")
    assert before["error_count"] == res["error_count"] == 0, res["errors"]
    assert tape_events(capsys, "claude_code", HELLO_SID) == clean
    all_indexed(capsys, baseline)


# -- broken lines and files -----------------------------------------------------------------------


def test_truncated_last_line_in_each_jsonl_harness(world, baseline, capsys):
    """An unterminated last line may still be being written: not an error, nothing lost."""
    for log in (world.claude / HELLO_LOG, world.codex / "rollout-2026-05-11T13-28-45-019e1695.jsonl",
                world.claw / "synthetic__jazzyalex__small.jsonl", world.gemini / GEMINI_JSONL):
        with open(log, "a") as f:
            f.write('{"type": "user", "message": {"role": "user", "content": "half a li')
    res = ingest(capsys, "--seal")
    assert res["error_count"] == 0, res["errors"]
    all_indexed(capsys, baseline)


def test_malformed_lines_in_the_middle(world, baseline, capsys):
    cc = world.claude / HELLO_LOG
    lines = cc.read_text().splitlines(keepends=True)
    lines.insert(3, "{this is not json\n")
    lines.insert(9, '{"type": "user", "message": \n')
    cc.write_text("".join(lines))
    cx = world.codex / "rollout-2026-05-11T11-26-55-019e1625.jsonl"
    lines = cx.read_text().splitlines(keepends=True)
    lines.insert(50, "[1, 2, 3]\n")
    cx.write_text("".join(lines))
    res = ingest(capsys, "--seal")
    assert_reported(res, cc, 4, "E_ADAPTER_PARSE")
    assert_reported(res, cc, 10, "E_ADAPTER_PARSE")
    assert_reported(res, cx, 51, "E_ADAPTER_PARSE")
    assert res["error_count"] == 3
    all_indexed(capsys, baseline)


def test_binary_garbage_logs(world, baseline, capsys):
    junk = world.claude / "junk.jsonl"
    junk.write_bytes(os.urandom(20000).replace(b"\n", b"\0") + b"\n" + os.urandom(300) + b"\n")
    cx_junk = world.codex / "rollout-2026-05-12T00-00-00-0000junk.jsonl"
    cx_junk.write_bytes(b"\x00\xff\xfe" * 1000 + b"\n")
    gm_junk = world.gemini / "session-2026-03-01T00-00-junk.json"
    gm_junk.write_bytes(os.urandom(5000))
    res = ingest(capsys, "--seal")
    for p in (junk, cx_junk, gm_junk):
        assert any(e["path"] == str(p) for e in errors_of(res)), p
    assert all(e["line"] is not None for e in errors_of(res) if e["path"] != str(gm_junk))
    all_indexed(capsys, baseline)


# -- what lies outside the configured locations, what cannot be read -------------------------------


def test_symlinks_out_of_the_locations_are_not_read(world, baseline, capsys, tmp_path):
    """A log that is a link to a file outside every configured location, and a project directory
    that is a link to a directory outside: neither is read; each is reported; links that stay
    inside are followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.jsonl"
    secret.write_text((CLAUDE / HELLO_LOG).read_text().replace(HELLO_SID, "5ec7e700-0000-4000-8000-000000000000"))
    (world.claude / "evil.jsonl").symlink_to(secret)
    (world.claude / "shadow.jsonl").symlink_to("/etc/shadow")
    (world.claude.parent / "-evil-dir").symlink_to(outside, target_is_directory=True)
    inside = world.claude.parent / "-moved"
    inside.mkdir()
    moved = inside / "moved.jsonl"
    moved.write_text((CLAUDE / HELLO_LOG).read_text().replace(HELLO_SID, "11111111-0000-4000-8000-000000000000"))
    (world.claude / "link-inside.jsonl").symlink_to(moved)
    res = ingest(capsys, "--seal")
    for link in (world.claude / "evil.jsonl", world.claude / "shadow.jsonl",
                 world.claude.parent / "-evil-dir" / "secret.jsonl"):
        err = assert_reported(res, link, None, "E_LINK_OUTSIDE")
        assert "outside" in err["message"]
    got = all_indexed(capsys, baseline)
    assert ("claude_code", "5ec7e700-0000-4000-8000-000000000000") not in got
    assert ("claude_code", "11111111-0000-4000-8000-000000000000") in got
    cur = apsw.Connection(str(index_dir() / "index.sqlite"))
    read = {r[0] for r in cur.execute("SELECT source FROM cursors")}
    assert not any("evil" in s or "shadow" in s for s in read)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway; the reporting "
                    "path is tested by test_unreadable_log_is_reported_not_traced")
def test_chmod_000_log_and_directory(world, baseline, capsys):
    log = world.claude / HELLO_LOG
    log.chmod(0)
    d = world.codex
    d.chmod(0)
    try:
        res = ingest(capsys, "--seal")
    finally:
        log.chmod(0o644)
        d.chmod(0o755)
    assert_reported(res, log, None, "E_UNREADABLE")
    assert_reported(res, d, None, "E_UNREADABLE_DIR")


def test_unreadable_log_is_reported_not_traced(world, baseline, capsys, monkeypatch):
    """A log that cannot be opened (a permission error, as a non-root user gets from chmod 000):
    one error naming it, no traceback; the rest is indexed."""
    victim = str(world.claude / HELLO_LOG)
    real_open = open

    def deny(path, *a, **kw):
        if str(path) == victim:
            raise PermissionError(13, "Permission denied", victim)
        return real_open(path, *a, **kw)

    monkeypatch.setattr(base, "open", deny, raising=False)
    res = ingest(capsys, "--seal")
    err = assert_reported(res, world.claude / HELLO_LOG, None, "E_UNREADABLE")
    assert "Permission denied" in err["message"] and res["error_count"] == 1
    assert indexed(capsys) == baseline - Counter({("claude_code", HELLO_SID): 1})
    monkeypatch.delattr(base, "open")
    res = ingest(capsys, "--seal")  # readable again: indexed, the error gone
    assert res["error_count"] == 0
    all_indexed(capsys, baseline)


def test_unreadable_directory_is_reported(world, baseline, capsys, monkeypatch):
    """A project directory that cannot be listed (as a non-root user gets from chmod 000)."""
    victim = str(world.codex.parent)  # .../2026/05
    real = os.scandir

    def deny(path=".", *a, **kw):
        if os.fspath(path).rstrip("/") == victim:
            raise PermissionError(13, "Permission denied", victim)
        return real(path, *a, **kw)

    monkeypatch.setattr(os, "scandir", deny)
    res = ingest(capsys, "--seal")
    err = assert_reported(res, world.codex.parent, None, "E_UNREADABLE_DIR")
    assert "Permission denied" in err["message"]
    got = indexed(capsys)
    assert +Counter({k: n for k, n in got.items() if k[0] != "codex"}) == \
        +Counter({k: n for k, n in baseline.items() if k[0] != "codex"})
    assert sum(n for k, n in got.items() if k[0] == "codex") < \
        sum(n for k, n in baseline.items() if k[0] == "codex")
    monkeypatch.setattr(os, "scandir", real)
    res = ingest(capsys, "--seal")
    assert res["error_count"] == 0, res["errors"]  # listed again: nothing left over
    all_indexed(capsys, baseline)


def test_vanished_log_is_reported_not_traced(world, baseline, capsys, monkeypatch):
    from engram.ingest import ingestor

    gone = world.claude / "gone.jsonl"
    real = ingestor.Ingestor.sources

    def listed_then_deleted(self, only=None):
        out = real(self, only)
        return out + [ingestor.Source(out[0].adapter, gone)]

    monkeypatch.setattr(ingestor.Ingestor, "sources", listed_then_deleted)
    res = ingest(capsys, "--seal")
    err = assert_reported(res, gone, None, "E_UNREADABLE")
    assert "No such file" in err["message"]
    all_indexed(capsys, baseline)


# -- tapes: repaired from their logs; a kill leaves what a clean run leaves ------------------------


SPANS = ("hello.py:1-8", "hello.py:4-5")


def explain_all(capsys, *extra: str) -> str:
    """The explain answers on ``SPANS``, timings out and the home directory's path as ``~``."""
    out = []
    for span in SPANS:
        r = cli(capsys, "explain", span, *extra)
        r.get("stats", {}).pop("elapsed_ms", None)
        out.append(r)
    return json.dumps(out, sort_keys=True).replace(os.environ["ENGRAM_HOME"], "~")


def test_rebuild_repairs_a_corrupt_tape_from_its_log(world, baseline, capsys):
    ingest(capsys, "--seal")
    answers = explain_all(capsys)
    tape = Path(sessions(capsys)[("claude_code", HELLO_SID)]["path"])
    good = tape.read_bytes()
    tape.write_bytes(good[: len(good) // 2] + bytes(64))  # torn write
    with pytest.raises(CorruptTape):
        reader.read_raw(tape)
    res = ingest(capsys, "--rebuild", "--seal")
    assert res["tapes_repaired"] == 1 and res["error_count"] == 0, res
    assert tape.read_bytes() == good
    assert explain_all(capsys) == answers
    all_indexed(capsys, baseline)


def _engram(root: Path, *argv: str, home: Path | None = None,
            batch_bytes: int | None = None) -> subprocess.Popen:
    """``engram ARGV`` in a process of its own (``batch_bytes``: a commit every that many bytes
    of logs, instead of ``BATCH_BYTES``)."""
    env = {**os.environ, "ENGRAM_NO_PROGRESS": "1"}
    if home is not None:
        env["ENGRAM_HOME"] = str(home)
    code = ("import sys\nfrom engram.ingest import ingestor\n"
            f"ingestor.BATCH_BYTES = {batch_bytes or 'ingestor.BATCH_BYTES'}\n"
            "from engram.cli import main\nsys.exit(main(sys.argv[1:]))")
    return subprocess.Popen([sys.executable, "-c", code, *argv], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _rows(index: Path) -> tuple[int, int]:
    """(tapes, tapes the lineage pass finished) committed in ``index`` (0, 0: none yet)."""
    try:
        c = apsw.Connection(f"file:{index}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY
                            | apsw.SQLITE_OPEN_URI)
        try:
            c.setbusytimeout(100)
            return (c.execute("SELECT count(*) FROM tapes").fetchone()[0],
                    c.execute("SELECT count(*) FROM lineage_done").fetchone()[0])
        finally:
            c.close()
    except apsw.Error:
        return 0, 0


def _tape_files(home: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (home / "tapes").glob("*.jsonl.zst")}


@pytest.mark.parametrize("batch_bytes", [None, 1], ids=["one-batch", "batch-per-source"])
def test_kill_9_mid_ingest_then_ingest_gives_what_a_clean_run_gives(world, tmp_path, capsys,
                                                                     batch_bytes):
    """Killed once rows are committed (in the lineage pass after the one batch; or between two
    of many batches), the next ingest ends with the tapes and answers of an uninterrupted run."""
    for i in range(40):  # enough sessions for several batches and a lineage pass
        for p in sorted(CLAUDE.glob("*.jsonl")):
            if "compaction" in p.name:  # 2.6 MB: left out of the copies
                continue
            text = p.read_text()
            (world.claude / f"copy{i:02d}-{p.name}").write_text(
                text.replace('"sessionId":"', f'"sessionId":"c{i:02d}-').replace(
                    '"sessionId": "', f'"sessionId": "c{i:02d}-'))
    clean_home = tmp_path / "clean-home"
    clean = _engram(world.root, "ingest", "--seal", "--index", str(tmp_path / "clean.sqlite"),
                    home=clean_home)
    out, err = clean.communicate(timeout=600)
    assert clean.returncode == 0, err
    total = _rows(tmp_path / "clean.sqlite")[0]

    index = index_dir() / "index.sqlite"
    proc = _engram(world.root, "ingest", "--seal", batch_bytes=batch_bytes)
    at_kill = (0, 0)
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        at_kill = _rows(index)
        if at_kill[0] > 0:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the ingest finished before the kill"
    assert at_kill[0] > 0 and at_kill != (total, total), at_kill  # mid-ingest: rows, not done
    if batch_bytes:
        assert at_kill[0] < total  # between two batches: sources left to read
    res = ingest(capsys, "--seal")
    assert res["error_count"] == 0, res["errors"]
    home = Path(os.environ["ENGRAM_HOME"])
    assert _tape_files(home) == _tape_files(clean_home)
    resumed = explain_all(capsys)
    os.environ["ENGRAM_HOME"], old = str(clean_home), os.environ["ENGRAM_HOME"]
    try:
        reference = explain_all(capsys, "--index", str(tmp_path / "clean.sqlite"))
    finally:
        os.environ["ENGRAM_HOME"] = old
    assert '"sessions": [{' in resumed and resumed == reference
    assert _rows(index) == _rows(tmp_path / "clean.sqlite") == (total, total)
