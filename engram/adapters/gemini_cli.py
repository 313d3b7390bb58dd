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
        return _Document(self, path, mode).run()

    streams = True

    def streams_source(self, path: Path) -> bool:
        """Legacy ``session-*.json`` documents (``_Document``) and JSONL chats (``_Jsonl``)
        stream; ``logs.json`` (user prompts only) is parsed whole."""
        p = Path(path)
        return p.suffix == ".jsonl" or (p.suffix == ".json" and not p.name.endswith("logs.json"))

    def stream_source(self, path: Path, *, mode: str = "permissive") -> base.SessionStream:
        """A legacy ``session-*.json`` document as a stream: its messages read one at a time
        (``ijson``), never the whole document; a JSONL chat in two passes (``_Jsonl``)."""
        if Path(path).suffix == ".jsonl":
            return base.SessionStream(_Jsonl(self, Path(path), mode).run(stream=True))
        return base.SessionStream(_Document(self, Path(path), mode).run(stream=True))

    def _parse_jsonl(self, path: Path, mode: str) -> ParseOutput:
        out = ParseOutput()
        meta, order, msgs = _walk_jsonl(path, out, lambda m, *_loc: m)
        if not meta and not msgs:
            if mode == "strict" and out.errors:
                raise UnsupportedLog("no Gemini CLI chat records found", path=str(path))
            return out
        self._session(out, path, meta, [msgs[i] for i in order], "jsonl")
        return out

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
    def _meta(self, path: Path, rec: dict, cwd: str | None, model: str | None,
              fmt: str) -> dict:
        sid = rec.get("sessionId") if isinstance(rec.get("sessionId"), str) else path.stem
        extra = {"log_format": fmt}
        if isinstance(rec.get("projectHash"), str):
            extra["project_hash"] = rec["projectHash"]
        if rec.get("kind") == "subagent":
            extra["subagent"] = True
            extra["parent_session"] = path.parent.name
        if isinstance(rec.get("summary"), str):
            extra["summary"] = rec["summary"]
        return ev_meta(_ts(rec.get("startTime")), harness="gemini_cli", session=sid, adapter=self,
                       source_path=str(path), model=model, cwd=cwd, **extra)

    def _session(self, out: ParseOutput, path: Path, rec: dict, msgs: list[dict],
                 fmt: str) -> None:
        cwd = _dirs_cwd(rec.get("directories"))
        if cwd is None:
            cwd = _infer_cwd(msgs)
        model = next((m["model"] for m in msgs if isinstance(m.get("model"), str)), None)
        meta = self._meta(path, rec, cwd, model, fmt)
        events = [meta]
        known = _Known()
        try:
            for m in msgs:
                try:
                    events.extend(self._message(m, cwd, known))
                except Exception as e:  # one odd message never loses the rest
                    out.errors.append(parse_error(path, None, f"message {m.get('id')}: "
                                                              f"{type(e).__name__}: {e}"))
        finally:
            known.close()
        finish_session(events)
        out.sessions.append(SessionLog(key=meta["session"], events=events))

    def _message(self, m: dict, cwd: str | None, known: _Known) -> list[dict]:
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
        for th in base.as_list(m.get("thoughts")):
            if isinstance(th, dict):
                body = "\n".join(x for x in (th.get("subject"), th.get("description"))
                                 if isinstance(x, str) and x)
                if body:
                    evs.append(ev_msg(_ts(th.get("timestamp")) or t, "msg.out", body,
                                      reasoning=True, message_id=m.get("id")))
        if text:
            evs.append(ev_msg(t, "msg.out", text, message_id=m.get("id")))
        for tc in base.as_list(m.get("toolCalls")):
            if isinstance(tc, dict):
                evs.extend(self._tool(tc, t, cwd, known))
        return evs

    def _tool(self, tc: dict, t, cwd: str | None, known: _Known) -> list[dict]:
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


#: characters of file texts ``_Known`` keeps in memory (the most recently used); the rest spill
KNOWN_MEM_CHARS = 8_000_000
#: the spill file is copied without its dead texts (those since replaced) past this many of them
KNOWN_COMPACT_BYTES = 64 << 20


