"""OpenClaw (orchestrator tier): ``~/.openclaw/agents/<agent>/sessions/*.jsonl`` → tape events.

Sources: every transcript under ``agents/*/sessions/`` (``$OPENCLAW_STATE_DIR``, default
``~/.openclaw``, legacy ``~/.clawdbot``), including the rotated copies ``<id>.jsonl.reset.<ts>``
(``/new``, ``/reset``), ``.deleted.<ts>`` and ``.bak.<ts>``: ``meta.variant`` says which, with
``meta.variant_stamp``. ``sessions.json`` is the session index, not a transcript, and is skipped.

One file is one session (key: the header ``id``, else the file name). The format is the pi
coding-agent session log: line 1 ``{type: "session", version: 3, id, timestamp, cwd,
parentSession?}``, then entries with ``id``/``parentId`` (a tree; events follow file order, which
is append order, so parsing is prefix-stable). The header ``version`` is the *format* version (the
OpenClaw app version is not logged): it is checked against the version matrix and kept in
``meta.format_version``. Captured:

* ``message`` user → ``msg.in``; assistant ``text`` → ``msg.out``, ``thinking`` → ``msg.out``
  with ``reasoning: true``, ``toolCall`` → ``tool.call``; ``toolResult`` → ``tool.result``
  (``isError`` puts the text in ``stderr``, ``exit`` 1).
* After a successful ``toolResult`` of ``read`` → ``code.read`` (``offset`` is 1-based; pi's
  trailing ``[Showing lines …]`` notes stripped); ``write`` (and ``edit_file``/``write_file``
  with ``content``) → ``code.edit`` (whole content; exact diff when the file's content is known
  from earlier in the session); ``edit`` ``edits[].oldText/newText`` (or the older top-level
  ``oldText``/``newText``) → ``code.edit`` located in the known content, else
  ``range_known: false``.
* ``custom_message`` (enters the model's context) → ``msg.in`` with ``custom_type``;
  ``compaction`` / ``branch_summary`` ``summary`` → ``msg.out`` with ``summary: true``;
  ``model_change`` sets the model; ``thinking_level_change`` and ``custom`` (extension state, not
  in context) are skipped.
* Anything else (unknown entry types, message roles or content blocks) is reported: coverage
  ``degraded`` with one reason per kind in permissive mode (text of an unknown role is still kept
  as ``msg.in`` with its ``role``), ``UnsupportedLog`` in strict mode.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from engram.adapters import base
from engram.adapters.base import (
    MAX_TOOL_OUTPUT,
)
from engram.adapters.base import (
    as_dict as _d,
)
from engram.adapters.base import (
    as_int as _int,
)
from engram.adapters.base import (
    as_str as _s,
)
from engram.adapters.base import (
    iso_any as _ts,
)
from engram.adapters.base import (
    label_of as _label,
)
from engram.errors import UnsupportedLog

_NAME = re.compile(r"^(?P<stem>.+)\.jsonl(?:\.(?P<variant>reset|deleted|bak)\.(?P<stamp>.+))?$")
_PI_NOTE = re.compile(
    r"\n*\[(?:Showing lines \d+|\d+ more lines|Use offset=|Truncated)[^\]\n]*\]\s*$")
_READ = ("read", "read_file")
_WRITE = ("write", "write_file", "create_file")
_EDIT = ("edit", "edit_file", "str_replace")
_KNOWN_ENTRIES = ("session", "message", "model_change", "thinking_level_change", "custom",
                  "custom_message", "compaction", "branch_summary", "label")


def _text(content) -> str:
    """Text of a ``content`` value: a string or a list of ``{type: "text", text}`` blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict)
                         and b.get("type") == "text" and isinstance(b.get("text"), str))
    return ""


def _replace(content: str, old: str, new: str) -> str | None:
    if not old or old not in content:
        return None
    return content.replace(old, new, 1)


def source_variant(path: Path) -> tuple[str | None, str | None]:
    """``x.jsonl.reset.2026-01-01T…`` → ``("reset", "2026-01-01T…")``; a live log → (None, None)."""
    m = _NAME.match(Path(path).name)
    if not m:
        return None, None
    return m.group("variant"), m.group("stamp")


