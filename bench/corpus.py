"""Realistic benchmark corpus: real code history turned into Claude Code sessions, with ground truth.

Real code nobody here wrote: consecutive releases of public pure-Python PyPI packages
(more-itertools 8.0.0 → 10.8.0, click 7.0 → 8.1.8), fetched once as sdists with
``pip download --no-deps --no-binary :all:`` into ``bench/.cache/sdist``. Every release pair's real
diff becomes Claude Code sessions (``~/.claude/projects/<encoded-cwd>/<session>.jsonl`` layout):

* **bootstrap** sessions ``Write`` (type ``create``) each file of a package's first release;
* **edit** sessions apply the real diff hunks as ``Edit`` calls (``old_string``/``new_string`` =
  the hunk plus enough context to be unique, ``toolUseResult`` with ``originalFile`` = the whole file
  before and ``structuredPatch`` computed with difflib, 3 lines of context, as Claude Code logs it),
  ``Write`` (``create`` for new files, ``update`` for wholesale rewrites) and a ``Bash`` rm for deleted
  files, around a ``Read`` of the code (``     1→`` gutters), a user request derived from the
  changelog and the touched function names, assistant reasoning naming the functions, a test run;
* **read** sessions, later in time, ``Read`` a release's code and discuss (often re-quote) it;
* **filler** sessions read and discuss other real code (toolz, attrs) in other projects.

Ground truth is blame across releases: every applied hunk is diffed line by line, changed lines get
the editing session, unchanged context keeps its provenance. For each function/class/method of the
final tree (``ast`` spans, decorators included) the origin is the session owning most of its lines.

Scenarios (``--scenarios a,b,c,d,e,h`` or ``all``) add sessions to the same corpus, each with its own
truth file under ``<out>/scenarios/``: (a) compaction splits, (b) orchestrator sessions (OpenClaw
JSONL) quoting the code they dispatch, (c) functions moved between files, (d) unrelated code written
where deleted code used to be, (e) prose-only discussions of a function. (h) changes the main truth
instead: after all sessions, people edit the code by hand, unlogged (comment blocks inserted above
definitions shift every line below them; single lines get a trailing comment), as happens in every
real repository: line positions in the log no longer match today's file.

Deterministic: seeded RNG, fixed timestamps, sorted iteration. Only the standard library is needed
(``orjson`` is used when present). Run ``python bench/corpus.py --help``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime as dt
import difflib
import functools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
import zipfile
from pathlib import Path

try:  # orjson writes the same compact, non-ASCII-raw JSON as JSON.stringify, faster
    import orjson

    def dumps(obj) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover
    def dumps(obj) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache" / "sdist"
CORPUS_VERSION = 2
HUMAN_EDITS = 40        # scenario (h): hand edits per package after all sessions (not logged)

PACKAGES = {
    "more-itertools": {
        "versions": ["8.0.0", "8.0.1", "8.0.2", "8.1.0", "8.2.0", "8.3.0", "8.4.0", "8.5.0", "8.6.0",
                     "8.7.0", "8.8.0", "8.9.0", "8.10.0", "8.12.0", "8.13.0", "8.14.0", "9.0.0",
                     "9.1.0", "10.0.0", "10.1.0", "10.2.0", "10.3.0", "10.4.0", "10.5.0", "10.6.0",
                     "10.7.0", "10.8.0"],
        # 8.1–8.12 sdists cannot be fetched with pip (their setup.py imports the *installed*
        # more_itertools, which setuptools ≥71 vendors, so pip sees version 10.8.0 and discards
        # them): the code comes from the wheels, the changelog from the last release's sdist.
        "dist": "wheel",
        "dirs": ["more_itertools/"],
        "changelog": "docs/versions.rst",
        "test_cmd": "python -m pytest {test} -q",
        "test_file": "test_more.py",
    },
    "click": {
        "versions": ["7.0", "7.1", "7.1.1", "7.1.2", "8.0.0", "8.0.1", "8.0.2", "8.0.3", "8.0.4",
                     "8.1.0", "8.1.1", "8.1.2", "8.1.3", "8.1.4", "8.1.5", "8.1.6", "8.1.7", "8.1.8"],
        "dirs": ["click/", "tests/"],
        "changelog": "CHANGES.rst",
        "test_cmd": "pytest {test} -q",
        "test_file": "test_{name}",
    },
}
FILLER = {"toolz": {"versions": ["0.12.1"], "dirs": ["toolz/"]},
          "attrs": {"versions": ["23.2.0"], "dirs": ["attr/", "attrs/"]}}

# ``--packages heldout``: other real code, for checking that figures tuned on the default corpus
# hold on code nobody looked at while tuning (packaging and requests: other authors, styles and
# changelog formats; six and idna as filler)
HELDOUT = {
    "packaging": {
        "versions": ["20.0", "20.1", "20.3", "20.4", "20.5", "20.7", "20.8", "20.9", "21.0", "21.2",
                     "21.3", "22.0", "23.0", "23.1", "23.2", "24.0", "24.1", "24.2", "25.0"],
        "dist": "wheel",
        "dirs": ["packaging/"],
        "changelog": "CHANGELOG.rst",
        "test_cmd": "python -m pytest {test} -q",
        "test_file": "test_{name}",
    },
    "requests": {
        "versions": ["2.25.0", "2.25.1", "2.26.0", "2.27.0", "2.27.1", "2.28.0", "2.28.1", "2.28.2",
                     "2.29.0", "2.30.0", "2.31.0", "2.32.2", "2.32.3"],
        "dist": "wheel",
        "dirs": ["requests/"],
        "changelog": "HISTORY.md",
        "test_cmd": "python -m pytest {test} -q",
        "test_file": "test_requests.py",
    },
}
HELDOUT_FILLER = {"six": {"versions": ["1.16.0"], "dirs": ["six.py"]},
                  "idna": {"versions": ["3.7"], "dirs": ["idna/"]}}
PACKAGE_SETS = {"default": (PACKAGES, FILLER), "heldout": (HELDOUT, HELDOUT_FILLER)}

CWD_BASE = "/home/dev/src"
ORCH_CWD = "/home/dev/orchestrator"
CC_VERSIONS = [("1.0.111", "claude-sonnet-4-20250514"), ("1.0.120", "claude-sonnet-4-20250514"),
               ("2.0.14", "claude-sonnet-4-5-20250929"), ("2.0.64", "claude-opus-4-5-20251101"),
               ("2.0.76", "claude-sonnet-4-5-20250929"), ("2.1.7", "claude-opus-4-5-20251101")]
T0 = dt.datetime(2025, 3, 3, 8, 30, tzinfo=dt.timezone.utc)
BIG_FILE_LINES = 1500          # above this Claude Code's Read refuses the whole file: offset/limit
REWRITE_FRACTION = 0.6         # more than this fraction of a file changed → one Write (update)


# ----------------------------------------------------------------------------------------------
# fetching and reading releases

def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sdist_path(pkg: str, ver: str, dist: str = "sdist") -> Path | None:
    want = _norm(f"{pkg}-{ver}")
    if CACHE.is_dir():
        for p in sorted(CACHE.iterdir()):
            if dist == "sdist" and p.name.endswith(".tar.gz") and _norm(p.name[: -len(".tar.gz")]) == want:
                return p
            if dist == "wheel" and p.name.endswith(".whl") and _norm("-".join(p.name.split("-")[:2])) == want:
                return p
    return None


def fetch(specs: list[tuple[str, str, str]], jobs: int = 4) -> None:
    """Download the missing distributions (once; the cache is reused)."""
    missing = [(p, v, d) for p, v, d in specs if sdist_path(p, v, d) is None]
    if not missing:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"fetching {len(missing)} distributions into {CACHE} ...", file=sys.stderr)
    procs: list[subprocess.Popen] = []
    for p, v, d in missing:
        while len([x for x in procs if x.poll() is None]) >= jobs:
            time.sleep(0.2)
        kind = ["--no-binary", ":all:"] if d == "sdist" else ["--only-binary", ":all:"]
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *kind, f"{p}=={v}", "-d", str(CACHE)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for x in procs:
        x.wait()
    still = [(p, v, d) for p, v, d in specs if sdist_path(p, v, d) is None]
    if still:
        raise SystemExit(f"could not fetch: {still}")


def read_release(pkg: str, ver: str, dirs: list[str], changelog: str | None = None, dist: str = "sdist"):
    """Return ({relpath: text} of the .py files under ``dirs`` (``src/`` stripped), changelog text)."""
    files: dict[str, str] = {}
    log = ""
    if dist == "wheel":
        with zipfile.ZipFile(sdist_path(pkg, ver, "wheel")) as zf:
            for name in sorted(zf.namelist()):
                if name.endswith(".py") and any(name.startswith(d) for d in dirs):
                    files[name] = zf.read(name).decode("utf-8", "replace").replace("\r\n", "\n")
        return dict(sorted(files.items())), log
    with tarfile.open(sdist_path(pkg, ver)) as tf:
        for m in tf.getmembers():
            if not m.isfile():
                continue
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if changelog and rel == changelog:
                log = tf.extractfile(m).read().decode("utf-8", "replace")
            if rel.startswith("src/"):
                rel = rel[4:]
            if not rel.endswith(".py") or not any(rel.startswith(d) for d in dirs):
                continue
            text = tf.extractfile(m).read().decode("utf-8", "replace").replace("\r\n", "\n")
            files[rel] = text
    return dict(sorted(files.items())), log


def changelog_bullets(log: str, ver: str) -> list[str]:
    """Bullets of the changelog section of ``ver`` (rst markup simplified)."""
    lines = log.splitlines()
    start = None
    for i, line in enumerate(lines[:-1]):
        head = line.strip()
        if (re.fullmatch(rf"(Version )?{re.escape(ver)}( \(.*\)| - .*)?", head)  # "2.32.3 (2024-05-29)"
                and set(lines[i + 1].strip()) <= set("-=~") and lines[i + 1].strip()):
            start = i + 2
            break
    if start is None:
        return []
    out: list[str] = []
    cur: list[str] | None = None
    for line in lines[start:]:
        if re.match(r"^(Version )?\d+(\.\d+)+( \(.*\)| - .*)?\s*$", line.strip()) and not line.startswith(" "):
            break
        m = re.match(r"^\s*[-*]\s+(.*)", line)
        if m:
            if cur:
                out.append(" ".join(cur))
            cur = [m.group(1).strip()]
        elif cur is not None and line.strip():
            cur.append(line.strip())
        elif cur is not None:
            out.append(" ".join(cur))
            cur = None
    if cur:
        out.append(" ".join(cur))
    clean = []
    for b in out:
        b = re.sub(r":(?:func|class|meth|attr|mod|data|exc|obj):`~?([^`]+)`", r"`\1`", b)
        b = re.sub(r":(?:issue|pr):`(\d+)`", r"#\1", b)
        b = re.sub(r"``([^`]+)``", r"`\1`", b)
        b = re.sub(r"\s*\(thanks to [^)]*\)", "", b).strip()
        if len(b) > 12 and not b.endswith(":"):
            clean.append(b)
    return clean


# ----------------------------------------------------------------------------------------------
# symbols

@dataclasses.dataclass(frozen=True)
class Sym:
    start: int   # 1-based inclusive, decorators included
    end: int
    name: str    # qualified: Class.method
    kind: str    # function / class / method
    doc: str


@functools.lru_cache(maxsize=256)
def symbols(text: str) -> list[Sym]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    out: list[Sym] = []

    def visit(body, prefix, in_class):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                kind = "class" if isinstance(node, ast.ClassDef) else ("method" if in_class else "function")
                out.append(Sym(start, node.end_lineno, prefix + node.name, kind, ast.get_docstring(node) or ""))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, prefix + node.name + ".", True)

    visit(tree.body, "", False)
    return tuple(out)


def enclosing_names(syms: list[Sym], lo: int, hi: int) -> list[str]:
    """Innermost symbols overlapping 1-based lines [lo, hi]."""
    hits = [s for s in syms if s.start <= hi and s.end >= lo]
    inner = [s for s in hits if not any(o is not s and o.start >= s.start and o.end <= s.end for o in hits)]
    return [s.name for s in inner]


# ----------------------------------------------------------------------------------------------
# ids, time, text helpers

class Ids:
    B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

    def __init__(self, rng: random.Random):
        self.rng = rng

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def b62(self, n: int) -> str:
        return "".join(self.rng.choice(self.B62) for _ in range(n))


def iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def encode_cwd(cwd: str) -> str:
    return re.sub(r"[/. ~]", "-", cwd)


def gutter(lines: list[str], first: int) -> str:
    return "\n".join(f"{first + i:6d}\u2192{line}" for i, line in enumerate(lines))


def code_of(text_lines: list[str], s: Sym) -> str:
    return "\n".join(text_lines[s.start - 1: s.end])


def structured_patch(before: list[str], after: list[str], lo: int, hi_b: int, hi_a: int) -> list[dict]:
    """difflib unified hunks (3 context lines) for a change confined to before[lo:hi_b] → after[lo:hi_a].

    Computed on a window (the files are identical outside it), then shifted; same hunks as a diff of
    the whole files. ``oldStart``/``newStart`` are 1-based, as jsdiff's structuredPatch reports them.
    """
    s = max(0, lo - 4)
    wb = before[s: hi_b + 4]
    wa = after[s: hi_a + 4]
    hunks = []
    cur = None
    for line in difflib.unified_diff(wb, wa, n=3, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line)
            ob, oc, nb, nc = int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1)
            if oc == 0:
                ob += 1
            if nc == 0:
                nb += 1
            cur = {"oldStart": ob + s, "oldLines": oc, "newStart": nb + s, "newLines": nc, "lines": []}
            hunks.append(cur)
        elif cur is not None:
            cur["lines"].append(line.rstrip("\n"))
    return hunks


def split_lines(text: str) -> list[str]:
    """Lines without terminators; a trailing newline gives no extra element."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def join_lines(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


