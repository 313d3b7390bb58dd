"""Cursor: agent transcripts (JSONL) and the editor's ``state.vscdb`` → tape events.

Two kinds of source (``discover``):

* **Agent transcripts** ``~/.cursor/projects/<slug>/agent-transcripts/**/*.jsonl`` (subagents in
  ``<parent>/subagents/<child>.jsonl``). One file is one session (key: the file stem). Lines are
  ``{role, message: {content: [{type: text|tool_use}]}}``; roleless ``turn_ended`` lines are
  skipped. The format has **no timestamps, ids, tool results or version**: events carry
  ``t: null``, tool calls get ``call_id`` ``L<line>.<block>``, edits come from the tool input
  (``Write`` ``contents``; ``StrReplace``-style ``old_string``/``new_string`` located in content
  written earlier in the session, ``range_known: false`` otherwise), and reads give no
  ``code.read`` (there is no result text). User text loses its ``<user_query>`` wrapper; text
  blocks that are exactly ``[REDACTED]`` (reasoning hidden by Cursor) are dropped. ``meta.cwd``
  is inferred from the project slug: the first absolute tool path with a directory whose
  slug is ``<slug>``.
* **``state.vscdb``** (``~/.config/Cursor/User/globalStorage/`` on Linux,
  ``~/Library/Application Support/Cursor/User/globalStorage/`` on macOS): table ``cursorDiskKV``,
  ``composerData:<composer>`` (one session per composer, key: the composer id) and
  ``bubbleId:<composer>:<bubble>`` rows, read read-only in one snapshot without blocking the editor
  (``sqlite_store``). Bubbles follow ``fullConversationHeadersOnly`` (else the inline
  ``conversation``, else key order). Type 1 → ``msg.in``; type 2 → ``msg.out`` (``thinking.text``
  with ``reasoning: true``) and, with ``toolFormerData``, ``tool.call`` (``rawArgs``/``params``) +
  ``tool.result`` (the result's text field, else its JSON). Completed edit tools with
  ``result.diff.chunks[]`` → one ``code.edit`` per changed region; read tools with result text →
  ``code.read``. The store has no app version: ``composerData._v`` is checked against the version
  matrix and kept in ``meta.schema_version``.

Incremental: ``changed_since(db, cursor)`` uses ``cursorDiskKV``'s rowid (rows are written with
``INSERT OR REPLACE``, so a rewritten row gets a new rowid); ``parse_source(..., only=ids)``.
"""

from __future__ import annotations

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
    iso_any as _ts,
)
from engram.adapters.base import (
    label_of as _label,
)
from engram.errors import UnsupportedLog

_USER_QUERY = re.compile(r"^\s*<user_query>\n?(.*?)\n?</user_query>\s*$", re.S)
_SLUG = re.compile(r"[^A-Za-z0-9]+")

# transcript tools
_T_WRITE = ("Write", "write")
_T_REPLACE = ("StrReplace", "Edit", "search_replace", "str_replace")
_T_DELETE = ("Delete", "delete_file")
# state.vscdb tools
_V_EDIT = ("edit_file", "edit_file_v2", "search_replace", "write", "reapply", "apply_patch",
           "delete_file", "edit_notebook")
_V_READ = ("read_file", "read_file_v2")


def _json(v):
    """Parse a JSON string (Cursor stores args and results as strings); other values as is."""
    if isinstance(v, (str, bytes)):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            return v
    return v


def _replace(content: str, old: str, new: str) -> str | None:
    if not old or old not in content:
        return None
    return content.replace(old, new, 1)


def _slug(s: str) -> str:
    return _SLUG.sub("-", s).strip("-")