class _Known:
    """What the session knows of each file: its path → its last full text (an earlier full read
    or write), what a later ``replace`` is placed against. A session that touches new files all
    along would hold every text it ever saw; here only the most recently used
    ``KNOWN_MEM_CHARS`` characters stay in memory, the rest are spilled, zstd-compressed, to a
    private unnamed temp file (0600, ``O_TMPFILE``: nothing is left behind, even by a kill -9)
    of the user's tape directory and read back when asked for: the same texts, so the same
    events. Memory: the recent texts, and per spilled path its name and place in the file."""

    def __init__(self, cap: int | None = None) -> None:
        from collections import OrderedDict

        self.cap = KNOWN_MEM_CHARS if cap is None else cap
        self.mem: OrderedDict[str, str] = OrderedDict()
        self.chars = 0                               # characters in ``mem``
        self.disk: dict[str, tuple[int, int]] = {}   # path → (offset, length) in ``f``
        self.f = None
        self.end = 0       # bytes written to ``f``
        self.dead = 0      # of them, no longer any path's
        self._z = None

    def get(self, key: str, default=None):
        text = self.mem.get(key)
        if text is not None:
            self.mem.move_to_end(key)
            return text
        at = self.disk.get(key)
        if at is None:
            return default
        text = self._read(at)
        self._hold(key, text)   # (its copy on disk stays good until the text changes)
        return text

    def __setitem__(self, key: str, text: str) -> None:
        self.pop(key)
        self._hold(key, text)

    def pop(self, key: str, default=None):
        at = self.disk.pop(key, None)
        if at is not None:
            self.dead += at[1]
        old = self.mem.pop(key, None)
        if old is not None:
            self.chars -= len(old)
        return default

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
        self.mem.clear()
        self.disk.clear()

    def __enter__(self) -> _Known:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _hold(self, key: str, text: str) -> None:
        self.mem[key] = text
        self.chars += len(text)
        while self.chars > self.cap and len(self.mem) > 1:
            k, v = self.mem.popitem(last=False)
            self.chars -= len(v)
            if k in self.disk:
                continue
            try:
                self._write(k, v)
            except OSError:   # no room to spill (disk full): kept here, as all of them were
                self.mem[k] = v
                self.mem.move_to_end(k, last=False)
                self.chars += len(v)
                self.cap = float("inf")
                return

    def _codec(self):
        if self._z is None:
            import zstandard

            self._z = (zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor())
        return self._z

    def _write(self, key: str, text: str) -> None:
        if self.f is None:
            self.f = _private_temp_file()
        if self.dead > KNOWN_COMPACT_BYTES and self.dead > self.end // 2:
            self._compact()
        data = self._codec()[0].compress(text.encode("utf-8", "surrogatepass"))
        self.f.seek(self.end)
        self.f.write(data)
        self.disk[key] = (self.end, len(data))
        self.end += len(data)

    def _read(self, at: tuple[int, int]) -> str:
        self.f.seek(at[0])
        data = self.f.read(at[1])
        return self._codec()[1].decompress(data).decode("utf-8", "surrogatepass")

    def _compact(self) -> None:
        """The live texts copied to a new file (most of the old one was texts since replaced)."""
        new = _private_temp_file()
        moved: dict[str, tuple[int, int]] = {}
        end = 0
        try:
            for key, (ofs, n) in self.disk.items():
                self.f.seek(ofs)
                new.write(self.f.read(n))
                moved[key] = (end, n)
                end += n
        except BaseException:
            new.close()
            raise
        self.f.close()
        self.f, self.disk, self.end, self.dead = new, moved, end, 0


def _private_temp_file():
    """An unnamed temp file (``O_TMPFILE`` where the system has it; 0600 in any case) of the
    user's tape directory (the disk the tapes go to), else of the system's temp directory."""
    import tempfile

    from engram import paths

    try:
        return tempfile.TemporaryFile(dir=paths.private_dir(paths.user_tapes_dir()))
    except OSError:
        return tempfile.TemporaryFile()


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