class OpenClawAdapter(base.Adapter):
    name = "openclaw"
    tier = "orchestrator"
    #: over the transcript header's ``version`` (the format version; the app version is not logged)
    versions = base.VersionMatrix(min="3", max_tested="3")
    default_locations = ("$OPENCLAW_STATE_DIR", "~/.openclaw", "~/.clawdbot")
    patterns = ("agents/*/sessions/*.jsonl", "agents/*/sessions/*.jsonl.*")
    version = "1"

    def default_paths(self) -> list[Path]:
        state = os.environ.get("OPENCLAW_STATE_DIR")
        if state:
            return [Path(state)]
        return [Path("~/.openclaw").expanduser(), Path("~/.clawdbot").expanduser()]

    def discover(self, root: Path):
        """Transcripts under a state dir, an ``agents`` dir, or a ``sessions`` dir. Sorted."""
        root = Path(root)
        if root.is_file():
            yield root
            return
        if not root.is_dir():
            return
        found = set()
        for pat in ("agents/*/sessions/*", "*/sessions/*", "sessions/*", "*"):
            for p in root.glob(pat):
                if p.is_file() and _NAME.match(p.name):
                    found.add(p)
        yield from sorted(found)

    def parse_source(self, path: Path, *, mode: str = "permissive") -> base.ParseOutput:
        path = Path(path)
        p = _Parser(self, path, mode)
        out = base.ParseOutput(end_offset=0)
        for line_no, end, rec, err in base.iter_jsonl(path):
            out.end_offset = end
            if err:
                out.errors.append(base.record_error(path, line_no, err, rec))
                if rec is None:
                    continue
            try:
                p.record(rec, line_no)
            except UnsupportedLog:
                raise
            except Exception as e:  # a record of an unexpected shape never aborts the file
                out.errors.append(base.parse_error(
                    path, line_no, f"unexpected {rec.get('type')!r} record: {type(e).__name__}: {e}"))
        if p.header is None and not p.events and not p.reasons:
            return out  # empty or nothing but junk: no session
        meta = p.meta()
        events = base.finish_session([meta, *p.events], degraded_reasons=p.reasons)
        out.sessions.append(base.SessionLog(meta["session"], events))
        return out