class CursorAdapter(base.Adapter):
    name = "cursor"
    tier = "agent"
    #: over ``composerData._v`` (the store's schema version): Cursor logs no app version
    versions = base.VersionMatrix(min="1", max_tested="3")
    default_locations = (
        "~/.cursor/projects",
        "~/.config/Cursor/User/globalStorage/state.vscdb",
        "~/Library/Application Support/Cursor/User/globalStorage/state.vscdb",
        "$APPDATA/Cursor/User/globalStorage/state.vscdb",
    )
    patterns = ("**/agent-transcripts/**/*.jsonl", "**/state.vscdb")
    version = "1"
    busy_timeout_ms = sqlite_store.BUSY_TIMEOUT_MS

    def parse_source(self, path: Path, *, mode: str = "permissive",
                     only: set[str] | None = None) -> base.ParseOutput:
        path = Path(path)
        if _is_sqlite(path):
            return self._parse_vscdb(path, mode, only)
        return self._parse_transcript(path, mode)

    # -- agent transcripts ------------------------------------------------------------------

    def _parse_transcript(self, path: Path, mode: str) -> base.ParseOutput:
        out = base.ParseOutput(end_offset=0)
        events: list[dict] = []
        reasons: list[str] = []
        files: dict[str, str] = {}
        parts = path.parts
        slug = parts[parts.index("agent-transcripts") - 1] if "agent-transcripts" in parts[1:] \
            else None
        subagent = path.parent.name == "subagents"
        cwd = None
        label = None
        for line_no, end, rec, err in base.iter_jsonl(path):
            out.end_offset = end
            if err:
                out.errors.append(base.record_error(path, line_no, err, rec))
                if rec is None:
                    continue
            role = rec.get("role")
            if role is None and rec.get("type") == "turn_ended":
                continue
            content = _d(rec.get("message")).get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if role not in ("user", "assistant") or not isinstance(content, list):
                r = f"unknown record shape (role {role!r}, type {rec.get('type')!r})"
                if r not in reasons:
                    reasons.append(r)
                if mode == "strict":
                    raise UnsupportedLog(r, path=str(path), line=line_no)
                continue
            for i, b in enumerate(content):
                b = _d(b)
                typ = b.get("type")
                if typ == "text" and isinstance(b.get("text"), str):
                    text = b["text"]
                    if role == "user":
                        m = _USER_QUERY.match(text)
                        text = m.group(1) if m else text
                        if label is None and text.strip():
                            label = _label(text)
                    elif text.strip() == "[REDACTED]":
                        continue
                    if text:
                        events.append(base.ev_msg(None, "msg.in" if role == "user" else "msg.out",
                                                  text, line=line_no))
                elif typ == "tool_use":
                    tool = _s(b.get("name")) or "unknown"
                    args = b.get("input") if b.get("input") is not None else {}
                    cid = _s(b.get("id")) or f"L{line_no}.{i}"
                    if cwd is None and slug:
                        cwd = _cwd_from_slug(slug, args)
                    events.append(base.ev_tool_call(None, tool, cid, args, line=line_no))
                    events.extend(_transcript_edits(tool, _d(args), cwd, files,
                                                    {"tool": tool, "call_id": cid,
                                                     "line": line_no}))
                else:
                    r = f"unknown content block type {typ!r}"
                    if r not in reasons:
                        reasons.append(r)
                    if mode == "strict":
                        raise UnsupportedLog(r, path=str(path), line=line_no)
        extra: dict = {"format": "agent-transcript", "project": slug}
        if subagent:
            extra.update(subagent=True, parent_session=path.parent.parent.name)
        meta = base.ev_meta(None, harness=self.name, session=path.stem, adapter=self,
                            source_path=str(path), cwd=cwd, label=label, **extra)
        if events or reasons:
            out.sessions.append(base.SessionLog(
                path.stem, base.finish_session([meta, *events], degraded_reasons=reasons)))
        return out

    # -- state.vscdb ------------------------------------------------------------------------

    def _parse_vscdb(self, path: Path, mode: str, only: set[str] | None) -> base.ParseOutput:
        errors: list[dict] = []
        try:
            composers, store_reasons = sqlite_store.read_snapshot(
                path, lambda c: _load_vscdb(c, path, only, errors),
                busy_timeout_ms=self.busy_timeout_ms)
        except sqlite_store.StoreBusy as e:
            return base.ParseOutput(errors=[base.parse_error(path, None, e.message,
                                                             code="E_SOURCE_BUSY")])
        out = base.ParseOutput(errors=errors)
        for cid, comp, bubbles in composers:
            out.sessions.append(self._composer(path, cid, comp, bubbles, mode, store_reasons))
        return out

    def _composer(self, path: Path, cid: str, comp: dict, bubbles: dict[str, dict], mode: str,
                  store_reasons: list[str]) -> base.SessionLog:
        reasons = list(store_reasons)
        v = comp.get("_v")
        schema = str(v) if isinstance(v, (int, str)) and not isinstance(v, bool) else None
        st = self.versions.status(schema)
        if st != "ok":
            reasons.append(f"cursor composer schema _v={schema} is outside the tested range "
                           f"{self.versions.min}..{self.versions.max_tested}")
        ws = _d(comp.get("workspaceIdentifier"))
        cwd = _s(_d(ws.get("uri")).get("fsPath")) or _s(_d(ws.get("uri")).get("path"))
        order: list[dict] = []
        missing = 0
        headers = comp.get("fullConversationHeadersOnly")
        if isinstance(headers, list) and headers:
            for h in headers:
                bid = _s(_d(h).get("bubbleId"))
                if bid and bid in bubbles:
                    order.append(bubbles[bid])
                elif bid:
                    missing += 1
        elif isinstance(comp.get("conversation"), list):
            order = [b for b in comp["conversation"] if isinstance(b, dict)]
        else:
            order = [bubbles[k] for k in sorted(bubbles)]
        if missing:
            reasons.append(f"{missing} bubble(s) listed by the composer are missing")
        events: list[dict] = []
        files: dict[str, str] = {}
        model = _s(_d(comp.get("modelConfig")).get("modelName"))
        label = _s(comp.get("name"))
        t = None
        for b in order:
            t = _ts(b.get("createdAt")) or _ts(_d(b.get("timingInfo")).get("clientStartTime")) or t
            x = {"bubble_id": b["bubbleId"]} if isinstance(b.get("bubbleId"), str) else {}
            typ = b.get("type")
            text = _s(b.get("text"))
            if typ == 1:
                if text:
                    events.append(base.ev_msg(t, "msg.in", text, **x))
                    if label is None:
                        label = _label(text)
                continue
            if typ != 2:
                r = f"unknown bubble type {typ!r}"
                if r not in reasons:
                    reasons.append(r)
                continue
            if model is None:
                model = _s(_d(b.get("modelInfo")).get("modelName"))
            thinking = _s(_d(b.get("thinking")).get("text"))
            if thinking:
                events.append(base.ev_msg(t, "msg.out", thinking, reasoning=True, **x))
            if text:
                events.append(base.ev_msg(t, "msg.out", text, **x))
            tfd = b.get("toolFormerData")
            if isinstance(tfd, dict):
                events.extend(_tool_events(tfd, t, cwd, files, x))
        meta = base.ev_meta(_ts(comp.get("createdAt")), harness=self.name, session=cid,
                            adapter=self, source_path=str(path), model=model, cwd=cwd,
                            label=label, format="state.vscdb", schema_version=v)
        if mode == "strict" and reasons:
            raise UnsupportedLog("; ".join(reasons), path=str(path))
        return base.SessionLog(cid, base.finish_session([meta, *events],
                                                        degraded_reasons=reasons))

    def changed_since(self, path: Path, cursor: dict | None) -> tuple[list[str], dict]:
        """Composer ids whose rows changed after ``cursor`` (``{"rowid": n}``) and the new cursor."""
        last = _int((cursor or {}).get("rowid")) or 0

        def fn(conn):
            if not sqlite_store.table_columns(conn, "cursorDiskKV"):
                return [], last
            keys = [k for (k,) in conn.execute(
                "SELECT key FROM cursorDiskKV WHERE rowid > ? AND "
                "(key LIKE 'composerData:%' OR key LIKE 'bubbleId:%')", (last,))]
            top = conn.execute("SELECT max(rowid) FROM cursorDiskKV").fetchone()[0]
            return keys, max(last, top or 0)

        keys, top = sqlite_store.read_snapshot(Path(path), fn,
                                               busy_timeout_ms=self.busy_timeout_ms)[0]
        ids = set()
        for k in keys:
            parts = k.split(":")
            if len(parts) >= 2 and parts[1]:
                ids.add(parts[1])
        return sorted(ids), {"rowid": top}


