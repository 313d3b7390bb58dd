"""Codex CLI (and Codex Desktop / VS Code) rollouts → tape events.

Source: ``$CODEX_HOME`` (default ``~/.codex``) ``/sessions/YYYY/MM/DD/rollout-*.jsonl`` and
``archived_sessions/``; zstd-compressed ``rollout-*.jsonl.zst`` are read too (the plain file wins
when both exist). One rollout is one session. Lines are ``{timestamp, type, payload}`` envelopes:

* ``session_meta`` → ``meta`` (thread id, cwd, git commit, cli_version, originator); the model comes
  from the first ``turn_context``.
* ``response_item`` messages → ``msg.in``/``msg.out`` (developer/system prompts are skipped;
  harness-injected user context such as AGENTS.md or ``<environment_context>`` is kept with
  ``boilerplate: true``); reasoning summaries → ``msg.out`` with ``reasoning: true``. The same text
  also arrives as ``event_msg`` ``user_message``/``agent_message``/``agent_reasoning`` (and 0.149+
  ``item_completed``); the two copies are paired so each message is emitted once.
* ``function_call``/``custom_tool_call``/``local_shell_call``/``web_search_call`` → ``tool.call``;
  their outputs → ``tool.result``.
* ``apply_patch`` (freeform ``custom_tool_call`` input, ``function_call`` arguments
  ``{"input"|"patch"}``, or a shell ``apply_patch <<'EOF'`` heredoc) → one ``code.edit`` per hunk.
  Line numbers come from ``event_msg.patch_apply_end`` unified diffs when present; otherwise the
  patch text is parsed (``*** Begin Patch`` grammar) and ranges are marked ``range_known: false``
  unless the ``@@`` header carries numbers.
* Shell reads (``cat``, ``sed -n 'a,bp'``, ``nl -ba`` (gutter stripped), ``head``, ``tail``,
  ``rg -n`` ``file:line:`` output) → ``code.read``, from ``exec_command_end`` (full output) or the
  call's own output when the rollout has no ``exec_command_end``.
* ``compacted`` and ``event_msg.context_compacted`` → ``msg.in`` with ``compaction: true``.

Edits and reads are emitted when the *result* of a call is seen (the first of ``patch_apply_end``
/ ``exec_command_end`` / the call output), so appending lines to a rollout only appends events.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
from collections.abc import Iterator
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
    ev_read,
    ev_tool_call,
    ev_tool_result,
    finish_session,
    join_lines,
    lines_of,
    parse_error,
    rel_path,
)
from engram.errors import UnsupportedLog

_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
_BOILERPLATE_PREFIXES = ("<environment_context>", "# AGENTS.md instructions", "<user_instructions>",
                         "<INSTRUCTIONS>", "<permissions instructions>", "<turn_aborted>",
                         "<user_shell_command>", "<skills_instructions>", "<subagent_notification>")
_SHELL_TOOLS = {"shell", "shell_command", "exec_command", "local_shell", "container.exec",
                "unified_exec"}
_RESPONSE_TYPES = {"message", "reasoning", "function_call", "function_call_output",
                   "custom_tool_call", "custom_tool_call_output", "local_shell_call",
                   "web_search_call"}
_TRUNC = re.compile(r"…\d+ (?:chars|tokens) truncated…|\[\.\.\. \d+ (?:chars|tokens|lines) truncated")
_MAX_RG_READS = 100


def _ts(value) -> str | None:
    return value if isinstance(value, str) and _ISO.match(value) else None


def _text_of(content) -> str:
    """Text of a Responses-API content list (or a plain string)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for c in content:
        if isinstance(c, dict) and isinstance(c.get("text"), str):
            parts.append(c["text"])
        elif isinstance(c, str):
            parts.append(c)
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# apply_patch grammar