# ----------------------------------------------------------------------------------------------
# Claude Code session writer

class CCSession:
    """Builds one Claude Code JSONL log with the record shapes of real logs (see FORMATS.md §1)."""

    def __init__(self, gen: Generator, cwd: str, t: dt.datetime, kind: str, sid: str | None = None,
                 version: tuple[str, str] | None = None):
        self.gen = gen
        self.rng = gen.rng
        self.sid = sid or gen.ids.uuid()
        self.cwd = cwd
        self.t = t
        self.kind = kind
        self.version, self.model = version or gen.cc_version(t)
        self.branch = self.rng.choice(["main", "main", "main", "dev", "fix-" + self.rng.choice(
            ["docs", "typing", "perf", "tests", "edge-cases"])])
        self.parent: str | None = None
        self.records: list[bytes] = []
        self.first_t = t
        self.mentions: set[tuple[str, str]] = set()   # (file, symbol) discussed/read

    # -- plumbing
    def tick(self, lo: float = 0.3, hi: float = 6.0) -> str:
        self.t += dt.timedelta(seconds=self.rng.uniform(lo, hi))
        return iso(self.t)

    def _env(self, typ: str, **extra) -> dict:
        u = self.gen.ids.uuid()
        rec = {"parentUuid": self.parent, "isSidechain": False, "userType": "external", "cwd": self.cwd,
               "sessionId": self.sid, "version": self.version, "gitBranch": self.branch}
        rec.update(extra)
        rec["type"] = typ
        self.parent = u
        return rec | {"uuid": u}

    def _emit(self, rec: dict) -> None:
        self.records.append(dumps(rec))

    def user(self, text: str, **extra) -> None:
        rec = self._env("user", **extra)
        rec["message"] = {"role": "user", "content": text}
        rec["timestamp"] = self.tick(5, 40)
        self._emit(rec)

    def _usage(self, out_tokens: int) -> dict:
        r = self.rng
        cc = r.randint(200, 6000)
        return {"input_tokens": r.randint(2, 9), "cache_creation_input_tokens": cc,
                "cache_read_input_tokens": r.randint(8000, 90000),
                "cache_creation": {"ephemeral_5m_input_tokens": cc, "ephemeral_1h_input_tokens": 0},
                "output_tokens": out_tokens, "service_tier": "standard"}

    def assistant(self, blocks: list[dict]) -> list[str]:
        """One API message streamed as one JSONL line per content block (same message.id)."""
        mid = "msg_01" + self.gen.ids.b62(22)
        req = "req_011C" + self.gen.ids.b62(18)
        uuids = []
        for i, b in enumerate(blocks):
            rec = self._env("assistant")
            last = i == len(blocks) - 1
            rec["message"] = {"id": mid, "type": "message", "role": "assistant", "model": self.model,
                              "content": [b], "stop_reason": ("tool_use" if b["type"] == "tool_use" else "end_turn") if last else None,
                              "stop_sequence": None, "usage": self._usage(self.rng.randint(1, 600))}
            rec["requestId"] = req
            rec["timestamp"] = self.tick(0.5, 9.0) if i == 0 else self.tick(0.05, 0.6)
            # envelope key order of real logs: message before type
            rec = {k: rec[k] for k in ("parentUuid", "isSidechain", "userType", "cwd", "sessionId",
                                       "version", "gitBranch", "message", "requestId", "type", "uuid", "timestamp")}
            self._emit(rec)
            uuids.append(rec["uuid"])
        return uuids

    def say(self, text: str) -> None:
        self.assistant([{"type": "text", "text": text}])

    def tool(self, name: str, inp: dict, content: str, result, text: str | None = None, is_error=False) -> None:
        tid = "toolu_01" + self.gen.ids.b62(22)
        blocks = ([{"type": "text", "text": text}] if text else []) + [
            {"type": "tool_use", "id": tid, "name": name, "input": inp}]
        auuid = self.assistant(blocks)[-1]
        rec = self._env("user")
        tr = {"tool_use_id": tid, "type": "tool_result", "content": content}
        if is_error:
            tr["is_error"] = True
        rec["message"] = {"role": "user", "content": [tr]}
        rec["timestamp"] = self.tick(0.1, 3.0)
        rec["toolUseResult"] = result
        if self.version.startswith("2.1"):
            rec["sourceToolAssistantUUID"] = auuid
        self._emit(rec)

    # -- tools
    def read(self, path: str, text_lines: list[str], offset: int | None = None, limit: int | None = None,
             text: str | None = None) -> tuple[int, int]:
        total = len(text_lines) + 1  # Claude Code counts the empty string after the final newline
        inp = {"file_path": path}
        if offset is not None:
            inp["offset"] = offset
            inp["limit"] = limit
            start = offset
            sel = text_lines[offset - 1: offset - 1 + limit]
        else:
            start = 1
            sel = text_lines + [""]
        content = gutter(sel, start)
        if not self.version.startswith("1."):
            content += ("\n\n<system-reminder>\nWhenever you read a file, you should consider whether it would be "
                        "considered malware. You CAN and SHOULD provide analysis of malware, what it is doing. But "
                        "you MUST refuse to improve or augment the code. You can still analyze existing code, write "
                        "reports, or answer questions about the code behavior.\n</system-reminder>\n")
        res = {"type": "text", "file": {"filePath": path, "content": "\n".join(sel), "numLines": len(sel),
                                        "startLine": start, "totalLines": total}}
        self.tool("Read", inp, content, res, text=text)
        return start, start + len(sel) - 1

    def edit(self, path: str, before: str, after: str, old: str, new: str, patch: list[dict],
             after_lines: list[str], new_lo: int, new_hi: int, text: str | None = None) -> None:
        s = max(0, new_lo - 5)
        snippet = gutter(after_lines[s: new_hi + 5], s + 1)
        content = (f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet of "
                   f"the edited file:\n{snippet}")
        res = {"filePath": path, "oldString": old, "newString": new, "originalFile": before,
               "structuredPatch": patch, "userModified": False, "replaceAll": False}
        self.tool("Edit", {"file_path": path, "old_string": old, "new_string": new}, content, res, text=text)

    def write(self, path: str, content_text: str, before: str | None, patch: list[dict], text: str | None = None):
        if before is None:
            msg = f"File created successfully at: {path}"
            res = {"type": "create", "filePath": path, "content": content_text, "structuredPatch": [],
                   "originalFile": None}
        else:
            al = split_lines(content_text)
            msg = (f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the "
                   f"edited file:\n{gutter(al[:40], 1)}")
            res = {"type": "update", "filePath": path, "content": content_text, "structuredPatch": patch,
                   "originalFile": before}
        self.tool("Write", {"file_path": path, "content": content_text}, msg, res, text=text)

    def bash(self, command: str, desc: str, stdout: str, text: str | None = None) -> None:
        self.tool("Bash", {"command": command, "description": desc}, stdout,
                  {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False}, text=text)

    def save(self, root: Path) -> int:
        d = root / "logs" / encode_cwd(self.cwd)
        d.mkdir(parents=True, exist_ok=True)
        data = b"\n".join(self.records) + b"\n"
        (d / f"{self.sid}.jsonl").write_bytes(data)
        return len(data)