def _is_sqlite(path: Path) -> bool:
    if path.suffix == ".vscdb":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _cwd_from_slug(slug: str, args) -> str | None:
    target = _slug(slug)
    for v in (args.values() if isinstance(args, dict) else ()):
        if not isinstance(v, str) or not v.startswith("/"):
            continue
        parts = v.split("/")
        for n in range(len(parts) - 1, 1, -1):
            prefix = "/".join(parts[:n])
            if _slug(prefix) == target:
                return prefix
    return None


def _transcript_edits(tool: str, args: dict, cwd, files: dict, x: dict) -> list[dict]:
    file = _s(args.get("path")) or _s(args.get("file_path")) or _s(args.get("target_file"))
    if not file:
        return []
    if tool in _T_WRITE:
        content = _s(args.get("contents")) if "contents" in args else _s(args.get("content"))
        if content is None:
            return []
        before = files.get(file)
        files[file] = content
        if before is not None:
            return base.edits_from_texts(None, file, before, content, cwd=cwd, **x)
        return [base.ev_edit(None, file, 1, "", 1, content, cwd=cwd, range_known=False, **x)]
    if tool in _T_REPLACE:
        old = _s(args.get("old_string")) or _s(args.get("oldString"))
        new = _s(args.get("new_string")) or _s(args.get("newString")) or ""
        if old is None:
            return []
        before = files.get(file)
        after = _replace(before, old, new) if before is not None else None
        if after is not None:
            files[file] = after
            return base.edits_from_texts(None, file, before, after, cwd=cwd, **x)
        files.pop(file, None)
        return [base.ev_edit(None, file, 1, old, 1, new, cwd=cwd, range_known=False, **x)]
    if tool in _T_DELETE:
        before = files.pop(file, None)
        if before is not None:
            return [base.ev_edit(None, file, 1, before, 1, "", cwd=cwd, deleted=True, **x)]
    return []