def parse_patch(text: str) -> list[dict]:
    """Parse ``*** Begin Patch`` text into ``[{op, path, move_to, hunks: [{header, lines}]}]``."""
    files: list[dict] = []
    cur: dict | None = None
    lines = text.split("\n")
    for raw in lines:
        ln = raw[:-1] if raw.endswith("\r") else raw
        if ln.startswith(("*** Begin Patch", "*** End Patch")):
            cur = None if ln.startswith("*** End Patch") else cur
            continue
        m = re.match(r"^\*\*\* (Add|Update|Delete) File: (.+)$", ln)
        if m:
            cur = {"op": m.group(1).lower(), "path": m.group(2).strip(), "move_to": None,
                   "hunks": []}
            files.append(cur)
            if cur["op"] == "add":
                cur["hunks"].append({"header": None, "lines": []})
            continue
        if cur is None:
            continue
        m = re.match(r"^\*\*\* Move to: (.+)$", ln)
        if m:
            cur["move_to"] = m.group(1).strip()
            continue
        if ln.startswith(("*** End of File", "*** ")):
            continue
        if cur["op"] == "delete":
            continue
        if ln.startswith("@@"):
            cur["hunks"].append({"header": ln, "lines": []})
            continue
        if not cur["hunks"]:
            cur["hunks"].append({"header": None, "lines": []})
        if ln[:1] in ("+", "-", " "):
            cur["hunks"][-1]["lines"].append(ln)
        elif ln == "":
            cur["hunks"][-1]["lines"].append(" ")
    for f in files:  # a trailing empty context line is the split artefact of the final newline
        for h in f["hunks"]:
            while h["lines"] and h["lines"][-1] == " " and f["op"] == "update":
                h["lines"].pop()
    return files


def extract_patch(s: str) -> str | None:
    """The ``*** Begin Patch`` … ``*** End Patch`` text inside a string (heredoc or argv)."""
    i = s.find("*** Begin Patch")
    if i < 0:
        return None
    j = s.find("*** End Patch", i)
    return s[i:] if j < 0 else s[i:j + len("*** End Patch")] + "\n"


_HUNK_HDR = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _diff_hunks(diff: str) -> list[dict]:
    """Unified diff text → ``[{oldStart, newStart, lines}]`` (base.edits_from_hunks shape)."""
    hunks: list[dict] = []
    for ln in diff.split("\n"):
        m = _HUNK_HDR.match(ln)
        if m:
            hunks.append({"oldStart": int(m.group(1)), "newStart": int(m.group(3)), "lines": []})
            continue
        if not hunks or ln.startswith(("---", "+++")):
            continue
        if ln[:1] in ("+", "-", " ", "\\"):
            hunks[-1]["lines"].append(ln)
    return hunks


def _trimmed(lines: list[str]) -> tuple[int, list[str], list[str]] | None:
    """(leading context count, before lines, after lines) of a hunk trimmed to its changes."""
    idx = [i for i, ln in enumerate(lines) if ln[:1] in ("+", "-")]
    if not idx:
        return None
    region = lines[idx[0]:idx[-1] + 1]
    before = [ln[1:] for ln in region if ln[:1] in ("-", " ")]
    after = [ln[1:] for ln in region if ln[:1] in ("+", " ")]
    return idx[0], before, after


def edits_from_patch(t, files: list[dict], cwd: str | None, workdir: str | None,
                     **extra) -> list[dict]:
    out: list[dict] = []
    for f in files:
        path = f["path"]
        more = dict(extra)
        if f.get("move_to"):
            more["moved_to"] = f["move_to"]
        if f["op"] == "delete":
            out.append(_fix_rel(ev_edit(t, path, 1, "", 1, "", cwd=cwd, deleted=True,
                                        range_known=False, **more), path, cwd, workdir))
            continue
        for h in f["hunks"]:
            if f["op"] == "add":
                after = [ln[1:] for ln in h["lines"] if ln[:1] == "+"]
                out.append(_fix_rel(ev_edit(t, path, 1, "", 1, join_lines(after), cwd=cwd,
                                            created=True, **more), path, cwd, workdir))
                continue
            tr = _trimmed(h["lines"])
            if tr is None:
                continue
            lead, before, after = tr
            m = _HUNK_HDR.match(h["header"] or "")
            if m:
                bs, as_ = int(m.group(1)) + lead, int(m.group(3)) + lead
                ev = ev_edit(t, path, bs, join_lines(before), as_, join_lines(after), cwd=cwd,
                             **more)
            else:
                ev = ev_edit(t, path, 1, join_lines(before), 1, join_lines(after), cwd=cwd,
                             range_known=False, **more)
            out.append(_fix_rel(ev, path, cwd, workdir))
    return out


