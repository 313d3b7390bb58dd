"""Custom agents log themselves: ``engram.sdk.Session``.

An agent framework with no log format of its own writes its session as it goes::

    from engram.sdk import Session

    with Session("fix the retry loop", cwd="/path/to/repo", agent="my-agent") as s:
        s.message("user", "fix the retry loop in net.py")
        s.read("net.py", text=open("/path/to/repo/net.py").read())
        s.edit("net.py", before=old, after=new)          # whole file, or a region with start=
        call = s.tool_call("shell", {"command": "pytest -q"})
        s.tool_result(call, stdout="3 passed", exit=0)
        s.message("assistant", "Fixed: retries stop after 3 attempts.")
        s.note("net.py", 10, 18, "warning", "keep 3 retries: the balancer drops the 4th")

Each call appends one JSON line to ``$ENGRAM_HOME/inbox/<session id>.jsonl`` (0600, in a 0700
directory) and flushes it; Engram's ``engram_sdk`` adapter reads the inbox like any harness's log
(``engram ingest``, ``engram watch``, the language server's watcher): live at once, sealed into a
tape after ``seal_after`` quiet seconds. Secrets are redacted at ingest, as for every harness.

This module imports nothing of Engram beyond its leaves, so it is cheap to import in an agent.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path

from engram import paths
from engram.timestamps import utc_iso

FORMAT = 1
INBOX = "inbox"
ROLES = {"user": "msg.in", "assistant": "msg.out", "system": "msg.in"}
NOTE_KINDS = ("warning", "decision", "discovery", "todo")


def inbox_dir() -> Path:
    """Where SDK sessions are logged: ``$ENGRAM_HOME/inbox``."""
    return paths.user_dir() / INBOX


class Session:
    """One agent session, logged as it happens (module docstring). Thread-safe; a closed session
    refuses further events."""

    def __init__(self, label: str | None = None, *, cwd: str | os.PathLike | None = None,
                 agent: str = "custom", model: str | None = None,
                 session_id: str | None = None):
        self.id = session_id or uuid.uuid4().hex
        if not all(c.isalnum() or c in "-_." for c in self.id) or len(self.id) > 128:
            raise ValueError(f"session id {self.id!r}: letters, digits, '-', '_', '.' only")
        self.cwd = str(Path(cwd or os.getcwd()).resolve())
        self.path = paths.private_dir(inbox_dir()) / f"{self.id}.jsonl"
        self._lock = threading.Lock()
        self._calls = 0
        self.closed = False
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, paths.FILE_MODE)
        os.fchmod(fd, paths.FILE_MODE)
        self._f = os.fdopen(fd, "a", encoding="utf-8")
        self._append({"k": "start", "format": FORMAT, "session": self.id, "label": label,
                      "cwd": self.cwd, "agent": agent, "model": model})

    # -- events ----------------------------------------------------------------------------------
    def message(self, role: str, text: str) -> None:
        """A message: ``role`` ``user`` (the request), ``assistant`` or ``system``."""
        if role not in ROLES:
            raise ValueError(f"role {role!r}: one of {', '.join(ROLES)}")
        self._append({"k": "message", "role": role, "text": str(text)})

    def tool_call(self, tool: str, args=None, call_id: str | None = None) -> str:
        """A tool call; returns its id (pass it to ``tool_result``)."""
        with self._lock:
            self._calls += 1
            n = self._calls
        cid = call_id or f"call-{n}"
        self._append({"k": "tool_call", "tool": str(tool), "call_id": cid, "args": args})
        return cid

    def tool_result(self, call_id: str, stdout: str | None = None, *, stderr: str | None = None,
                    exit: int | None = None, tool: str | None = None) -> None:
        self._append({"k": "tool_result", "call_id": call_id, "tool": tool, "stdout": stdout,
                      "stderr": stderr, "exit": exit})

    def read(self, file: str, text: str, start: int = 1) -> None:
        """The agent read ``text`` (lines from ``start``) of ``file``."""
        self._append({"k": "read", "file": self._abs(file), "start": int(start), "text": text})

    def edit(self, file: str, *, after: str, before: str | None = None,
             start: int | None = None) -> None:
        """The agent changed ``file``: with ``start``, lines from ``start`` that read ``before``
        now read ``after``; without, ``before``/``after`` are the whole file (``before=None``: a
        new file)."""
        self._append({"k": "edit", "file": self._abs(file), "before": before, "after": after,
                      "start": None if start is None else int(start)})

    def note(self, file: str, start: int, end: int, kind: str, text: str) -> None:
        """A note on lines ``start..end`` of ``file`` as they are now (kind ``warning``,
        ``decision``, ``discovery`` or ``todo``): kept in this session's tape with the span's
        text, so explain finds it where that code goes."""
        if kind not in NOTE_KINDS:
            raise ValueError(f"note kind {kind!r}: one of {', '.join(NOTE_KINDS)}")
        p = self._abs(file)
        with open(p, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        span = "\n".join(lines[int(start) - 1:int(end)]) + "\n"
        self._append({"k": "note", "file": p, "start": int(start), "end": int(end),
                      "kind": kind, "text": str(text), "span": span})

    def close(self) -> None:
        if self.closed:
            return
        self._append({"k": "close"})
        with self._lock:
            self.closed = True
            self._f.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the log -----------------------------------------------------------------------------------
    def _abs(self, file: str) -> str:
        return file if os.path.isabs(file) else os.path.join(self.cwd, file)

    def _append(self, rec: dict) -> None:
        rec = {"t": utc_iso(millis=True), **rec}
        line = json.dumps(rec, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            if self.closed:
                raise ValueError(f"session {self.id} is closed")
            self._f.write(line)
            self._f.flush()