# --------------------------------------------------------------------------------------------
# A legacy ``session-*.json`` document read as a stream
#
# The document is one JSON object whose ``messages`` array holds the whole session. It is read
# with ijson (its C backend, yajl2_c, when installed): one message at a time is built, turned into
# events and dropped, so memory does not grow with the document. What ``json.loads`` accepted and
# the tape encoder cannot write is made encodable as ``base.loads_json_text`` does, with the same
# notes: the bytes are cleaned on their way to the parser (``_Clean``: a byte order mark dropped,
# invalid UTF-8 replaced, lone UTF-16 surrogate escapes replaced by ``\ufffd``, ``NaN`` and
# ``Infinity`` read as the floats ``json.loads`` makes of them), each message is made encodable
# at its depth in the document (wider integers, deeper nesting). A document cut short keeps every
# message that was complete.

_BOM = b"\xef\xbb\xbf"
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_ESC = re.compile(rb"(\\+)u[dD]([89a-fA-F])[0-9a-fA-F]{2}")
_CONSTANT_SCAN = re.compile(rb'\\.|"|-?Infinity|NaN', re.S)
_QUOTE_AFTER_BACKSLASHES = re.compile(rb'\\+"')
#: what ``NaN``, ``Infinity`` and ``-Infinity`` outside strings are fed to the parser as (yajl
#: refuses the constants): integers no log holds, turned back into floats once a message is built
_CONSTANTS = {b"NaN": (b"10000000000000000000000000000000000000000000000011", float("nan")),
              b"Infinity": (b"10000000000000000000000000000000000000000000000012", float("inf")),
              b"-Infinity": (b"10000000000000000000000000000000000000000000000013",
                             float("-inf"))}
_FLOAT_OF = {int(k): v for k, v in _CONSTANTS.values()}
_PIECE = 1 << 16


class _Clean:
    """A binary file as the JSON parser reads it, cleaned a piece at a time (a piece ends just
    after a quote, a comma or a newline, so no escape, token or UTF-8 sequence is cut); what was
    rewritten is counted, with its line."""

    def __init__(self, f) -> None:
        self.f = f
        self.carry = b""
        self.eof = False
        self.first = True
        self.in_str = False      # whether the next piece starts inside a string
        self.lines = 0           # newlines before the next piece
        self.surrogates: list[int] = []   # the line of each lone surrogate replaced
        self.constants: list[int] = []    # the line of each NaN / Infinity read

    def read(self, n: int = _PIECE) -> bytes:
        if n == 0:
            return b""   # (ijson asks whether the file gives bytes)
        while True:
            if self.eof:
                b, self.carry = self.carry, b""
                return self._clean(b) if b else b""
            raw = self.f.read(_PIECE)
            if not raw:
                self.eof = True
                continue
            b = self.carry + raw
            cut = max(b.rfind(b'"'), b.rfind(b","), b.rfind(b"\n")) + 1
            if cut == 0:
                self.carry = b
                continue
            self.carry = b[cut:]
            return self._clean(b[:cut])

    def _clean(self, b: bytes) -> bytes:
        if self.first:
            self.first = False
            if b.startswith(_BOM):
                b = b[3:]
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            b = b.decode("utf-8", "replace").encode("utf-8")
        if _SURROGATE_HINT.search(b):
            b = self._surrogates(b)
        if b"NaN" in b or b"Infinity" in b:
            b = self._constants(b)
        else:
            self.in_str ^= bool(_unescaped_quotes(b) & 1)
        self.lines += b.count(b"\n")
        return b

    def _line(self, b: bytes, pos: int) -> int:
        return self.lines + b.count(b"\n", 0, pos) + 1

    def _surrogates(self, b: bytes) -> bytes:
        """Lone ``\\uD800``-``\\uDFFF`` escapes → ``\\ufffd`` (same length); pairs kept."""
        lone: list[int] = []
        high = None   # (start, end) of a high surrogate escape not paired yet
        for m in _SURROGATE_ESC.finditer(b):
            if len(m.group(1)) % 2 == 0:
                continue   # an escaped backslash, then a plain "u"
            start, end = m.end(1) - 1, m.end()
            is_high = m.group(2) in b"89abAB"
            if high is not None:
                if not is_high and start == high[1]:
                    high = None
                    continue
                lone.append(high[0])
                high = None
            if is_high:
                high = (start, end)
            else:
                lone.append(start)
        if high is not None:
            lone.append(high[0])
        if not lone:
            return b
        buf = bytearray(b)
        for at in lone:
            buf[at:at + 6] = b"\\ufffd"
            self.surrogates.append(self._line(b, at))
        return bytes(buf)

    def _constants(self, b: bytes) -> bytes:
        """``NaN`` / ``Infinity`` outside strings → their stand-in integers (``_CONSTANTS``)."""
        out: list[bytes] = []
        last = 0
        in_str = self.in_str
        for m in _CONSTANT_SCAN.finditer(b):
            tok = m.group()
            if tok == b'"':
                in_str = not in_str
            elif tok[:1] != b"\\" and not in_str:
                out.append(b[last:m.start()])
                out.append(_CONSTANTS[tok][0])
                last = m.end()
                self.constants.append(self._line(b, m.start()))
        self.in_str = in_str
        if not out:
            return b
        out.append(b[last:])
        return b"".join(out)


