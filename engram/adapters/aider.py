"""Aider chat history (``.aider.chat.history.md``) → tape events.

Aider has no global log: it appends to ``.aider.chat.history.md`` in the repo root (git root, or
the cwd), so there are no default locations; configure the repos to scan and the adapter finds
``**/.aider.chat.history.md`` under them. The sibling ``.aider.input.history`` (prompt_toolkit
``# <timestamp>`` / ``+line`` entries) supplies per-prompt times when present.

Grammar (aider ``io.py``): ``# aider chat started at YYYY-MM-DD HH:MM:SS`` starts a session (one
process run); ``#### `` lines are user input (→ ``msg.in``, consecutive lines joined); ``> `` lines
ending in two spaces are tool/UI output (banner, ``Applied edit to``, ``Tokens:``, errors) and
become one ``tool.result`` per run of lines (``tool: "aider"``); everything else is assistant
markdown (→ ``msg.out``; ``<thinking-content-…>`` blocks become a separate ``msg.out`` with
``reasoning: true``). ``#### /add …``-style commands also produce a ``tool.call`` (``tool`` is the
command).

Edits are reconstructed from the reply text in the session's edit format (from the banner):
SEARCH/REPLACE blocks (``diff``, ``diff-fenced``, and any reply that contains them) give one
``code.edit`` per block with ``range_known: false``; ``whole`` format (filename line + fenced full
file) is parsed the way Aider's own ``WholeFileCoder`` does (so the edit holds what Aider wrote to
disk) and gives a whole-file ``code.edit`` (``whole_file: true``; ``before_known: false`` unless
Aider asked to create the file). Edits are emitted at the ``> Applied edit to <file>`` line that
confirms them, and only for confirmed files.

Times: the header time (local time, no zone: stored as if UTC, ``meta.local_time: true``) and, for
prompts, the matching input-history entry. Model and version come from the banner (``Main model:``
/ ``Model:``, ``Aider vX``).
"""

from __future__ import annotations

import re
from pathlib import Path

from engram.adapters.base import (
    Adapter,
    ParseOutput,
    SessionLog,
    VersionMatrix,
    ev_edit,
    ev_meta,
    ev_msg,
    ev_tool_call,
    ev_tool_result,
    finish_session,
    parse_error,
)
from engram.errors import UnsupportedLog

_HEADER = re.compile(r"^# aider chat started at (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\s*$")
_TOOL_LINE = re.compile(r"^>(?: .*)?  $|^>\s*$")
_THINK_OPEN = re.compile(r"^<thinking-content-[0-9a-f]+>\s*$")
_THINK_CLOSE = re.compile(r"^</thinking-content-[0-9a-f]+>\s*$")
_SEARCH = re.compile(r"^<{5,9} SEARCH\s*$")
_DIVIDER = re.compile(r"^={5,9}\s*$")
_REPLACE = re.compile(r"^>{5,9} REPLACE\s*$")
_MODEL = re.compile(r"^(?:Main model|Model): (\S+)(?: with (\S+) edit format)?")
_VERSION = re.compile(r"^Aider v(\d+\.\d+\.\d+\S*)")
_CONFIRM = re.compile(r"^[^\n]*\? \(Y\)es/\(N\)o[^\n]*\]: ?(\S*)$")
_INPUT_TS = re.compile(r"^# (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(\.\d+)?\s*$")


def _iso(ts: str, frac: str | None = None) -> str:
    return ts.replace(" ", "T") + (frac or "") + "Z"


def input_history(path: Path) -> list[tuple[str, str]]:
    """``[(iso_time, text)]`` from a prompt_toolkit FileHistory file."""
    out: list[tuple[str, list[str]]] = []
    try:
        raw = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    for ln in raw.split("\n"):
        m = _INPUT_TS.match(ln)
        if m:
            out.append((_iso(m.group(1), (m.group(2) or "")[:4]), []))
        elif ln.startswith("+") and out:
            out[-1][1].append(ln[1:])
    return [(t, "\n".join(lines)) for t, lines in out]