class OCSession:
    """An OpenClaw (pi coding-agent v3) orchestrator transcript (FORMATS.md §6)."""

    def __init__(self, gen: Generator, t: dt.datetime):
        self.gen = gen
        self.rng = gen.rng
        self.sid = gen.ids.uuid()
        self.t = t
        self.first_t = t
        self.parent = self.sid
        self.lines: list[bytes] = []
        self.mentions: set[tuple[str, str]] = set()
        self.kind = "orchestrator"
        self.lines.append(dumps({"type": "session", "version": 3, "id": self.sid, "timestamp": iso(t),
                                 "cwd": ORCH_CWD}))
        self._entry({"type": "model_change", "provider": "anthropic", "modelId": "claude-opus-4-5"})

    def _entry(self, e: dict) -> str:
        eid = self.gen.ids.b62(8).lower()
        self.t += dt.timedelta(seconds=self.rng.uniform(1, 20))
        rec = {"type": e.pop("type"), "id": eid, "parentId": self.parent, "timestamp": iso(self.t)} | e
        self.parent = eid
        self.lines.append(dumps(rec))
        return eid

    def user(self, text: str) -> None:
        self._entry({"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": text}]}})

    def say(self, text: str) -> None:
        self._entry({"type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": text}],
                                                    "model": "claude-opus-4-5", "provider": "anthropic"}})

    def call(self, text: str, name: str, args: dict, result: str, details: dict | None = None) -> None:
        cid = "call_" + self.gen.ids.b62(16)
        self._entry({"type": "message", "message": {"role": "assistant", "model": "claude-opus-4-5",
                                                    "provider": "anthropic", "content": [
                                                        {"type": "text", "text": text},
                                                        {"type": "toolCall", "id": cid, "name": name, "arguments": args}]}})
        tr = {"role": "toolResult", "toolCallId": cid, "toolName": name,
              "content": [{"type": "text", "text": result}], "isError": False}
        if details:
            tr["details"] = details
        self._entry({"type": "message", "message": tr})

    def save(self, root: Path) -> int:
        d = root / "openclaw" / "agents" / "orchestrator" / "sessions"
        d.mkdir(parents=True, exist_ok=True)
        data = b"\n".join(self.lines) + b"\n"
        (d / f"{self.sid}.jsonl").write_bytes(data)
        return len(data)


# ----------------------------------------------------------------------------------------------
# prose

REQ_TEMPLATES = [
    "{bullet}\n\nThe code is in {file}.",
    "Can you work on {names} in {file}? {bullet}",
    "Next item for {ver}: {bullet}",
    "{bullet} Please make the change in {file} and keep the existing behaviour otherwise.",
    "I'd like to get this into the {ver} release: {bullet}",
]
REQ_NO_BULLET = [
    "Please update {names} in {file}.",
    "Can you clean up {names} in {file}? We need it for {ver}.",
    "There are a few changes pending for {names} in {file}; please apply them.",
    "Refactor {names} in {file} a bit, it has been bugging me.",
    "Let's finish the {ver} work on {file}: {names}.",
]
TEST_REQ = [
    "Add tests covering {names} in {file}.",
    "The tests in {file} need updating for {names}.",
    "Please extend {file} with cases for {names}.",
]
OPEN_TEMPLATES = [
    "I'll start by reading {file} around {names}.",
    "Let me look at the current implementation of {names} first.",
    "First I'll read {file} to see how {names} is written today.",
    "Let me find {names} in {file}.",
]
EDIT_TEMPLATES = [
    "Now I'll update {names}.",
    "I'll change {names} so that it matches the request.",
    "Next, the change to {names}:",
    "Here is the edit for {names}.",
    "Updating {names} in {file}.",
    "The change in {names} is small; applying it now.",
]
REASON_TEMPLATES = [
    "Looking at {names}, the logic is spread over a few lines; the cleanest fix is to change it in place rather "
    "than add another helper.",
    "{names} is used by several other functions, so I'll keep the signature stable and only change the body.",
    "I see how {names} works now. The change touches only this function, so the rest of {file} can stay as it is.",
    "The existing tests for {names} should still pass after this; I'll run them afterwards.",
    "Before editing {names} I checked its callers; none of them depend on the detail I'm changing.",
]
DONE_TEMPLATES = [
    "Done. I updated {names} in {file} and the tests pass.",
    "The changes to {names} are in place and the test suite is green.",
    "I've finished the work on {names}. Summary: the edits are confined to {file}.",
    "All set — {names} updated, tests run successfully.",
]
READ_QUESTIONS = [
    "How does {name} in {file} work?",
    "Can you explain what {name} does? I'm reviewing {file}.",
    "I'm trying to understand {name}. Walk me through it.",
    "Is there anything surprising in {name}? I want to use it in our pipeline.",
    "Why is {name} written this way?",
    "Review {name} in {file} for edge cases, no changes please.",
]
READ_ANSWERS = [
    "Here is {name}:\n\n```python\n{code}\n```\n\nIt is a small function; the main loop does the work and the "
    "rest handles the edge cases.",
    "`{name}` reads like this:\n\n```python\n{code}\n```\n\nNothing surprising apart from how it treats empty input.",
    "The relevant part of {file}:\n\n```python\n{code}\n```\n\nI don't see a bug here; the behaviour matches its docstring.",
    "{name} lives at lines {start}-{end} of {file}. It does what the docstring says; the implementation relies on the "
    "standard library and keeps no state between calls.",
    "I've read {name} (lines {start}-{end}). It's straightforward; the only subtle part is how it handles the last "
    "element.",
]


def names_text(names: list[str]) -> str:
    names = [f"`{n}`" for n in names[:4]]
    if not names:
        return "the module-level code"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


STOP = set("""a an the and or of to in on for with by is are be it its this that as at from if then else not no
into when which while will can may each all any one two only than more most other such also their there these
those was were has have had been but so do does return returns given value values object objects default""".split())