def _fix_rel(ev: dict, path: str, cwd: str | None, workdir: str | None) -> dict:
    """Relative paths in a call are relative to its workdir; express ``rel`` against the cwd."""
    if workdir and not path.startswith("/") and cwd and workdir.rstrip("/") != cwd.rstrip("/"):
        ev["rel"] = rel_path(workdir.rstrip("/") + "/" + path, cwd)
    return ev


# --------------------------------------------------------------------------------------------
# Shell reads


def _command_string(name: str, args) -> str | None:
    if isinstance(args, dict):
        for key in ("cmd", "command"):
            v = args.get(key)
            if isinstance(v, str):
                return v
            if isinstance(v, list) and all(isinstance(x, str) for x in v):
                if len(v) >= 3 and v[-2] in ("-lc", "-c") and os.path.basename(v[0]) in (
                        "bash", "zsh", "sh"):
                    return v[-1]
                return shlex.join(v)
    if isinstance(args, list) and all(isinstance(x, str) for x in args):
        return _command_string(name, {"command": args})
    return None


def _split_cd(cmd: str, workdir: str | None) -> tuple[str, str | None]:
    m = re.match(r"^\s*cd\s+(\S+)\s*&&\s*(.*)$", cmd, re.S)
    if m:
        d = m.group(1).strip("'\"")
        if d.startswith("/") or not workdir:
            workdir = d
        else:
            workdir = workdir.rstrip("/") + "/" + d
        return m.group(2), workdir
    return cmd, workdir


def _sed_range(script: str) -> tuple[int, int | None] | None:
    m = re.fullmatch(r"(\d+)(?:,(\d+|\$))?p", script.strip())
    if not m:
        return None
    a, b = int(m.group(1)), m.group(2)
    return a, (None if b == "$" else int(b) if b else a)