def _unescaped_quotes(b: bytes) -> int:
    """How many quotes in ``b`` (a piece that starts outside any escape) open or close a
    string: those after an odd run of backslashes are escaped."""
    escaped = b.count(b'\\"')
    if escaped and b"\\\\" in b:   # runs of several backslashes: count the odd ones
        escaped = sum(1 for r in _QUOTE_AFTER_BACKSLASHES.findall(b) if len(r) % 2 == 0)
    return b.count(b'"') - escaped


def _restore_constants(value):
    """``value`` with the stand-ins of ``_CONSTANTS`` turned back into floats (iterative)."""
    def fix(v):
        return _FLOAT_OF.get(v, v) if type(v) is int else v

    if not isinstance(value, (dict, list)):
        return fix(value)
    stack = [value]
    while stack:
        c = stack.pop()
        items = c.items() if isinstance(c, dict) else enumerate(c)
        for k, v in list(items):
            if isinstance(v, (dict, list)):
                stack.append(v)
            elif type(v) is int and v in _FLOAT_OF:
                c[k] = _FLOAT_OF[v]
    return value


def _ijson():
    import ijson

    try:
        return ijson.get_backend("yajl2_c")
    except ImportError:   # no C backend on this platform: the pure Python one, same values
        return ijson


def _encodable_at(value, level: int, counts: dict):
    """``value``, found at ``level`` of the document (the document is 1), made encodable as
    ``base.make_encodable`` of the whole document would make it."""
    import orjson

    wrapped = value
    for _ in range(level - 1):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped, option=orjson.OPT_NON_STR_KEYS)
        return value
    except (orjson.JSONEncodeError, TypeError):
        return base._fix_value(value, level, counts)