def paraphrase(name: str, doc: str, code: str, rng: random.Random) -> str | None:
    """Prose naming ``name`` that shares no 4-word run with its code (a programmatic paraphrase)."""
    first = doc.strip().split("\n\n")[0]
    words = [w.lower() for w in re.findall(r"[A-Za-z][a-z]{3,}", first) if w.lower() not in STOP]
    seen: list[str] = []
    for w in words:
        if w not in seen and w != name.lower():
            seen.append(w)
    if len(seen) < 3:
        return None
    keys = seen[:7]
    rng.shuffle(keys)
    templates = [
        "About `{n}`: as I understand it, the point is {w} — it deals with {k}. Is that the right mental model?",
        "Decision: keep `{n}` but document it better. Key ideas, in my words: {k}. The core of it is {w}.",
        "We discussed `{n}` earlier. Roughly: it is about {w}; the notions involved are {k}. No code change needed yet.",
        "Note for later on `{n}`: think {w}. Related concepts: {k}. Worth a closer look when we refactor.",
    ]
    text = rng.choice(templates).format(n=name, w=keys[0], k=", ".join(keys[1:]))
    code_words = re.findall(r"\w+", code.lower())
    grams = {tuple(code_words[i:i + 4]) for i in range(len(code_words) - 3)}
    tw = re.findall(r"\w+", text.lower())
    if any(tuple(tw[i:i + 4]) in grams for i in range(len(tw) - 3)):
        return None
    return text


# ----------------------------------------------------------------------------------------------
# the generator

@dataclasses.dataclass
class Unit:
    """A contiguous piece of a release diff for one file: one or more Edits, a Write, or a delete."""
    pkg: str
    pair: int          # index of the target release
    file: str
    kind: str          # edit / create / rewrite / delete / bootstrap
    groups: list = dataclasses.field(default_factory=list)  # edit: list of opcode groups (a-coords)
    before: str = ""
    after: str = ""
    names: list = dataclasses.field(default_factory=list)


class FileState:
    """Current text of a file as a line list plus per-line provenance (owner session, history set)."""

    def __init__(self, lines: list[str], owner: str):
        h = frozenset([owner])
        self.lines = list(lines)
        self.owner = [owner] * len(lines)
        self.hist = [h] * len(lines)

    def replace(self, lo: int, hi: int, new: list[str], sid: str) -> None:
        """Replace lines[lo:hi] by ``new``; unchanged lines (inner line diff) keep their provenance."""
        old = self.lines[lo:hi]
        sm = difflib.SequenceMatcher(None, old, new, autojunk=False)
        owners, hists = [], []
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                owners += self.owner[lo + i1: lo + i2]
                hists += self.hist[lo + i1: lo + i2]
            elif tag in ("replace", "insert"):
                base = frozenset().union(*self.hist[lo + i1: lo + i2]) if tag == "replace" else frozenset()
                h = base | {sid}
                owners += [sid] * (j2 - j1)
                hists += [h] * (j2 - j1)
        self.lines[lo:hi] = new
        self.owner[lo:hi] = owners
        self.hist[lo:hi] = hists