def read_spec(cmd: str) -> dict | None:
    """Recognise a read command. Returns ``{kind, path, start?, gutter?}`` or None."""
    if "`" in cmd or "$(" in cmd or "\n" in cmd.strip():
        return None
    try:
        lex = shlex.shlex(cmd, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:
        return None
    stages: list[list[str]] = [[]]
    for tok in tokens:
        if tok == "|":
            stages.append([])
        elif tok and set(tok) <= set("&;<>|()"):
            return None  # chains, redirections, subshells: output cannot be attributed
        else:
            stages[-1].append(tok)
    if not stages or any(not s for s in stages):
        return None
    first = stages[0]
    prog = os.path.basename(first[0])
    if len(stages) == 1:
        if prog == "cat":
            files = [a for a in first[1:] if not a.startswith("-")]
            flags = [a for a in first[1:] if a.startswith("-")]
            if len(files) == 1 and flags in ([], ["-n"]):
                return {"kind": "whole", "path": files[0], "gutter": flags == ["-n"]}
            return None
        if prog == "nl" and "-ba" in first:
            files = [a for a in first[1:] if not a.startswith("-")]
            if len(files) == 1:
                return {"kind": "whole", "path": files[0], "gutter": True}
            return None
        if prog == "sed" and len(first) == 4 and first[1] == "-n":
            r = _sed_range(first[2])
            if r:
                return {"kind": "range", "path": first[3], "start": r[0], "gutter": False}
            return None
        if prog == "head":
            rest = first[1:]
            if len(rest) == 1:
                return {"kind": "whole", "path": rest[0], "gutter": False}
            if len(rest) == 3 and rest[0] == "-n" and rest[1].isdigit():
                return {"kind": "whole", "path": rest[2], "gutter": False}
            if len(rest) == 2 and re.fullmatch(r"-n?\d+", rest[0]):
                return {"kind": "whole", "path": rest[1], "gutter": False}
            return None
        if prog == "tail":
            rest = first[1:]
            path = rest[-1] if rest else None
            if path and not path.startswith("-") and (
                    len(rest) == 1 or (len(rest) == 3 and rest[0] == "-n" and rest[1].isdigit())
                    or (len(rest) == 2 and re.fullmatch(r"-n?\d+", rest[0]))):
                if len(rest) == 3 and rest[1].startswith("+"):
                    return None
                return {"kind": "tail", "path": path, "gutter": False}
            return None
        if prog == "rg" and ("-n" in first or "--line-number" in first):
            if any(a in first for a in ("--files", "-l", "--json", "-c", "--count", "-o")):
                return None
            return {"kind": "rg"}
        return None
    if len(stages) == 2 and prog in ("nl", "cat"):
        second = stages[1]
        gutter_ok = (prog == "nl" and "-ba" in first) or (prog == "cat" and "-n" in first)
        files = [a for a in first[1:] if not a.startswith("-")]
        if gutter_ok and len(files) == 1 and os.path.basename(second[0]) == "sed" and \
                len(second) == 3 and second[1] == "-n" and _sed_range(second[2]):
            return {"kind": "whole", "path": files[0], "gutter": True}
    return None


def _clean_output(text: str) -> tuple[str, bool]:
    """Drop the unified-exec header and anything from a truncation marker on."""
    m = re.match(r"^(?:Chunk ID: .*\n)?(?:Wall time: .*\n)?(?:Process (?:exited with code|running)"
                 r".*\n)?(?:Original token count: .*\n)?Output:\n", text)
    if m:
        text = text[m.end():]
    m = re.match(r"^Total output lines: \d+\n\n", text)
    if m:
        text = text[m.end():]
    mt = _TRUNC.search(text)
    if mt:
        cut = text.rfind("\n", 0, mt.start())
        return (text[:cut + 1] if cut >= 0 else ""), True
    return text, False


_RG_LINE = re.compile(r"^(.+?)([:-])(\d+)[:-](.*)$")


def reads_from_output(t, spec: dict, output: str, cwd: str | None, workdir: str | None,
                      call_id: str | None) -> list[dict]:
    text, truncated = _clean_output(output)
    if not text.strip():
        return []
    extra: dict = {"call_id": call_id}
    if truncated:
        extra["truncated"] = True
    kind = spec["kind"]
    if kind == "rg":
        return _rg_reads(t, text, cwd, workdir, extra)
    path = spec["path"]
    start = spec.get("start", 1)
    if spec.get("gutter"):
        stripped, first = base.strip_gutter(text)
        if first is None:
            return []
        text, start = stripped, first
    if kind == "tail":
        extra["range_known"] = False
    return [_fix_rel(ev_read(t, path, start, text, cwd=cwd, **extra), path, cwd, workdir)]


def _rg_reads(t, text: str, cwd, workdir, extra) -> list[dict]:
    blocks: list[list] = []  # [path, start, [lines]]
    for ln in lines_of(text):
        m = _RG_LINE.match(ln)
        if not m or m.group(1).isdigit():
            continue
        path, no, body = m.group(1), int(m.group(3)), m.group(4)
        if blocks and blocks[-1][0] == path and blocks[-1][1] + len(blocks[-1][2]) == no:
            blocks[-1][2].append(body)
        else:
            blocks.append([path, no, [body]])
    out = []
    for path, start, body in blocks[:_MAX_RG_READS]:
        ev = ev_read(t, path, start, join_lines(body), cwd=cwd, source="rg", **extra)
        out.append(_fix_rel(ev, path, cwd, workdir))
    return out


# --------------------------------------------------------------------------------------------
# Reading rollouts


def _iter_records(path: Path) -> tuple[Iterator[tuple[int, int, dict | None, str | None]], bool]:
    if str(path).endswith(".zst"):
        import zstandard

        def gen():
            with open(path, "rb") as f:
                stream = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(f), 1 << 20)
                yield from base.iter_jsonl_stream(stream)
        return gen(), True
    return base.iter_jsonl(path), False


class _Ledger:
    """Pairs the two copies Codex logs of each message (response_item and event_msg)."""

    def __init__(self) -> None:
        self.open: dict[tuple[str, str], list[str]] = {}

    def first(self, kind: str, text: str, source: str) -> bool:
        key = (kind, text.strip())
        pending = self.open.setdefault(key, [])
        for i, src in enumerate(pending):
            if src != source:
                del pending[i]
                return False
        pending.append(source)
        return True