class _Document(base.StreamParser):
    """One legacy ``session-*.json`` ``ConversationRecord`` parsed a message at a time."""

    def __init__(self, adapter: GeminiCliAdapter, path: Path, mode: str) -> None:
        self.a, self.path, self.mode = adapter, path, mode
        self.counts = base._rewrite_counts()
        self.rec: dict = {}
        self.is_map = False
        self.has_messages = False
        self.n = 0                     # messages read
        self.complete = 0              # of them complete
        self.bad: list[dict] = []      # "message i is not a MessageRecord"
        self.crashed: list[dict] = []  # a message that raised
        self.clean: _Clean | None = None
        self.rewritten_at: list[str] = []   # where values were rewritten (ints, depth)

    # ---- passes
    def _open(self):
        f = open(self.path, "rb")
        return f, _Clean(f)

    def _cwd(self) -> str | None:
        """The session's ``cwd``, needed before the first message's events: the document's
        ``directories[0]`` (wherever the key is; the last one wins, as in ``json.loads``), else
        inferred from the first message that shows it (``_infer_cwd``)."""
        from ijson.common import JSONError

        ij = _ijson()
        cwd = None
        if self._mentions(b'"directories"'):
            f, clean = self._open()
            with f:
                try:
                    for dirs in ij.items(clean, "directories"):
                        cwd = _dirs_cwd(dirs)
                except (JSONError, ValueError):
                    pass
            if cwd is not None:
                return cwd
        f, clean = self._open()
        with f:
            try:
                for m in ij.items(clean, "messages.item"):
                    if isinstance(m, dict) and isinstance(m.get("type"), str):
                        found = _cwd_of(m)
                        if found is not None:
                            return found
            except (JSONError, ValueError):
                pass
        return None

    def _mentions(self, needle: bytes) -> bool:
        with open(self.path, "rb") as f:
            tail = b""
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    return False
                if needle in tail + chunk[:len(needle)] or needle in chunk:
                    return True
                tail = chunk[-len(needle):]

    def _run(self, stream: bool):
        path = self.path
        fin = base.StreamFinish() if stream else None
        cwd = self._cwd()
        model: list = []   # the first message's model (``_made``), kept if the document is cut
        known = _Known()
        events: list[dict] = []
        failure = None
        meta_t = lambda: _ts(self.rec.get("startTime"))  # noqa: E731
        f, self.clean = self._open()
        with f, known:
            try:
                yield from _made(self.a, path, self._messages(), cwd, known, fin, events,
                                 self.crashed, meta_t, model)
            except Exception as e:  # noqa: BLE001 — malformed or cut short: what was read stays
                failure = e
        out = self.output = ParseOutput()
        self.counts["surrogate"] += len(self.clean.surrogates)
        notes = base._notes(self.counts)
        if notes:
            out.errors.append(parse_error(path, self._first_rewrite(), "; ".join(notes)
                                          + self._where() + "; session kept",
                                          base.VALUE_REWRITTEN))
        if failure is not None:
            line = self.clean.lines + 1
            msg = f"malformed JSON chat record at or before line {line}: {_one_line(failure)}"
            if self.mode == "strict":
                raise UnsupportedLog(msg, path=str(path), line=line) from None
            if self.complete:
                msg += f"; the {self.complete} complete message(s) before it kept"
            out.errors.append(parse_error(path, line, msg))
            if not self.complete:
                return out
        elif not (self.is_map and self.has_messages):
            msg = "not a Gemini CLI ConversationRecord (no messages list)"
            if self.mode == "strict":
                raise UnsupportedLog(msg, path=str(path))
            out.errors.append(parse_error(path, None, msg))
            return out
        out.errors.extend(self.bad)
        out.errors.extend(self.crashed)
        meta = self.a._meta(path, self.rec, cwd, model[0] if model else None, "json")
        return (yield from _end_session(out, meta, events, fin))

    def _first_rewrite(self) -> int | None:
        lines = self.clean.surrogates + self.clean.constants
        return min(lines) if lines else None

    def _where(self) -> str:
        parts = []
        if self.clean.surrogates:
            parts.append("surrogates at line(s) " + _lines(self.clean.surrogates))
        if self.rewritten_at:
            parts.append("other values in " + ", ".join(self.rewritten_at[:10])
                         + (" …" if len(self.rewritten_at) > 10 else ""))
        return f" ({'; '.join(parts)})" if parts else ""

    def _messages(self):
        """The document's valid messages, one at a time (the rest of the document kept in
        ``rec``, made encodable)."""
        from ijson.common import ObjectBuilder

        ij = _ijson()
        depth = 0
        key = None           # the top-level key whose value is being read
        builder = None
        in_messages = False
        restore = self.clean.constants
        for event, value in ij.basic_parse(self.clean):
            if event == "number" and type(value) is not int:
                value = float(value)   # a Decimal: the float json.loads reads (ints stay exact)
            elif event in ("start_map", "start_array"):
                depth += 1
                if depth == 1:
                    self.is_map = event == "start_map"
                    continue
                if not self.is_map:
                    continue
                if depth == 2 and key == "messages" and event == "start_array":
                    in_messages = True
                    self.has_messages = True
                    continue
            elif event in ("end_map", "end_array"):
                depth -= 1
                if depth == 0 or not self.is_map:
                    continue
                if depth == 1 and in_messages:
                    in_messages = False
                    continue
            elif event == "map_key" and depth == 1:
                key = value
                continue
            if depth == 0 or not self.is_map:
                continue   # not an object: reported at the end
            if builder is None:
                builder = ObjectBuilder()
            builder.event(event, value)
            if in_messages and depth == 2:       # a message is complete
                m, builder = builder.value, None
                i, self.n = self.n, self.n + 1
                if restore:
                    m = _restore_constants(m)
                before = dict(self.counts)
                m = _encodable_at(m, 3, self.counts)
                if self.counts != before:
                    self.rewritten_at.append(f"message {i}")
                if isinstance(m, dict) and isinstance(m.get("type"), str):
                    self.complete += 1
                    yield m
                else:
                    self.bad.append(parse_error(self.path, None,
                                                f"message {i} is not a MessageRecord"))
            elif not in_messages and depth == 1:  # a top-level value is complete
                v, builder = builder.value, None
                if restore:
                    v = _restore_constants(v)
                self.rec[key] = _encodable_at(v, 2, self.counts)