class Generator:
    def __init__(self, out: Path, sessions: int, seed: int, scenarios: set[str], orch_format: str,
                 cwd_base: str = CWD_BASE):
        self.out = out
        self.target = sessions
        self.rng = random.Random(seed)
        self.ids = Ids(random.Random(seed + 1))
        self.scenarios = scenarios
        self.orch_format = orch_format
        self.cwd_base = cwd_base
        self.files: dict[str, dict[str, FileState]] = {}
        self.meta: dict[str, dict] = {}     # session id → {kind, pkg, first_t, last_t, format}
        self.bytes = 0
        self.counts: dict[str, int] = {}
        self.scen_truth: dict[str, list] = {s: [] for s in "abcdeh"}
        self.split_part1: dict[str, str] = {}     # part-2 session → part-1 session
        self.dispatch: dict[str, str] = {}        # coding session → orchestrator session
        self.mentions: dict[tuple[str, str, str], set[str]] = {}  # (pkg, file, sym) → sessions

    # -- time / versions
    def cc_version(self, t: dt.datetime) -> tuple[str, str]:
        span = (t - T0).total_seconds() / (86400 * 300)
        i = min(len(CC_VERSIONS) - 1, max(0, int(span * len(CC_VERSIONS))))
        return CC_VERSIONS[i]

    def cwd(self, pkg: str) -> str:
        return f"{self.cwd_base}/{pkg}"

    def path(self, pkg: str, rel: str) -> str:
        return f"{self.cwd(pkg)}/{rel}"

    def record(self, s, pkg: str, kind: str, fmt: str = "claude_code") -> None:
        self.bytes += s.save(self.out)
        self.meta[s.sid] = {"kind": kind, "pkg": pkg, "format": fmt, "first_t": iso(s.first_t), "last_t": iso(s.t)}
        self.counts[kind] = self.counts.get(kind, 0) + 1
        for f, sym in s.mentions:
            self.mentions.setdefault((pkg, f, sym), set()).add(s.sid)

    # -- diff → units
    def plan_units(self, pkg: str, releases: list[dict[str, str]]) -> list[Unit]:
        units: list[Unit] = []
        for f, text in releases[0].items():
            units.append(Unit(pkg, 0, f, "bootstrap", after=text))
        for p in range(1, len(releases)):
            a, b = releases[p - 1], releases[p]
            for f in sorted(set(a) | set(b)):
                if f not in b:
                    units.append(Unit(pkg, p, f, "delete", before=a[f]))
                    continue
                if f not in a:
                    units.append(Unit(pkg, p, f, "create", after=b[f]))
                    continue
                if a[f] == b[f]:
                    continue
                al, bl = split_lines(a[f]), split_lines(b[f])
                sm = difflib.SequenceMatcher(None, al, bl, autojunk=False)
                ops = list(sm.get_opcodes())
                changed = sum(max(i2 - i1, j2 - j1) for t, i1, i2, j1, j2 in ops if t != "equal")
                if changed > REWRITE_FRACTION * max(len(al), 1) and len(al) > 20:
                    units.append(Unit(pkg, p, f, "rewrite", before=a[f], after=b[f]))
                    continue
                # merge change opcodes separated by ≤ 2 equal lines into one edit group
                groups: list[list] = []
                for t, i1, i2, j1, j2 in ops:
                    if t == "equal":
                        continue
                    if groups and i1 - groups[-1][-1][2] <= 2:
                        groups[-1].append((t, i1, i2, j1, j2))
                    else:
                        groups.append([(t, i1, i2, j1, j2)])
                units.append(Unit(pkg, p, f, "edit", groups=groups, before=a[f], after=b[f]))
        return units

    # -- main
    def run(self) -> dict:
        t_start = time.time()
        specs = [(p, v, c.get("dist", "sdist")) for p, c in PACKAGES.items() for v in c["versions"]]
        specs += [(p, c["versions"][-1], "sdist") for p, c in PACKAGES.items() if c.get("dist") == "wheel"]
        specs += [(p, v, "sdist") for p, c in FILLER.items() for v in c["versions"]]
        fetch(specs)
        if self.out.exists():
            shutil.rmtree(self.out)
        (self.out / "logs").mkdir(parents=True)

        histories = {}
        for pkg, conf in PACKAGES.items():
            rels = []
            for v in conf["versions"]:
                rels.append(read_release(pkg, v, conf["dirs"], dist=conf.get("dist", "sdist"))[0])
            log = read_release(pkg, conf["versions"][-1], [], conf["changelog"])[1]
            histories[pkg] = (rels, log)
        filler = {}
        for pkg, conf in FILLER.items():
            filler[pkg] = read_release(pkg, conf["versions"][-1], conf["dirs"])[0]

        plans = {pkg: self.plan_units(pkg, rels) for pkg, (rels, _) in histories.items()}
        n_boot = sum(1 for u in sum(plans.values(), []) if u.kind == "bootstrap")
        n_groups = sum(len(u.groups) if u.kind == "edit" else 1 for u in sum(plans.values(), []) if u.kind != "bootstrap")
        edit_target = max(1, int(self.target * 0.62) - n_boot)
        per_session = max(1.0, n_groups / edit_target)
        read_target = int(self.target * 0.23)

        # package timelines, interleaved by start time
        sessions_by_pkg = {}
        for pkg in PACKAGES:
            sessions_by_pkg[pkg] = self.chunk(plans[pkg], per_session)
        n_edit = sum(len(v) for v in sessions_by_pkg.values())
        reads_left = max(0, self.target - n_edit - int(self.target * 0.15)) if n_edit < self.target else read_target
        reads_left = max(read_target, reads_left)

        for pkg, (rels, changelog) in histories.items():
            self.gen_package(pkg, rels, changelog, sessions_by_pkg[pkg],
                             reads=int(reads_left * len(sessions_by_pkg[pkg]) / max(1, n_edit)))
        if "c" in self.scenarios or "d" in self.scenarios:
            self.gen_moves_and_replacements(filler)
        if "h" in self.scenarios:
            self.gen_human_edits()
        done = sum(self.counts.get(k, 0) for k in ("bootstrap", "edit", "read"))
        for i in range(max(0, self.target - done)):
            self.gen_filler(filler, i)
        truth = self.write_truth()
        if "e" in self.scenarios:
            self.gen_prose(truth)
        self.write_repo()
        summary = {
            "corpus_version": CORPUS_VERSION, "sessions": len(self.meta), "by_kind": dict(sorted(self.counts.items())),
            "raw_log_bytes": self.bytes, "raw_log_mb": round(self.bytes / 1e6, 2), "truth_spans": len(truth),
            "scenarios": {k: len(v) for k, v in self.scen_truth.items() if k in self.scenarios},
            "packages": {p: [c["versions"][0], c["versions"][-1]] for p, c in PACKAGES.items()},
            "filler_packages": {p: c["versions"] for p, c in FILLER.items()},
            "cwd_base": self.cwd_base, "orchestrator_format": self.orch_format,
            "seed_sessions_target": self.target, "generate_seconds": round(time.time() - t_start, 1),
        }
        (self.out / "sessions.json").write_text(json.dumps(self.meta, indent=1, sort_keys=True))
        (self.out / "corpus.json").write_text(json.dumps(summary, indent=2))
        return summary

    def chunk(self, units: list[Unit], per_session: float) -> list[list[tuple[Unit, list]]]:
        """Pack units into sessions: each session = list of (unit, groups) pieces, 1–2 files."""
        rng = self.rng
        out: list[list[tuple[Unit, list]]] = []
        by_pair: dict[int, list[Unit]] = {}
        for u in units:
            by_pair.setdefault(u.pair, []).append(u)
        for p in sorted(by_pair):
            pieces: list[tuple[Unit, list]] = []
            for u in by_pair[p]:
                if u.kind == "edit":
                    g = u.groups
                    i = 0
                    while i < len(g):
                        n = max(1, int(round(rng.uniform(0.5, 1.5) * per_session)))
                        pieces.append((u, g[i:i + n]))
                        i += n
                else:
                    pieces.append((u, []))
            i = 0
            while i < len(pieces):
                sess = [pieces[i]]
                i += 1
                if p > 0 and i < len(pieces) and pieces[i][0].file != sess[0][0].file and rng.random() < 0.25 \
                        and pieces[i][0].kind in ("edit", "create"):
                    sess.append(pieces[i])
                    i += 1
                out.append(sess)
        return out

    # -- a package's edit + read sessions
    def gen_package(self, pkg: str, rels: list[dict], changelog: str, sessions: list, reads: int) -> None:
        rng = self.rng
        conf = PACKAGES[pkg]
        state = self.files.setdefault(pkg, {})
        t = T0 + dt.timedelta(minutes=rng.randint(0, 600))
        n_pairs = len(rels)
        # reads are spread after each release proportionally to the work in it, weighted to later releases
        per_pair = {}
        for sess in sessions:
            per_pair[sess[0][0].pair] = per_pair.get(sess[0][0].pair, 0) + 1
        weights = {p: (1 + p) for p in range(n_pairs)}
        wsum = sum(weights.values())
        read_plan = {p: int(round(reads * weights[p] / wsum)) for p in range(n_pairs)}
        delta: dict[str, int] = {}   # a-coordinate → current coordinate offset, per file of the pair
        cur_pair = -1
        idx = 0
        while idx < len(sessions):
            sess = sessions[idx]
            pair = sess[0][0].pair
            if pair != cur_pair:
                if cur_pair >= 0:
                    t = self.gen_reads(pkg, rels[cur_pair], read_plan.get(cur_pair, 0), t)
                cur_pair = pair
                delta = {}
                t += dt.timedelta(hours=rng.uniform(6, 60))
            t = self.gen_edit_session(pkg, conf, rels, changelog, pair, sess, state, delta, t)
            idx += 1
        t = self.gen_reads(pkg, rels[-1], read_plan.get(n_pairs - 1, 0) + (reads - sum(read_plan.values())), t)
        # sanity: replaying the hunks reproduces the final release exactly
        for f, text in rels[-1].items():
            assert join_lines(state[f].lines) == text or state[f].lines == split_lines(text), (pkg, f)
        self.final = getattr(self, "final", {})
        self.final[pkg] = rels[-1]
        self.tend = getattr(self, "tend", {})
        self.tend[pkg] = t

    def bullets_for(self, changelog: str, ver: str, names: list[str]) -> tuple[str | None, list[str]]:
        bl = changelog_bullets(changelog, ver)
        short = [n.split(".")[-1] for n in names]
        hits = [b for b in bl if any(re.search(rf"\b{re.escape(n)}\b", b) for n in short if len(n) > 2)]
        return (hits[0] if hits else None), bl

    def gen_edit_session(self, pkg, conf, rels, changelog, pair, pieces, state, delta, t) -> dt.datetime:
        rng = self.rng
        ver = conf["versions"][pair]
        compact = pair > 0 and "a" in self.scenarios and rng.random() < 0.12 and pieces[0][0].kind == "edit"
        orch = (pair > 0 and not compact and "b" in self.scenarios and rng.random() < 0.12
                and pieces[0][0].kind == "edit")
        s = CCSession(self, self.cwd(pkg), t, "edit")
        kind = "bootstrap" if pieces[0][0].kind == "bootstrap" else "edit"
        # names touched, for prose
        all_names: list[str] = []
        plan = []   # (unit, groups) with names
        for u, groups in pieces:
            if u.kind in ("edit",):
                syms = symbols(u.after)
                names = []
                for g in groups:
                    j1, j2 = g[0][3], g[-1][4]
                    names += enclosing_names(syms, j1 + 1, max(j1 + 1, j2))
                names = list(dict.fromkeys(names))
            else:
                names = [x.name for x in symbols(u.after or u.before) if "." not in x.name][:4]
            all_names += names
            plan.append((u, groups, names))
        all_names = list(dict.fromkeys(all_names))
        main = pieces[0][0]
        files_txt = " and ".join(dict.fromkeys(u.file for u, _ in pieces))
        nt = names_text(all_names)
        bullet, bl = self.bullets_for(changelog, ver, all_names)
        if kind == "bootstrap":
            req = rng.choice([
                f"Set up {main.file} for the {pkg} project (version {ver}). Write the whole module.",
                f"Create {main.file} with the initial implementation for {pkg} {ver}.",
                f"We are starting {pkg}: write {main.file}.",
            ])
        elif main.file.startswith("tests/"):
            req = rng.choice(TEST_REQ).format(names=nt, file=files_txt)
            if bullet:
                req += f" Context from the changelog: {bullet}"
        elif bullet:
            req = rng.choice(REQ_TEMPLATES).format(bullet=bullet, file=files_txt, names=nt, ver=ver)
        else:
            req = rng.choice(REQ_NO_BULLET).format(names=nt, file=files_txt, ver=ver)
        orch_sid = None
        if orch:
            orch_sid = self.gen_orchestrator(pkg, main, pieces, nt, req, state, t - dt.timedelta(minutes=rng.randint(5, 90)))
        s.user(req)
        part1 = None
        for pi, (u, groups, names) in enumerate(plan):
            path = self.path(pkg, u.file)
            nt_u = names_text(names)
            if u.kind == "bootstrap":
                s.write(path, u.after, None, [], text=f"I'll write {u.file} now.")
                state[u.file] = FileState(split_lines(u.after), s.sid)
                continue
            if u.kind == "create":
                s.write(path, u.after, None, [], text=rng.choice([
                    f"{u.file} doesn't exist yet; I'll create it.", f"Creating {u.file} with {nt_u}."]))
                state[u.file] = FileState(split_lines(u.after), s.sid)
                continue
            if u.kind == "delete":
                s.bash(f"git rm {u.file}", f"Remove {u.file}", f"rm '{u.file}'",
                       text=f"{u.file} is no longer needed, removing it.")
                del state[u.file]
                continue
            fs = state[u.file]
            cur = fs.lines
            # read what we are about to change
            if groups:
                lo_a = groups[0][0][1] + delta.get(u.file, 0)
            else:
                lo_a = 0
            if len(cur) > BIG_FILE_LINES:
                off = max(1, lo_a - rng.randint(10, 60))
                s.read(path, cur, off, rng.choice([80, 120, 150, 200]), text=rng.choice(OPEN_TEMPLATES).format(
                    file=u.file, names=nt_u))
            else:
                s.read(path, cur, text=rng.choice(OPEN_TEMPLATES).format(file=u.file, names=nt_u))
            for f_, sy in ((u.file, n) for n in names):
                s.mentions.add((f_, sy))
            if rng.random() < 0.6:
                s.say(rng.choice(REASON_TEMPLATES).format(names=nt_u, file=u.file))
            if compact and part1 is None and pi == 0:
                # scenario (a): the context runs out here; the edits continue in a new log
                part1 = s
                s = self.continue_after_compaction(part1, req, u, nt_u)
            if u.kind == "rewrite":
                before = join_lines(cur)
                after_l = split_lines(u.after)
                patch = structured_patch(cur, after_l, 0, len(cur), len(after_l))
                s.write(path, u.after, before, patch, text=rng.choice([
                    f"The changes to {u.file} touch most of the file, so I'll rewrite it in one go.",
                    f"Rewriting {u.file}: {nt_u} all change."]))
                fs.replace(0, len(cur), after_l, s.sid)
                continue
            b_lines = split_lines(u.after)
            for g in groups:
                d = delta.get(u.file, 0)
                i1, i2 = g[0][1], g[-1][2]
                j1, j2 = g[0][3], g[-1][4]
                lo, hi = i1 + d, i2 + d
                new_block = b_lines[j1:j2]
                gnames = enclosing_names(symbols(u.after), j1 + 1, max(j1 + 1, j2)) if rng.random() < 0.5 else []
                self.apply_edit(s, path, fs, lo, hi, new_block, text=rng.choice(EDIT_TEMPLATES).format(
                    names=names_text(gnames) if gnames else nt_u, file=u.file) if rng.random() < 0.8 else None)
                delta[u.file] = d + (j2 - j1) - (i2 - i1)
        if kind == "edit" and rng.random() < 0.7:
            tests = [u.file for u, _, _ in plan if u.file.startswith("tests/")] or \
                    ["tests/" + conf["test_file"].format(name=Path(main.file).name)]
            cmd = conf["test_cmd"].format(test=tests[0])
            n = rng.randint(20, 400)
            s.bash(cmd, "Run the tests", f"{'.' * min(n, 70)}\n{n} passed in {rng.uniform(0.2, 4):.2f}s",
                   text=rng.choice(["Let me run the tests.", "Running the test suite to check.", None]))
        s.say(rng.choice(DONE_TEMPLATES).format(names=nt, file=files_txt))
        if part1 is not None:
            self.record(part1, pkg, "edit-part1")
            self.split_part1[s.sid] = part1.sid
        if orch_sid:
            self.dispatch[s.sid] = orch_sid
        self.record(s, pkg, kind)
        return s.t + dt.timedelta(minutes=rng.uniform(3, 90))

    def apply_edit(self, s: CCSession, path: str, fs: FileState, lo: int, hi: int, new_block: list[str],
                   text: str | None) -> None:
        """Edit lines[lo:hi] → new_block, with the least context that makes old_string unique."""
        cur = fs.lines
        cur_text = join_lines(cur)
        ctx_b = 0 if hi > lo else 1
        ctx_a = 0
        if hi > lo and not new_block:
            # a pure deletion needs a context line, or the replaced text would leave an empty line
            if hi < len(cur):
                ctx_a = 1
            else:
                ctx_b = 1
        while True:
            olo, ohi = lo - ctx_b, hi + ctx_a
            old = "\n".join(cur[max(olo, 0): min(ohi, len(cur))])
            if old.strip() and cur_text.count(old) == 1:
                break
            if olo <= 0 and ohi >= len(cur):
                break
            if (ctx_a + ctx_b) % 2 == 0 and olo > 0 or ohi >= len(cur):
                ctx_b += 1
            else:
                ctx_a += 1
        olo, ohi = max(lo - ctx_b, 0), min(hi + ctx_a, len(cur))
        new_lines = cur[olo:lo] + new_block + cur[hi:ohi]
        old = "\n".join(cur[olo:ohi])
        new = "\n".join(new_lines)
        before = cur_text
        before_lines = list(cur)
        fs.replace(olo, ohi, new_lines, s.sid)
        if os.environ.get("CORPUS_DEBUG"):
            assert before.replace(old, new, 1) == join_lines(fs.lines), (path, old[:80], new[:80])
        patch = structured_patch(before_lines, fs.lines, olo, ohi, olo + len(new_lines))
        s.edit(path, before, join_lines(fs.lines), old, new, patch, fs.lines, olo, olo + len(new_lines), text=text)

    # -- scenario (a)
    def continue_after_compaction(self, p1: CCSession, req: str, u: Unit, nt_u: str) -> CCSession:
        rng = self.rng
        t = p1.t + dt.timedelta(seconds=rng.uniform(20, 120))
        s2 = CCSession(self, p1.cwd, t, "edit", version=(p1.version, p1.model))
        s2.branch = p1.branch
        # the quoted reasoning: the assistant text blocks of part 1
        said = []
        for r in p1.records:
            d = json.loads(r)
            if d.get("type") == "assistant":
                for b in d["message"]["content"]:
                    if b.get("type") == "text":
                        said.append(b["text"])
        code = ""
        fs = self.files[u.pkg][u.file]
        if u.groups:
            lo = max(0, u.groups[0][0][1] - 3)
            code = "\n".join(fs.lines[lo: lo + 25])
        summary = (
            "This session is being continued from a previous conversation that ran out of context. The conversation "
            "is summarized below:\nAnalysis:\nLet me chronologically analyze the conversation:\n\n"
            f"1. **Initial Request**: The user asked: \"{req}\"\n\n"
            f"2. **My approach**: I read {u.file} to understand {nt_u}. " + " ".join(said[-3:]) + "\n\n"
            "Summary:\n"
            f"1. Primary Request and Intent:\n   {req}\n\n"
            f"2. Key Technical Concepts:\n   - {nt_u} in {u.file}\n\n"
            f"3. Files and Code Sections:\n   - {self.path(u.pkg, u.file)}\n"
            f"     - Read to understand the current implementation of {nt_u}\n"
            f"     - Relevant code:\n```python\n{code}\n```\n\n"
            f"4. Pending Tasks:\n   - Apply the planned edits to {nt_u}\n\n"
            f"5. Current Work:\n   I had just finished reading {u.file} and was about to edit {nt_u}.\n\n"
            f"6. Optional Next Step:\n   Edit {nt_u} in {u.file} as planned.\n"
            "Please continue the conversation from where we left it off without asking the user any further "
            "questions. Continue with the last task that you were asked to work on.")
        s2.parent = None
        s2.user(summary, isCompactSummary=True, isVisibleInTranscriptOnly=True)
        s2.say(f"Continuing with the edits to {nt_u}.")
        return s2

    # -- scenario (b)
    def gen_orchestrator(self, pkg: str, main: Unit, pieces, nt: str, req: str, state, t: dt.datetime) -> str:
        """An orchestrator that plans the change and dispatches it, quoting current and drafted code."""
        rng = self.rng
        _fs = state[main.file]  # (unused; kept so the generated corpus stays byte-identical)
        u, groups = pieces[0]
        a_lines = split_lines(u.before)
        b_lines = split_lines(u.after)
        g = groups[0]
        i1, i2, j1, j2 = g[0][1], g[-1][2], g[0][3], g[-1][4]
        old_code = "\n".join(a_lines[max(0, i1 - 2): i2 + 2])
        new_code = "\n".join(b_lines[max(0, j1 - 2): j2 + 2])
        task = (f"Repository: {self.cwd(pkg)}\nFile: {main.file}\nGoal: {req}\n\nCurrent code:\n```python\n{old_code}\n```\n\n"
                f"Change it to:\n```python\n{new_code}\n```\n\nKeep the rest of {nt} unchanged, then run the tests.")
        if self.orch_format == "openclaw":
            o = OCSession(self, t)
            o.user(rng.choice(["Plan the next {pkg} change: {r}", "Coordinate this for {pkg}: {r}",
                               "Please get this done in {pkg}: {r}"]).format(pkg=pkg, r=req))
            o.call(f"Let me look at {main.file} first.", "read", {"path": self.path(pkg, main.file)},
                   "\n".join(a_lines[max(0, i1 - 20): i2 + 20]))
            o.say(f"The change is confined to {nt}. I'll draft it and hand it to a coding agent.")
            o.call("Dispatching to the coding agent.", "sessions_spawn",
                   {"task": task, "label": f"{pkg}: {nt}"[:80], "agentId": "coder"},
                   json.dumps({"status": "accepted", "childSessionKey": f"agent:coder:subagent:{self.ids.uuid()}",
                               "runId": self.ids.uuid()}))
            o.say("Dispatched; I'll review the result when the agent reports back.")
            self.record(o, pkg, "orchestrator", fmt="openclaw")
            return o.sid
        s = CCSession(self, ORCH_CWD, t, "orchestrator")
        s.user(f"[orchestrator] Plan the next {pkg} change: {req}")
        s.say(f"The change is confined to {nt}. Dispatching this task to a coding agent:\n\n{task}")
        self.record(s, pkg, "orchestrator")
        return s.sid

    # -- read sessions
    def gen_reads(self, pkg: str, files: dict[str, str], n: int, t: dt.datetime) -> dt.datetime:
        rng = self.rng
        cands = [f for f in files if not f.endswith("__init__.py")]
        for _ in range(n):
            t += dt.timedelta(minutes=rng.uniform(5, 240))
            f = rng.choice(cands)
            lines = split_lines(files[f])
            syms = [x for x in symbols(files[f]) if x.end - x.start >= 3]
            if not syms:
                continue
            s = CCSession(self, self.cwd(pkg), t, "read")
            picks = rng.sample(syms, min(len(syms), rng.choice([1, 1, 2, 3])))
            sym = picks[0]
            s.user(rng.choice(READ_QUESTIONS).format(name=f"`{sym.name}`", file=f))
            if rng.random() < 0.3:
                s.tool("Grep", {"pattern": f"def {sym.name.split('.')[-1]}", "path": self.cwd(pkg), "output_mode": "content", "-n": True},
                       f"{f}:{sym.start}:{lines[sym.start - 1]}",
                       {"mode": "content", "numFiles": 1, "filenames": [], "content": f"{f}:{sym.start}:{lines[sym.start - 1]}",
                        "numLines": 1}, text=f"Let me find `{sym.name}`.")
            for p in picks:
                if len(lines) > BIG_FILE_LINES or rng.random() < 0.5:
                    off = max(1, p.start - rng.randint(0, 15))
                    s.read(self.path(pkg, f), lines, off, (p.end - off + 1) + rng.randint(0, 40))
                else:
                    s.read(self.path(pkg, f), lines)
                s.mentions.add((f, p.name))
                code = code_of(lines, p)
                if len(code) > 4000:
                    code = "\n".join(code.splitlines()[:60]) + "\n    ..."
                s.say(rng.choice(READ_ANSWERS).format(name=p.name, code=code, file=f, start=p.start, end=p.end))
            if rng.random() < 0.4:
                s.user(rng.choice(["Thanks, that's clear.", "OK. Any caveats?", "Makes sense, leave it as is."]))
                s.say(rng.choice(["No caveats beyond what I mentioned.", "You're welcome.",
                                  "Agreed, no change needed."]))
            self.record(s, pkg, "read")
            t = s.t
        return t

    # -- filler
    def gen_filler(self, filler: dict, i: int) -> None:
        rng = self.rng
        pkg = rng.choice(sorted(filler))
        files = filler[pkg]
        f = rng.choice(sorted(files))
        lines = split_lines(files[f])
        t = T0 + dt.timedelta(minutes=rng.uniform(0, 60 * 24 * 330))
        s = CCSession(self, self.cwd(pkg), t, "filler")
        syms = [x for x in symbols(files[f]) if x.end - x.start >= 2]
        if syms:
            sym = rng.choice(syms)
            s.user(rng.choice(READ_QUESTIONS).format(name=f"`{sym.name}`", file=f))
            off = max(1, sym.start - rng.randint(0, 10))
            s.read(self.path(pkg, f), lines, off, sym.end - off + 1 + rng.randint(0, 30))
            code = code_of(lines, sym)
            s.say(rng.choice(READ_ANSWERS).format(name=sym.name, code=code[:3000], file=f, start=sym.start, end=sym.end))
        else:
            s.user(f"What's in {f}?")
            s.read(self.path(pkg, f), lines)
            s.say(f"{f} is short; it mostly re-exports names.")
        self.record(s, pkg, "filler")

    # -- scenarios (c) and (d): post-release refactors on the final trees
    def gen_moves_and_replacements(self, filler: dict) -> None:
        rng = self.rng
        foreign = [(p, f, x, split_lines(filler[p][f])) for p in sorted(filler) for f in sorted(filler[p])
                   for x in symbols(filler[p][f]) if x.kind == "function" and 6 <= x.end - x.start <= 40]
        for pkg in PACKAGES:
            state = self.files[pkg]
            t = self.tend[pkg] + dt.timedelta(hours=6)
            src_files = [f for f in sorted(state) if not f.startswith("tests/") and not f.endswith("__init__.py")]
            n_moves = 15 if "c" in self.scenarios else 0
            n_repl = 15 if "d" in self.scenarios else 0
            for _ in range(n_moves):
                f = rng.choice(src_files)
                text = join_lines(state[f].lines)
                syms = [x for x in symbols(text) if x.kind == "function" and 5 <= x.end - x.start <= 60]
                if not syms:
                    continue
                sym = rng.choice(syms)
                t = self.gen_move(pkg, f, sym, t) + dt.timedelta(minutes=rng.uniform(10, 300))
            for _ in range(n_repl):
                f = rng.choice(src_files)
                text = join_lines(state[f].lines)
                syms = [x for x in symbols(text) if x.kind == "function" and 5 <= x.end - x.start <= 60]
                if not syms or not foreign:
                    continue
                sym = rng.choice(syms)
                fo = rng.choice(foreign)
                t = self.gen_replace(pkg, f, sym, fo, t) + dt.timedelta(minutes=rng.uniform(10, 300))
            self.tend[pkg] = t

    def gen_move(self, pkg: str, f: str, sym: Sym, t: dt.datetime) -> dt.datetime:
        rng = self.rng
        fs = self.files[pkg][f]
        lo, hi = sym.start - 1, sym.end
        while hi < len(fs.lines) and fs.lines[hi].strip() == "":
            hi += 1  # take the blank lines after it too
        block = fs.lines[lo:sym.end]
        own_before = {}
        for o in fs.owner[lo:sym.end]:
            own_before[o] = own_before.get(o, 0) + 1
        hist = set().union(*fs.hist[lo:sym.end])
        target = rng.choice([x for x in sorted(self.files[pkg]) if x != f and not x.startswith("tests/")] + ["NEW"])
        s = CCSession(self, self.cwd(pkg), t, "move")
        mod = Path(f).stem
        s.user(rng.choice([f"Move `{sym.name}` out of {f}; it belongs somewhere else.",
                           f"{f} is too big. Please move `{sym.name}` to {'a new module' if target == 'NEW' else target}.",
                           f"Refactor: relocate `{sym.name}` from {f}."]))
        s.read(self.path(pkg, f), fs.lines, max(1, sym.start - 5), sym.end - sym.start + 12,
               text=f"Let me read `{sym.name}` in {f}.")
        # cut
        self.apply_edit(s, self.path(pkg, f), fs, lo, hi, [], text=f"Removing `{sym.name}` from {f}.")
        # paste
        if target == "NEW":
            target = f"{Path(f).parent.as_posix()}/_{sym.name.lower()}_impl.py"
            body = [f'"""`{sym.name}`, moved out of {mod}."""', ""] + block
            content = join_lines(body)
            s.write(self.path(pkg, target), content, None, [], text=f"Creating {target} with `{sym.name}`.")
            self.files[pkg][target] = FileState(body, s.sid)
            start = 3
        else:
            tfs = self.files[pkg][target]
            n = len(tfs.lines)
            self.apply_edit(s, self.path(pkg, target), tfs, n, n, ["", ""] + block,
                            text=f"Pasting `{sym.name}` at the end of {target}.")
            start = n + 3
        s.say(f"Moved `{sym.name}` from {f} to {target}. Remember to update imports if anything used it directly.")
        self.record(s, pkg, "move")
        self.scen_truth["c"].append({"file": f"{pkg}/{target}", "start": start, "end": start + len(block) - 1,
                                     "symbol": sym.name, "origin_session": s.sid, "moved_from": f"{pkg}/{f}",
                                     "history_sessions": sorted(x for x in hist if x != s.sid),
                                     "writer_before_move": max(sorted(own_before), key=lambda k: own_before[k]),
                                     "_block": block})
        return s.t

    def gen_replace(self, pkg: str, f: str, sym: Sym, fo, t: dt.datetime) -> dt.datetime:
        """Delete ``sym``; put unrelated real code (from another package) at the same place."""
        rng = self.rng
        fpkg, ffile, fsym, flines = fo
        fs = self.files[pkg][f]
        lo, hi = sym.start - 1, sym.end
        old_owners = set(fs.owner[lo:hi]) | set().union(*fs.hist[lo:hi])
        new_block = flines[fsym.start - 1: fsym.end]
        same_session = rng.random() < 0.5
        s = CCSession(self, self.cwd(pkg), t, "replace")
        s.user(f"`{sym.name}` in {f} is dead code; delete it." + (
            f" Put a port of `{fsym.name}` from {fpkg} in its place." if same_session else ""))
        s.read(self.path(pkg, f), fs.lines, max(1, sym.start - 5), sym.end - sym.start + 12)
        if same_session:
            self.apply_edit(s, self.path(pkg, f), fs, lo, hi, new_block,
                            text=f"Replacing `{sym.name}` with `{fsym.name}`.")
            writer = s.sid
            forbidden = old_owners - {s.sid}
            self.record(s, pkg, "replace")
        else:
            self.apply_edit(s, self.path(pkg, f), fs, lo, hi, [], text=f"Deleting `{sym.name}`.")
            s.say(f"`{sym.name}` is gone.")
            self.record(s, pkg, "replace")
            s2 = CCSession(self, self.cwd(pkg), s.t + dt.timedelta(hours=rng.uniform(1, 48)), "replace")
            s2.user(f"Add a port of `{fsym.name}` from {fpkg} to {f}, around line {sym.start}.")
            ctx_lo = max(0, lo - 2)
            s2.read(self.path(pkg, f), fs.lines, max(1, lo - 10), 30)
            self.apply_edit(s2, self.path(pkg, f), fs, lo, lo, new_block + [""] if lo < len(fs.lines) else new_block,
                            text=f"Adding `{fsym.name}` here.")
            s2.say(f"Added `{fsym.name}`.")
            self.record(s2, pkg, "replace")
            writer = s2.sid
            forbidden = old_owners | {s.sid}
            del ctx_lo
            s = s2  # the next refactor starts after the re-insertion: timestamps follow the order of edits
        self.scen_truth["d"].append({"file": f"{pkg}/{f}", "start": lo + 1, "end": lo + len(new_block),
                                     "symbol": fsym.name, "origin_session": writer, "replaced_symbol": sym.name,
                                     "forbidden_sessions": sorted(forbidden), "_block": new_block})
        return s.t

    # -- scenario (h): edits nobody logged
    HUMAN = "human-unlogged"

    def gen_human_edits(self) -> None:
        """After all sessions, people edit by hand (no log): comment blocks inserted above
        definitions (every line below shifts, so the logged edits' ranges are off by that much for
        the code below) and single lines changed inside functions (a trailing review comment). The
        truth counts the changed lines as nobody's session; at most a comment block or one line
        per function changes, so no span's lines are mostly hand-written."""
        rng = self.rng
        self.meta[self.HUMAN] = {"kind": "human", "pkg": "", "format": "none", "first_t": "", "last_t": ""}
        for pkg in PACKAGES:
            files = [f for f in sorted(self.files[pkg]) if f.endswith(".py")]
            for _ in range(HUMAN_EDITS):
                f = rng.choice(files)
                fs = self.files[pkg][f]
                syms = [x for x in symbols(join_lines(fs.lines)) if x.end - x.start >= 4]
                if not syms:
                    continue
                sym = rng.choice(syms)
                if rng.random() < 0.5:
                    at = sym.start - 1
                    line = fs.lines[at]
                    indent = line[: len(line) - len(line.lstrip())]
                    block = [f"{indent}# NOTE({rng.choice(['ana', 'bo', 'chen', 'dee'])}): "
                             + rng.choice(["keep in sync with the docs", "see issue tracker",
                                           "hot path, measure before changing", "reviewed"])]
                    block += [f"{indent}# " + rng.choice(["-", "TODO: tests", "ok"])
                              for _ in range(rng.randint(0, 4))]
                    fs.replace(at, at, block, self.HUMAN)
                else:
                    quotes = ('"' * 3, "'" * 3)
                    cand = [i for i in range(sym.start, sym.end)
                            if fs.lines[i].strip() and "#" not in fs.lines[i]
                            and not any(q in fs.lines[i] for q in quotes)
                            and not fs.lines[i].rstrip().endswith("\\")]
                    if not cand:
                        continue
                    i = rng.choice(cand)
                    fs.replace(i, i + 1, [fs.lines[i] + "  # reviewed"], self.HUMAN)
                self.counts["human_edit"] = self.counts.get("human_edit", 0) + 1

    # -- scenario (e)
    def gen_prose(self, truth: list[dict]) -> None:
        rng = self.rng
        cands = [x for x in truth if x.get("doc") and x["kind"] in ("function", "class") and x["end"] - x["start"] >= 4]
        rng.shuffle(cands)
        made = 0
        for x in cands:
            if made >= 60:
                break
            pkg, rel = x["file"].split("/", 1)
            lines = split_lines(join_lines(self.files[pkg][rel].lines))
            code = "\n".join(lines[x["start"] - 1: x["end"]])
            name = x["symbol"].split(".")[-1]
            text = paraphrase(name, x["doc"], code, rng)
            if not text:
                continue
            t = T0 + dt.timedelta(minutes=rng.uniform(0, 60 * 24 * 330))
            if self.orch_format == "openclaw" and rng.random() < 0.5:
                o = OCSession(self, t)
                o.user(f"Where are we on the {pkg} API review? {name} came up.")
                o.say(text)
                o.say("I'll keep that in the review notes; no dispatch needed right now.")
                self.record(o, pkg, "prose", fmt="openclaw")
                sid = o.sid
            else:
                s = CCSession(self, self.cwd(pkg), t, "prose")
                s.user(rng.choice([f"Quick question about {name}, no need to open the code.",
                                   f"Remind me what {name} is for?", f"Summarise {name} for the docs team."]))
                s.say(text)
                self.record(s, pkg, "prose")
                sid = s.sid
            related = set(x["all_sessions_that_edited"]) | set(x["readers"]) | {x["origin_session"], sid}
            self.scen_truth["e"].append({"file": x["file"], "start": x["start"], "end": x["end"], "symbol": x["symbol"],
                                         "prose_session": sid, "origin_session": x["origin_session"],
                                         "related_sessions": sorted(related)})
            made += 1

    # -- truth and repo
    def locate_blocks(self) -> None:
        """Scenario (c)/(d) spans were recorded when made; later refactors shift them: find them again
        in the final files (verbatim), dropping any that a later session changed."""
        for k in ("c", "d"):
            kept = []
            for x in self.scen_truth[k]:
                block = x.pop("_block")
                pkg, rel = x["file"].split("/", 1)
                fs = self.files[pkg].get(rel)
                if fs is None:
                    continue
                n = len(block)
                hits = [i for i in range(len(fs.lines) - n + 1) if fs.lines[i] == block[0] and fs.lines[i:i + n] == block]
                if len(hits) != 1:
                    continue
                x["start"], x["end"] = hits[0] + 1, hits[0] + n
                kept.append(x)
            self.scen_truth[k] = kept

    def write_truth(self) -> list[dict]:
        self.locate_blocks()
        truth = []
        for pkg in PACKAGES:
            for f in sorted(self.files[pkg]):
                if not f.endswith(".py"):
                    continue
                fs = self.files[pkg][f]
                text = join_lines(fs.lines)
                for sym in symbols(text):
                    own: dict[str, int] = {}
                    for o in fs.owner[sym.start - 1: sym.end]:
                        own[o] = own.get(o, 0) + 1
                    origin = max(sorted(own), key=lambda k: own[k])
                    hist = set().union(*fs.hist[sym.start - 1: sym.end])
                    readers = sorted(self.mentions.get((pkg, f, sym.name), set()) - hist)
                    truth.append({
                        "file": f"{pkg}/{f}", "start": sym.start, "end": sym.end, "symbol": sym.name, "kind": sym.kind,
                        "origin_session": origin, "origin_kind": self.meta[origin]["kind"],
                        "origin_share": round(own[origin] / (sym.end - sym.start + 1), 3),
                        "line_sessions": dict(sorted(own.items())),
                        "all_sessions_that_edited": sorted(hist), "readers": readers,
                        "doc": sym.doc.strip().split("\n\n")[0][:400],
                    })
        (self.out / "truth.json").write_text(json.dumps(truth, indent=1))
        # line-level truth for ``engram blame``: the session (or ``human-unlogged``) that wrote
        # each line of each Python file as it stands in the repo
        owners = {f"{pkg}/{f}": list(self.files[pkg][f].owner)
                  for pkg in PACKAGES for f in sorted(self.files[pkg]) if f.endswith(".py")}
        (self.out / "lines.json").write_text(json.dumps(owners, sort_keys=True))
        by_origin: dict[str, list] = {}
        for x in truth:
            by_origin.setdefault(x["origin_session"], []).append(x)
        for p2, p1 in sorted(self.split_part1.items()):
            for x in by_origin.get(p2, []):
                self.scen_truth["a"].append({"file": x["file"], "start": x["start"], "end": x["end"],
                                             "symbol": x["symbol"], "origin_session": p2, "continued_from": p1,
                                             "expected_sessions": [p2, p1]})
        for s, o in sorted(self.dispatch.items()):
            for x in by_origin.get(s, []):
                self.scen_truth["b"].append({"file": x["file"], "start": x["start"], "end": x["end"],
                                             "symbol": x["symbol"], "origin_session": s, "orchestrator_session": o})
        return truth

    def write_repo(self) -> None:
        for pkg in PACKAGES:
            for f, fs in sorted(self.files[pkg].items()):
                p = self.out / "repo" / pkg / f
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(join_lines(fs.lines))
        sd = self.out / "scenarios"
        sd.mkdir(exist_ok=True)
        names = {"a": "continuation", "b": "orchestrator", "c": "moved", "d": "false_lineage", "e": "semantic"}
        for k in sorted(self.scenarios - {"h"}):
            (sd / f"{names[k]}.json").write_text(json.dumps(self.scen_truth[k], indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "corpus" / "base")
    ap.add_argument("--sessions", type=int, default=1000, help="target number of base sessions (edit+read+filler)")
    ap.add_argument("--seed", type=int, default=20250303)
    ap.add_argument("--scenarios", default="", help="comma list of a,b,c,d,e,h or 'all'")
    ap.add_argument("--orchestrator-format", choices=["openclaw", "claude_code"], default="openclaw")
    ap.add_argument("--cwd-base", default=CWD_BASE, help="absolute dir the sessions' cwd/file paths live under")
    ap.add_argument("--packages", choices=sorted(PACKAGE_SETS), default="default",
                    help="whose release history the sessions edit: more-itertools and click "
                         "(default), or packaging and requests (heldout: code the engine was not tuned on)")
    a = ap.parse_args(argv)
    global PACKAGES, FILLER
    PACKAGES, FILLER = PACKAGE_SETS[a.packages]
    sc = set("abcdeh") if a.scenarios == "all" else {x.strip() for x in a.scenarios.split(",") if x.strip()}
    if sc - set("abcdeh"):
        ap.error("scenarios are a,b,c,d,e")
    g = Generator(a.out, a.sessions, a.seed, sc, a.orchestrator_format, a.cwd_base)
    summary = g.run()
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