def _norm(text: str) -> str:
    return "\n".join(ln.rstrip() for ln in text.strip().split("\n"))


class AiderAdapter(Adapter):
    name = "aider"
    versions = VersionMatrix("0.86.0", "0.86")
    default_locations = ()
    patterns = ("**/.aider.chat.history.md",)

    def repo_paths(self, root: Path) -> list[Path]:
        """Aider writes its history next to the repo: read the repo root's file by default."""
        return [Path(root) / ".aider.chat.history.md"]
    version = "1"

    def parse_source(self, path: Path, *, mode: str = "permissive") -> ParseOutput:
        path = Path(path)
        out = ParseOutput()
        try:
            raw = path.read_bytes()
        except OSError as e:
            out.errors.append(parse_error(path, None, f"cannot read: {e}"))
            return out
        if b"\x00" in raw:  # binary junk: reported, dropped, the rest still parsed
            out.errors.append(parse_error(path, raw[:raw.index(b"\x00")].count(b"\n") + 1,
                                          "NUL bytes in a Markdown history (dropped)"))
            raw = raw.replace(b"\x00", b"")
        text = raw.decode("utf-8", "replace")
        inputs = input_history(path.with_name(path.name.replace("chat.history.md",
                                                                 "input.history")))
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        # split into sessions: [(header_ts, first_line_no, lines)]
        chunks: list[tuple[str | None, int, list[str]]] = []
        for i, ln in enumerate(lines, 1):
            m = _HEADER.match(ln)
            if m:
                chunks.append((m.group(1), i, []))
            elif chunks:
                chunks[-1][2].append(ln)
            elif ln.strip():
                chunks.append((None, i, [ln]))
        last_version: str | None = None
        keys: dict[str, int] = {}
        cursor = 0
        cwd = str(path.parent)
        for n, (ts, line_no, body) in enumerate(chunks):
            try:
                sess = _Session(self, path, ts, line_no, body, cwd)
                sess.parse()
            except Exception as e:  # a confusing run never loses the other sessions
                out.errors.append(parse_error(path, line_no, f"{type(e).__name__}: {e}"))
                continue
            out.errors.extend(sess.errors)
            version = sess.version or last_version
            last_version = version or last_version
            if not sess.has_content():
                continue  # a start-up that ended before any exchange
            next_ts = chunks[n + 1][0] if n + 1 < len(chunks) else None
            cursor = sess.apply_input_times(inputs, cursor, next_ts)
            reasons = []
            status = self.versions.status(version)
            if status != "ok":
                msg = (f"aider version {version or 'unknown'} is {status} "
                       f"(tested {self.versions.min}..{self.versions.max_tested})")
                if mode == "strict":
                    raise UnsupportedLog(msg, path=str(path), line=line_no)
                reasons.append(msg)
            base_key = ts or f"line-{line_no}"
            keys[base_key] = keys.get(base_key, 0) + 1
            key = base_key if keys[base_key] == 1 else f"{base_key}#{keys[base_key]}"
            t0 = _iso(ts) if ts else None
            extra = {"local_time": True}
            if sess.edit_format:
                extra["edit_format"] = sess.edit_format
            if sess.weak_model:
                extra["weak_model"] = sess.weak_model
            meta = ev_meta(t0, harness="aider", session=f"aider:{key}", adapter=self,
                           source_path=str(path), harness_version=version, model=sess.model,
                           cwd=cwd, **extra)
            events = [meta] + sess.events
            for ev in events:
                if ev.get("t") is None:
                    ev["t"] = t0
            finish_session(events, degraded_reasons=reasons)
            out.sessions.append(SessionLog(key=key, events=events))
        return out