def _load_vscdb(conn, path: Path, only: set[str] | None, errors: list):
    """``[(composer id, composerData, {bubble id: bubble})]`` sorted by composer id."""
    if not sqlite_store.table_columns(conn, "cursorDiskKV"):
        return []  # a workspace database (ItemTable only): no conversations here
    out = []
    for key, value in conn.execute(
            "SELECT key, value FROM cursorDiskKV WHERE key LIKE 'composerData:%' ORDER BY key"):
        cid = key.split(":", 1)[1]
        if only is not None and cid not in only:
            continue
        comp = _value(value, key, path, errors)
        if comp is None:
            continue
        bubbles: dict[str, dict] = {}
        lo, hi = f"bubbleId:{cid}:", f"bubbleId:{cid};"
        for bkey, bval in conn.execute(
                "SELECT key, value FROM cursorDiskKV WHERE key >= ? AND key < ? ORDER BY key",
                (lo, hi)):
            b = _value(bval, bkey, path, errors)
            if b is None:
                continue
            bid = bkey[len(lo):]
            b.setdefault("bubbleId", bid)
            bubbles[bid] = b
        out.append((cid, comp, bubbles))
    return out


def _value(raw, key: str, path: Path, errors: list) -> dict | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    try:
        v = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        try:  # a byte order mark, a lone surrogate escape, nesting deeper than orjson reads
            v, notes = base.loads_lenient(raw)
        except ValueError:
            errors.append(base.parse_error(path, None, f"{key}: malformed JSON: {e}"))
            return None
        if notes:
            errors.append(base.parse_error(path, None, f"{key}: {'; '.join(notes)}; kept",
                                           base.VALUE_REWRITTEN))
    if not isinstance(v, dict):
        if v is not None:
            errors.append(base.parse_error(path, None, f"{key}: expected a JSON object"))
        return None
    return v


def _result_text(result) -> str | None:
    if result is None or isinstance(result, str):
        return result
    if isinstance(result, dict):
        for k in ("output", "contents", "content", "fileContents", "stdout", "text"):
            if isinstance(result.get(k), str):
                return result[k]
    return orjson.dumps(result, option=orjson.OPT_SORT_KEYS).decode()


