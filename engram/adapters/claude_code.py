"""Claude Code: ``~/.claude/projects/<encoded-cwd>/<session>.jsonl`` → tape events.

One JSONL file is one session (sidechain files are their own session, keyed
``<sessionId>:<agentId>``). Records are read in file order and every content block becomes one
event, so appending lines only appends events (prefix-stable). What is captured:

* ``user`` text → ``msg.in``. Injected text (``isMeta``: local-command caveats) is kept, marked
  ``meta: true``, so the transcript stays complete and the label/continuation logic can skip it.
  ``isCompactSummary`` messages and ``system/compact_boundary`` records → ``msg.in`` with
  ``compaction: true``. Queued input (``queue-operation`` enqueue) → ``msg.in`` with
  ``queued: true``.
* ``assistant`` text → ``msg.out``; ``thinking`` → ``msg.out`` with ``reasoning: true``;
  ``tool_use`` → ``tool.call``. Streaming writes one line per block sharing ``message.id``: each
  block is one event, in file order; a block repeated under the same ``message.id`` (or a record
  whose ``uuid`` was already seen) is dropped.
* ``tool_result`` → ``tool.result`` paired with its call by ``tool_use_id`` (``tool`` filled in,
  ``exit`` from ``is_error``, ``agent_id`` for Task/Agent results, stdout capped at
  ``MAX_TOOL_OUTPUT`` characters with ``truncated: true``), followed by the code events derived from
  it: Read → ``code.read`` (``toolUseResult.file`` content, else the gutter-stripped result text);
  Edit/MultiEdit/Write → one ``code.edit`` per changed region of ``structuredPatch`` (a Write that
  creates a file is one edit with an empty before side); without a structured result the tool input
  is used, located in the last known content of the file when there is one (``range_known: false``
  otherwise). NotebookEdit → one ``code.edit`` for the cell. A failed or rejected call
  (``is_error``) produces no code events. Code texts are never truncated.
* ``summary`` records are titles (often of *other* sessions) → ``meta.summaries``, no events.
  ``file-history-snapshot``, ``system`` records other than compaction and unknown types are skipped.

``meta``: ``session`` (the log's ``sessionId``), ``harness_version``, ``model`` (first real
assistant model), ``cwd``, ``git_branch`` (``repo_head`` stays null: a branch is not a commit),
``label`` (first real user request, else the first summary), ``usage`` token totals (last usage of
each ``message.id``, summed), and for sidechains ``agent_id`` and ``sidechain: true``.
Each event keeps the record's ``uuid`` and ``parent_uuid``.
"""

from __future__ import annotations

import itertools
import pickle
import re
from pathlib import Path

import xxhash

from engram import paths
from engram.adapters import base
from engram.adapters.base import MAX_TOOL_OUTPUT  # noqa: F401  (the limit this module applies)
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
    iso_utc as _ts,
)
from engram.adapters.base import (
    label_of as _label,
)
from engram.errors import UnsupportedLog
from engram.sortedset import KeyMap
from engram.spill import SpillFile

#: tool output (``tool.result`` stdout/stderr) kept per event, in characters
#: unchanged lines that separate two changed regions of one hunk into two code.edit events
SPLIT_CONTEXT = 3

_EDIT_TOOLS = ("Edit", "MultiEdit", "Write", "NotebookEdit")
_AGENT_ID_TEXT = re.compile(r"^agentId: ([A-Za-z0-9_-]+)")
_NOT_A_REQUEST = ("<command-", "<local-command-", "Caveat: ", "[Request interrupted",
                  "<system-reminder>", "<bash-", "<user-prompt-submit-hook>")


