"""Gemini CLI chats → tape events.

Source: ``~/.gemini/tmp/<project>/chats/`` (``$GEMINI_CLI_HOME/.gemini/tmp`` when set):

* legacy ``session-*.json``: one JSON ``ConversationRecord`` ``{sessionId, projectHash, startTime,
  lastUpdated, messages[]}``;
* current ``session-*.jsonl`` (v0.38+): a metadata line, then ``MessageRecord`` lines. A message is
  re-appended whenever it is updated, so records are deduplicated by ``id`` (last write wins, first
  position kept); ``{"$set": {...}}`` updates metadata (with ``messages`` it is a checkpoint that
  replaces the history); ``{"$rewindTo": id}`` drops that message and everything after it;
* subagent chats ``chats/<parentSessionId>/<id>.jsonl`` (``kind: "subagent"``);
* ``logs.json``: user prompts only. Prompts of sessions whose chat file exists next to it are
  already in the chat and skipped; the rest become text-only sessions.

Messages: ``user`` → ``msg.in``; ``gemini`` → ``thoughts`` as ``msg.out`` (``reasoning: true``),
the reply text as ``msg.out``, and each ``toolCalls[]`` entry as ``tool.call`` + ``tool.result``.
``read_file`` → ``code.read``; ``write_file`` / ``replace`` → ``code.edit`` from
``resultDisplay.{originalContent,newContent}`` when logged, else from the file content the session
already knows (an earlier full read or write), else from the arguments with ``range_known: false``.

Gemini CLI does not log its own version; ``meta.harness_version`` is null and ``log_format`` says
which on-disk generation was read. Strict mode rejects files that are not chat records.

Prefix stability: new messages only append events, but JSONL *updates* of an existing message
(tool calls arriving, ``$rewindTo``) change that message's events, as the log itself does.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from engram.adapters import base
from engram.adapters.base import (
    Adapter,
    ParseOutput,
    SessionLog,
    VersionMatrix,
    edits_from_texts,
    ev_edit,
    ev_meta,
    ev_msg,
    ev_read,
    ev_tool_call,
    ev_tool_result,
    finish_session,
    parse_error,
)
from engram.errors import UnsupportedLog

_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
_READ_TOOLS = {"read_file"}
_WRITE_TOOLS = {"write_file"}
_REPLACE_TOOLS = {"replace", "edit"}


def _ts(v) -> str | None:
    return v if isinstance(v, str) and _ISO.match(v) else None


def _parts_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    out = []
    for p in content:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought"):
            out.append(p["text"])
    return "\n".join(out)


def _result_text(result) -> str | None:
    """Output text of a tool call's ``result`` (functionResponse parts)."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        result = [result]
    if not isinstance(result, list):
        return None
    out = []
    for p in result:
        if not isinstance(p, dict):
            continue
        fr = p.get("functionResponse")
        if isinstance(fr, dict):
            resp = fr.get("response")
            if isinstance(resp, dict):
                for key in ("output", "error", "llmContent"):
                    if isinstance(resp.get(key), str):
                        out.append(resp[key])
                        break
            elif isinstance(resp, str):
                out.append(resp)
        elif isinstance(p.get("text"), str):
            out.append(p["text"])
    return "\n".join(out) if out else None


