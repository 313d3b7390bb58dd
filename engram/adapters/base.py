"""The adapter contract: harness log → tape events.

Every harness has one module in this package with one ``Adapter`` subclass. An adapter:

* declares ``name``, ``tier`` (``agent``/``orchestrator``), a ``VersionMatrix`` and its default log
  locations (``default_paths``; ``~`` expanded, overridable in config ``harnesses.<name>.paths``);
* ``discover(root)`` yields the *sources* under one configured path: files (a JSONL log, a history
  markdown) or stores (a SQLite database, a storage tree directory). It never reads outside ``root``;
* ``parse_source(path, mode=...)`` reads one source and returns a ``ParseOutput``: zero or more
  ``SessionLog`` (one per session in the source) plus machine-readable errors.

Parsing is pure and *prefix-stable*: the same bytes give the same events, and appending records to a
log only appends events to its sessions (ingest relies on this to seal live sessions and continue
them in new tapes). Adapters never consult the clock, the environment or random numbers.

Events are plain dicts following the tape schema in ``docs/tape-format.md``: every event has
``t`` (ISO-8601 UTC, from the log; inherited from the previous event when a record lacks one) and
``k``. The first event of every session is ``meta``. Helpers below build the common event kinds so
every harness produces identical shapes. Secrets are redacted centrally (``finish_session``), so
every harness redacts the same way.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import ClassVar

from engram.adapters import redact
from engram.digest import text_hash


@dataclasses.dataclass(frozen=True)
class VersionMatrix:
    """Harness versions this adapter understands: ``min`` and ``max_tested`` inclusive."""

    min: str
    max_tested: str
    known_bad: tuple[str, ...] = ()

    def status(self, version: str | None) -> str:
        """``ok``, ``unknown`` (outside the tested range or unparseable) or ``bad``."""
        if not version:
            return "unknown"
        if version in self.known_bad:
            return "bad"
        v = version_key(version)
        if v is None:
            return "unknown"
        lo, hi = version_key(self.min), version_key(self.max_tested)
        if lo is not None and v < lo:
            return "unknown"
        if hi is not None and v[: len(hi)] > hi:
            return "unknown"
        return "ok"

    def to_dict(self) -> dict:
        return {"min": self.min, "max_tested": self.max_tested, "known_bad": list(self.known_bad)}


def version_key(version: str) -> tuple[int, ...] | None:
    """``"2.0.64"`` → ``(2, 0, 64)``; ``"0.128.0-alpha.1"`` → ``(0, 128, 0)``; junk → None."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    if not m:
        return None
    return tuple(int(p) for p in m.group(1).split("."))


@dataclasses.dataclass
class SessionLog:
    """One session parsed from a source.

    ``key`` identifies the session inside its source and is stable across re-parses (usually the
    harness's session id). ``events[0]`` is the ``meta`` event.
    """

    key: str
    events: list[dict]


@dataclasses.dataclass
class ParseOutput:
    sessions: list[SessionLog] = dataclasses.field(default_factory=list)
    errors: list[dict] = dataclasses.field(default_factory=list)
    #: byte offset just past the last complete line read (JSONL sources); None for stores.
    end_offset: int | None = None


class SessionStream:
    """One session parsed as a stream (``Adapter.stream_source``): iterate it for the events
    after the ``meta``, each finished as ``finish_session`` would (``StreamFinish``); once
    iterated to the end, ``output`` is the ``ParseOutput`` with that session's ``meta`` as its
    only event (no session: none)."""

    def __init__(self, gen: Iterator[dict]):
        self.gen = gen
        self.output: ParseOutput | None = None

    def __iter__(self) -> Iterator[dict]:
        self.output = yield from self.gen


def parse_error(path: str | os.PathLike, line: int | None, message: str,
                code: str = "E_ADAPTER_PARSE") -> dict:
    """A machine-readable error record (``line`` is 1-based)."""
    return {"error": {"code": code, "path": str(path), "line": line, "message": message}}


def _path_order(p: Path) -> tuple[str, ...]:
    """The order of ``sorted()`` on paths (part by part), as a key: thousands of logs sort
    without a Python ``__lt__`` call per comparison."""
    return p.parts


