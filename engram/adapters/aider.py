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

from engram.adapters import base
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
    """``[(iso_time, text)]`` from a prompt_toolkit FileHistory file (read line by line)."""
    out: list[tuple[str, list[str]]] = []
    try:
        with open(path, "rb") as f:
            for raw in f:
                ln = raw.decode("utf-8", "replace")
                ln = ln[:-1] if ln.endswith("\n") else ln
                m = _INPUT_TS.match(ln)
                if m:
                    out.append((_iso(m.group(1), (m.group(2) or "")[:4]), []))
                elif ln.startswith("+") and out:
                    out[-1][1].append(ln[1:])
    except OSError:
        return []
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
        return _Reader(self, Path(path), mode).run()

    streams = True

    def streams_source(self, path: Path) -> bool:
        """Every history is read as a stream, a session at a time (``stream_sessions``)."""
        return True

    def stream_source(self, path: Path, *, mode: str = "permissive") -> base.SessionStream:
        """The history's first session as a stream (a history of one session: all of it)."""
        return base.SessionStream(_Reader(self, Path(path), mode).run(stream=True))

    def stream_sessions(self, path: Path, *, mode: str = "permissive",
                        keep_metas: bool = True) -> SessionStreams:
        """``parse_source`` of a history of any number of sessions as one ``SessionStream`` per
        session, in order, each given as its session is read (drain each before the next):
        the same events, metas and errors, never more than one session's run of lines at once.
        Without ``keep_metas`` the source's ``output`` leaves out the sessions (each one's
        ``meta`` is its stream's): nothing is held per session but its key's count."""
        return SessionStreams(_Reader(self, Path(path), mode).run_many(keep_metas))


class _SessionEnd:
    """(``_Reader.run_many``) the end of one session's events: its output (its ``meta``, or no
    session)."""

    __slots__ = ("output",)

    def __init__(self, output: ParseOutput) -> None:
        self.output = output


class SessionStreams:
    """The sessions of one source parsed as streams one after another (``stream_sessions``):
    iterate it for a ``base.SessionStream`` per session — each drained before the next is asked
    for; once all are, ``output`` is the source's ``ParseOutput``: its errors (as
    ``parse_source`` gives them) and every session's ``meta``."""

    def __init__(self, gen) -> None:
        self.gen = gen
        self.output: ParseOutput | None = None

    def __iter__(self):
        while True:
            try:
                item = next(self.gen)
            except StopIteration as e:
                self.output = e.value
                return
            yield base.SessionStream(self._one(item))

    def _one(self, item):
        while not isinstance(item, _SessionEnd):
            yield item
            item = next(self.gen)
        return item.output


_BLOCK = 1 << 18   # bytes read at a time (its lines: a few copies of it live while split)


