"""The MCP tools: name → (description, input schema, call). Each call takes the engine and the
validated arguments and returns the object the CLI prints for the same question.

The schemas are strict (``additionalProperties: false``, types, ranges, enums) and checked
before any call (``check``): a missing or wrong-typed argument is a one-line error naming it.
``log``, ``review`` and ``stats`` are listed only when the engine has them (``available``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from engram.agents.notes import KINDS, MAX_TEXT

_FILE = {"type": "string", "minLength": 1, "maxLength": 4096,
         "description": "a file path, relative to the repository root or absolute"}
_LINE = {"type": "integer", "minimum": 1, "description": "a 1-based line number"}


def _obj(props: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def _explain(eng, a: dict) -> dict:
    return eng.explain(a["file"], a["start"], a["end"], brief=a.get("brief", False),
                       all=a.get("all", False), window_sessions=a.get("windows"), client="mcp")


def _search(eng, a: dict) -> dict:
    filters = {"intent": a["intent"]} if a.get("intent") else {}
    return eng.search(a["query"], limit=a.get("limit", 20), client="mcp", **filters)


def _trace(eng, a: dict) -> dict:
    from engram.query import history

    return history.trace(eng, a["file"])


def _blame(eng, a: dict) -> dict:
    return eng.blame(a["file"])


def _brief(eng, a: dict) -> dict:
    return eng.brief(a.get("paths") or [], budget=a.get("budget", 1500))


def _note(eng, a: dict) -> dict:
    return eng.add_note(a["file"], a["start"], a["end"], a["kind"], a["text"],
                        related=a.get("related"), tier="agent", via="mcp")


def _feedback(eng, a: dict) -> dict:
    return eng.feedback(a["session"], a["verdict"], file=a.get("file"), start=a.get("start"),
                        end=a.get("end"), note=a.get("note"))


def _log(eng, a: dict) -> dict:
    return eng.log(a["revs"].split() if a.get("revs") else None, limit=a.get("limit"),
                   agent=a.get("agent"))


def _review(eng, a: dict) -> dict:
    return eng.review(a["range"])


def _stats(eng, a: dict) -> dict:
    return eng.stats(by=a.get("by", "model"), since=a.get("since"), all_=a.get("all", False))


Tool = tuple[str, dict, Callable[[Any, dict], dict]]

TOOLS: dict[str, Tool] = {
    "explain": (
        "Which agent sessions produced lines START-END of FILE, and why: the sessions (producers "
        "first), transcript windows around the edit, lineage, and notes left on this code "
        "(warnings first, with `stale` when the code changed since). Call it before changing "
        "code you did not write.",
        _obj({"file": _FILE, "start": _LINE, "end": _LINE,
              "brief": {"type": "boolean", "description": "sessions and anchors only, no transcript"},
              "all": {"type": "boolean", "description": "include weak evidence"},
              "windows": {"type": "integer", "minimum": 0, "maximum": 50,
                          "description": "how many sessions get transcript windows (default 3)"}},
             ["file", "start", "end"]),
        _explain),
    "search": (
        "Full-text search of agent reasoning (requests, answers, tool output) across sessions.",
        _obj({"query": {"type": "string", "minLength": 1, "maxLength": 2000},
              "limit": {"type": "integer", "minimum": 1, "maximum": 200},
              "intent": {"type": "string", "maxLength": 40,
                         "description": "what the search is for (e.g. debug, refactor)"}},
             ["query"]),
        _search),
    "trace": (
        "Every session that touched FILE (reads and edits with line ranges), oldest first.",
        _obj({"file": _FILE}, ["file"]), _trace),
    "blame": (
        "Per line of FILE, the session that most likely wrote it.",
        _obj({"file": _FILE}, ["file"]), _blame),
    "brief": (
        "What to know before touching PATHS: notes (warnings first, [POSSIBLY STALE] when the "
        "code changed), the latest work's request → edits → outcome, recent changes. Markdown in "
        "the text, the items in structuredContent. Call it at the start of a task.",
        _obj({"paths": {"type": "array", "items": _FILE, "maxItems": 100},
              "budget": {"type": "integer", "minimum": 50, "maximum": 100000,
                         "description": "token budget (default 1500)"}}, []),
        _brief),
    "note": (
        "Leave a note on lines START-END of FILE for the next agent or person: kind warning "
        "(\"don't change X, because Y\"), decision, discovery or todo. Kept as an immutable tape; "
        "explain and brief find it by the code's fingerprints even after the code moves.",
        _obj({"file": _FILE, "start": _LINE, "end": _LINE,
              "kind": {"type": "string", "enum": list(KINDS)},
              "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
              "related": {"type": "string", "maxLength": 80,
                          "description": "TAPE#EVENT this note is about"}},
             ["file", "start", "end", "kind", "text"]),
        _note),
    "feedback": (
        "Say whether a session an answer showed was helpful, not_relevant or incorrect "
        "(optionally for the span FILE:START-END); later rankings use it.",
        _obj({"session": {"type": "string", "minLength": 1, "maxLength": 200},
              "verdict": {"type": "string", "enum": ["helpful", "not_relevant", "incorrect"]},
              "file": _FILE, "start": _LINE, "end": _LINE,
              "note": {"type": "string", "maxLength": MAX_TEXT}},
             ["session", "verdict"]),
        _feedback),
    "log": (
        "Commits with the agent sessions behind their added lines (like git log).",
        _obj({"revs": {"type": "string", "maxLength": 400,
                       "description": "revisions as git log takes them, space-separated (default HEAD)"},
              "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
              "agent": {"type": "string", "maxLength": 200,
                        "description": "only commits with a session of this harness/model/session"}},
             []),
        _log),
    "review": (
        "A range of commits A..B: the sessions, files, agent share and dead ends.",
        _obj({"range": {"type": "string", "minLength": 1, "maxLength": 400}}, ["range"]),
        _review),
    "stats": (
        "Tokens, cost and lines at HEAD by harness, model, week, file or session.",
        _obj({"by": {"type": "string", "enum": ["harness", "model", "week", "file", "session"]},
              "since": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
                        "description": "sessions that began on or after this date"},
              "all": {"type": "boolean", "description": "every indexed session, not only this "
                                                        "repository's"}},
             []),
        _stats),
}

#: tools that exist only when the engine has the method of the same name
OPTIONAL = ("log", "review", "stats")


def available(engine_cls) -> list[str]:
    """The tools this engine serves, in ``TOOLS`` order."""
    return [n for n in TOOLS if n not in OPTIONAL or callable(getattr(engine_cls, n, None))]


@functools.cache
def validator(name: str):
    """The schema's validator, built once per tool (building one costs ~10 ms)."""
    import jsonschema

    return jsonschema.Draft202012Validator(TOOLS[name][1])


def check(name: str, args: dict | None) -> dict:
    """The arguments of tool ``name`` validated against its schema; ``ValueError`` with one
    line naming the first problem."""
    args = {} if args is None else args
    errors = sorted(validator(name).iter_errors(args),
                    key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path)
        msg = e.message
        if e.validator == "maxLength" and isinstance(e.instance, str):
            msg = f"{len(e.instance)} characters long; at most {e.validator_value}"
        elif len(msg) > 200:  # the message quotes the value: never echo a huge one
            msg = msg[:200] + "…"
        raise ValueError(f"{name}: {where + ': ' if where else ''}{' '.join(msg.split())}")
    if "start" in args and "end" in args and args["end"] < args["start"]:
        raise ValueError(f"{name}: end ({args['end']}) is before start ({args['start']})")
    return args