class Adapter:
    """Base class. Subclasses set the class attributes and implement ``parse_source``."""

    name: ClassVar[str] = ""
    tier: ClassVar[str] = "agent"
    versions: ClassVar[VersionMatrix] = VersionMatrix("0", "0")
    #: default locations, ``~`` allowed; environment variables like ``$CODEX_HOME`` expanded.
    default_locations: ClassVar[tuple[str, ...]] = ()
    #: glob patterns (relative to a configured root) that select this harness's sources.
    patterns: ClassVar[tuple[str, ...]] = ("**/*.jsonl",)
    #: adapter version, bumped when the events it produces change.
    version: ClassVar[str] = "1"

    def default_paths(self) -> list[Path]:
        out = []
        for loc in self.default_locations:
            expanded = os.path.expandvars(os.path.expanduser(loc))
            if "$" in expanded:  # an unset variable: skip this location
                continue
            out.append(Path(expanded))
        return out

    def repo_paths(self, root: Path) -> list[Path]:
        """Default locations inside the repository itself (e.g. Aider's history file)."""
        return []

    def discover(self, root: Path) -> Iterator[Path]:
        """Sources under ``root`` (a file given directly is its own source). Sorted."""
        root = Path(root)
        if root.is_file():
            yield root
            return
        if not root.is_dir():
            return
        seen: set[Path] = set()
        for pat in self.patterns:
            for p in root.glob(pat):
                if p not in seen and (p.is_file() or p.is_dir()):
                    seen.add(p)
        yield from sorted(seen, key=_path_order)

    def parse_source(self, path: Path, *, mode: str = "permissive") -> ParseOutput:
        raise NotImplementedError

    #: whether ``stream_source`` reads a source one event at a time (one session per source)
    streams: ClassVar[bool] = False

    def streams_source(self, path: Path) -> bool:
        """Whether ``stream_source`` reads this source (an adapter whose sources differ: some of
        one session read as a stream, others parsed whole)."""
        return self.streams

    def stream_source(self, path: Path, *, mode: str = "permissive") -> SessionStream:
        """``parse_source`` of a one-session source as a ``SessionStream``: the same events and
        meta, never the whole session at once (adapters whose ``streams`` is True)."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "tier": self.tier, "versions": self.versions.to_dict(),
                "default_paths": [str(p) for p in self.default_paths()]}


# --------------------------------------------------------------------------------------------
# Reading JSONL robustly
#
# Logs are read line by line (memory: one line at a time, never the whole file). A line is parsed
# by orjson; what orjson refuses is tried again leniently (``loads_lenient``): a UTF-8 byte order
# mark is dropped, invalid UTF-8 is replaced, a lone UTF-16 surrogate escape (half an emoji) is read
# and replaced by U+FFFD, JSON nested deeper than ``MAX_DEPTH`` keeps its deep part as JSON text.
# Every value that reaches an event can be written to a tape (``make_encodable``).

#: containers nested deeper than this cannot be written by orjson (the tape encoder): the deeper
#: part of a value is kept as its JSON text (a string) instead
MAX_DEPTH = 254
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1   # the integers orjson writes

#: error code of a record that was kept after values in it were rewritten (``E_ADAPTER_PARSE``:
#: a record that was skipped)
VALUE_REWRITTEN = "E_ADAPTER_VALUE"


def iter_jsonl(path: Path, start: int = 0) -> Iterator[tuple[int, int, dict | None, str | None]]:
    """Yield ``(line_no, end_offset, record, error)`` for each *complete* line from ``start``.

    ``line_no`` is 1-based within the file only when ``start`` is 0 (else relative to ``start``).
    ``record`` None: the line was skipped and ``error`` says why (malformed JSON, not an object);
    ``record`` with an ``error``: values of the record were rewritten so it can be kept
    (``record_error`` turns either into an error record). A final line without a newline is not
    yielded (it may still be being written). The file is read line by line.
    """
    with open(path, "rb") as f:
        f.seek(start)
        yield from iter_jsonl_stream(f, start)


_READ_CHUNK = 1 << 20


def iter_jsonl_stream(f, start: int = 0) -> Iterator[tuple[int, int, dict | None, str | None]]:
    """``iter_jsonl`` over a binary file object positioned at offset ``start``: read a chunk at
    a time (a line longer than a chunk is put together once it ends)."""
    offset = start
    line_no = 0
    pending: list[bytes] = []   # the start of a line that has not ended yet
    while True:
        chunk = f.read(_READ_CHUNK)
        if not chunk:
            return  # an unterminated last line (in ``pending``) may still be being written
        pos = 0
        while True:
            nl = chunk.find(b"\n", pos)
            if nl < 0:
                if pos < len(chunk):
                    pending.append(chunk[pos:])
                break
            if pending:
                pending.append(chunk[pos:nl + 1])
                raw = b"".join(pending)
                pending = []
            else:
                raw = chunk[pos:nl + 1]
            pos = nl + 1
            line_no += 1
            offset += len(raw)
            rec, err = parse_line(raw)
            if rec is not None or err is not None:  # blank lines are skipped silently
                yield line_no, offset, rec, err


def iter_jsonl_bytes(data: bytes, start: int = 0) -> Iterator[tuple[int, int, dict | None, str | None]]:
    """``iter_jsonl`` over bytes already read (``start``: their offset in the file)."""
    import io

    yield from iter_jsonl_stream(io.BytesIO(data), start)


def record_error(path: str | os.PathLike, line: int | None, error: str, record) -> dict:
    """The error record of ``iter_jsonl``'s ``error``: ``E_ADAPTER_PARSE`` for a skipped line,
    ``VALUE_REWRITTEN`` for a record kept with rewritten values."""
    return parse_error(path, line, error, "E_ADAPTER_PARSE" if record is None else VALUE_REWRITTEN)


def skipped(errors: Iterable[dict]) -> int:
    """How many of ``errors`` are records that were skipped (not merely rewritten)."""
    return sum(1 for e in errors if e.get("error", e).get("code") != VALUE_REWRITTEN)


def parse_line(raw: bytes) -> tuple[dict | None, str | None]:
    """``(record, error)`` of one JSONL line, as ``iter_jsonl`` yields them; ``(None, None)`` for
    a blank line."""
    import orjson

    if raw.isspace() or not raw:
        return None, None
    try:
        rec = orjson.loads(raw)  # whitespace around the value (the newline) is allowed: no copy
    except orjson.JSONDecodeError as e:
        try:
            rec, notes = loads_lenient(raw)
        except ValueError:
            return None, f"malformed JSON: {e}"
    else:
        # what orjson reads it can write, unless nested deeper than it writes (a quick count
        # first: brackets inside strings count too, and lines are rarely made of them)
        notes = []
        if (len(raw) > 2 * MAX_DEPTH and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH
                and _depth_of(rec) > MAX_DEPTH):
            rec, notes = make_encodable(rec)
    if not isinstance(rec, dict):
        return None, f"expected a JSON object, got {type(rec).__name__}"
    return rec, ("; ".join(notes) + "; record kept") if notes else None


def loads_lenient(data: bytes | str) -> tuple[object, list[str]]:
    """A JSON document that orjson refuses, read anyway where it can be: ``(value, notes)`` with
    the value made encodable (``make_encodable``) and what was rewritten. A byte order mark is
    dropped and invalid UTF-8 replaced (silently, as before). Raises ``ValueError`` when the text
    is not JSON (``NaN`` and ``Infinity`` included: orjson refuses them)."""
    import orjson

    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else data
    text = text.strip().lstrip("\ufeff")
    try:
        return make_encodable(orjson.loads(text))
    except orjson.JSONDecodeError:
        return loads_json_text(text, constants=False)


def loads_json_text(text: str, *, constants: bool = True) -> tuple[object, list[str]]:
    """``json.loads(text)`` made encodable: ``(value, notes)`` as ``make_encodable`` gives them.
    The standard parser reads lone surrogate escapes and keeps big integers exact (both are then
    rewritten); a document nested deeper than it can recurse has its deep parts read as JSON
    text. ``constants``: accept ``NaN``/``Infinity`` (as ``json.loads`` does). Raises
    ``ValueError`` when the text is not JSON."""
    import json

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    kw = {} if constants else {"parse_constant": no_constants}
    counts = _rewrite_counts()
    try:
        value = json.loads(text, **kw)
    except RecursionError:
        # deeper than the parser goes: the deep parts become JSON text before parsing
        text, counts["depth"] = _flatten_deep_text(text, MAX_DEPTH)
        value = json.loads(text, **kw)
    value = _make_encodable(value, counts)
    return value, _notes(counts)


def _flatten_deep_text(text: str, limit: int) -> tuple[str, int]:
    """``text`` (a JSON document) with every array or object nested deeper than ``limit`` replaced
    by a JSON string of its text, and how many were; unchanged when the brackets do not balance.
    Iterative."""
    import json

    out: list[str] = []
    depth, cut, last, i, in_str = 0, -1, 0, 0, False
    search = _JSON_SPECIAL.search
    while True:
        m = search(text, i)
        if m is None:
            break
        j = m.start()
        c = text[j]
        i = j + 1
        if in_str:
            if c == "\\":
                i = j + 2
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            if depth == limit + 1:
                cut = j
        else:
            if depth == limit + 1 and cut >= 0:
                out.append(text[last:cut])
                out.append(json.dumps(text[cut:j + 1], ensure_ascii=False))
                last, cut = j + 1, -1
            depth -= 1
    if cut >= 0 or depth:
        return text, 0
    out.append(text[last:])
    return "".join(out), len(out) // 2


_JSON_SPECIAL = re.compile(r'["\\\[\]{}]')


def make_encodable(value) -> tuple[object, list[str]]:
    """``(value, notes)``: ``value`` itself when the tape encoder (orjson) can write it, else a
    copy that it can: lone UTF-16 surrogates → U+FFFD, integers beyond 64 bits → their decimal
    string, arrays and objects nested deeper than ``MAX_DEPTH`` (``value`` is level 1) → their
    JSON text. ``notes`` says what was rewritten (empty: nothing). Never recurses deeper than
    ``MAX_DEPTH`` (the JSON text of a deeper part is written iteratively), so whatever walks the
    result recursively afterwards (redaction) is safe too."""
    counts = _rewrite_counts()
    fixed = _make_encodable(value, counts)
    return fixed, _notes(counts)


def _rewrite_counts() -> dict[str, int]:
    return {"surrogate": 0, "int": 0, "depth": 0}


def _make_encodable(value, counts: dict[str, int]):
    import orjson

    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
        return value
    except (orjson.JSONEncodeError, TypeError):
        return _fix_value(value, 1, counts)


def _notes(counts: dict[str, int]) -> list[str]:
    return [msg.format(counts[k]) for k, msg in _NOTES if counts[k]]


_NOTES = (("surrogate", "{} lone UTF-16 surrogate(s) replaced by U+FFFD"),
          ("int", "{} integer(s) beyond 64 bits kept as decimal strings"),
          ("depth", f"{{}} value(s) nested deeper than {MAX_DEPTH} levels kept as JSON text"))


def _depth_of(value) -> int:
    """Nesting depth of arrays/objects in ``value`` (a scalar: 0), computed iteratively."""
    best = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, (list, tuple)):
            continue
        best = max(best, d)
        stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list, tuple)))
    return best


def _fix_str(s: str, counts: dict) -> str:
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        pass
    fixed = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    counts["surrogate"] += sum(1 for c in fixed if c == "\ufffd") - s.count("\ufffd")
    return fixed


def _fix_value(v, depth: int, counts: dict):
    if isinstance(v, str):
        return _fix_str(v, counts)
    if isinstance(v, bool) or v is None or isinstance(v, float):
        return v
    if isinstance(v, int):
        if _INT_MIN <= v <= _INT_MAX:
            return v
        counts["int"] += 1
        return str(v)
    if isinstance(v, (dict, list, tuple)):
        if depth > MAX_DEPTH:
            counts["depth"] += 1
            return _json_text(v, counts)
        if isinstance(v, dict):
            return {(_fix_str(k, counts) if isinstance(k, str) else k): _fix_value(x, depth + 1, counts)
                    for k, x in v.items()}
        return [_fix_value(x, depth + 1, counts) for x in v]
    return v


def _json_text(value, counts: dict) -> str:
    """Compact JSON text of ``value`` (keys in their order), written without recursion; strings
    and integers made writable as in ``_fix_value``."""
    import orjson

    parts: list[str] = []
    stack: list = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _Raw):
            parts.append(v.text)
        elif isinstance(v, dict):
            items = list(v.items())
            stack.append(_Raw("}"))
            for n in range(len(items) - 1, -1, -1):
                k, x = items[n]
                stack.append(x)
                key = _fix_str(k if isinstance(k, str) else str(k), counts)
                stack.append(_Raw(("," if n else "") + orjson.dumps(key).decode() + ":"))
            stack.append(_Raw("{"))
        elif isinstance(v, (list, tuple)):
            stack.append(_Raw("]"))
            for n in range(len(v) - 1, -1, -1):
                stack.append(v[n])
                if n:
                    stack.append(_Raw(","))
            stack.append(_Raw("["))
        elif isinstance(v, int) and not isinstance(v, bool):
            parts.append(str(v))  # any integer is JSON text
        else:
            x = _fix_str(v, counts) if isinstance(v, str) else v
            try:
                parts.append(orjson.dumps(x).decode())
            except (orjson.JSONEncodeError, TypeError):
                parts.append(orjson.dumps(_fix_str(str(x), counts)).decode())
    return "".join(parts)


class _Raw:
    """A piece of JSON text on ``_json_text``'s stack."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


