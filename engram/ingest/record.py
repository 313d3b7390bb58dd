"""Generic recording: tapes for tools that write no session log (``engram record``).

* ``record_stdin(stream)`` turns a pasted transcript into events: JSONL of ``{role, text}``
  (``content`` accepted for ``text``), or plain text whose lines start a message with a speaker
  prefix (``user:``, ``human:``, ``you:``, ``> `` → ``msg.in``; ``assistant:``, ``ai:``,
  ``model:``, ``bot:`` → ``msg.out``; ``system:`` → ``msg.in`` with ``role: "system"``; other lines
  continue the current message). Text with no prefix at all is one ``msg.in``.
* ``record_command(argv, cwd)`` runs a command under a pseudo-terminal (output passed through to
  the real stdout and recorded, capped) between two snapshots of the working tree, and emits
  ``msg.in`` (the command line), ``tool.call``/``tool.result`` (the output, exit code) and one
  ``code.edit`` per changed region of every created, changed or deleted text file.

Both return a session's events (``meta`` first, harness ``generic``), passed through
``base.finish_session`` (redaction, coverage) like every adapter's. **Timestamps:** every event
carries one time, the ``t`` argument when given, else the time this process started (so the same
inputs and ``t`` give byte-identical events); ``meta.t_source`` records which (``argument`` /
``process_start``). The session id is a hash of the input, not a random id.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from engram.adapters import base
from engram.digest import text_hash
from engram.timestamps import utc_iso

#: recorded command output, in bytes (the passthrough to stdout is never capped)
OUTPUT_CAP = 1_000_000
#: files larger than this are not snapshotted
MAX_FILE_BYTES = 1_000_000
SKIP_DIRS = {".git", ".venv", "node_modules", ".engram-cache", "__pycache__"}
LABEL_MAX = 80

_PROCESS_START = time.time()
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_PREFIX = re.compile(
    r"^(?:(?P<who>user|human|you|assistant|ai|model|bot|system)\s*:\s?|(?P<quote>> ?))"
    r"(?P<rest>.*)$",
    re.I)
_OUT_ROLES = {"assistant", "ai", "model", "bot"}


class _Generic(base.Adapter):
    name = "generic"
    tier = "agent"
    version = "1"


GENERIC = _Generic()


def _iso(t: float | str | None) -> tuple[str, str]:
    if isinstance(t, str):
        return t, "argument"
    src = "argument" if t is not None else "process_start"
    ts = _PROCESS_START if t is None else t
    return utc_iso(ts, millis=True), src


def _label(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= LABEL_MAX else one[: LABEL_MAX - 1].rstrip() + "…"


# --------------------------------------------------------------------------------------------
# stdin


def _jsonl_messages(text: str) -> list[tuple[str, str]] | None:
    out = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    for ln in lines:
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError:
            return None
        if not isinstance(rec, dict) or not isinstance(rec.get("role"), str):
            return None
        body = rec.get("text", rec.get("content"))
        if not isinstance(body, str):
            return None
        out.append((rec["role"].lower(), body))
    return out


def _plain_messages(text: str) -> list[tuple[str, str]]:
    msgs: list[list] = []
    for ln in text.splitlines():
        m = _PREFIX.match(ln)
        if m:
            role = "user" if m.group("quote") is not None else m.group("who").lower()
            msgs.append([role, [m.group("rest")]])
        elif msgs:
            msgs[-1][1].append(ln)
        else:
            msgs.append([None, [ln]])
    if not any(role for role, _ in msgs):
        return [("user", text.strip("\n"))] if text.strip() else []
    out = []
    for role, lines in msgs:
        body = "\n".join(lines).strip("\n")
        if body:
            out.append((role or "user", body))
    return out


def record_stdin(stream: IO[str] | IO[bytes] | str, *, label: str | None = None,
                 fmt: str = "auto", t: float | str | None = None) -> list[dict]:
    """A transcript read from ``stream`` (text, bytes or a ``str``) → one session's events.

    ``fmt``: ``auto`` (JSONL when every non-blank line is a ``{role, text}`` object, else plain),
    ``jsonl`` or ``text``. ``label`` defaults to the first user message. ``t``: epoch seconds or
    an ISO string used for every event (default: the process start time).
    """
    raw = stream if isinstance(stream, str) else stream.read()
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    ts, t_src = _iso(t)
    reasons: list[str] = []
    msgs = None
    if fmt in ("auto", "jsonl"):
        msgs = _jsonl_messages(text)
        if msgs is None and fmt == "jsonl":
            reasons.append("input is not JSONL of {role, text}: read as plain text")
    if msgs is None:
        msgs = _plain_messages(text)
    events = []
    for role, body in msgs:
        if role in _OUT_ROLES:
            events.append(base.ev_msg(ts, "msg.out", body))
        elif role in ("user", "human", "you"):
            events.append(base.ev_msg(ts, "msg.in", body))
        else:
            events.append(base.ev_msg(ts, "msg.in", body, role=role))
    if label is None:
        label = next((_label(e["text"]) for e in events if e["k"] == "msg.in"), None)
    session = text_hash(text)[:16]
    meta = base.ev_meta(ts, harness="generic", session=session, adapter=GENERIC,
                        source_path="<stdin>", label=label, t_source=t_src,
                        format="jsonl" if msgs and _jsonl_messages(text) is not None else "text")
    return base.finish_session([meta, *events], degraded_reasons=reasons)


# --------------------------------------------------------------------------------------------
# command


def _git(cwd: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.decode("utf-8", "surrogateescape") if r.returncode == 0 else None


def _list_files(cwd: Path) -> list[str]:
    out = _git(cwd, "ls-files", "-co", "--exclude-standard", "-z")
    if out is not None:
        return sorted({p for p in out.split("\0") if p})
    files = []
    for dirpath, dirnames, filenames in os.walk(cwd):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for f in filenames:
            files.append(os.path.relpath(os.path.join(dirpath, f), cwd).replace(os.sep, "/"))
    return sorted(files)


def snapshot(cwd: str | os.PathLike) -> dict[str, str | None]:
    """``{relative path: text}`` of the working tree under ``cwd``.

    In a git work tree the files are ``git ls-files -co --exclude-standard`` (tracked plus
    untracked, .gitignore respected); elsewhere a walk skipping ``SKIP_DIRS``. Files over
    ``MAX_FILE_BYTES``, binary files (a NUL byte, or not UTF-8) and links map to None (present,
    not diffed).
    """
    cwd = Path(cwd)
    snap: dict[str, str | None] = {}
    for rel in _list_files(cwd):
        p = cwd / rel
        try:
            if p.is_symlink() or not p.is_file():
                continue
            if p.stat().st_size > MAX_FILE_BYTES:
                snap[rel] = None
                continue
            data = p.read_bytes()
        except OSError:
            continue
        if b"\0" in data:
            snap[rel] = None
            continue
        try:
            snap[rel] = data.decode("utf-8")
        except UnicodeDecodeError:
            snap[rel] = None
    return snap


def _run_pty(argv: list[str], cwd: Path, passthrough: bool) -> tuple[int, bytes, int]:
    """Run under a pseudo-terminal; returns ``(exit code, captured output, total bytes)``."""
    import pty  # noqa: F401  (POSIX only; ImportError → the pipe fallback)
    import select

    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                                start_new_session=True, close_fds=True)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    buf = bytearray()
    total = 0
    out = getattr(sys.stdout, "buffer", None) if passthrough else None
    stdin_fd = None
    try:
        if passthrough and sys.stdin is not None and sys.stdin.isatty():
            stdin_fd = sys.stdin.fileno()
    except (ValueError, OSError, io.UnsupportedOperation):
        stdin_fd = None
    try:
        while True:
            fds = [master] + ([stdin_fd] if stdin_fd is not None else [])
            ready, _, _ = select.select(fds, [], [], 0.1)
            if master in ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk:
                    break
                total += len(chunk)
                if len(buf) < OUTPUT_CAP:
                    buf.extend(chunk[: OUTPUT_CAP - len(buf)])
                if out is not None:
                    out.write(chunk)
                    out.flush()
            if stdin_fd is not None and stdin_fd in ready:
                data = os.read(stdin_fd, 4096)
                if data:
                    os.write(master, data)
                else:
                    stdin_fd = None
            if not ready and proc.poll() is not None:
                break  # the child exited and nothing is left to read (a daemon may hold the pty)
    finally:
        os.close(master)
    return proc.wait(), bytes(buf), total


def _run_pipe(argv: list[str], cwd: Path, passthrough: bool) -> tuple[int, bytes, int]:
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    buf = bytearray()
    total = 0
    out = getattr(sys.stdout, "buffer", None) if passthrough else None
    assert proc.stdout is not None
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
        total += len(chunk)
        if len(buf) < OUTPUT_CAP:
            buf.extend(chunk[: OUTPUT_CAP - len(buf)])
        if out is not None:
            out.write(chunk)
            out.flush()
    return proc.wait(), bytes(buf), total


def record_command(argv: list[str], cwd: str | os.PathLike, *, label: str | None = None,
                   t: float | str | None = None,
                   passthrough: bool = True) -> tuple[int, list[dict]]:
    """Run ``argv`` in ``cwd`` under a pseudo-terminal and record it as one session.

    Returns ``(exit_code, events)``: ``meta`` (``cwd``, ``repo_head`` when in git, ``label``
    defaulting to the command line), ``msg.in`` (the command line), ``tool.call`` (``shell``,
    ``argv``), ``tool.result`` (output with ANSI escapes removed and CRLF → LF, capped at
    ``OUTPUT_CAP`` bytes with ``truncated: true``), then ``code.edit`` per changed region for each
    created / changed / deleted text file, in path order. A signal death gives exit
    ``128 + signal``. A command that cannot be started gives exit 127 and its error as stderr.
    """
    cwd = Path(cwd).resolve()
    ts, t_src = _iso(t)
    cmdline = shlex.join(argv)
    before = snapshot(cwd)
    stderr = None
    try:
        try:
            code, raw, total = _run_pty(list(argv), cwd, passthrough)
        except ImportError:
            code, raw, total = _run_pipe(list(argv), cwd, passthrough)
    except OSError as e:
        code, raw, total, stderr = 127, b"", 0, f"{argv[0] if argv else ''}: {e.strerror or e}"
    if code < 0:
        code = 128 - code
    after = snapshot(cwd)
    output = _ANSI.sub("", raw.decode("utf-8", "replace")).replace("\r\n", "\n").replace("\r", "\n")
    reasons: list[str] = []
    extra: dict = {}
    if total > len(raw):
        extra.update(truncated=True, output_bytes=total)
    call_id = "cmd"
    events = [base.ev_msg(ts, "msg.in", cmdline),
              base.ev_tool_call(ts, "shell", call_id, {"argv": list(argv), "cwd": str(cwd)}),
              base.ev_tool_result(ts, "shell", call_id, output, stderr, code, **extra)]
    skipped = []
    for rel in sorted(set(before) | set(after)):
        b, a = before.get(rel), after.get(rel)
        if rel in before and rel in after and b == a:
            continue
        file = str(cwd / rel)
        x = {"tool": "shell", "call_id": call_id}
        if (rel in before and b is None) or (rel in after and a is None):
            skipped.append(rel)
            continue
        if rel not in before:
            events.extend(base.edits_from_texts(ts, file, None, a, cwd=str(cwd), created=True, **x))
        elif rel not in after:
            events.append(base.ev_edit(ts, file, 1, b, 1, "", cwd=str(cwd), deleted=True, **x))
        else:
            events.extend(base.edits_from_texts(ts, file, b, a, cwd=str(cwd), **x))
    if skipped:
        reasons.append(f"{len(skipped)} changed file(s) not diffed (binary or over "
                       f"{MAX_FILE_BYTES} bytes): {', '.join(skipped[:5])}")
    head = _git(cwd, "rev-parse", "HEAD")
    session = text_hash(json.dumps([list(argv), str(cwd), ts]))[:16]
    meta = base.ev_meta(ts, harness="generic", session=session, adapter=GENERIC,
                        source_path=str(cwd), cwd=str(cwd),
                        repo_head=head.strip() if head else None,
                        label=label or _label(cmdline), t_source=t_src, command=list(argv))
    return code, base.finish_session([meta, *events], degraded_reasons=reasons)
