"""OpenCode: the SQLite store (≥ 1.2) and the older JSON storage tree → tape events.

Sources (``discover``) under the data root ``$XDG_DATA_HOME/opencode`` (default
``~/.local/share/opencode``):

* ``opencode*.db`` (``opencode.db``, channel stores like ``opencode-beta.db``): tables ``session``,
  ``message`` and ``part`` with JSON ``data`` columns. Read read-only in one snapshot
  (``sqlite_store.read_snapshot``): the running OpenCode is never blocked; a locked store is read
  lock-free (``immutable=1``, coverage degraded) or reported as ``E_SOURCE_BUSY``.
* ``storage/`` (≤ 1.1): ``session/<project>/<id>.json``, ``message/<session>/*.json``,
  ``part/<message>/*.json``. Once a database exists next to it the tree is a frozen copy of part of
  it, so ``discover`` yields it only when there is no database.

One ``SessionLog`` per session (key: the session id). Messages are ordered by creation time then
id, parts by creation time then id (file name in the tree). What is captured, per part:

* ``text`` → ``msg.in`` (user) / ``msg.out`` (assistant), ``synthetic``/``ignored`` flags kept;
  ``reasoning`` → ``msg.out`` with ``reasoning: true``; an assistant ``error`` → ``msg.out`` with
  ``error: true``; ``subtask`` → ``tool.call`` ``subtask``.
* ``tool`` → ``tool.call`` (``state.input``); ``completed`` adds ``tool.result`` (``output``,
  ``metadata.exit``), ``error`` adds ``tool.result`` with ``stderr``; ``pending``/``running`` give
  the call only (parts are mutable rows: the result appears when the tool finishes).
* completed edit tools (``edit``, ``write``, ``multiedit``, ``patch``, ``apply_patch``) →
  ``code.edit``: from ``metadata.filediff.before/after`` (whole texts), else the unified diff in
  ``metadata.filediff.patch`` / ``metadata.diff`` (one edit per changed region), else the input
  (``oldString``/``newString`` located in the last known content of the file, ``range_known:
  false`` when it is not known; ``content`` for writes; ``patchText`` for patches).
* completed ``read`` → ``code.read`` when the output carries line numbers (``00042| code``,
  ``42: code``, ``42→code``), gutters stripped.
* ``step-start``/``step-finish``/``snapshot``/``patch``/``agent``/``retry``/``compaction`` carry no
  text and are skipped; other part types degrade coverage (``UnsupportedLog`` in strict mode).

``meta``: ``harness_version`` (the session's ``version``), ``model`` (first assistant model),
``cwd`` (session ``directory``), ``label`` (session title unless it is the default
``New session - …``, else the first user text), ``parent_session``, ``project``, ``store``.
Every event keeps its ``part_id``. Timestamps are the parts' own times (epoch ms → ISO-8601 UTC).

Incremental reads: ``changed_since(path, cursor)`` gives the sessions with rows updated after the
cursor (``time_updated`` in the database, file ``mtime_ns`` in the tree); ``parse_source(...,
only=keys)`` parses just those.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson

from engram.adapters import base, sqlite_store, unified_diff
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
    cap_output as _cap,
)
from engram.adapters.base import (
    iso_from_epoch_ms as iso_ms,
)
from engram.adapters.base import (
    label_of as _label,
)
from engram.errors import UnsupportedLog

_EDIT_TOOLS = ("edit", "write", "multiedit", "patch", "apply_patch")
_SILENT_PARTS = ("step-start", "step-finish", "snapshot", "patch", "agent", "retry", "compaction",
                 "file")
_DEFAULT_TITLE = re.compile(r"^(New session|Child session) - \d{4}-")
_GUTTERS = (re.compile(r"^(\d+)\| ?(.*)$"), re.compile(r"^(\d+): ?(.*)$"),
            re.compile(r"^ *(\d+)→(.*)$"), re.compile(r"^ *(\d+)\t(.*)$"))
_READ_NOTE = re.compile(r"^\((File has more lines|End of file|Output truncated|Showing lines)")


def _loads(raw, what: str, path, errors: list) -> dict | None:
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    try:
        rec = orjson.loads(raw)
    except (orjson.JSONDecodeError, TypeError) as e:
        try:  # a byte order mark, a lone surrogate escape, nesting deeper than orjson reads
            rec, notes = base.loads_lenient(raw)
        except (ValueError, TypeError):
            errors.append(base.parse_error(path, None, f"{what}: malformed JSON: {e}"))
            return None
        if notes:
            errors.append(base.parse_error(path, None, f"{what}: {'; '.join(notes)}; kept",
                                           base.VALUE_REWRITTEN))
    if not isinstance(rec, dict):
        errors.append(base.parse_error(path, None, f"{what}: expected a JSON object"))
        return None
    return rec


def strip_read_output(output: str) -> tuple[str | None, int | None]:
    """OpenCode ``read`` output → ``(code, first_line)``; ``(None, None)`` without line numbers.

    Handles the ``<file>…</file>`` and ``<content>…</content>`` wrappers, the trailing
    ``(File has more lines …)`` / ``(End of file …)`` notes and the ``00042| ``, ``42: ``,
    ``42→`` and ``42<TAB>`` gutters.
    """
    body = output
    m = re.search(r"<content>\n?(.*?)\n?</content>", body, re.S)
    if m:
        body = m.group(1)
    else:
        m = re.search(r"<file>\n?(.*?)\n?</file>", body, re.S)
        if m:
            body = m.group(1)
    lines = body.split("\n")
    while lines and (lines[-1].strip() == "" or _READ_NOTE.match(lines[-1].strip())):
        lines.pop()
    if not lines:
        return None, None
    for rx in _GUTTERS:
        out: list[str] = []
        first = None
        for ln in lines:
            mm = rx.match(ln)
            if not mm:
                break
            if first is None:
                first = int(mm.group(1))
            out.append(mm.group(2))
        else:
            return base.join_lines(out), first
    return None, None


class _Session:
    """One session's raw records, whichever generation of store they came from."""

    def __init__(self, sid: str, info: dict | None):
        self.id = sid
        self.info = info
        self.messages: list[dict] = []  # each with "_parts": [part, ...] and "_created"