# --------------------------------------------------------------------------------------------
# Text helpers shared by adapters

_GUTTER_ARROW = re.compile(r"^ *(\d+)→(.*)$")
_GUTTER_TAB = re.compile(r"^ *(\d+)\t(.*)$")


_ARROW_CACHED = 1 << 14
_arrow_gutters: list[str] = []   # ``f"{n:>6}→"`` for n = 0, 1, ...: grown on demand up to ``_ARROW_CACHED``


def _arrows(first: int, n: int) -> list[str]:
    """The gutters ``f"{i:>6}→"`` of lines ``first`` .. ``first + n - 1``."""
    global _arrow_gutters
    end = first + n
    if end > _ARROW_CACHED:
        return [f"{i:>6}→" for i in range(first, end)]
    g = _arrow_gutters
    if len(g) < end:  # a new list bound at once: a thread reading the old one sees it whole
        g = _arrow_gutters = g + [f"{i:>6}→" for i in range(len(g), max(end, 2 * len(g), 4096))]
    return g[first:end]


def _arrow_listing(lines: list[str]) -> tuple[list[str], int] | None:
    """``lines`` without their gutters, and the first line's number, when every line starts with
    Claude Code's gutter (``f"{n:>6}→"``, n counting up from the first line's, under a million);
    else None. Each such line is one that ``_GUTTER_ARROW`` matches, its group 2 what follows the
    seven characters: what ``strip_gutter``'s loop would keep, without a regex match per line."""
    head = lines[0]
    if head[6:7] != "→":
        return None
    try:
        first = int(head[:6])
    except ValueError:
        return None
    if first < 0 or first + len(lines) > 1_000_000:
        return None
    if [ln[:7] for ln in lines] != _arrows(first, len(lines)):
        return None  # not that format (the numbers are compared as written: spaces, ASCII digits)
    return [ln[7:] for ln in lines], first