def _walk_jsonl(path: Path, out: ParseOutput, keep) -> tuple[dict, list[str], dict]:
    """A JSONL chat's lines under its rules (a later line can rewrite any earlier message:
    re-appended when updated, first place kept; ``$rewindTo`` cuts the messages from one on; a
    ``$set`` checkpoint replaces them; a resumed legacy record adds its own), each bad line an
    error of ``out`` (``out.end_offset``: the end of the last line). ``(meta, ids in order, id →
    keep(message, start, end, index in a list or -1, in a $set))`` for the messages still there:
    the messages themselves for the whole parse, where they lie for the stream's (``_Jsonl``)."""
    meta: dict = {}
    order: list[str] = []
    got: dict[str, object] = {}

    def put(m, *loc) -> None:
        if not isinstance(m, dict) or not isinstance(m.get("id"), str):
            return
        if m["id"] not in got:
            order.append(m["id"])
        got[m["id"]] = keep(m, *loc)

    prev = out.end_offset = 0
    for no, off, rec, err in base.iter_jsonl(path):
        start, prev = prev, off
        out.end_offset = off
        if err:
            out.errors.append(base.record_error(path, no, err, rec))
            if rec is None:
                continue
        if "$rewindTo" in rec:
            target = rec["$rewindTo"]
            if target in got:
                cut = order.index(target)
                for mid in order[cut:]:
                    got.pop(mid, None)
                del order[cut:]
            continue
        if "$set" in rec:
            upd = rec["$set"]
            if not isinstance(upd, dict):
                out.errors.append(parse_error(path, no, "$set value is not an object"))
                continue
            if isinstance(upd.get("messages"), list):
                order.clear()
                got.clear()
                for i, m in enumerate(upd["messages"]):
                    put(m, start, off, i, True)
            meta.update({k: v for k, v in upd.items() if k != "messages"})
            continue
        if isinstance(rec.get("id"), str) and isinstance(rec.get("type"), str):
            put(rec, start, off, -1, False)
            continue
        if "sessionId" in rec and "type" not in rec:
            if isinstance(rec.get("messages"), list):  # a resumed legacy record
                for i, m in enumerate(rec["messages"]):
                    put(m, start, off, i, False)
            meta.update({k: v for k, v in rec.items() if k != "messages"})
            continue
        out.errors.append(parse_error(path, no, "unrecognised Gemini CLI chat line"))
    return meta, order, got