class _Reader(base.StreamParser):
    """A history read line by line (never the whole file), each session parsed when the next
    header (or the end) shows it complete."""

    def __init__(self, adapter: AiderAdapter, path: Path, mode: str) -> None:
        self.a, self.path, self.mode = adapter, path, mode
        self.nul_error: dict | None = None

    def lines(self):
        """The file's lines (decoded, NUL bytes dropped: reported once, at the first), a
        block of whole lines decoded at a time."""
        with open(self.path, "rb") as f:
            pending = b""
            no = 0
            while True:
                chunk = f.read(_BLOCK)
                data = pending + chunk
                if chunk:
                    end = data.rfind(b"\n")
                    if end < 0:
                        pending = data
                        continue
                    data, pending = data[:end], data[end + 1:]
                elif not data:
                    return
                if b"\x00" in data:
                    if self.nul_error is None:
                        at = no + data[:data.index(b"\x00")].count(b"\n") + 1
                        self.nul_error = parse_error(self.path, at,
                                                     "NUL bytes in a Markdown history (dropped)")
                    data = data.replace(b"\x00", b"")
                block = data.decode("utf-8", "replace").split("\n")
                no += len(block)
                yield from block
                if not chunk:
                    return

    def _run(self, stream: bool):
        path = self.path
        out = self.output = ParseOutput()
        errors: list[dict] = []
        inputs = input_history(path.with_name(path.name.replace("chat.history.md",
                                                                 "input.history")))
        self.last_version: str | None = None
        self.keys: dict[str, int] = {}
        self.cursor = 0
        cwd = str(path.parent)
        sess: _Session | None = None
        fin = base.StreamFinish() if stream else None
        released = False   # (stream) whether the session's events are going out
        times = None
        try:
            lines = self.lines()
            for i, ln in enumerate(lines, 1):
                m = _HEADER.match(ln)
                if m or (sess is None and ln.strip()):
                    if sess is not None:
                        if stream:
                            break   # a second session appended since: this one is complete
                        self._finish(sess, m.group(1), inputs, out, errors)
                    sess = _Session(self.a, path, m.group(1) if m else None, i, cwd)
                    self.t0 = sess.t
                    if stream:
                        times = _Times(inputs, 0, sess.t, None)
                    if m:
                        continue
                if sess is None:
                    continue
                sess.feed(ln)
                if stream and sess.events and not sess.broken:
                    if not released and sess.has_content():
                        released = True
                    if released:
                        made, sess.events = sess.events, []
                        sess.made += len(made)
                        for ev in made:
                            yield from fin.event(self._timed(ev, times, sess), self._meta_t)
        except OSError as e:
            errors.append(parse_error(path, None, f"cannot read: {e}"))
            out.errors = errors
            return out
        if sess is not None and not stream:
            self._finish(sess, None, inputs, out, errors)
        if stream and sess is not None:
            sess.close()
            made, sess.events = sess.events, []
            if not sess.broken and (released or any(e["k"] in ("msg.in", "msg.out", "code.edit")
                                                    for e in made)):
                for ev in made:
                    yield from fin.event(self._timed(ev, times, sess), self._meta_t)
                meta = self._meta(sess, [])
                if meta is not None:
                    meta, rest = fin.finish(meta, self._reasons)
                    yield from rest
                    out.sessions.append(SessionLog(key=self._key, events=[meta]))
            elif sess.broken:
                errors.append(sess.broken)
        out.errors = ([self.nul_error] if self.nul_error else []) + errors
        return out

    def run_many(self, keep_metas: bool = True):
        """(``stream_sessions``) a generator of every session's finished events, each session
        ended by a ``_SessionEnd``; it returns the source's ``ParseOutput``. The same sessions,
        events and errors as ``run()``: each session's prompt times are matched before the next
        header's time (known from a first pass over the headers, when there is an input
        history)."""
        path = self.path
        out = self.output = ParseOutput()
        errors: list[dict] = []
        inputs = input_history(path.with_name(path.name.replace("chat.history.md",
                                                                 "input.history")))
        self.last_version = None
        self.keys = {}
        self.cursor = 0
        heads = self._header_times() if inputs else []
        hi = 0      # headers read
        cwd = str(path.parent)
        st = None   # the session being read: [session, StreamFinish, _Times, released]
        try:
            for i, ln in enumerate(self.lines(), 1):
                m = _HEADER.match(ln)
                if m or (st is None and ln.strip()):
                    if st is not None:
                        yield from self._end_streamed(st, out, errors, keep_metas)
                    sess = _Session(self.a, path, m.group(1) if m else None, i, cwd)
                    self.t0 = sess.t
                    hi += bool(m)   # (the next header ends the session)
                    st = [sess, base.StreamFinish(),
                          _Times(inputs, self.cursor, sess.t, heads[hi] if hi < len(heads)
                                 else None), False]
                    if m:
                        continue
                if st is None:
                    continue
                sess = st[0]
                sess.feed(ln)
                if sess.events and not sess.broken:
                    if not st[3] and sess.has_content():
                        st[3] = True
                    if st[3]:
                        made, sess.events = sess.events, []
                        for ev in made:
                            yield from st[1].event(self._timed(ev, st[2], sess), self._meta_t)
        except OSError as e:
            errors.append(parse_error(path, None, f"cannot read: {e}"))
            out.errors = errors
            return out
        if st is not None:
            yield from self._end_streamed(st, out, errors, keep_metas)
        out.errors = ([self.nul_error] if self.nul_error else []) + errors
        return out

    def _end_streamed(self, st: list, out: ParseOutput, errors: list[dict], keep_metas: bool):
        """(``run_many``) the end of a session: the events it still holds, then a
        ``_SessionEnd`` with its ``meta`` (none: a start-up with no exchange, or a session whose
        parse broke, reported); as ``_finish`` does."""
        sess, fin, times, released = st
        sess.close()
        made, sess.events = sess.events, []
        one = ParseOutput()
        if sess.broken:
            errors.append(sess.broken)
        else:
            errors.extend(sess.errors)
            self.last_version = sess.version or self.last_version
            if released or any(e["k"] in ("msg.in", "msg.out", "code.edit") for e in made):
                for ev in made:
                    yield from fin.event(self._timed(ev, times, sess), self._meta_t)
                meta = self._meta(sess, errors)
                meta, rest = fin.finish(meta, self._reasons)
                yield from rest
                self.cursor = times.cursor
                one.sessions.append(SessionLog(key=self._key, events=[meta]))
                if keep_metas:
                    out.sessions.append(SessionLog(key=self._key, events=[meta]))
        yield _SessionEnd(one)

    def _header_times(self) -> list[str]:
        """The time of every ``# aider chat started at`` header, in order (a first pass)."""
        return [m.group(1) for m in map(_HEADER.match, self.lines()) if m]

    def _meta_t(self) -> str | None:
        return self.t0

    @staticmethod
    def _timed(ev: dict, times: _Times, sess: _Session) -> dict:
        times.apply(ev)
        if ev.get("t") is None:
            ev["t"] = sess.t
        return ev

    def _finish(self, sess: _Session, next_ts: str | None, inputs, out: ParseOutput,
                errors: list[dict]) -> None:
        """A whole session (the next header, or the end, reached) → its ``SessionLog``."""
        sess.close()
        if sess.broken:
            errors.append(sess.broken)
            return
        errors.extend(sess.errors)
        version = sess.version or self.last_version
        self.last_version = version or self.last_version
        if not sess.has_content():
            return  # a start-up that ended before any exchange
        self.cursor = sess.apply_input_times(inputs, self.cursor, next_ts)
        meta = self._meta(sess, errors)
        events = [meta] + sess.events
        for ev in events:
            if ev.get("t") is None:
                ev["t"] = sess.t
        finish_session(events, degraded_reasons=self._reasons)
        out.sessions.append(SessionLog(key=self._key, events=events))

    def _meta(self, sess: _Session, errors: list[dict]) -> dict:
        version = sess.version or self.last_version
        reasons = []
        status = self.a.versions.status(version)
        if status != "ok":
            msg = (f"aider version {version or 'unknown'} is {status} "
                   f"(tested {self.a.versions.min}..{self.a.versions.max_tested})")
            if self.mode == "strict":
                raise UnsupportedLog(msg, path=str(self.path), line=sess.line_no)
            reasons.append(msg)
        self._reasons = reasons
        ts = sess.ts
        base_key = ts or f"line-{sess.line_no}"
        self.keys[base_key] = self.keys.get(base_key, 0) + 1
        key = base_key if self.keys[base_key] == 1 else f"{base_key}#{self.keys[base_key]}"
        self._key = key
        extra = {"local_time": True}
        if sess.edit_format:
            extra["edit_format"] = sess.edit_format
        if sess.weak_model:
            extra["weak_model"] = sess.weak_model
        return ev_meta(sess.t, harness="aider", session=f"aider:{key}", adapter=self.a,
                       source_path=str(self.path), harness_version=version, model=sess.model,
                       cwd=sess.cwd, **extra)