class OpenCodeAdapter(base.Adapter):
    name = "opencode"
    tier = "agent"
    versions = base.VersionMatrix(min="0.1.0", max_tested="1.3")
    default_locations = ("$XDG_DATA_HOME/opencode", "~/.local/share/opencode")
    patterns = ("opencode*.db", "storage")
    version = "1"
    #: how long a read waits for a locked database before reading it lock-free
    busy_timeout_ms = sqlite_store.BUSY_TIMEOUT_MS

    def default_paths(self) -> list[Path]:
        xdg = os.environ.get("XDG_DATA_HOME")
        if xdg:
            return [Path(xdg) / "opencode"]
        return [Path("~/.local/share/opencode").expanduser()]

    def discover(self, root: Path):
        root = Path(root)
        if root.is_file():
            yield root
            return
        if not root.is_dir():
            return
        if _is_storage(root):
            yield root
            return
        dbs = sorted(p for p in root.glob("opencode*.db") if p.is_file())
        yield from dbs
        if not dbs and _is_storage(root / "storage"):
            yield root / "storage"

    # -- parsing ----------------------------------------------------------------------------

    def parse_source(self, path: Path, *, mode: str = "permissive",
                     only: set[str] | None = None) -> base.ParseOutput:
        """Parse a database file or a storage directory; ``only`` limits it to those sessions."""
        path = Path(path)
        errors: list[dict] = []
        store_reasons: list[str] = []
        if path.is_dir():
            st = path / "storage" if not _is_storage(path) and _is_storage(path / "storage") \
                else path
            sessions = self._load_storage(st, only, errors)
            store = "json"
        else:
            try:
                sessions, store_reasons = sqlite_store.read_snapshot(
                    path, lambda c: self._load_db(c, path, only, errors),
                    busy_timeout_ms=self.busy_timeout_ms)
            except sqlite_store.StoreBusy as e:
                return base.ParseOutput(errors=[base.parse_error(path, None, e.message,
                                                                 code="E_SOURCE_BUSY")])
            except _NotOpenCode as e:
                if mode == "strict":
                    raise UnsupportedLog(str(e), path=str(path)) from None
                return base.ParseOutput(errors=[base.parse_error(path, None, str(e))])
            store = "sqlite"
        out = base.ParseOutput(errors=errors)
        for s in sessions:
            out.sessions.append(self._build(s, path, mode, store, store_reasons))
        return out

    def _load_db(self, conn, path: Path, only: set[str] | None, errors: list) -> list[_Session]:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = {"session", "message", "part"} - tables
        if missing:
            raise _NotOpenCode(f"not an OpenCode database: no table {', '.join(sorted(missing))}")
        where, args = "", ()
        if only is not None:
            keys = sorted(only)
            where = f" WHERE {{col}} IN ({','.join('?' * len(keys))})"
            args = tuple(keys)
        sessions: dict[str, _Session] = {}
        cols = sqlite_store.table_columns(conn, "session")
        for row in conn.execute("SELECT * FROM session" + where.format(col="id"), args):
            r = dict(zip(cols, row))
            sid = r.get("id")
            if not isinstance(sid, str):
                continue
            info = _session_from_row(r, path, errors)
            sessions[sid] = _Session(sid, info)
        by_msg: dict[str, dict] = {}
        for mid, sid, created, data in conn.execute(
                "SELECT id, session_id, time_created, data FROM message"
                + where.format(col="session_id") + " ORDER BY time_created, id", args):
            rec = _loads(data, f"message {mid}", path, errors)
            if rec is None:
                continue
            rec["id"], rec["sessionID"], rec["_created"], rec["_parts"] = mid, sid, created, []
            s = sessions.get(sid)
            if s is None:
                s = sessions[sid] = _Session(sid, None)
            s.messages.append(rec)
            by_msg[mid] = rec
        for pid, mid, created, data in conn.execute(
                "SELECT id, message_id, time_created, data FROM part"
                + where.format(col="session_id") + " ORDER BY time_created, id", args):
            rec = _loads(data, f"part {pid}", path, errors)
            if rec is None:
                continue
            rec["id"], rec["_created"] = pid, created
            msg = by_msg.get(mid)
            if msg is None:
                errors.append(base.parse_error(path, None, f"part {pid}: no message {mid}"))
                continue
            msg["_parts"].append(rec)
        return [sessions[k] for k in sorted(sessions)]

    def _load_storage(self, st: Path, only: set[str] | None, errors: list) -> list[_Session]:
        infos: dict[str, dict] = {}
        for f in sorted((st / "session").rglob("*.json")) if (st / "session").is_dir() else []:
            rec = _load_file(f, errors)
            if rec is None or not isinstance(rec.get("id"), str) or "role" in rec:
                continue
            infos.setdefault(rec["id"], rec)
        sids = set(infos)
        msg_root = st / "message"
        if msg_root.is_dir():
            sids |= {d.name for d in msg_root.iterdir() if d.is_dir()}
        out = []
        for sid in sorted(sids):
            if only is not None and sid not in only:
                continue
            s = _Session(sid, infos.get(sid))
            msgs = []
            for f in sorted((msg_root / sid).glob("*.json")) if (msg_root / sid).is_dir() else []:
                rec = _load_file(f, errors)
                if rec is None:
                    continue
                mid = rec.get("id") if isinstance(rec.get("id"), str) else f.stem
                rec["id"], rec["_parts"] = mid, []
                created = _d(rec.get("time")).get("created")
                rec["_created"] = created
                pdir = st / "part" / mid
                for pf in sorted(pdir.glob("*.json")) if pdir.is_dir() else []:
                    prec = _load_file(pf, errors)
                    if prec is not None:
                        prec.setdefault("id", pf.stem)
                        rec["_parts"].append(prec)
                key = created if isinstance(created, (int, float)) and not isinstance(
                    created, bool) else 0
                msgs.append((key, f.name, rec))
            s.messages = [m for _, _, m in sorted(msgs, key=lambda x: (x[0], x[1]))]
            out.append(s)
        return out

    def _build(self, s: _Session, path: Path, mode: str, store: str,
               store_reasons: list[str]) -> base.SessionLog:
        info = s.info or {}
        reasons = list(store_reasons)
        if s.info is None:
            reasons.append(f"session {s.id}: no session record, only messages")
        version = _s(info.get("version"))
        st = self.versions.status(version)
        if st == "bad":
            reasons.append(f"opencode {version} is a known-bad version")
        elif st == "unknown":
            reasons.append(f"opencode {version or '(no version)'} is outside the tested range "
                           f"{self.versions.min}..{self.versions.max_tested}")
        cwd = _s(info.get("directory"))
        if cwd is None:
            for m in s.messages:
                p = m.get("path")
                cwd = _s(_d(p).get("cwd")) or _s(p)
                if cwd:
                    break
        files: dict[str, str] = {}
        events: list[dict] = []
        model = None
        first_user = None
        for m in s.messages:
            role = m.get("role")
            mt = iso_ms(_d(m.get("time")).get("created")) or iso_ms(m.get("_created"))
            if role not in ("user", "assistant"):
                reasons.append(f"unknown message role {role!r}")
                continue
            if role == "assistant" and model is None:
                model = _s(m.get("modelID")) or _s(_d(m.get("model")).get("modelID"))
            for p in m["_parts"]:
                evs = self._part(p, role, mt, cwd, files, reasons)
                if first_user is None and role == "user":
                    first_user = next((e["text"] for e in evs if e["k"] == "msg.in"
                                       and not e.get("synthetic")), None)
                events.extend(evs)
            err = _d(m.get("error"))
            if role == "assistant" and err:
                msg = _s(_d(err.get("data")).get("message")) or ""
                text = f"{_s(err.get('name')) or 'Error'}: {msg}".rstrip(": ")
                t_err = iso_ms(_d(m.get("time")).get("completed")) or mt
                events.append(base.ev_msg(t_err, "msg.out", text, error=True, message_id=m["id"]))
        if model is None:
            model = next((_s(_d(m.get("model")).get("modelID")) for m in s.messages
                          if _s(_d(m.get("model")).get("modelID"))), None)
        title = _s(info.get("title"))
        label = title if title and not _DEFAULT_TITLE.match(title) else None
        if label is None and first_user:
            label = _label(first_user)
        t0 = iso_ms(_d(info.get("time")).get("created"))
        meta = base.ev_meta(
            t0, harness=self.name, session=s.id, adapter=self, source_path=str(path),
            harness_version=version, model=model, cwd=cwd, label=label,
            parent_session=_s(info.get("parentID")), project=_s(info.get("projectID")),
            store=store)
        if mode == "strict" and reasons:
            raise UnsupportedLog("; ".join(reasons), path=str(path))
        evs = base.finish_session([meta, *events], degraded_reasons=reasons)
        return base.SessionLog(s.id, evs)

    def _part(self, p: dict, role: str, mt: str | None, cwd: str | None, files: dict,
              reasons: list) -> list[dict]:
        typ = p.get("type")
        t = iso_ms(_d(p.get("time")).get("start")) or iso_ms(p.get("_created")) or mt
        x = {"part_id": p["id"]} if isinstance(p.get("id"), str) else {}
        if typ == "text":
            text = _s(p.get("text"))
            if not text:
                return []
            flags = {k: True for k in ("synthetic", "ignored") if p.get(k) is True}
            return [base.ev_msg(t, "msg.in" if role == "user" else "msg.out", text, **flags, **x)]
        if typ == "reasoning":
            text = _s(p.get("text"))
            return [base.ev_msg(t, "msg.out", text, reasoning=True, **x)] if text else []
        if typ == "tool":
            return self._tool(p, t, cwd, files, x)
        if typ == "subtask":
            args = {k: p.get(k) for k in ("prompt", "description", "agent", "model") if k in p}
            return [base.ev_tool_call(t, "subtask", None, args, **x)]
        if typ in _SILENT_PARTS:
            return []
        r = f"unknown part type {typ!r}"
        if r not in reasons:
            reasons.append(r)
        return []

    def _tool(self, p: dict, t: str | None, cwd: str | None, files: dict, x: dict) -> list[dict]:
        st = _d(p.get("state"))
        status = _s(st.get("status"))
        inp = st.get("input") if st.get("input") is not None else {}
        tool = _s(p.get("tool")) or "unknown"
        cid = _s(p.get("callID"))
        tm = _d(st.get("time"))
        t_call = iso_ms(tm.get("start")) or t
        out = [base.ev_tool_call(t_call, tool, cid, inp, **x)]
        t_end = iso_ms(tm.get("end")) or t_call
        md = _d(st.get("metadata"))
        if status == "completed":
            output = _s(st.get("output"))
            stdout, trunc = _cap(output)
            extra: dict = {}
            if trunc:
                extra["truncated"] = True
            if tm.get("compacted") is not None:
                extra["compacted"] = True
            out.append(base.ev_tool_result(t_end, tool, cid, stdout, None, _int(md.get("exit")),
                                           **extra, **x))
            code_x = {"tool": tool, "call_id": cid, **x}
            if tool == "read":
                out.extend(_read_events(_d(inp), output, t_end, cwd, code_x))
            elif tool in _EDIT_TOOLS:
                out.extend(_edit_events(tool, _d(inp), md, t_end, cwd, files, code_x))
        elif status == "error":
            err = st.get("error")
            stderr = err if isinstance(err, str) else orjson.dumps(err).decode() if err else None
            out.append(base.ev_tool_result(t_end, tool, cid, None, stderr, None, status="error",
                                           **x))
        return out

    # -- incremental ------------------------------------------------------------------------

    def changed_since(self, path: Path, cursor: dict | None) -> tuple[list[str], dict]:
        """Session keys with records newer than ``cursor``, and the cursor to pass next time.

        Database: ``{"time_updated": max ms, "seen": [rows at that ms]}`` over the session,
        message and part tables (rows sharing the cursor's millisecond are not lost). Storage
        tree: the same over file ``mtime_ns``. ``cursor=None`` → every session.
        """
        path = Path(path)
        cursor = cursor or {}
        if path.is_dir():
            st = path / "storage" if not _is_storage(path) and _is_storage(path / "storage") \
                else path
            rows = _storage_rows(st)
            key = "mtime_ns"
        else:
            def fn(conn):
                out = []
                last = cursor.get("time_updated", -1)
                for table, col in (("session", "id"), ("message", "session_id"),
                                   ("part", "session_id")):
                    for rid, sid, tu in conn.execute(
                            f"SELECT id, {col}, time_updated FROM {table} "
                            "WHERE time_updated >= ?", (last,)):
                        out.append((f"{table}:{rid}", sid, tu))
                return out

            rows, _ = sqlite_store.read_snapshot(path, fn, busy_timeout_ms=self.busy_timeout_ms)
            key = "time_updated"
        last = cursor.get(key, -1)
        seen = set(cursor.get("seen") or ())
        changed = {sid for rid, sid, v in rows
                   if isinstance(sid, str) and (v > last or (v == last and rid not in seen))}
        new_last = max([last, *(v for _, _, v in rows)])
        new_seen = {rid for rid, _, v in rows if v == new_last}
        if new_last == last:
            new_seen |= seen
        return sorted(changed), {key: new_last, "seen": sorted(new_seen)}