class _Session:
    def __init__(self, adapter, path: Path, ts: str | None, line_no: int, body: list[str],
                 cwd: str) -> None:
        self.path, self.line_no, self.body, self.cwd = path, line_no, body, cwd
        self.t = _iso(ts) if ts else None
        self.events: list[dict] = []
        self.errors: list[dict] = []
        self.version: str | None = None
        self.model: str | None = None
        self.weak_model: str | None = None
        self.edit_format: str | None = None
        self.pending: list[dict] = []  # edits parsed from the last reply, awaiting confirmation
        self.created: set[str] = set()
        self.asked: str | None = None

    def has_content(self) -> bool:
        return any(e["k"] in ("msg.in", "msg.out", "code.edit") for e in self.events)

    def parse(self) -> None:
        kind, buf = None, []
        for ln in self.body:
            if ln.startswith("#### ") or ln == "####":
                k = "in"
            elif _TOOL_LINE.match(ln):
                k = "tool"
            else:
                k = "out"
            if k != kind:
                self.flush(kind, buf)
                kind, buf = k, []
            buf.append(ln)
        self.flush(kind, buf)

    def flush(self, kind: str | None, buf: list[str]) -> None:
        if kind is None or not buf:
            return
        if kind == "in":
            text = "\n".join(ln[5:] if ln.startswith("#### ") else "" for ln in buf)
            text = "\n".join(ln[:-2] if ln.endswith("  ") else ln for ln in text.split("\n"))
            if text.strip():
                m = _CONFIRM.match(text.strip())
                if m:  # an answer typed at a (Y)es/(N)o prompt
                    self.events.append(ev_msg(self.t, "msg.in", text, confirmation=True,
                                              answer=m.group(1)))
                    return
                self.events.append(ev_msg(self.t, "msg.in", text))
                first = text.strip().split()[0] if text.strip() else ""
                if first.startswith("/") and re.fullmatch(r"/[a-z][a-z-]*", first):
                    args = text.strip()[len(first):].split()
                    self.events.append(ev_tool_call(self.t, first, None, {"args": args}))
            return
        if kind == "tool":
            body = [ln[2:] if ln.startswith("> ") else ln[1:] for ln in buf]
            body = [ln[:-2] if ln.endswith("  ") else ln.rstrip() for ln in body]
            text = "\n".join(body).strip("\n")
            if text.strip():
                self.events.append(ev_tool_result(self.t, "aider", None, text + "\n"))
            for ln in body:
                self.tool_line(ln.strip())
            return
        text = "\n".join(buf).strip("\n")
        if not text.strip():
            return
        reply, thinking = _split_thinking(text)
        for th in thinking:
            self.events.append(ev_msg(self.t, "msg.out", th, reasoning=True))
        if reply.strip():
            self.events.append(ev_msg(self.t, "msg.out", reply))
            self.pending = self.edits_from_reply(reply)

    def tool_line(self, ln: str) -> None:
        m = _VERSION.match(ln)
        if m and not self.version:
            self.version = m.group(1)
        m = _MODEL.match(ln)
        if m and ln.startswith(("Main model", "Model")) and not self.model:
            self.model = m.group(1)
            self.edit_format = m.group(2)
        if ln.startswith("Weak model: ") and not self.weak_model:
            self.weak_model = ln[len("Weak model: "):].strip()
        if ln.startswith("Applied edit to "):
            fname = ln[len("Applied edit to "):].strip()
            for e in self.pending:
                if e["_file"] == fname or e["_file"].split("/")[-1] == fname.split("/")[-1] \
                        and "/" not in fname:
                    ev = dict(e)
                    ev.pop("_file")
                    if ev.get("whole_file") and fname in self.created:
                        ev["before_known"] = True
                        ev["created"] = True
                    self.events.append(ev)
            self.pending = [e for e in self.pending if e["_file"] != fname]
        elif any(ln == e["_file"] for e in self.pending):
            self.asked = ln  # "<file>" then "Create new file? (Y)es/(N)o [Yes]: y"
        elif ln.startswith("Create new file?") and self.asked:
            if re.search(r":\s*(?:y|yes)?$", ln, re.I):
                self.created.add(self.asked)
            self.asked = None

    # ---- edits
    def edits_from_reply(self, reply: str) -> list[dict]:
        edits = self.search_replace(reply)
        if not edits and (self.edit_format or "").startswith("whole"):
            edits = self.whole(reply)
        return edits

    def _edit(self, fname: str, before: str, after: str, **extra) -> dict:
        ev = ev_edit(self.t, fname, 1, before, 1, after, cwd=self.cwd, **extra)
        ev["_file"] = fname
        return ev

    def search_replace(self, reply: str) -> list[dict]:
        lines = reply.split("\n")
        out: list[dict] = []
        fname: str | None = None
        i = 0
        while i < len(lines):
            if _SEARCH.match(lines[i]):
                fname = _find_filename(lines[max(0, i - 3):i]) or fname
                j = i + 1
                while j < len(lines) and not _DIVIDER.match(lines[j]):
                    j += 1
                k = j + 1
                while k < len(lines) and not _REPLACE.match(lines[k]):
                    k += 1
                if k >= len(lines) or fname is None:
                    break
                before = "".join(ln + "\n" for ln in lines[i + 1:j])
                after = "".join(ln + "\n" for ln in lines[j + 1:k])
                out.append(self._edit(fname, before, after, range_known=False))
                i = k + 1
                continue
            i += 1
        return out

    def whole(self, reply: str) -> list[dict]:
        """Aider's WholeFileCoder.get_edits: filename line, fence, content, fence."""
        lines = reply.split("\n")
        edits: list[tuple[str, list[str]]] = []
        fname: str | None = None
        new: list[str] = []
        for i, ln in enumerate(lines):
            if ln.startswith("```"):
                if fname is not None:
                    edits.append((fname, new))
                    fname, new = None, []
                    continue
                cand = lines[i - 1].strip() if i > 0 else ""
                cand = cand.strip("*").rstrip(":").strip("`").lstrip("#").strip()
                fname = cand if cand and len(cand) <= 250 else None
                if fname is None:
                    fname = "\x00"  # a block without a usable name: consumed, never applied
                continue
            if fname is not None:
                new.append(ln)
        if fname is not None:
            edits.append((fname, new))
        out, seen = [], set()
        for name, body in edits:
            if name == "\x00" or name in seen:
                continue
            seen.add(name)
            out.append(self._edit(name, "", "".join(ln + "\n" for ln in body), whole_file=True,
                                  before_known=False))
        return out

    # ---- times
    def apply_input_times(self, inputs: list[tuple[str, str]], cursor: int,
                          next_ts: str | None) -> int:
        limit = _iso(next_ts) if next_ts else None
        t_last = self.t
        for ev in self.events:
            if ev["k"] == "msg.in":
                want = _norm(ev["answer"] if ev.get("confirmation") else ev["text"])
                for j in range(cursor, len(inputs)):
                    t, text = inputs[j]
                    if limit and t >= limit:
                        break
                    if self.t and t < self.t:
                        cursor = j + 1
                        continue
                    if _norm(text) == want:
                        ev["t"] = t
                        cursor = j + 1
                        break
            if ev.get("t") and (t_last is None or ev["t"] >= t_last):
                t_last = ev["t"]
            else:
                ev["t"] = t_last
        return cursor


def _split_thinking(text: str) -> tuple[str, list[str]]:
    lines = text.split("\n")
    reply: list[str] = []
    thinking: list[str] = []
    cur: list[str] | None = None
    for ln in lines:
        if cur is None and _THINK_OPEN.match(ln):
            cur = []
            continue
        if cur is not None and _THINK_CLOSE.match(ln):
            thinking.append("\n".join(cur).strip("\n"))
            cur = None
            continue
        (cur if cur is not None else reply).append(ln)
    if cur is not None:
        thinking.append("\n".join(cur).strip("\n"))
    return "\n".join(reply).strip("\n"), [t for t in thinking if t.strip()]


def _find_filename(prev: list[str]) -> str | None:
    for ln in reversed(prev):
        s = ln.strip()
        if not s or s.startswith("```"):
            continue
        s = s.strip("*").rstrip(":").strip("`").lstrip("#").strip()
        if s and (" " not in s or "/" in s or "." in s):
            return s
    return None


ADAPTER = AiderAdapter()