class CodexAdapter(Adapter):
    name = "codex"
    versions = VersionMatrix("0.125.0", "0.146")
    default_locations = ("~/.codex/sessions", "~/.codex/archived_sessions")
    patterns = ("**/rollout-*.jsonl", "**/rollout-*.jsonl.zst")
    version = "1"

    def default_paths(self) -> list[Path]:
        home = os.environ.get("CODEX_HOME")
        root = Path(home) if home else Path(os.path.expanduser("~/.codex"))
        return [root / "sessions", root / "archived_sessions"]

    def discover(self, root: Path) -> Iterator[Path]:
        for p in super().discover(root):
            if p.name.endswith(".jsonl.zst") and p.with_name(p.name[:-4]).is_file():
                continue  # the plain rollout wins
            yield p

    def parse_source(self, path: Path, *, mode: str = "permissive") -> ParseOutput:
        path = Path(path)
        return _Parser(self, path, mode).run()

    streams = True

    def stream_source(self, path: Path, *, mode: str = "permissive") -> base.SessionStream:
        return base.SessionStream(_Parser(self, Path(path), mode).run(stream=True))


class _Parser(base.StreamParser):
    def __init__(self, adapter: CodexAdapter, path: Path, mode: str) -> None:
        self.a, self.path, self.mode = adapter, path, mode
        self.meta: dict = {}
        self.events: list[dict] = []
        self.errors: list[dict] = []
        self.calls: dict[str, dict] = {}
        self.done: set[str] = set()  # call ids whose edits/reads were emitted
        self.ledger = _Ledger()
        self.model: str | None = None
        self.cwd: str | None = None
        self.legacy = False
        self.line: int | None = None   # of the record being read

    # ---- driver
    def _run(self, stream: bool):
        fin = base.StreamFinish() if stream else None
        made = False
        records, compressed = _iter_records(self.path)
        end = 0
        for no, off, rec, err in records:
            end = off
            self.line = no
            if err:
                self.errors.append(base.record_error(self.path, no, err, rec))
                if rec is None:
                    continue
            try:
                self.record(rec)
            except Exception as e:  # a record of an unexpected shape never aborts the file
                self.errors.append(parse_error(self.path, no, f"{type(e).__name__}: {e}"))
            if fin is not None and self.events:
                made_now, self.events = self.events, []
                made = True
                for ev in made_now:
                    yield from fin.event(ev, lambda: _ts(self.meta.get("timestamp")))
        self.output = out = ParseOutput(errors=self.errors, end_offset=None if compressed else end)
        if not self.meta and not self.events and not made:
            return out
        version = self.meta.get("cli_version")
        version = version if isinstance(version, str) else None
        status = self.a.versions.status(version)
        reasons = []
        if status != "ok":
            msg = (f"codex version {version or 'unknown'} is {status} "
                   f"(tested {self.a.versions.min}..{self.a.versions.max_tested})")
            if self.mode == "strict":
                raise UnsupportedLog(msg, path=str(self.path))
            reasons.append(msg)
        if self.legacy:
            reasons.append("legacy pre-envelope rollout format")
        sid = self.meta.get("session_id") or self.meta.get("id")
        sid = sid if isinstance(sid, str) and sid else self.path.name.split(".")[0]
        git = self.meta.get("git") if isinstance(self.meta.get("git"), dict) else {}
        extra = {}
        for k, key in (("originator", "originator"), ("source", "codex_source"),
                       ("forked_from_id", "forked_from_id"), ("model_provider", "model_provider")):
            if self.meta.get(k) is not None:
                extra[key] = self.meta[k]
        if git.get("branch"):
            extra["git_branch"] = git["branch"]
        meta = ev_meta(_ts(self.meta.get("timestamp")), harness="codex", session=sid,
                       adapter=self.a, source_path=str(self.path), harness_version=version,
                       model=self.model, cwd=self.cwd, repo_head=git.get("commit_hash"), **extra)
        if fin is not None:
            meta, rest = fin.finish(meta, reasons)
            yield from rest
            out.sessions.append(SessionLog(key=sid, events=[meta]))
            return out
        events = finish_session([meta] + self.events, degraded_reasons=reasons)
        out.sessions.append(SessionLog(key=sid, events=events))
        return out

    def emit(self, ev: dict) -> None:
        self.events.append(ev)

    # ---- records
    def record(self, rec: dict) -> None:
        typ = rec.get("type")
        payload = rec.get("payload")
        t = _ts(rec.get("timestamp"))
        if "payload" not in rec:
            # ≤0.2x: a bare meta first line, then bare ResponseItems
            if typ in _RESPONSE_TYPES:
                self.legacy = True
                self.response_item(None, rec)
            elif not self.meta and "id" in rec and "timestamp" in rec and typ is None:
                self.legacy = True
                self.meta = dict(rec)
            return
        if not isinstance(payload, dict):
            raise ValueError(f"payload of a {typ!r} record is not an object")
        if typ == "session_meta":
            if not self.meta:
                self.meta = payload
                cwd = payload.get("cwd")
                if isinstance(cwd, str) and self.cwd is None:
                    self.cwd = cwd
        elif typ == "turn_context":
            model = payload.get("model")
            if self.model is None and isinstance(model, str) and model:
                self.model = model
            if self.cwd is None and isinstance(payload.get("cwd"), str):
                self.cwd = payload["cwd"]
        elif typ == "response_item":
            self.response_item(t, payload)
        elif typ == "event_msg":
            self.event_msg(t, payload)
        elif typ == "compacted":
            msg = payload.get("message")
            self.emit(ev_msg(t, "msg.in", msg if isinstance(msg, str) else "", compaction=True,
                             marker="compacted"))

    def response_item(self, t, p: dict) -> None:
        typ = p.get("type")
        if typ == "message":
            role = p.get("role")
            text = _text_of(p.get("content"))
            if role == "user":
                if text.lstrip().startswith(_BOILERPLATE_PREFIXES):
                    self.emit(ev_msg(t, "msg.in", text, boilerplate=True))
                elif text and self.ledger.first("user", text, "item"):
                    self.emit(ev_msg(t, "msg.in", text))
            elif role == "assistant":
                if text and self.ledger.first("assistant", text, "item"):
                    extra = {"phase": p["phase"]} if isinstance(p.get("phase"), str) else {}
                    self.emit(ev_msg(t, "msg.out", text, **extra))
            return
        if typ == "reasoning":
            parts = [s.get("text") for s in base.as_list(p.get("summary")) if isinstance(s, dict)]
            if not any(parts):
                parts = [c.get("text") for c in base.as_list(p.get("content")) if isinstance(c, dict)]
            for text in parts:
                if isinstance(text, str) and text and self.ledger.first("reasoning", text, "item"):
                    self.emit(ev_msg(t, "msg.out", text, reasoning=True))
            return
        if typ in ("function_call", "custom_tool_call"):
            name = p.get("name") if isinstance(p.get("name"), str) else "unknown"
            call_id = p.get("call_id") if isinstance(p.get("call_id"), str) else None
            raw = p.get("arguments") if typ == "function_call" else p.get("input")
            args = raw
            if isinstance(raw, str):
                try:  # big integers, lone surrogates, deep nesting: rewritten, and reported
                    args, notes = base.loads_json_text(raw)
                except ValueError:
                    args = raw if typ == "function_call" else {"input": raw}
                else:
                    if notes:
                        self.errors.append(parse_error(
                            self.path, self.line, f"arguments of call {call_id}: "
                            + "; ".join(notes) + "; record kept", base.VALUE_REWRITTEN))
            self.emit(ev_tool_call(t, name, call_id, args))
            self.note_call(call_id, name, args, raw)
            return
        if typ == "local_shell_call":
            call_id = p.get("call_id") if isinstance(p.get("call_id"), str) else None
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            self.emit(ev_tool_call(t, "local_shell", call_id, action))
            self.note_call(call_id, "local_shell", action, None)
            return
        if typ == "web_search_call":
            self.emit(ev_tool_call(t, "web_search", p.get("id") if isinstance(p.get("id"), str)
                                   else None, p.get("action")))
            return
        if typ in ("function_call_output", "custom_tool_call_output"):
            call_id = p.get("call_id") if isinstance(p.get("call_id"), str) else None
            self.call_output(t, call_id, p.get("output"))

    def note_call(self, call_id, name: str, args, raw) -> None:
        info: dict = {"name": name, "patch": None, "cmd": None, "workdir": None}
        if isinstance(args, dict):
            wd = args.get("workdir") or args.get("working_directory") or args.get("cwd")
            info["workdir"] = wd if isinstance(wd, str) else None
        if name == "apply_patch":
            src = None
            if isinstance(args, dict):
                src = args.get("input") or args.get("patch")
            elif isinstance(args, str):
                src = args
            if isinstance(src, str):
                info["patch"] = extract_patch(src) or src
        else:
            cmd = _command_string(name, args)
            if cmd is None and isinstance(raw, str) and name in _SHELL_TOOLS:
                cmd = raw
            if isinstance(cmd, str):
                info["patch"] = extract_patch(cmd) if "*** Begin Patch" in cmd else None
                info["cmd"] = cmd if info["patch"] is None else None
        if call_id:
            self.calls[call_id] = info

    def call_output(self, t, call_id, output) -> None:
        text, exit_code = _output_text(output)
        info = self.calls.get(call_id or "")
        tool = info["name"] if info else None
        self.emit(ev_tool_result(t, tool, call_id, text, exit=exit_code))
        if not info or call_id in self.done:
            return
        if info["patch"]:
            if exit_code not in (None, 0) or _patch_failed(text):
                return
            self.done.add(call_id)
            for ev in edits_from_patch(t, parse_patch(info["patch"]), self.cwd, info["workdir"],
                                       call_id=call_id):
                self.emit(ev)
        elif info["cmd"] and text is not None:
            if "Process running with session ID" in text[:300]:
                return  # partial: the full output arrives in exec_command_end
            if exit_code not in (None, 0):
                return
            self.emit_reads(t, call_id, info, text)

    def emit_reads(self, t, call_id, info: dict, output: str, cmd: str | None = None) -> None:
        cmd, workdir = _split_cd(cmd or info.get("cmd") or "", info.get("workdir") or self.cwd)
        spec = read_spec(cmd)
        if call_id:
            self.done.add(call_id)
        if spec is None:
            return
        for ev in reads_from_output(t, spec, output, self.cwd, workdir, call_id):
            self.emit(ev)

    def event_msg(self, t, p: dict) -> None:
        typ = p.get("type")
        if typ == "user_message":
            text = p.get("message")
            if isinstance(text, str) and text and self.ledger.first("user", text, "event"):
                self.emit(ev_msg(t, "msg.in", text))
        elif typ == "agent_message":
            text = p.get("message")
            if isinstance(text, str) and text and self.ledger.first("assistant", text, "event"):
                extra = {"phase": p["phase"]} if isinstance(p.get("phase"), str) else {}
                self.emit(ev_msg(t, "msg.out", text, **extra))
        elif typ == "agent_reasoning":
            text = p.get("text")
            if isinstance(text, str) and text and self.ledger.first("reasoning", text, "event"):
                self.emit(ev_msg(t, "msg.out", text, reasoning=True))
        elif typ == "context_compacted":
            self.emit(ev_msg(t, "msg.in", "", compaction=True, marker="context_compacted"))
        elif typ == "exec_command_end":
            self.exec_end(t, p)
        elif typ == "patch_apply_end":
            self.patch_end(t, p)
        elif typ == "item_completed":
            item = p.get("item") if isinstance(p.get("item"), dict) else {}
            it = item.get("type")
            if it == "UserMessage":
                text = _text_of(item.get("content"))
                if text and self.ledger.first("user", text, "event"):
                    self.emit(ev_msg(t, "msg.in", text))
            elif it == "AgentMessage":
                text = _text_of(item.get("content"))
                if text and self.ledger.first("assistant", text, "event"):
                    self.emit(ev_msg(t, "msg.out", text))
            elif it == "CommandExecution":
                self.exec_end(t, dict(item, call_id=item.get("call_id") or item.get("id")))
            elif it == "FileChange":
                self.patch_end(t, dict(item, call_id=item.get("call_id") or item.get("id")))
        elif typ == "mcp_tool_call_end":
            call_id = p.get("call_id") if isinstance(p.get("call_id"), str) else None
            if call_id and call_id not in self.calls:
                inv = p.get("invocation") if isinstance(p.get("invocation"), dict) else {}
                tool = f"mcp:{inv.get('server')}.{inv.get('tool')}"
                self.calls[call_id] = {"name": tool, "patch": None, "cmd": None, "workdir": None}
                self.emit(ev_tool_call(t, tool, call_id, inv.get("arguments")))
                res = p.get("result")
                self.emit(ev_tool_result(t, tool, call_id, json.dumps(res, sort_keys=True,
                                                                      ensure_ascii=False)))

    def exec_end(self, t, p: dict) -> None:
        call_id = p.get("call_id") if isinstance(p.get("call_id"), str) else None
        if call_id in self.done:
            return
        if p.get("exit_code") not in (0, None):
            if call_id:
                self.done.add(call_id)
            return
        out = p.get("stdout") if isinstance(p.get("stdout"), str) and p.get("stdout") else \
            p.get("aggregated_output")
        if not isinstance(out, str):
            return
        info = self.calls.get(call_id or "") or {"name": None, "cmd": None, "workdir": None,
                                                 "patch": None}
        if info.get("patch"):
            return
        cmd = info.get("cmd")
        if not cmd:
            command = p.get("command")
            if isinstance(command, list):
                cmd = _command_string("shell", {"command": command})
        if not cmd:
            return
        wd = p.get("cwd") if isinstance(p.get("cwd"), str) else None
        self.emit_reads(t, call_id, dict(info, workdir=info.get("workdir") or wd), out, cmd)

    def patch_end(self, t, p: dict) -> None:
        call_id = p.get("call_id") if isinstance(p.get("call_id"), str) else None
        changes = p.get("changes")
        if call_id in self.done or not isinstance(changes, dict) or not changes:
            return
        if p.get("success") is False or p.get("status") == "failed":
            if call_id:
                self.done.add(call_id)
            return
        info = self.calls.get(call_id or "") or {}
        patch_files = parse_patch(info["patch"]) if info.get("patch") else []
        evs: list[dict] = []
        for fpath in sorted(changes):
            ch = changes[fpath]
            if not isinstance(ch, dict):
                continue
            kind = ch.get("type")
            extra = {"call_id": call_id}
            if isinstance(ch.get("move_path"), str) and ch["move_path"]:
                extra["moved_to"] = ch["move_path"]
            got: list[dict] = []
            if kind == "update" and isinstance(ch.get("unified_diff"), str):
                got = base.edits_from_hunks(t, fpath, _diff_hunks(ch["unified_diff"]),
                                            cwd=self.cwd, **extra)
            elif kind == "add" and isinstance(ch.get("content"), str):
                got = [ev_edit(t, fpath, 1, "", 1, ch["content"], cwd=self.cwd, created=True,
                               **extra)]
            elif kind == "delete":
                content = ch.get("content") if isinstance(ch.get("content"), str) else ""
                got = [ev_edit(t, fpath, 1, content, 1, "", cwd=self.cwd, deleted=True, **extra)]
            if not got:  # no usable diff: fall back to the patch text for this file
                same = [f for f in patch_files if fpath == f["path"] or
                        fpath.endswith("/" + f["path"].lstrip("./"))]
                got = edits_from_patch(t, same, self.cwd, info.get("workdir"), call_id=call_id)
            evs.extend(got)
        if call_id:
            self.done.add(call_id)
        for ev in evs:
            self.emit(ev)