class ClaudeCodeAdapter(base.Adapter):
    name = "claude_code"
    tier = "agent"
    versions = base.VersionMatrix(min="1.0.111", max_tested="2.1.7")
    default_locations = ("$CLAUDE_CONFIG_DIR/projects", "~/.claude/projects")
    patterns = ("*.jsonl", "*/*.jsonl", "*/subagents/agent-*.jsonl",
                "*/*/subagents/agent-*.jsonl", "*/*/subagents/workflows/*/agent-*.jsonl")
    version = "1"

    def parse_source(self, path: Path, *, mode: str = "permissive") -> base.ParseOutput:
        path = Path(path)
        p = _Parser(self, path)
        end = 0
        for line_no, end, rec, err in base.iter_jsonl(path):  # noqa: B007 (end: the offset parsed to)
            p.feed(line_no, rec, err)
        reasons = p.version_reasons()
        if mode == "strict" and reasons:
            raise UnsupportedLog("; ".join(reasons), path=str(path), line=p.first_version_line)
        n_skipped = base.skipped(p.errors)
        if n_skipped:
            reasons.append(f"{n_skipped} malformed record(s) skipped")
        if len(p.errors) > n_skipped:
            reasons.append(f"{len(p.errors) - n_skipped} record(s) kept with values rewritten "
                           "(see the errors)")
        if not p.events:  # nothing but titles / snapshots (yet): no session
            return base.ParseOutput(sessions=[], errors=p.errors, end_offset=end)
        events = [p.meta()] + p.events
        base.finish_session(events, degraded_reasons=reasons)
        return base.ParseOutput(sessions=[base.SessionLog(p.key(), events)], errors=p.errors,
                                end_offset=end)


    streams = True

    def stream_source(self, path: Path, *, mode: str = "permissive") -> base.SessionStream:
        return base.SessionStream(self._stream(Path(path), mode))

    def _stream(self, path: Path, mode: str):
        """``parse_source`` one record at a time: its events finished as they are made
        (``base.StreamFinish``), the meta at the end (the ``SessionStream``'s ``output``)."""
        p = _Parser(self, path)
        fin = base.StreamFinish()
        end = n_events = 0
        for line_no, end, rec, err in base.iter_jsonl(path):  # noqa: B007 (end: the offset parsed to)
            if not p.feed(line_no, rec, err):
                continue
            if p.events:
                made, p.events = p.events, []
                n_events += len(made)
                p.made = True
                for ev in made:
                    yield from fin.event(ev, lambda: p.first_t)
        reasons = p.version_reasons()
        if mode == "strict" and reasons:
            raise UnsupportedLog("; ".join(reasons), path=str(path), line=p.first_version_line)
        n_skipped = base.skipped(p.errors)
        if n_skipped:
            reasons.append(f"{n_skipped} malformed record(s) skipped")
        if len(p.errors) > n_skipped:
            reasons.append(f"{len(p.errors) - n_skipped} record(s) kept with values rewritten "
                           "(see the errors)")
        if not n_events:
            return base.ParseOutput(sessions=[], errors=p.errors, end_offset=end)
        meta, rest = fin.finish(p.meta(), reasons)
        yield from rest
        return base.ParseOutput(sessions=[base.SessionLog(p.key(), [meta])], errors=p.errors,
                                end_offset=end)


ADAPTER = ClaudeCodeAdapter()


# --------------------------------------------------------------------------------------------