class GeminiCliAdapter(Adapter):
    name = "gemini_cli"
    #: Gemini CLI logs no version; the matrix documents the formats read (legacy JSON from
    #: 0.1x, JSONL from 0.38) and is never checked against a log.
    versions = VersionMatrix("0.16.0", "0.40")
    default_locations = ("~/.gemini/tmp",)
    patterns = ("**/chats/session-*.json", "**/chats/session-*.jsonl", "**/chats/*/*.jsonl",
                "**/logs.json")
    version = "1"

    def default_paths(self) -> list[Path]:
        home = os.environ.get("GEMINI_CLI_HOME")
        root = Path(home) / ".gemini" if home else Path(os.path.expanduser("~/.gemini"))
        return [root / "tmp"]

    def parse_source(self, path: Path, *, mode: str = "permissive") -> ParseOutput:
        path = Path(path)
        if path.name.endswith("logs.json"):
            return self._parse_logs(path, mode)
        if path.suffix == ".jsonl":
            return self._parse_jsonl(path, mode)
        return self._parse_json(path, mode)

    # ---- sources
    def _parse_json(self, path: Path, mode: str) -> ParseOutput:
        out = ParseOutput()
        try:
            rec = _load_json(path, out)
        except ValueError as e:
            msg = f"malformed JSON chat record: {e}"
            if mode == "strict":
                raise UnsupportedLog(msg, path=str(path)) from None
            out.errors.append(parse_error(path, None, msg))
            return out
        if not isinstance(rec, dict) or not isinstance(rec.get("messages"), list):
            msg = "not a Gemini CLI ConversationRecord (no messages list)"
            if mode == "strict":
                raise UnsupportedLog(msg, path=str(path))
            out.errors.append(parse_error(path, None, msg))
            return out
        msgs = []
        for i, m in enumerate(rec["messages"]):
            if isinstance(m, dict) and isinstance(m.get("type"), str):
                msgs.append(m)
            else:
                out.errors.append(parse_error(path, None, f"message {i} is not a MessageRecord"))
        self._session(out, path, rec, msgs, "json")
        return out

    def _parse_jsonl(self, path: Path, mode: str) -> ParseOutput:
        out = ParseOutput()
        meta: dict = {}
        order: list[str] = []
        msgs: dict[str, dict] = {}
        end = 0
        for no, off, rec, err in base.iter_jsonl(path):
            end = off
            if err:
                out.errors.append(base.record_error(path, no, err, rec))
                if rec is None:
                    continue
            if "$rewindTo" in rec:
                target = rec["$rewindTo"]
                if target in msgs:
                    cut = order.index(target)
                    for mid in order[cut:]:
                        msgs.pop(mid, None)
                    del order[cut:]
                continue
            if "$set" in rec:
                upd = rec["$set"]
                if not isinstance(upd, dict):
                    out.errors.append(parse_error(path, no, "$set value is not an object"))
                    continue
                if isinstance(upd.get("messages"), list):
                    order, msgs = [], {}
                    for m in upd["messages"]:
                        self._put(order, msgs, m)
                meta.update({k: v for k, v in upd.items() if k != "messages"})
                continue
            if isinstance(rec.get("id"), str) and isinstance(rec.get("type"), str):
                self._put(order, msgs, rec)
                continue
            if "sessionId" in rec and "type" not in rec:
                if isinstance(rec.get("messages"), list):  # a resumed legacy record
                    for m in rec["messages"]:
                        self._put(order, msgs, m)
                meta.update({k: v for k, v in rec.items() if k != "messages"})
                continue
            out.errors.append(parse_error(path, no, "unrecognised Gemini CLI chat line"))
        out.end_offset = end
        if not meta and not msgs:
            if mode == "strict" and out.errors:
                raise UnsupportedLog("no Gemini CLI chat records found", path=str(path))
            return out
        self._session(out, path, meta, [msgs[i] for i in order], "jsonl")
        return out

    @staticmethod
    def _put(order: list[str], msgs: dict[str, dict], m) -> None:
        if not isinstance(m, dict) or not isinstance(m.get("id"), str):
            return
        if m["id"] not in msgs:
            order.append(m["id"])
        msgs[m["id"]] = m

    def _parse_logs(self, path: Path, mode: str) -> ParseOutput:
        out = ParseOutput()
        try:
            data = _load_json(path, out)
        except ValueError as e:
            if mode == "strict":
                raise UnsupportedLog(f"malformed logs.json: {e}", path=str(path)) from None
            out.errors.append(parse_error(path, None, f"malformed logs.json: {e}"))
            return out
        if not isinstance(data, list):
            out.errors.append(parse_error(path, None, "logs.json is not a JSON array"))
            return out
        by_sid: dict[str, list[dict]] = {}
        for i, e in enumerate(data):
            if not isinstance(e, dict) or not isinstance(e.get("sessionId"), str):
                out.errors.append(parse_error(path, None, f"entry {i} has no sessionId"))
                continue
            by_sid.setdefault(e["sessionId"], []).append(e)
        chats = path.parent / "chats"
        for sid in sorted(by_sid, key=lambda s: (str(by_sid[s][0].get("timestamp")), s)):
            if chats.is_dir() and any(chats.glob(f"session-*{sid[:8]}*.json*")):
                continue  # the chat file holds these prompts with everything else
            entries = by_sid[sid]
            meta = ev_meta(_ts(entries[0].get("timestamp")), harness="gemini_cli", session=sid,
                           adapter=self, source_path=str(path), log_format="logs.json")
            events = [meta]
            for e in entries:
                if e.get("type", "user") == "user" and isinstance(e.get("message"), str):
                    events.append(ev_msg(_ts(e.get("timestamp")), "msg.in", e["message"],
                                         message_id=e.get("messageId")))
            finish_session(events, degraded_reasons=["logs.json holds user prompts only"])
            out.sessions.append(SessionLog(key=sid, events=events))
        return out

    # ---- one session
    def _session(self, out: ParseOutput, path: Path, rec: dict, msgs: list[dict],
                 fmt: str) -> None:
        sid = rec.get("sessionId") if isinstance(rec.get("sessionId"), str) else path.stem
        dirs = rec.get("directories")
        cwd = dirs[0] if isinstance(dirs, list) and dirs and isinstance(dirs[0], str) else None
        if cwd is None:
            cwd = _infer_cwd(msgs)
        model = next((m["model"] for m in msgs if isinstance(m.get("model"), str)), None)
        extra = {"log_format": fmt}
        if isinstance(rec.get("projectHash"), str):
            extra["project_hash"] = rec["projectHash"]
        if rec.get("kind") == "subagent":
            extra["subagent"] = True
            extra["parent_session"] = path.parent.name
        if isinstance(rec.get("summary"), str):
            extra["summary"] = rec["summary"]
        meta = ev_meta(_ts(rec.get("startTime")), harness="gemini_cli", session=sid, adapter=self,
                       source_path=str(path), model=model, cwd=cwd, **extra)
        events = [meta]
        known: dict[str, str] = {}
        for m in msgs:
            try:
                events.extend(self._message(m, cwd, known))
            except Exception as e:  # one odd message never loses the rest
                out.errors.append(parse_error(path, None, f"message {m.get('id')}: "
                                                          f"{type(e).__name__}: {e}"))
        finish_session(events)
        out.sessions.append(SessionLog(key=sid, events=events))

    def _message(self, m: dict, cwd: str | None, known: dict[str, str]) -> list[dict]:
        t = _ts(m.get("timestamp"))
        typ = m.get("type")
        text = _parts_text(m.get("content"))
        evs: list[dict] = []
        if typ == "user":
            if text:
                evs.append(ev_msg(t, "msg.in", text, message_id=m.get("id")))
            return evs
        if typ in ("error", "warning"):
            if text:
                evs.append(ev_msg(t, "msg.out", text, notice=typ, message_id=m.get("id")))
            return evs
        if typ != "gemini":
            return evs
        for th in m.get("thoughts") or []:
            if isinstance(th, dict):
                body = "\n".join(x for x in (th.get("subject"), th.get("description"))
                                 if isinstance(x, str) and x)
                if body:
                    evs.append(ev_msg(_ts(th.get("timestamp")) or t, "msg.out", body,
                                      reasoning=True, message_id=m.get("id")))
        if text:
            evs.append(ev_msg(t, "msg.out", text, message_id=m.get("id")))
        for tc in m.get("toolCalls") or []:
            if isinstance(tc, dict):
                evs.extend(self._tool(tc, t, cwd, known))
        return evs

    def _tool(self, tc: dict, t, cwd: str | None, known: dict[str, str]) -> list[dict]:
        t = _ts(tc.get("timestamp")) or t
        name = tc.get("name") if isinstance(tc.get("name"), str) else "unknown"
        call_id = tc.get("id") if isinstance(tc.get("id"), str) else None
        args = tc.get("args") if isinstance(tc.get("args"), dict) else {}
        status = tc.get("status")
        output = _result_text(tc.get("result"))
        evs = [ev_tool_call(t, name, call_id, tc.get("args")),
               ev_tool_result(t, name, call_id, output, status=status)]
        if status not in ("success", None):
            return evs
        path = args.get("file_path") or args.get("absolute_path") or args.get("path")
        if not isinstance(path, str) or not path:
            return evs
        key = _abs(path, cwd)
        extra = {"call_id": call_id}
        rd = tc.get("resultDisplay") if isinstance(tc.get("resultDisplay"), dict) else None
        if name in _READ_TOOLS:
            if output is None or output.startswith("Error"):
                return evs
            start = 1
            ranged = False
            if isinstance(args.get("start_line"), int):
                start, ranged = max(args["start_line"], 1), True
            elif isinstance(args.get("offset"), int):
                start, ranged = args["offset"] + 1, True
            if isinstance(args.get("limit"), int) or isinstance(args.get("end_line"), int):
                ranged = True
            text, truncated = _strip_read_notice(output)
            if not ranged and not truncated:
                known[key] = text
            if text:
                evs.append(ev_read(t, path, start, text, cwd=cwd, truncated=truncated or None,
                                   **extra))
            return evs
        if name in _WRITE_TOOLS or name in _REPLACE_TOOLS:
            if rd and isinstance(rd.get("newContent"), str):
                before = rd.get("originalContent")
                before = before if isinstance(before, str) else None
                if rd.get("isNewFile"):
                    before = None
                new = rd["newContent"]
                evs.extend(edits_from_texts(t, path, before, new, cwd=cwd, **extra))
                known[key] = new
                return evs
            if name in _WRITE_TOOLS:
                content = args.get("content")
                if not isinstance(content, str):
                    return evs
                before = known.get(key)
                created = isinstance(output, str) and "created" in output.lower()[:80]
                if before is None and not created:
                    evs.append(ev_edit(t, path, 1, "", 1, content, cwd=cwd, before_known=False,
                                       **extra))
                else:
                    evs.extend(edits_from_texts(t, path, None if created else before, content,
                                                cwd=cwd, **extra))
                known[key] = content
                return evs
            old, new = args.get("old_string"), args.get("new_string")
            if not isinstance(old, str) or not isinstance(new, str):
                return evs
            before = known.get(key)
            if old == "" and before is None:
                evs.extend(edits_from_texts(t, path, None, new, cwd=cwd, **extra))
                known[key] = new
            elif before is not None and old and old in before:
                multi = bool(args.get("allow_multiple")) or \
                    (isinstance(args.get("expected_replacements"), int)
                     and args["expected_replacements"] > 1)
                if multi:
                    after = before.replace(old, new)
                    evs.extend(edits_from_texts(t, path, before, after, cwd=cwd, **extra))
                else:
                    after = before.replace(old, new, 1)
                    evs.append(_located_edit(t, path, before, old, new, cwd, extra))
                known[key] = after
            else:
                evs.append(ev_edit(t, path, 1, old, 1, new, cwd=cwd, range_known=False, **extra))
                known.pop(key, None)
        return evs