def _output_text(output) -> tuple[str | None, int | None]:
    """(text, exit code) of a function/custom tool output in any of its logged shapes."""
    exit_code = None
    if isinstance(output, str):
        s = output.strip()
        if s.startswith("{") and '"output"' in s:
            try:
                d = json.loads(s)
            except ValueError:
                d = None
            if isinstance(d, dict) and isinstance(d.get("output"), str):
                md = d.get("metadata") if isinstance(d.get("metadata"), dict) else {}
                ec = md.get("exit_code")
                return d["output"], ec if isinstance(ec, int) else None
        m = re.search(r"^Process exited with code (\d+)$", output[:400], re.M)
        if m:
            exit_code = int(m.group(1))
        else:
            m = re.match(r"^Exit code: (\d+)\n", output)
            if m:
                exit_code = int(m.group(1))
        return output, exit_code
    if isinstance(output, dict):
        if isinstance(output.get("text"), str):
            return output["text"], None
        if isinstance(output.get("content"), str):
            return output["content"], None
        return json.dumps(output, sort_keys=True, ensure_ascii=False), None
    if isinstance(output, list):
        return _text_of(output), None
    return None, None


def _patch_failed(text: str | None) -> bool:
    if not text:
        return False
    head = text.lstrip()[:200].lower()
    return head.startswith(("error", "apply_patch verification failed", "failed")) or \
        "verification failed" in head


ADAPTER = CodexAdapter()
