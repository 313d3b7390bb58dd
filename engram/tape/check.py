"""The shape a tape's events must have before anything indexes them (``docs/tape-format.md``).

A tape that did not come from this machine's adapters — a teammate's, pulled by ``engram pull``,
dropped in a configured tape source or in a repository's ``.engram/tapes/`` — is untrusted input:
its name matches its content, but the content may be anything a JSON object can hold. The index,
the lineage pass and every answer read the documented fields of each event kind as the types the
format gives them (a time is a string, a range is two integers, an edit's texts are strings), so
a tape holding another type there (``"t": 5``, a range of strings, a call id that is a list) is
refused whole as a corrupt tape, naming the event's line and the field: it costs only its own
session, never the ingest of the others.

Unknown kinds and unknown keys stay allowed (the format keeps them, and a newer Engram may write
them); so does a missing field (every reader takes its absence as no value: a missing text is no
text) and ``null`` wherever the format allows no value.
"""

from __future__ import annotations

from engram.errors import CorruptTape

_NONE = type(None)
_STR = (str,)
_OPT_STR = (str, _NONE)
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1  # what SQLite stores

# per kind: field -> what it may hold ("range": [int, int] or null; "flag": true/false/null;
# "int": an integer or null; "dict": an object; a tuple: those Python types)
_COMMON = {"t": _OPT_STR, "call_id": _OPT_STR, "agent_id": _OPT_STR, "tool": _OPT_STR,
           "uuid": _OPT_STR, "parent_uuid": _OPT_STR, "source": _OPT_STR, "message_id": _OPT_STR}
_KINDS: dict[str, dict[str, object]] = {
    "meta": {"harness": _OPT_STR, "harness_version": _OPT_STR, "session": _OPT_STR, "model": _OPT_STR,
             "cwd": _OPT_STR, "repo_head": _OPT_STR, "tier": _OPT_STR, "label": _OPT_STR,
             "adapter": _OPT_STR, "adapter_version": _OPT_STR, "source_path": _OPT_STR,
             "continues": _OPT_STR, "coverage": "dict", "usage": "dict_or_null",
             "summaries": "list_or_null"},
    "msg.in": {"text": _STR, "compaction": "flag", "boilerplate": "flag", "queued": "flag",
               "meta": "flag"},
    "msg.out": {"text": _STR, "reasoning": "flag"},
    "tool.call": {},
    "tool.result": {"stdout": _OPT_STR, "stderr": _OPT_STR, "exit": "int", "truncated": "flag"},
    "code.read": {"file": _OPT_STR, "rel": _OPT_STR, "range": "range", "text": _STR,
                  "truncated": "flag"},
    "code.edit": {"file": _OPT_STR, "rel": _OPT_STR, "before_range": "range",
                  "after_range": "range", "before_text": _STR, "after_text": _STR,
                  "before_hash": _OPT_STR, "after_hash": _OPT_STR, "range_known": "flag"},
    "span.link": {"from_file": _OPT_STR, "from_range": "range", "to_file": _OPT_STR,
                  "to_range": "range", "note": _OPT_STR},
}


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _INT_MIN <= v <= _INT_MAX


def _fits(value, want) -> bool:
    if isinstance(want, tuple):
        return isinstance(value, want)
    if want == "range":
        return value is None or (isinstance(value, list) and len(value) == 2
                                 and _int(value[0]) and _int(value[1]))
    if want == "flag":
        return value is None or isinstance(value, bool)
    if want == "int":
        return value is None or _int(value)
    if want == "dict":
        return isinstance(value, dict)
    if want == "dict_or_null":
        return value is None or isinstance(value, dict)
    if want == "list_or_null":
        return value is None or isinstance(value, list)
    raise AssertionError(want)


def _named(want) -> str:
    if isinstance(want, tuple):
        return " or ".join("null" if t is _NONE else t.__name__ for t in want)
    return {"range": "[start, end] of integers or null", "flag": "true, false or null",
            "int": "an integer or null", "dict": "an object", "dict_or_null": "an object or null",
            "list_or_null": "a list or null"}[want]


def _type(value) -> str:
    return "null" if value is None else type(value).__name__


def check_event(ev: dict, n: int, path) -> None:
    """Raise ``CorruptTape`` (at line ``n + 1``) unless event ``n`` has the format's shape: ``k``
    a string, ``meta`` first and only first, and every documented field of its kind of the
    documented type."""
    k = ev.get("k")
    if not isinstance(k, str):
        raise CorruptTape(f"event {n}: 'k' is {_type(k)}, not a string", path=str(path), line=n + 1)
    if (k == "meta") != (n == 0):
        raise CorruptTape(f"event {n}: " + ("a meta event after the first line" if n
                                             else "the first line is not a meta event"),
                          path=str(path), line=n + 1)
    fields = _KINDS.get(k)
    for key, want in _COMMON.items():
        if key in ev and not (fields is not None and key in fields) and not _fits(ev[key], want):
            raise CorruptTape(f"event {n} ({k}): '{key}' is {_type(ev[key])}, not {_named(want)}",
                              path=str(path), line=n + 1)
    if fields is None:
        return  # a kind this Engram does not know: kept, not read
    for key, want in fields.items():
        if key in ev and not _fits(ev[key], want):
            raise CorruptTape(f"event {n} ({k}): '{key}' is {_type(ev[key])}, not {_named(want)}",
                              path=str(path), line=n + 1)