class _NotOpenCode(Exception):
    pass


def _is_storage(d: Path) -> bool:
    return d.is_dir() and ((d / "session").is_dir() or (d / "message").is_dir())


def _load_file(f: Path, errors: list) -> dict | None:
    try:
        raw = f.read_bytes()
    except OSError as e:
        errors.append(base.parse_error(f, None, f"unreadable: {e}"))
        return None
    return _loads(raw, f.name, f, errors)


def _session_from_row(r: dict, path: Path, errors: list) -> dict:
    info: dict = {}
    if isinstance(r.get("data"), (str, bytes)):
        info.update(_loads(r["data"], f"session {r.get('id')}", path, errors) or {})
    info.update({"id": r.get("id"), "projectID": r.get("project_id"),
                 "parentID": r.get("parent_id"), "slug": r.get("slug"),
                 "directory": r.get("directory"), "title": r.get("title"),
                 "version": r.get("version"),
                 "time": {"created": r.get("time_created"), "updated": r.get("time_updated")}})
    return {k: v for k, v in info.items() if v is not None}


def _storage_rows(st: Path) -> list[tuple[str, str, int]]:
    """``(file, session id, mtime_ns)`` for every file of the tree."""
    rows: list[tuple[str, str, int]] = []
    msg_session: dict[str, str] = {}
    if (st / "message").is_dir():
        for d in sorted((st / "message").iterdir()):
            for f in sorted(d.glob("*.json")) if d.is_dir() else []:
                msg_session[f.stem] = d.name
                rec = _load_file(f, [])
                if rec and isinstance(rec.get("id"), str):
                    msg_session[rec["id"]] = d.name
                rows.append((str(f.relative_to(st)), d.name, f.stat().st_mtime_ns))
    if (st / "session").is_dir():
        for f in sorted((st / "session").rglob("*.json")):
            rec = _load_file(f, [])
            sid = rec.get("id") if rec and isinstance(rec.get("id"), str) else f.stem
            rows.append((str(f.relative_to(st)), sid, f.stat().st_mtime_ns))
    if (st / "part").is_dir():
        for d in sorted((st / "part").iterdir()):
            sid = msg_session.get(d.name)
            for f in sorted(d.glob("*.json")) if d.is_dir() else []:
                s = sid
                if s is None:
                    rec = _load_file(f, [])
                    s = _s((rec or {}).get("sessionID"))
                if s:
                    rows.append((str(f.relative_to(st)), s, f.stat().st_mtime_ns))
    return rows