def _tool_events(tfd: dict, t, cwd, files: dict, x: dict) -> list[dict]:
    tool = _s(tfd.get("name")) or (str(tfd["tool"]) if _int(tfd.get("tool")) is not None
                                   else "unknown")
    args = _json(tfd.get("rawArgs"))
    if not isinstance(args, dict):
        args = _json(tfd.get("params"))
    if not isinstance(args, dict):
        args = {}
    params = _json(tfd.get("params"))
    params = params if isinstance(params, dict) else {}
    cid = _s(tfd.get("toolCallId")) or x.get("bubble_id")
    out = [base.ev_tool_call(t, tool, cid, args, **x)]
    status = _s(tfd.get("status"))
    result = _json(tfd.get("result"))
    err = tfd.get("error")
    if result is None and err is None and status not in ("completed", "error", "cancelled"):
        return out  # still running
    stdout, trunc = _cap(_result_text(result))
    stderr = err if isinstance(err, str) else (
        orjson.dumps(err, option=orjson.OPT_SORT_KEYS).decode() if err else None)
    extra = {"status": status} if status else {}
    if trunc:
        extra["truncated"] = True
    exit_code = _int(_d(result).get("exitCode"))
    out.append(base.ev_tool_result(t, tool, cid, stdout, stderr, exit_code, **extra, **x))
    failed = bool(err) or status in ("error", "cancelled") or _d(result).get("applyFailed") is True
    if failed:
        return out
    code_x = {"tool": tool, "call_id": cid, **x}
    file = (_s(args.get("relativeWorkspacePath")) or _s(args.get("targetFile"))
            or _s(args.get("target_file")) or _s(args.get("file_path")) or _s(args.get("path"))
            or _s(params.get("relativeWorkspacePath")) or _s(params.get("targetFile")))
    if tool in _V_EDIT:
        out.extend(_vscdb_edits(tool, file, args, _d(result), t, cwd, files, code_x))
    elif tool in _V_READ and file:
        r = _d(result)
        text = _s(r.get("contents")) or _s(r.get("content")) or _s(r.get("fileContents"))
        if text:
            body, first = base.strip_gutter(text)
            start = first or _int(args.get("startLineOneIndexed")) or _int(
                args.get("start_line_one_indexed")) or (
                (_int(args.get("offset")) or 0) + 1 if "offset" in args else 1)
            out.append(base.ev_read(t, file, start, body, cwd=cwd, **code_x))
    return out


def _vscdb_edits(tool: str, file: str | None, args: dict, result: dict, t, cwd, files: dict,
                 x: dict) -> list[dict]:
    chunks = _d(result.get("diff")).get("chunks")
    if file and isinstance(chunks, list) and chunks:
        out = []
        for c in chunks:
            c = _d(c)
            ds = _s(c.get("diffString"))
            if not ds:
                continue
            if any(ln.startswith("@@") for ln in ds.split("\n")):
                hunks = [h for _, hs in unified_diff.parse_unified(ds) for h in hs]
            else:
                lines = ds.split("\n")
                if lines and lines[-1] == "":
                    lines.pop()
                hunks = [{"oldStart": _int(c.get("oldStart")) or 1,
                          "newStart": _int(c.get("newStart")) or 1, "lines": lines}]
            for h in hunks:
                for sub in unified_diff.split_hunk(h):
                    out.extend(base.edits_from_hunks(t, file, [sub], cwd=cwd, **x))
        files.pop(file, None)
        return out
    if tool == "apply_patch":
        patch = _s(args.get("patch"))
        out = []
        for _op, p, pairs in unified_diff.parse_codex_patch(patch or ""):
            for before, after in pairs:
                out.append(base.ev_edit(t, p, 1, before, 1, after, cwd=cwd, range_known=False,
                                        **x))
        return out
    if not file:
        return []
    if tool == "search_replace":
        old, new = _s(args.get("old_string")), _s(args.get("new_string")) or ""
        if old is None:
            return []
        before = files.get(file)
        after = _replace(before, old, new) if before is not None else None
        if after is not None:
            files[file] = after
            return base.edits_from_texts(t, file, before, after, cwd=cwd, **x)
        return [base.ev_edit(t, file, 1, old, 1, new, cwd=cwd, range_known=False, **x)]
    if tool == "write":
        content = _s(args.get("contents")) or _s(args.get("content"))
        if content is None:
            return []
        before = files.get(file)
        files[file] = content
        if before is not None:
            return base.edits_from_texts(t, file, before, content, cwd=cwd, **x)
        return [base.ev_edit(t, file, 1, "", 1, content, cwd=cwd, range_known=False, **x)]
    return []  # edit_file without chunks: its code_edit is a sketch, not the file's text


ADAPTER = CursorAdapter()