def _located_edit(t, path: str, before: str, old: str, new: str, cwd, extra: dict) -> dict:
    """One edit covering the whole lines around the first ``old`` in ``before``."""
    idx = before.index(old)
    ls = before.rfind("\n", 0, idx) + 1
    le = before.find("\n", idx + len(old))
    le = len(before) if le < 0 else le + 1
    after = before[:idx] + new + before[idx + len(old):]
    start = before.count("\n", 0, ls) + 1
    return ev_edit(t, path, start, before[ls:le], start, after[ls:le + len(new) - len(old)],
                   cwd=cwd, **extra)


def _load_json(path: Path, out: ParseOutput):
    """A whole-file JSON document (a byte order mark dropped, invalid UTF-8 replaced), made
    encodable (``base.loads_json_text``); what was rewritten is reported in ``out.errors``."""
    value, notes = base.loads_json_text(path.read_bytes().decode("utf-8-sig", "replace"))
    if notes:
        out.errors.append(parse_error(path, None, "; ".join(notes) + "; session kept",
                                      base.VALUE_REWRITTEN))
    return value


def _abs(path: str, cwd: str | None) -> str:
    if path.startswith("/") or not cwd:
        return path
    return cwd.rstrip("/") + "/" + path.lstrip("./")


def _strip_read_notice(output: str) -> tuple[str, bool]:
    """Drop the truncation notice read_file prepends to partial reads."""
    if output.startswith(("\nIMPORTANT: The file content has been truncated",
                          "IMPORTANT: The file content has been truncated")):
        i = output.find("--- FILE CONTENT (truncated) ---")
        return (output[i + len("--- FILE CONTENT (truncated) ---\n"):] if i >= 0 else ""), True
    return output, False


def _infer_cwd(msgs: list[dict]) -> str | None:
    """The project root, when a relative path in a call is echoed absolute in its result."""
    for m in msgs:
        for tc in m.get("toolCalls") or []:
            if not isinstance(tc, dict) or not isinstance(tc.get("args"), dict):
                continue
            p = tc["args"].get("file_path")
            out = _result_text(tc.get("result"))
            if not isinstance(p, str) or p.startswith("/") or not out:
                continue
            rel = p.lstrip("./")
            mm = re.search(r"(/\S*?)/" + re.escape(rel) + r"(?=[.\s]|$)", out)
            if mm:
                return mm.group(1)
    return None


ADAPTER = GeminiCliAdapter()