class _Jsonl(base.StreamParser):
    """A JSONL chat as a stream, in two passes: a later line can rewrite any earlier message
    (re-appended when updated, first place kept; ``$rewindTo``; a ``$set`` checkpoint), so the
    first pass reads every line and keeps, per message still there, only where its last version
    lies (``_parse_jsonl``'s rules, the same errors); the second reads those versions, in order,
    one at a time. Memory: an id and a place per message, one line."""

    def __init__(self, adapter: GeminiCliAdapter, path: Path, mode: str) -> None:
        self.a, self.path, self.mode = adapter, path, mode
        self._line: tuple[int, dict] | None = None   # the last line read back: (start, record)

    def _index(self, out: ParseOutput) -> tuple[dict, list[str], dict]:
        """meta, message ids in order, id → (start, end, index in a list or -1, in a ``$set``)."""
        return _walk_jsonl(self.path, out, lambda _m, *loc: loc)

    def _messages(self, f, order: list[str], at: dict):
        """The final version of each message, in order (read back from its line)."""
        for mid in order:
            start, end, i, in_set = at[mid]
            if self._line is None or self._line[0] != start:
                f.seek(start)
                data = f.read(end - start)
                raw = data[data.rfind(b"\n", 0, len(data) - 1) + 1:]   # (blank lines before it)
                self._line = (start, base.parse_line(raw)[0])
            rec = self._line[1]
            if i < 0:
                yield rec
            else:
                yield (rec["$set"] if in_set else rec)["messages"][i]

    def _run(self, stream: bool):
        path = self.path
        out = self.output = ParseOutput()
        meta_rec, order, at = self._index(out)
        if not meta_rec and not order:
            if self.mode == "strict" and out.errors:
                raise UnsupportedLog("no Gemini CLI chat records found", path=str(path))
            return out
        fin = base.StreamFinish() if stream else None
        events: list[dict] = []
        crashed: list[dict] = []
        model: list = []
        with open(path, "rb") as f, _Known() as known:
            cwd = _dirs_cwd(meta_rec.get("directories"))
            if cwd is None:
                cwd = _infer_cwd(self._messages(f, order, at))
            yield from _made(self.a, path, self._messages(f, order, at), cwd, known, fin,
                             events, crashed, lambda: _ts(meta_rec.get("startTime")), model)
        self._line = None
        out.errors.extend(crashed)
        meta = self.a._meta(path, meta_rec, cwd, model[0] if model else None, "jsonl")
        return (yield from _end_session(out, meta, events, fin))


def _made(a: GeminiCliAdapter, path: Path, msgs, cwd, known: _Known, fin, events: list[dict],
          crashed: list[dict], when, model: list):
    """(a parser's body) each message's events (``a._message``): added to ``events``, or, as a
    stream, through ``fin`` (``when``: the session's start time, asked for when needed); a
    message that fails is an error in ``crashed`` and the rest are kept. ``model`` gets the first
    message's model as soon as it is read (it stays if ``msgs`` fails part of the way)."""
    for m in msgs:
        if not model and isinstance(m.get("model"), str):
            model.append(m["model"])
        try:
            made = a._message(m, cwd, known)
        except Exception as e:  # one odd message never loses the rest
            crashed.append(parse_error(path, None, f"message {m.get('id')}: "
                                                   f"{type(e).__name__}: {e}"))
            continue
        if fin is None:
            events.extend(made)
        else:
            for ev in made:
                yield from fin.event(ev, when)


def _end_session(out: ParseOutput, meta: dict, events: list[dict], fin):
    """(a parser's end) its session: whole (``fin`` None: ``meta`` first, then every event) or,
    as a stream (``fin``, a ``base.StreamFinish``), what it held back and the meta, last."""
    if fin is None:
        events.insert(0, meta)
        finish_session(events)
        out.sessions.append(SessionLog(key=meta["session"], events=events))
        return out
    meta, rest = fin.finish(meta)
    yield from rest
    out.sessions.append(SessionLog(key=meta["session"], events=[meta]))
    return out


def _lines(lines: list[int]) -> str:
    return ", ".join(str(x) for x in lines[:10]) + (" …" if len(lines) > 10 else "")


def _one_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return (text[:200] + "…") if len(text) > 200 else text


def _load_json(path: Path, out: ParseOutput):
    """A whole-file JSON document (``logs.json``: prompts only) (a byte order mark dropped,
    invalid UTF-8 replaced), made encodable (``base.loads_json_text``); what was rewritten is
    reported in ``out.errors``."""
    value, notes = base.loads_json_text(path.read_bytes().decode("utf-8-sig", "replace"))
    if notes:
        out.errors.append(parse_error(path, None, "; ".join(notes) + "; session kept",
                                      base.VALUE_REWRITTEN))
    return value


def _dirs_cwd(dirs) -> str | None:
    return dirs[0] if isinstance(dirs, list) and dirs and isinstance(dirs[0], str) else None


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


def _infer_cwd(msgs) -> str | None:
    """The project root, when a relative path in a call is echoed absolute in its result."""
    for m in msgs:
        cwd = _cwd_of(m)
        if cwd is not None:
            return cwd
    return None


def _cwd_of(m: dict) -> str | None:
    """``_infer_cwd`` of one message."""
    for tc in base.as_list(m.get("toolCalls")):
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