class _Parser:
    def __init__(self, adapter: OpenClawAdapter, path: Path, mode: str):
        self.adapter = adapter
        self.path = path
        self.mode = mode
        self.header: dict | None = None
        self.events: list[dict] = []
        self.reasons: list[str] = []
        self.model: str | None = None
        self.label: str | None = None
        self.cwd: str | None = None
        self.calls: dict[str, dict] = {}  # toolCall id → {"tool", "args"}
        self.files: dict[str, str] = {}  # path → last known full content
        self.first_t: str | None = None

    def unsupported(self, reason: str, line_no: int) -> None:
        if self.mode == "strict":
            raise UnsupportedLog(reason, path=str(self.path), line=line_no)
        if reason not in self.reasons:
            self.reasons.append(reason)

    def meta(self) -> dict:
        h = self.header or {}
        variant, stamp = source_variant(self.path)
        parts = self.path.parts
        agent = parts[-3] if len(parts) >= 3 and parts[-2] == "sessions" else None
        extra: dict = {"format_version": h.get("version"), "variant": variant,
                       "agent_id": agent}
        if stamp:
            extra["variant_stamp"] = stamp
        if _s(h.get("parentSession")):
            extra["parent_session"] = h["parentSession"]
        m = _NAME.match(self.path.name)
        session = _s(h.get("id")) or (m.group("stem") if m else self.path.stem)
        return base.ev_meta(_ts(h.get("timestamp")) or self.first_t, harness="openclaw",
                            session=session, adapter=self.adapter, source_path=str(self.path),
                            model=self.model, cwd=self.cwd, label=self.label, **extra)

    # -- records ----------------------------------------------------------------------------

    def record(self, rec: dict, line_no: int) -> None:
        typ = rec.get("type")
        t = _ts(rec.get("timestamp")) or _ts(_d(rec.get("message")).get("timestamp"))
        if t and self.first_t is None:
            self.first_t = t
        x = {"entry_id": rec["id"]} if isinstance(rec.get("id"), str) else {}
        if typ == "session":
            if self.header is not None:
                self.unsupported("a second session header", line_no)
                return
            self.header = rec
            self.cwd = _s(rec.get("cwd"))
            v = rec.get("version")
            vs = str(v) if isinstance(v, (int, str)) and not isinstance(v, bool) else None
            st = self.adapter.versions.status(vs)
            if st != "ok":
                vm = self.adapter.versions
                self.unsupported(f"openclaw transcript format version {vs} is outside the "
                                 f"tested range {vm.min}..{vm.max_tested}", line_no)
            return
        if self.header is None and not self.events and "no session header" not in self.reasons:
            self.unsupported("no session header", line_no)
        if typ == "message":
            self._message(_d(rec.get("message")), t, x, line_no)
        elif typ == "model_change":
            self.model = self.model or _s(rec.get("modelId"))
        elif typ == "custom_message":
            text = _text(rec.get("content"))
            if text:
                self.events.append(base.ev_msg(t, "msg.in", text,
                                               custom_type=_s(rec.get("customType")), **x))
        elif typ in ("compaction", "branch_summary"):
            text = _s(rec.get("summary"))
            if text:
                self.events.append(base.ev_msg(t, "msg.out", text, summary=True, entry=typ, **x))
        elif typ in _KNOWN_ENTRIES:
            return  # thinking_level_change, custom, label: no text to keep
        else:
            self.unsupported(f"unknown entry type {typ!r}", line_no)

    def _message(self, msg: dict, t, x: dict, line_no: int) -> None:
        role = msg.get("role")
        content = msg.get("content")
        if role == "user":
            text = _text(content)
            if text:
                if self.label is None:
                    self.label = _label(text)
                self.events.append(base.ev_msg(t, "msg.in", text, **x))
        elif role == "assistant":
            self.model = self.model or _s(msg.get("model"))
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for b in blocks if isinstance(blocks, list) else []:
                b = _d(b)
                bt = b.get("type")
                if bt == "text":
                    if _s(b.get("text")):
                        self.events.append(base.ev_msg(t, "msg.out", b["text"], **x))
                elif bt == "thinking":
                    text = _s(b.get("thinking")) or _s(b.get("text"))
                    if text:
                        self.events.append(base.ev_msg(t, "msg.out", text, reasoning=True, **x))
                elif bt == "toolCall":
                    tool = _s(b.get("name")) or "unknown"
                    cid = _s(b.get("id"))
                    args = b.get("arguments") if b.get("arguments") is not None else {}
                    if cid:
                        self.calls[cid] = {"tool": tool, "args": args}
                    self.events.append(base.ev_tool_call(t, tool, cid, args, **x))
                else:
                    self.unsupported(f"unknown assistant content block {bt!r}", line_no)
        elif role == "toolResult":
            self._tool_result(msg, t, x)
        else:
            self.unsupported(f"unknown message role {role!r}", line_no)
            text = _text(content)
            if text:
                self.events.append(base.ev_msg(t, "msg.in", text, role=role, **x))

    def _tool_result(self, msg: dict, t, x: dict) -> None:
        cid = _s(msg.get("toolCallId"))
        call = self.calls.get(cid or "", {})
        tool = _s(msg.get("toolName")) or call.get("tool")
        text = _text(msg.get("content"))
        is_error = msg.get("isError") is True
        extra: dict = {}
        if len(text) > MAX_TOOL_OUTPUT:
            text, extra["truncated"] = text[:MAX_TOOL_OUTPUT], True
        self.events.append(base.ev_tool_result(
            t, tool, cid, None if is_error else text, text if is_error else None,
            1 if is_error else 0, **extra, **x))
        if is_error or not tool or not isinstance(call.get("args"), dict):
            return
        args = call["args"]
        code_x = {"tool": tool, "call_id": cid, **x}
        file = _s(args.get("path")) or _s(args.get("file_path")) or _s(args.get("filePath"))
        if not file:
            return
        if tool in _READ:
            body = _PI_NOTE.sub("\n", text) if _PI_NOTE.search(text) else text
            body, first = base.strip_gutter(body)
            start = first or _int(args.get("offset")) or 1
            if body:
                self.events.append(base.ev_read(t, file, start, body, cwd=self.cwd, **code_x))
                if start == 1 and _int(args.get("limit")) is None and not _PI_NOTE.search(text):
                    self.files[file] = body
            return
        content = _s(args.get("content"))
        if tool in _WRITE or (tool in _EDIT and content is not None and "edits" not in args
                              and "oldText" not in args):
            if content is None:
                return
            before = self.files.get(file)
            self.files[file] = content
            if before is not None:
                self.events.extend(base.edits_from_texts(t, file, before, content,
                                                         cwd=self.cwd, **code_x))
            else:
                self.events.append(base.ev_edit(t, file, 1, "", 1, content, cwd=self.cwd,
                                                range_known=False, **code_x))
            return
        if tool in _EDIT:
            edits = args.get("edits") if isinstance(args.get("edits"), list) else [args]
            pairs = [(_s(e.get("oldText")) or _s(e.get("old_string")) or "",
                      _s(e.get("newText")) or _s(e.get("new_string")) or "")
                     for e in edits if isinstance(e, dict)]
            pairs = [p for p in pairs if p[0] or p[1]]
            before = self.files.get(file)
            cur = before
            for old, new in pairs:
                cur = _replace(cur, old, new) if cur is not None else None
            if before is not None and cur is not None and pairs:
                self.files[file] = cur
                self.events.extend(base.edits_from_texts(t, file, before, cur, cwd=self.cwd,
                                                         **code_x))
                return
            self.files.pop(file, None)
            for old, new in pairs:
                self.events.append(base.ev_edit(t, file, 1, old, 1, new, cwd=self.cwd,
                                                range_known=False, **code_x))


ADAPTER = OpenClawAdapter()