def _block_text(content) -> str:
    """Text of a tool_result ``content`` (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"
                 and isinstance(b.get("text"), str)]
        return "\n".join(parts)
    return ""


def _split_hunk(h: dict) -> list[dict]:
    """Split one unified-diff hunk into changed regions.

    Regions separated by fewer than ``SPLIT_CONTEXT`` unchanged lines stay one region (blank lines
    and fences that happen to match inside a rewrite would otherwise shred it into fragments).
    """
    lines = [ln for ln in base.as_list(h.get("lines")) if isinstance(ln, str) and not ln.startswith("\\")]
    old_no, new_no = _int(h.get("oldStart")) or 1, _int(h.get("newStart")) or 1
    out: list[dict] = []
    cur: list[str] = []
    ctx: list[str] = []
    cur_old = cur_new = 0
    for ln in lines:
        if ln[:1] in ("-", "+"):
            if cur and len(ctx) < SPLIT_CONTEXT:
                cur.extend(ctx)
            elif cur:
                out.append({"oldStart": cur_old, "newStart": cur_new, "lines": cur})
                cur = []
            if not cur:
                cur_old, cur_new = old_no, new_no
            ctx = []
            cur.append(ln)
            if ln[:1] == "-":
                old_no += 1
            else:
                new_no += 1
        else:
            ctx.append(ln)
            old_no += 1
            new_no += 1
    if cur:
        out.append({"oldStart": cur_old, "newStart": cur_new, "lines": cur})
    return out


def _replace(content: str, old: str, new: str, replace_all: bool) -> str | None:
    if not old or old not in content:
        return None
    return content.replace(old, new) if replace_all else content.replace(old, new, 1)


_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
               "cache_read_input_tokens")
_BIG = 1 << 62
_TOOLS: dict[str, str] = {}   # one string object per tool name


def _call(tool: str, args) -> str | tuple:
    """What ``calls`` keeps of a tool call for its result: the tool's name, and its input only
    for a Read or an edit (the only results that read it). (The input as its JSON bytes was
    tried: smaller, but thousands of small long-lived buffers that orjson allocates big and
    shrinks strewed the heap — 60 MB more resident at 800 MB of log.)"""
    tool = _TOOLS.setdefault(tool, tool) if len(_TOOLS) < 4096 else tool
    if tool != "Read" and tool not in _EDIT_TOOLS:
        return tool
    return (tool, _d(args))


class _Calls:
    """``_Parser.calls``: tool_use id → what ``_call`` kept of it, for its result. A result comes
    soon after its call, but may come at any time later (or again): nothing is dropped. The
    latest ``IN_MEMORY`` calls are held as they are; past that the older half is pickled into a
    private temp file (``spill.SpillFile``: unnamed, in the user's tape directory, as the ingest
    cache's) and found again by the id's hash (``_key``) in a ``KeyMap`` (offset, length: 32
    bytes a call), so that a session's calls — their inputs are whole edits — cost the parse
    about the same memory whatever the log's length. (A temp file that cannot be made: they are
    kept in memory, as before.) ``get`` answers what a dict would: the last one set, None for
    an id never set; a spilled call comes back as an equal copy."""

    IN_MEMORY = 4096

    def __init__(self) -> None:
        self.recent: dict[str, str | tuple] = {}
        self.spilled: KeyMap | None = None
        self.file = None

    def __setitem__(self, call_id: str, kept) -> None:
        self.recent[call_id] = kept
        if len(self.recent) > self.IN_MEMORY and self.file is not False:
            self._spill()

    def get(self, call_id: str):
        kept = self.recent.get(call_id)
        if kept is not None or self.spilled is None:
            return kept
        row = self.spilled.get(_key(call_id))
        return None if row is None else pickle.loads(self.file.read(*row))

    def _spill(self) -> None:
        """The older half of ``recent`` written to the file, one write."""
        if self.file is None:
            try:   # (where the ingest cache spills: what it holds is what tapes hold)
                self.file = SpillFile(paths.private_dir(paths.user_tapes_dir()))
            except OSError:
                self.file = False   # held in memory, as before
                return
            self.spilled = KeyMap(2)
        n = len(self.recent) // 2
        ids = list(itertools.islice(self.recent, n))
        blobs = [pickle.dumps(self.recent[i], pickle.HIGHEST_PROTOCOL) for i in ids]
        pos = self.file.append(b"".join(blobs))
        for i, b in zip(ids, blobs):
            self.spilled[_key(i)] = (pos, len(b))
            pos += len(b)
            del self.recent[i]


def _uncall(kept) -> dict:
    """``{"tool", "input"}`` of what ``_call`` kept (``{}``: no such call)."""
    if kept is None:
        return {}
    if isinstance(kept, str):
        return {"tool": kept, "input": {}}
    return {"tool": kept[0], "input": kept[1]}


def _key(*parts: str) -> bytes:
    """A 128-bit hash of ``parts`` (unambiguous: each part's length comes before it), as a
    ``KeyMap`` key: kept instead of the strings in the sets of what was seen."""
    h = xxhash.xxh3_128()
    for part in parts:
        if isinstance(part, str):
            b = part.encode("utf-8", "surrogatepass")
            h.update(len(b).to_bytes(8, "little"))
        else:   # None, or another JSON value (as a tuple of them: one unhashable raises)
            hash(part)
            b = repr(part).encode()
            h.update((len(b) | 1 << 63).to_bytes(8, "little"))
        h.update(b)
    return KeyMap.key(h.digest())


class _Parser:
    """State of one file's parse. ``record`` consumes one JSON object."""

    def __init__(self, adapter: ClaudeCodeAdapter, path: Path):
        self.adapter = adapter
        self.path = path
        self.events: list[dict] = []
        self.made = False   # events were made and handed out (``_stream``)
        self.errors: list[dict] = []
        self.session: str | None = None
        self.agent_id: str | None = None
        self.sidechain = path.name.startswith("agent-")
        self.cwd: str | None = None        # see ``_envelope``
        self.branch: str | None = None
        self.loose: dict[str, str] = {}     # cwd/branch of records that name no session
        self.model: str | None = None
        self.label: str | None = None
        self.summaries: list[dict] = []
        self.versions: list[str] = []
        self.first_version_line: int | None = None
        self.first_t: str | None = None
        # What is kept for the whole session is kept small (a session's log can be GBs):
        # record ids, blocks and message ids as 128-bit hashes (``_key``) in sorted arrays
        # (``KeyMap``), a usage as its four counts, a call's input only for the tools whose
        # result reads it.
        self.usage = KeyMap(len(_USAGE_KEYS))  # message.id's key → its last usage's counts
        self.big_usage: dict[bytes, tuple] = {}  # (the keys whose counts do not fit 62 bits)
        self.calls = _Calls()  # tool_use id → its tool, or (tool, input)
        # path → last known full content, or (content before, hunks): applied when first asked
        # for (``_file``; most are never asked for, and applying splits the whole file)
        self.files: dict[str, str | tuple] = {}
        self.seen_uuids = KeyMap()
        self.seen_blocks = KeyMap()
        self.compactions = 0
        self.first_record = True

    # -- meta ---------------------------------------------------------------------------------

    def key(self) -> str:
        session = self.session or self.path.stem
        if self.sidechain and self.agent_id:
            return f"{session}:{self.agent_id}"
        if self.sidechain:
            return f"{session}:{self.path.stem}"
        return session

    def version_reasons(self) -> list[str]:
        vm = self.adapter.versions
        out = []
        for v in self.versions:
            st = vm.status(v)
            if st == "bad":
                out.append(f"claude_code {v} is a known-bad version")
            elif st == "unknown":
                out.append(f"claude_code {v} is outside the tested range {vm.min}..{vm.max_tested}")
        if not self.versions and (self.events or self.made):
            out.append("no claude_code version in the log")
        return out

    def meta(self) -> dict:
        label = self.label
        if label is None and self.summaries:
            label = _label(self.summaries[0]["text"])
        extra: dict = {"git_branch": self._branch(), "summaries": self.summaries,
                       "usage": self._usage_totals()}
        if self.sidechain or self.agent_id:
            extra["sidechain"] = True
            extra["agent_id"] = self.agent_id
        if self.compactions:
            extra["compactions"] = self.compactions
        return base.ev_meta(
            self.first_t, harness=self.adapter.name, session=self.session or self.path.stem,
            adapter=self.adapter, source_path=str(self.path),
            harness_version=self.versions[0] if self.versions else None, model=self.model,
            cwd=self._cwd(), repo_head=None, label=label, **extra)

    def _usage_totals(self) -> dict:
        keys = _USAGE_KEYS
        tot = dict.fromkeys(keys, 0)
        usage = self.usage
        if len(usage.keys) == 0:  # none merged into arrays yet (most sessions): the rows are the dict's
            rows = list(usage.recent.values())
            for j, k in enumerate(keys):
                tot[k] = sum(r[j] for r in rows)
            for u in self.big_usage.values():
                for k, n in zip(keys, u):
                    tot[k] += n
            tot["messages"] = len(rows)
            return tot
        rows = usage.rows()
        for j, k in enumerate(keys):
            tot[k] = sum(rows[:, j].tolist())   # Python ints: no overflow
        for u in self.big_usage.values():   # (their rows in ``usage`` are zeros)
            for k, n in zip(keys, u):
                tot[k] += n
        tot["messages"] = len(self.usage)
        return tot

    # -- records ------------------------------------------------------------------------------

    def feed(self, line_no: int, rec: dict | None, err) -> bool:
        """One line of the log (``base.iter_jsonl``'s record and error): its error noted, the
        record consumed; False when there is no record to consume."""
        if err is not None:
            self.errors.append(base.record_error(self.path, line_no, err, rec))
            if rec is None:
                return False
        try:
            self.record(rec, line_no)
        except Exception as e:  # a record of an unexpected shape never aborts the file
            self.errors.append(base.parse_error(
                self.path, line_no,
                f"unexpected {rec.get('type')!r} record: {type(e).__name__}: {e}"))
        return True

    def record(self, rec: dict, line_no: int) -> None:
        rtype = rec.get("type")
        if rtype == "summary":
            text = _s(rec.get("summary"))
            if text:
                self.summaries.append({"text": text, "leaf_uuid": _s(rec.get("leafUuid"))})
            return
        if rtype not in ("user", "assistant", "system", "queue-operation"):
            return  # file-history-snapshot, attachment, permission-mode, ...: nothing to keep
        if rtype in ("user", "assistant") and not isinstance(rec.get("message"), dict):
            # malformed: reported, and it says nothing about the session (its cwd, id, uuid)
            self.errors.append(base.parse_error(
                self.path, line_no, f"{rtype} record without a message object"))
            return
        uuid = _s(rec.get("uuid"))
        if uuid is not None:
            key = _key(uuid)
            if key in self.seen_uuids:
                return  # a resumed session re-copied this record
            self.seen_uuids.add(key)
        self._envelope(rec, line_no)
        t = _ts(rec.get("timestamp"))
        if t and self.first_t is None:
            self.first_t = t
        common = {"uuid": uuid, "parent_uuid": _s(rec.get("parentUuid"))}
        if rec.get("isSidechain") is True and not self.sidechain:
            common["sidechain"] = True  # sidechain interleaved in the main file (old layout)
            if _s(rec.get("agentId")):
                common["sidechain_agent_id"] = rec["agentId"]
        out: list[dict] = []
        if rtype == "user":
            self._user(rec, t, common, out, line_no)
        elif rtype == "assistant":
            self._assistant(rec, t, common, out, line_no)
        elif rtype == "system":
            self._system(rec, t, common, out)
        else:
            self._queue(rec, t, common, out)
        self.events.extend(out)

    def _cwd(self) -> str | None:
        return self.cwd or self.loose.get("cwd")

    def _branch(self) -> str | None:
        return self.branch or self.loose.get("branch")

    def _envelope(self, rec: dict, line_no: int) -> None:
        # the session's id, cwd and branch: from the first record that names its session (every
        # record Claude Code writes does; a stray object that does not is weaker evidence of where
        # the session ran, and the cwd decides every event's repo-relative path). A log whose
        # records name no session at all takes them from its first records that have them.
        named = _s(rec.get("sessionId"))
        if named and self.session is None:
            self.session = rec["sessionId"]
        for key, field in (("cwd", "cwd"), ("branch", "gitBranch")):
            value = _s(rec.get(field))
            if value and getattr(self, key) is None:
                if named:
                    setattr(self, key, value)
                else:
                    self.loose.setdefault(key, value)
        v = _s(rec.get("version"))
        if v and v not in self.versions:
            self.versions.append(v)
            if self.first_version_line is None:
                self.first_version_line = line_no
        if self.first_record:
            self.first_record = False
            if rec.get("isSidechain") is True:
                self.sidechain = True  # a subagent transcript: its first record is a sidechain
        if self.sidechain and self.agent_id is None and _s(rec.get("agentId")):
            self.agent_id = rec["agentId"]

    def _user(self, rec: dict, t, common: dict, out: list, line_no: int) -> None:
        msg = rec["message"]  # a dict (``record`` checked)
        content = msg.get("content")
        flags: dict = {}
        if rec.get("isMeta") is True:
            flags["meta"] = True
        if rec.get("isCompactSummary") is True:
            flags["compaction"] = True
        if isinstance(content, str):
            self._user_text(t, content, flags, common, out)
            return
        if not isinstance(content, list):
            self.errors.append(base.parse_error(self.path, line_no, "user message without content"))
            return
        for block in content:
            if not isinstance(block, dict):
                continue
            bt = block.get("type")
            if bt == "text" and isinstance(block.get("text"), str):
                self._user_text(t, block["text"], flags, common, out)
            elif bt == "tool_result":
                self._tool_result(rec, block, t, common, out)

    def _user_text(self, t, text: str, flags: dict, common: dict, out: list) -> None:
        extra = dict(flags)
        if text.startswith("[Request interrupted"):
            extra["interrupted"] = True
        out.append(base.ev_msg(t, "msg.in", text, **extra, **common))
        if (self.label is None and not flags and not extra.get("interrupted")
                and text.strip() and not text.lstrip().startswith(_NOT_A_REQUEST)):
            self.label = _label(text)

    def _assistant(self, rec: dict, t, common: dict, out: list, line_no: int) -> None:
        msg = rec["message"]  # a dict (``record`` checked)
        mid = _s(msg.get("id"))
        model = _s(msg.get("model"))
        if self.model is None and model and not model.startswith("<"):
            self.model = model  # "<synthetic>" marks harness-made messages
        usage = msg.get("usage")
        if mid and isinstance(usage, dict):
            row = tuple(_int(usage.get(k)) or 0 for k in _USAGE_KEYS)
            key = _key(mid)
            if all(-_BIG < n < _BIG for n in row):
                self.usage[key] = row
                self.big_usage.pop(key, None)
            else:
                self.usage[key] = (0,) * len(row)
                self.big_usage[key] = row
        content = msg.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            return
        extra = dict(common)
        if mid:
            extra["message_id"] = mid
        for block in content:
            if not isinstance(block, dict):
                continue
            bt = block.get("type")
            if mid is not None:
                sig = (mid, bt, _s(block.get("id")) or _s(block.get("text"))
                       or _s(block.get("thinking")))
                if sig[2] is not None:
                    key = _key(*sig)
                    if key in self.seen_blocks:
                        continue
                    self.seen_blocks.add(key)
            if bt == "text" and isinstance(block.get("text"), str):
                out.append(base.ev_msg(t, "msg.out", block["text"], **extra))
            elif bt == "thinking" and isinstance(block.get("thinking"), str):
                out.append(base.ev_msg(t, "msg.out", block["thinking"], reasoning=True, **extra))
            elif bt == "tool_use":
                call_id = _s(block.get("id"))
                tool = _s(block.get("name")) or "unknown"
                args = block.get("input")
                if call_id:
                    self.calls[call_id] = _call(tool, args)
                out.append(base.ev_tool_call(t, tool, call_id, args, **extra))

    def _system(self, rec: dict, t, common: dict, out: list) -> None:
        if rec.get("subtype") != "compact_boundary":
            return  # turn_duration, api_error, local_command, ...
        self.compactions += 1
        cm = _d(rec.get("compactMetadata"))
        extra = {"compaction": True, "logical_parent_uuid": _s(rec.get("logicalParentUuid"))}
        if _s(cm.get("trigger")):
            extra["trigger"] = cm["trigger"]
        if _int(cm.get("preTokens")) is not None:
            extra["pre_tokens"] = cm["preTokens"]
        text = _s(rec.get("content")) or "Conversation compacted"
        out.append(base.ev_msg(t, "msg.in", text, **extra, **common))

    def _queue(self, rec: dict, t, common: dict, out: list) -> None:
        text = _s(rec.get("content"))
        if rec.get("operation") == "enqueue" and text:
            out.append(base.ev_msg(t, "msg.in", text, queued=True, **common))

    # -- tool results -------------------------------------------------------------------------

    def _tool_result(self, rec: dict, block: dict, t, common: dict, out: list) -> None:
        call_id = _s(block.get("tool_use_id"))
        call = _uncall(self.calls.get(call_id or ""))
        tool = call.get("tool")
        tur = rec.get("toolUseResult")
        text = _block_text(block.get("content"))
        is_error = block.get("is_error") is True
        stdout, cut = _cap(text)
        stderr = None
        if isinstance(tur, dict) and isinstance(tur.get("stderr"), str) and tur["stderr"]:
            stderr, cut2 = _cap(tur["stderr"])
            cut = cut or cut2
        extra = dict(common)
        if is_error:
            extra["is_error"] = True
        if cut:
            extra["truncated"] = True
            extra["stdout_chars"] = len(text)
        if isinstance(tur, dict) and tur.get("interrupted") is True:
            extra["interrupted"] = True
        agent_id = _s(_d(tur).get("agentId"))
        if agent_id is None and isinstance(block.get("content"), list):
            for b in block["content"]:
                m = _AGENT_ID_TEXT.match(_s(_d(b).get("text")) or "")
                if m:
                    agent_id = m.group(1)
        if agent_id:
            extra["agent_id"] = agent_id
        exit_code = 1 if is_error else (0 if "is_error" in block or tur is not None else None)
        out.append(base.ev_tool_result(t, tool, call_id, stdout, stderr, exit_code, **extra))
        if is_error or tool is None:
            return
        code_extra = {"tool": tool, "call_id": call_id, **common}
        if tool == "Read":
            self._read(call["input"], tur, text, t, code_extra, out)
        elif tool in _EDIT_TOOLS:
            self._edit(tool, call["input"], tur, t, code_extra, out)

    def _read(self, args: dict, tur, text: str, t, extra: dict, out: list) -> None:
        f = _d(_d(tur).get("file"))
        path = _s(f.get("filePath")) or _s(args.get("file_path"))
        if not path:
            return
        body = _s(f.get("content"))
        start = _int(f.get("startLine"))
        if isinstance(tur, dict) and tur.get("type") not in (None, "text"):
            return  # image / notebook / pdf reads
        if body is None:
            body, first = base.strip_gutter(text)
            if first is None:
                return  # not file content ("File does not exist.", a summary, ...)
            start = start or first
        if start is None:
            start = _int(args.get("offset")) or 1
        more = {}
        if _int(f.get("totalLines")) is not None:
            more["total_lines"] = f["totalLines"]
        out.append(base.ev_read(t, path, start, body, cwd=self._cwd(), **more, **extra))
        total = _int(f.get("totalLines"))
        if start == 1 and total is not None and base.line_count(body) >= total:
            self.files[path] = body

    def _file(self, path: str) -> str | None:
        """The last known full content of ``path`` (None: unknown, or hunks that did not apply)."""
        v = self.files.get(path)
        if isinstance(v, tuple):
            v = base.apply_hunks(*v)
            if v is None:
                del self.files[path]
            else:
                self.files[path] = v
        return v

    def _edit(self, tool: str, args: dict, tur, t, extra: dict, out: list) -> None:
        r = _d(tur)
        path = _s(r.get("filePath")) or _s(args.get("file_path")) or _s(args.get("notebook_path"))
        if not path:
            return
        cwd = self._cwd()
        if tool == "NotebookEdit":
            before = _s(r.get("original_source")) or _s(r.get("old_source")) or ""
            after = _s(r.get("new_source")) or _s(args.get("new_source")) or ""
            if args.get("edit_mode") == "delete":
                after = ""
            more = {"range_known": False, "edit_mode": _s(args.get("edit_mode")) or "replace"}
            if _s(args.get("cell_id")):
                more["cell_id"] = args["cell_id"]
            out.append(base.ev_edit(t, path, 1, before, 1, after, cwd=cwd, **more, **extra))
            return
        original = r.get("originalFile") if "originalFile" in r else r.get("originalFileContents")
        original = _s(original)
        hunks = r.get("structuredPatch")
        created = r.get("type") == "create" or (tool == "Write" and "originalFile" in r
                                                and original is None)
        if tool == "Write" and created:
            content = _s(r.get("content")) or _s(args.get("content")) or ""
            out.extend(base.edits_from_texts(t, path, None, content, cwd=cwd, created=True,
                                             **extra))
            self.files[path] = content
            return
        if isinstance(hunks, list) and hunks and all(isinstance(h, dict) for h in hunks):
            for h in hunks:
                for sub in _split_hunk(h):
                    out.extend(base.edits_from_hunks(t, path, [sub], cwd=cwd, **extra))
            if original is not None:
                self.files[path] = (original, hunks)
            return
        # no structured patch: rebuild the change from the tool input
        before = original if original is not None else self._file(path)
        after = self._apply_input(tool, args, r, before)
        if before is not None and after is not None:
            edits = base.edits_from_texts(t, path, before, after, cwd=cwd, **extra)
            out.extend(edits)
            self.files[path] = after
            return
        self.files.pop(path, None)
        for old, new in self._pairs(tool, args):
            out.append(base.ev_edit(t, path, 1, old, 1, new, cwd=cwd, range_known=False, **extra))

    @staticmethod
    def _pairs(tool: str, args: dict) -> list[tuple[str, str]]:
        if tool == "Write":
            return [("", _s(args.get("content")) or "")]
        if tool == "MultiEdit":
            return [(_s(e.get("old_string")) or "", _s(e.get("new_string")) or "")
                    for e in base.as_list(args.get("edits")) if isinstance(e, dict)]
        return [(_s(args.get("old_string")) or "", _s(args.get("new_string")) or "")]

    @staticmethod
    def _apply_input(tool: str, args: dict, r: dict, before: str | None) -> str | None:
        if tool == "Write":
            return _s(r.get("content")) or _s(args.get("content"))
        if before is None:
            return None
        if tool == "MultiEdit":
            edits = [e for e in base.as_list(args.get("edits")) if isinstance(e, dict)]
        else:
            edits = [args]
        cur = before
        for e in edits:
            nxt = _replace(cur, _s(e.get("old_string")) or "", _s(e.get("new_string")) or "",
                           e.get("replace_all") is True)
            if nxt is None:
                return None
            cur = nxt
        return cur