def strip_gutter(text: str) -> tuple[str, int | None]:
    """Strip ``   42→code`` / ``42\\tcode`` line-number gutters.

    Returns ``(code, first_line_number)``; when fewer than all non-empty lines carry a gutter the
    text is returned unchanged with ``None``.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
        trailing = True
    else:
        trailing = False
    if not lines:
        return text, None
    # Claude Code's Read output (numbered lines, maybe a blank line and a reminder after them):
    # the loop below would keep the same lines; any other text is left to it
    fast = _arrow_listing(lines)
    if fast is None and "" in lines:
        cut = lines.index("")  # the loop stops at a blank line after lines that all match
        if cut:
            fast = _arrow_listing(lines[:cut])
    if fast is not None:
        return "\n".join(fast[0]) + ("\n" if trailing else ""), fast[1]
    for rx in (_GUTTER_ARROW, _GUTTER_TAB):
        out, first, ok = [], None, True
        for ln in lines:
            m = rx.match(ln)
            if not m:
                if ln.strip() == "" or ln.startswith("<system-reminder>"):
                    # trailing reminders are appended by the harness after the content
                    break
                ok = False
                break
            if first is None:
                first = int(m.group(1))
            out.append(m.group(2))
        if ok and first is not None:
            return "\n".join(out) + ("\n" if trailing else ""), first
    return text, None


MAX_TOOL_OUTPUT = 1_000_000   # characters of tool output kept in a tape (code texts never cut)
LABEL_MAX = 80                # characters of a session label


def label_of(text: str) -> str:
    """One line of at most ``LABEL_MAX`` characters (an ellipsis marks a cut). Secrets are redacted
    before the cut: cut first, half a key would no longer look like one to the redactor."""
    one = " ".join(redact.redact_text(text)[0].split())
    if len(one) <= LABEL_MAX:
        return one
    cut = one[: LABEL_MAX - 1]
    mark = cut.rfind("[REDACTED:")
    if mark >= 0 and "]" not in cut[mark:]:
        cut = cut[:mark]  # no half marker either
    return cut.rstrip() + "…"


def _relabel_cut(events: list[dict]) -> None:
    """A label an adapter cut from a message itself (not with ``label_of``) is made again from the
    whole message, with its secrets redacted before the cut."""
    meta = events[0]
    label = meta.get("label")
    if not isinstance(label, str) or not label.endswith("…"):
        return
    head = label[:-1]
    seen = 0
    for ev in events[1:]:
        if ev.get("k") == "msg.in" and isinstance(ev.get("text"), str):
            if " ".join(ev["text"].split()).startswith(head):
                meta["label"] = label_of(ev["text"])
                return
            seen += 1
            if seen == 5:
                return


def cap_output(text: str | None) -> tuple[str | None, bool]:
    """``(text cut to MAX_TOOL_OUTPUT, whether it was cut)``."""
    if text is not None and len(text) > MAX_TOOL_OUTPUT:
        return text[:MAX_TOOL_OUTPUT], True
    return text, False


def as_str(v) -> str | None:
    """``v`` when it is a string, else None (log fields are untrusted JSON)."""
    return v if isinstance(v, str) else None


def as_dict(v) -> dict:
    """``v`` when it is an object, else ``{}``."""
    return v if isinstance(v, dict) else {}


def as_list(v) -> list:
    """``v`` when it is an array, else ``[]`` (a string, a number or ``true`` where a log had a
    list: nothing to iterate, not its characters)."""
    return v if isinstance(v, list) else []


def as_int(v) -> int | None:
    """``v`` when it is an integer (not a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


_ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z$")


def iso_utc(v) -> str | None:
    """An ISO-8601 timestamp string → ISO-8601 UTC (``...Z``, kept as is when already so);
    None when absent or unreadable."""
    if not isinstance(v, str):
        return None
    if _ISO_Z.match(v):
        return v
    from datetime import datetime, timezone

    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_from_epoch_ms(v) -> str | None:
    """Epoch milliseconds → ``2024-01-28T16:37:10.000Z``; None when not a usable number."""
    from datetime import datetime, timezone

    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        dt = datetime.fromtimestamp(v / 1000.0, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_any(v) -> str | None:
    """Epoch milliseconds or an ISO-8601 string → ISO-8601 UTC; None when unreadable."""
    return iso_from_epoch_ms(v) if isinstance(v, (int, float)) else iso_utc(v)


def rel_path(file: str | None, cwd: str | None) -> str | None:
    """Repo-relative form of ``file`` when it lies under ``cwd``; None otherwise.

    Purely lexical (never touches the disk); ``..`` components that would escape ``cwd`` give None,
    so a hostile path in a log can never name a file outside the session's directory.
    """
    if not file:
        return None
    f = file.replace("\\", "/")
    if not cwd:
        return None if f.startswith("/") else _norm_rel(f)
    c = cwd.replace("\\", "/").rstrip("/")
    if f.startswith("/"):
        if f == c or not f.startswith(c + "/"):
            return None
        f = f[len(c) + 1:]
    return _norm_rel(f)


def _norm_rel(f: str) -> str | None:
    parts: list[str] = []
    for p in f.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(p)
    return "/".join(parts) or None


def lines_of(text: str) -> list[str]:
    """Lines of ``text`` without their terminators (a trailing newline adds no empty line)."""
    if not text:
        return []
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts


def line_count(text: str) -> int:
    """``len(lines_of(text))``, without making the lines."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def join_lines(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


# --------------------------------------------------------------------------------------------
# Event builders


def ev_meta(t: str | None, *, harness: str, session: str, adapter: Adapter, source_path: str,
            harness_version: str | None = None, model: str | None = None, cwd: str | None = None,
            repo_head: str | None = None, tier: str | None = None, label: str | None = None,
            **extra) -> dict:
    ev = {"t": t, "k": "meta", "harness": harness, "harness_version": harness_version,
          "session": session, "model": model, "cwd": cwd, "repo_head": repo_head,
          "tier": tier or adapter.tier, "label": label, "adapter": adapter.name,
          "adapter_version": adapter.version, "source_path": source_path,
          "coverage": {"grade": "full", "reasons": [], "redactions": 0}}
    ev.update(extra)
    return ev


def ev_msg(t: str | None, k: str, text: str, **extra) -> dict:
    assert k in ("msg.in", "msg.out")
    ev = {"t": t, "k": k, "text": text}
    ev.update(extra)
    return ev


def ev_tool_call(t, tool: str, call_id: str | None, args, **extra) -> dict:
    ev = {"t": t, "k": "tool.call", "tool": tool, "call_id": call_id, "args": args}
    ev.update(extra)
    return ev


def ev_tool_result(t, tool: str | None, call_id: str | None, stdout: str | None,
                   stderr: str | None = None, exit: int | None = None, **extra) -> dict:
    ev = {"t": t, "k": "tool.result", "tool": tool, "call_id": call_id, "stdout": stdout,
          "stderr": stderr, "exit": exit}
    ev.update(extra)
    return ev


def ev_read(t, file: str, start: int, text: str, cwd: str | None = None, **extra) -> dict:
    n = line_count(text)
    ev = {"t": t, "k": "code.read", "file": file, "rel": rel_path(file, cwd),
          "range": [start, start + max(n, 1) - 1], "text": text}
    ev.update(extra)
    return ev


def ev_edit(t, file: str, before_start: int, before_text: str, after_start: int, after_text: str,
            cwd: str | None = None, **extra) -> dict:
    """A changed region: ``before_text`` (lines ``before_range``) became ``after_text``.

    Ranges are 1-based inclusive; an empty side has ``[s, s-1]`` (insertion/deletion point ``s``).
    """
    nb, na = line_count(before_text), line_count(after_text)
    ev = {"t": t, "k": "code.edit", "file": file, "rel": rel_path(file, cwd),
          "before_range": [before_start, before_start + nb - 1],
          "after_range": [after_start, after_start + na - 1],
          "before_text": before_text, "after_text": after_text,
          "before_hash": text_hash(before_text), "after_hash": text_hash(after_text)}
    ev.update(extra)
    return ev


def edits_from_texts(t, file: str, before: str | None, after: str, cwd: str | None = None,
                     context: int = 0, **extra) -> list[dict]:
    """Diff a whole-file ``before`` → ``after`` into one ``code.edit`` per changed region.

    ``before=None`` means the file was created: one edit with an empty before side. Regions are
    found with difflib on lines; ``context`` unchanged lines are kept on each side.
    """
    from engram.linediff import SequenceMatcher

    if before is None:
        return [ev_edit(t, file, 1, "", 1, after, cwd=cwd, **extra)]
    a, b = lines_of(before), lines_of(after)
    sm = SequenceMatcher(None, a, b, autojunk=False)
    out = []
    for group in sm.get_grouped_opcodes(context):
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(ev_edit(t, file, i1 + 1, join_lines(a[i1:i2]), j1 + 1, join_lines(b[j1:j2]),
                           cwd=cwd, **extra))
    return out


def apply_hunks(before: str, hunks: Iterable[dict]) -> str | None:
    """Apply unified-diff hunks (``{oldStart, lines: [' ctx', '-old', '+new']}``) to ``before``.

    Returns None when a hunk does not apply (context mismatch), so callers can fall back.
    """
    src = lines_of(before)
    out: list[str] = []
    pos = 0
    for h in hunks:
        start = int(h.get("oldStart", 1)) - 1
        if start < 0:
            start = 0
        if start < pos or start > len(src):
            return None
        out.extend(src[pos:start])
        pos = start
        for ln in h.get("lines", []):
            if ln.startswith("\\"):
                continue
            tag, body = (ln[:1], ln[1:]) if ln else (" ", "")
            if tag == "+":
                out.append(body)
            elif tag in ("-", " "):
                if pos >= len(src) or src[pos] != body:
                    return None
                if tag == " ":
                    out.append(body)
                pos += 1
            else:
                return None
    out.extend(src[pos:])
    res = join_lines(out)
    if before and not before.endswith("\n") and res.endswith("\n") and pos >= len(src):
        res = res[:-1]
    return res


def edits_from_hunks(t, file: str, hunks: Iterable[dict], cwd: str | None = None,
                     **extra) -> list[dict]:
    """One ``code.edit`` per unified-diff hunk, context lines trimmed to the changed region.

    Hunks use Claude Code's ``structuredPatch`` shape (``oldStart``, ``newStart``, ``lines``).
    """
    out = []
    for h in hunks:
        lines = [ln for ln in h.get("lines", []) if not ln.startswith("\\")]
        old_no, new_no = int(h.get("oldStart", 1)), int(h.get("newStart", 1))
        first = last = None
        for i, ln in enumerate(lines):
            if ln[:1] in ("-", "+"):
                first = i if first is None else first
                last = i
        if first is None:
            continue
        for _ln in lines[:first]:
            old_no += 1
            new_no += 1
        region = lines[first:last + 1]
        before = [ln[1:] for ln in region if ln[:1] in ("-", " ")]
        after = [ln[1:] for ln in region if ln[:1] in ("+", " ")]
        out.append(ev_edit(t, file, old_no, join_lines(before), new_no, join_lines(after),
                           cwd=cwd, **extra))
    return out


def finish_session(events: list[dict], *, degraded_reasons: Iterable[str] = ()) -> list[dict]:
    """Make every event writable, redact secrets in every event, fill missing timestamps, record
    coverage in ``meta``.

    Called by every adapter on every session before returning it, so redaction and the coverage
    record are identical across harnesses. Returns the same list (mutated in place). A value the
    tape encoder cannot write (``make_encodable``) is rewritten *before* redaction walks it, and
    the rewrite is a coverage reason.
    """
    if not events or events[0].get("k") != "meta":
        raise ValueError("a session's first event must be meta")
    rewritten = _encodable_events(events)
    if rewritten:
        degraded_reasons = [*degraded_reasons,
                            "values rewritten so the tape can be written: " + "; ".join(rewritten)]
    _relabel_cut(events)  # before redaction: it needs the message as it was
    total = 0
    for ev in events:
        total += redact.redact_event(ev)
    last_t = None
    for ev in events:
        if ev.get("t"):
            last_t = ev["t"]
        else:
            ev["t"] = last_t
    meta = events[0]
    if not meta.get("label"):  # every harness gets a label: its first real request
        for ev in events[1:]:
            if (ev.get("k") == "msg.in" and isinstance(ev.get("text"), str) and ev["text"].strip()
                    and not (ev.get("compaction") or ev.get("boilerplate") or ev.get("meta"))):
                meta["label"] = label_of(ev["text"])
                break
    if meta.get("t") is None:
        meta["t"] = next((e["t"] for e in events if e.get("t")), None)
    _merge_coverage(meta, degraded_reasons, total)
    return events


def _merge_coverage(meta: dict, degraded_reasons, redactions: int) -> None:
    """The meta's ``coverage``: ``degraded_reasons`` added (once each; any reason makes a full
    grade ``degraded``) and ``redactions`` counted."""
    cov = meta.setdefault("coverage", {"grade": "full", "reasons": [], "redactions": 0})
    reasons = list(cov.get("reasons", []))
    for r in degraded_reasons:
        if r not in reasons:
            reasons.append(r)
    cov["reasons"] = reasons
    if reasons and cov.get("grade") == "full":
        cov["grade"] = "degraded"
    cov["redactions"] = cov.get("redactions", 0) + redactions


class StreamParser:
    """A parser run whole or as a stream. A subclass's ``_run(stream)`` is a generator (of the
    finished events after the ``meta``, with ``stream``) that leaves the ``ParseOutput`` in
    ``self.output``; ``run()`` drains it and gives that, ``run(stream=True)`` gives the generator
    (``Adapter.stream_source``)."""

    output: ParseOutput

    def run(self, stream: bool = False):
        gen = self._run(stream)
        if stream:
            return gen
        for _ in gen:
            pass
        return self.output

    def _run(self, stream: bool):
        raise NotImplementedError


class StreamFinish:
    """``finish_session`` one event at a time, for a session parsed as a stream (its ``meta``
    depends on the whole log, so it comes last): ``event(ev, meta_t)`` for each event after the
    ``meta``, in order, gives the events done. The first ones without a time take the ``meta``'s
    time: they (and the events after them) wait until ``meta_t()`` gives it (the time the
    ``meta`` will have: an adapter's is known once set), or the end;
    ``finish(meta, degraded_reasons)`` makes the ``meta`` and gives the events still waiting.
    The events and the ``meta`` are those ``finish_session`` makes of the whole list."""

    def __init__(self) -> None:
        self.counts = _rewrite_counts()
        self.total = 0
        self.n = 0
        self.last_t = None
        self.waiting: list[dict] | None = []   # events not given out yet (None: none now)
        self.lead = 0           # how many of them, at its start, have no time
        self.lead_open = True   # no event with a time yet
        self.first_t = None
        self.relabel: list[str] = []             # the first msg.in texts, as ``_relabel_cut`` reads
        self.label: str | None = None            # the label of the first real request

    def event(self, ev: dict, meta_t) -> list[dict]:
        self.n += 1
        fixed = _make_encodable(ev, self.counts)
        if fixed is not ev:
            if not isinstance(fixed, dict):
                raise ValueError(f"event {self.n} is not an object")
            if fixed.get("k") == "code.edit":
                for side in ("before", "after"):
                    if isinstance(fixed.get(f"{side}_text"), str):
                        fixed[f"{side}_hash"] = text_hash(fixed[f"{side}_text"])
            ev = fixed
        if (ev.get("k") == "msg.in" and isinstance(ev.get("text"), str)
                and len(self.relabel) < 5):
            self.relabel.append(ev["text"])
        self.total += redact.redact_event(ev)
        if (self.label is None and ev.get("k") == "msg.in" and isinstance(ev.get("text"), str)
                and ev["text"].strip()
                and not (ev.get("compaction") or ev.get("boilerplate") or ev.get("meta"))):
            self.label = label_of(ev["text"])
        has_t = bool(ev.get("t"))
        if has_t:
            self.first_t = self.first_t or ev["t"]
            self.last_t = ev["t"]
        if self.waiting is None:
            if not has_t:
                ev["t"] = self.last_t
            return [ev]
        if not has_t and self.lead_open:
            self.waiting.append(ev)
            self.lead += 1
            return []
        if not has_t:
            ev["t"] = self.last_t
        self.lead_open = False
        self.waiting.append(ev)
        if not self.lead:
            return self._release(None)
        t = meta_t()
        return [] if t is None else self._release(t)

    def _release(self, t) -> list[dict]:
        out, self.waiting = self.waiting or [], None
        for ev in out[:self.lead]:
            ev["t"] = t
        return out

    def finish(self, meta: dict, degraded_reasons: Iterable[str] = ()) -> tuple[dict, list[dict]]:
        """The ``meta`` event finished, and the events that were still waiting for a time."""
        fixed = _make_encodable(meta, self.counts)
        if not isinstance(fixed, dict) or fixed.get("k") != "meta":
            raise ValueError("a session's first event must be meta")
        meta = fixed
        rewritten = _notes(self.counts)
        if rewritten:
            degraded_reasons = [*degraded_reasons, "values rewritten so the tape can be written: "
                                + "; ".join(rewritten)]
        label = meta.get("label")
        if isinstance(label, str) and label.endswith("…"):   # ``_relabel_cut``
            head = label[:-1]
            for text in self.relabel:
                if " ".join(text.split()).startswith(head):
                    meta["label"] = label_of(text)
                    break
        self.total += redact.redact_event(meta)
        rest = self._release(meta.get("t")) if self.waiting is not None else []
        if not meta.get("label") and self.label is not None:
            meta["label"] = self.label
        if meta.get("t") is None:
            meta["t"] = self.first_t
        _merge_coverage(meta, degraded_reasons, self.total)
        return meta, rest


def _encodable_events(events: list[dict]) -> list[str]:
    """``make_encodable`` on each event, in place (an edit's text hashes follow its texts); the
    notes of what was rewritten. One event encoded at a time: no copy of the session."""
    counts = _rewrite_counts()
    for i, ev in enumerate(events):
        fixed = _make_encodable(ev, counts)
        if fixed is ev:
            continue
        if not isinstance(fixed, dict):
            raise ValueError(f"event {i} is not an object")
        if fixed.get("k") == "code.edit":
            for side in ("before", "after"):
                if isinstance(fixed.get(f"{side}_text"), str):
                    fixed[f"{side}_hash"] = text_hash(fixed[f"{side}_text"])
        events[i] = fixed
    return _notes(counts)