class _Session:
    def __init__(self, adapter, path: Path, ts: str | None, line_no: int, cwd: str) -> None:
        self.path, self.line_no, self.cwd, self.ts = path, line_no, cwd, ts
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
        self.kind: str | None = None   # of the lines in ``buf``
        self.buf: list[str] = []
        self.broken: dict | None = None   # the error that stopped this session's parse
        self.made = 0                     # (stream) events already handed out

    def has_content(self) -> bool:
        return any(e["k"] in ("msg.in", "msg.out", "code.edit") for e in self.events)

    def feed(self, ln: str) -> None:
        """One line of the session's body (a run of lines of one kind is flushed whole)."""
        if self.broken:
            return
        try:
            if ln.startswith("#### ") or ln == "####":
                k = "in"
            elif _TOOL_LINE.match(ln):
                k = "tool"
            else:
                k = "out"
            if k != self.kind:
                self.flush(self.kind, self.buf)
                self.kind, self.buf = k, []
            self.buf.append(ln)
        except Exception as e:  # a confusing run never loses the other sessions
            self._break(e)

    def close(self) -> None:
        if self.broken:
            return
        try:
            self.flush(self.kind, self.buf)
        except Exception as e:
            self._break(e)
        self.kind, self.buf = None, []

    def _break(self, e: Exception) -> None:
        self.broken = parse_error(self.path, self.line_no, f"{type(e).__name__}: {e}")
        self.events, self.buf = [], []

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
        times = _Times(inputs, cursor, self.t, next_ts)
        for ev in self.events:
            times.apply(ev)
        return times.cursor


class _Times:
    """Prompt times from the input history, applied one event at a time, in order: a prompt
    takes the time of its entry (matched from ``cursor`` on, before the next session's header);
    every event is at least as late as the one before it."""

    def __init__(self, inputs: list[tuple[str, str]], cursor: int, t: str | None,
                 next_ts: str | None) -> None:
        self.inputs, self.cursor, self.t = inputs, cursor, t
        self.limit = _iso(next_ts) if next_ts else None
        self.t_last = t

    def apply(self, ev: dict) -> None:
        inputs, limit = self.inputs, self.limit
        if ev["k"] == "msg.in":
            want = _norm(ev["answer"] if ev.get("confirmation") else ev["text"])
            for j in range(self.cursor, len(inputs)):
                t, text = inputs[j]
                if limit and t >= limit:
                    break
                if self.t and t < self.t:
                    self.cursor = j + 1
                    continue
                if _norm(text) == want:
                    ev["t"] = t
                    self.cursor = j + 1
                    break
        if ev.get("t") and (self.t_last is None or ev["t"] >= self.t_last):
            self.t_last = ev["t"]
        else:
            ev["t"] = self.t_last


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