def _read_events(inp: dict, output: str | None, t, cwd, x: dict) -> list[dict]:
    file = _s(inp.get("filePath")) or _s(inp.get("path"))
    if not file or output is None:
        return []
    text, first = strip_read_output(output)
    if text is None:
        return []  # "File not found", a directory listing, an image: not file content
    return [base.ev_read(t, file, first, text, cwd=cwd, **x)]


def _replace(content: str, old: str, new: str, replace_all: bool) -> str | None:
    if not old or old not in content:
        return None
    return content.replace(old, new) if replace_all else content.replace(old, new, 1)


def _edit_events(tool: str, inp: dict, md: dict, t, cwd, files: dict, x: dict) -> list[dict]:
    fd = _d(md.get("filediff"))
    file = _s(inp.get("filePath")) or _s(inp.get("path")) or _s(fd.get("file"))
    # 1. whole before/after texts (older builds)
    if file and isinstance(fd.get("before"), str) and isinstance(fd.get("after"), str):
        files[file] = fd["after"]
        return base.edits_from_texts(t, file, fd["before"], fd["after"], cwd=cwd, **x)
    # 2. a unified diff
    for diff in (_s(fd.get("patch")), _s(md.get("diff"))):
        if not diff:
            continue
        parsed = unified_diff.parse_unified(diff)
        if not parsed:
            continue
        out = []
        for p, hunks in parsed:
            target = file if (file and len(parsed) == 1) else (p or file)
            if not target:
                continue
            for h in hunks:
                for sub in unified_diff.split_hunk(h):
                    out.extend(base.edits_from_hunks(t, target, [sub], cwd=cwd, **x))
            if target in files:
                after = base.apply_hunks(files[target], hunks)
                if after is None:
                    files.pop(target, None)
                else:
                    files[target] = after
        if out:
            return out
    # 3. the tool input
    patch_text = _s(inp.get("patchText")) or _s(inp.get("patch"))
    if tool in ("patch", "apply_patch") and patch_text:
        return _codex_patch_events(patch_text, t, cwd, files, x)
    if not file:
        return []
    content = _s(inp.get("content"))
    if content is not None and _s(inp.get("oldString")) is None:
        before = files.get(file)
        files[file] = content
        if before is not None:
            return base.edits_from_texts(t, file, before, content, cwd=cwd, **x)
        return [base.ev_edit(t, file, 1, "", 1, content, cwd=cwd, range_known=False, **x)]
    pairs = [inp] if tool != "multiedit" else [e for e in base.as_list(inp.get("edits"))
                                                if isinstance(e, dict)]
    pairs = [(_s(e.get("oldString")) or "", _s(e.get("newString")) or "",
              e.get("replaceAll") is True) for e in pairs]
    if not pairs:
        return []
    before = files.get(file)
    if before is not None:
        cur = before
        for old, new, all_ in pairs:
            cur = _replace(cur, old, new, all_) if cur is not None else None
        if cur is not None:
            files[file] = cur
            return base.edits_from_texts(t, file, before, cur, cwd=cwd, **x)
    files.pop(file, None)
    return [base.ev_edit(t, file, 1, old, 1, new, cwd=cwd, range_known=False, **x)
            for old, new, _ in pairs]


def _codex_patch_events(text: str, t, cwd, files: dict, x: dict) -> list[dict]:
    out = []
    for op, path, pairs in unified_diff.parse_codex_patch(text):
        if op == "add":
            after = pairs[0][1] if pairs else ""
            files[path] = after
            out.extend(base.edits_from_texts(t, path, None, after, cwd=cwd, created=True, **x))
        elif op == "delete":
            before = files.pop(path, None)
            if before is not None:
                out.append(base.ev_edit(t, path, 1, before, 1, "", cwd=cwd, deleted=True, **x))
        else:
            files.pop(path, None)
            for before, after in pairs:
                out.append(base.ev_edit(t, path, 1, before, 1, after, cwd=cwd,
                                        range_known=False, **x))
    return out


ADAPTER = OpenCodeAdapter()
