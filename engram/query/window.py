"""Transcript windows: the events around an anchor, read back from the tape (or live rows).

Events are rendered compactly for people and agents: long texts are trimmed (the tape keeps them
whole; ``engram show`` prints everything), tool arguments are summarised.

A tape that cannot be read costs only its own windows: ``window`` answers ``{"events": [],
"unreadable": "corrupt-tape: <file>: <why>"}`` for it (never memoised: the tape may be restored),
and callers mark the session with ``unreadable`` (``lift_unreadable``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import orjson

from engram.errors import CorruptTape
from engram.index import queries
from engram.index.access import TapeAccess

TEXT_LIMIT = 1200
CODE_LIMIT = 2400
MAX_REQUEST_LOOKBACK = 400


def _trim(s, limit: int):
    if not isinstance(s, str):
        return s, False
    if len(s) <= limit:
        return s, False
    return s[:limit] + "…", True


def render_event(ofs: int, ev: dict, *, full: bool = False) -> dict:
    """A window entry: ``{offset, t, k, ...}`` with the fields a reader needs."""
    k = ev.get("k")
    out = {"offset": ofs, "t": ev.get("t"), "k": k}
    lim_t = 10**9 if full else TEXT_LIMIT
    lim_c = 10**9 if full else CODE_LIMIT
    trimmed = False
    if k in ("msg.in", "msg.out"):
        out["text"], trimmed = _trim(ev.get("text"), lim_t)
        for flag in ("reasoning", "compaction", "sidechain"):
            if ev.get(flag):
                out[flag] = ev[flag]
    elif k == "tool.call":
        out["tool"] = ev.get("tool")
        out["call_id"] = ev.get("call_id")
        args = ev.get("args")
        if isinstance(args, dict):
            summary = {}
            for key in sorted(args):
                v = args[key]
                if isinstance(v, str):
                    v, t = _trim(v, 300 if not full else 10**9)
                    trimmed |= t
                elif isinstance(v, (dict, list)):
                    s = orjson.dumps(v).decode()
                    v, t = _trim(s, 300 if not full else 10**9)
                    trimmed |= t
                summary[key] = v
            out["args"] = summary
        else:
            out["args"], trimmed = _trim(args if isinstance(args, str) else orjson.dumps(args).decode(), 300)
    elif k == "tool.result":
        out["tool"] = ev.get("tool")
        out["call_id"] = ev.get("call_id")
        out["stdout"], trimmed = _trim(ev.get("stdout"), lim_t)
        if ev.get("exit") is not None:
            out["exit"] = ev.get("exit")
    elif k == "code.read":
        out["file"] = ev.get("file")
        out["range"] = ev.get("range")
        out["text"], trimmed = _trim(ev.get("text"), lim_c)
    elif k == "code.edit":
        out["file"] = ev.get("file")
        out["before_range"] = ev.get("before_range")
        out["after_range"] = ev.get("after_range")
        out["before_text"], t1 = _trim(ev.get("before_text"), lim_c)
        out["after_text"], t2 = _trim(ev.get("after_text"), lim_c)
        trimmed = t1 or t2
    elif k == "span.link":
        for key in ("from_file", "from_range", "to_file", "to_range", "note"):
            out[key] = ev.get(key)
    elif k == "meta":
        for key in ("harness", "session", "model", "cwd", "label"):
            out[key] = ev.get(key)
    else:
        for key in sorted(ev):
            if key not in out:
                out[key] = ev[key]
    if ev.get("source") == "enrichment":
        out["source"] = "enrichment"
    if trimmed:
        out["trimmed"] = True
    return out


WINDOW_CACHE = 4096
_windows: OrderedDict[tuple, dict] = OrderedDict()
_windows_lock = threading.Lock()


def window(access: TapeAccess, tape: queries.TapeRow, anchor: int, before: int, after: int,
           expand_until: int | None = None, brief: bool = False) -> dict:
    """Events ``[anchor-before, anchor+after]``; ``expand_until`` extends backwards (at most that
    many extra events) until the window holds the user request that led to the anchor.

    Windows of sealed tapes are memoised (a tape id is the hash of its content, so a window of it
    never changes); those of live tapes for as long as the index is unchanged (``queries.memo``)."""
    key = (tape.tape_id, tape.path, anchor, before, after, expand_until, brief)
    try:
        return _memo_window(access, tape, key, anchor, before, after, expand_until, brief)
    except CorruptTape as e:
        return {"events": [], "unreadable": f"{e.code}: {e}"}


def _memo_window(access: TapeAccess, tape: queries.TapeRow, key: tuple, anchor: int, before: int,
                 after: int, expand_until: int | None, brief: bool) -> dict:
    if tape.live or not tape.path:
        live = queries.memo(access.conn, "window.live", OrderedDict)
        hit = live.get(key)
        if hit is None:
            hit = live[key] = _window(access, tape, anchor, before, after, expand_until, brief)
            while len(live) > WINDOW_CACHE:
                live.popitem(last=False)
    else:
        with _windows_lock:
            hit = _windows.get(key)
            if hit is not None:
                _windows.move_to_end(key)
        if hit is None:
            hit = _window(access, tape, anchor, before, after, expand_until, brief)
            with _windows_lock:
                _windows[key] = hit
                while len(_windows) > WINDOW_CACHE:
                    _windows.popitem(last=False)
    out = dict(hit)
    out["events"] = list(hit["events"])
    return out


def lift_unreadable(entry: dict) -> dict:
    """Move an ``unreadable`` reason from a session's windows up to the session (its windows keep
    their anchors, with no events); the entry, unchanged when every window was read."""
    reason = None
    for w in entry.get("windows", ()):
        why = w.pop("unreadable", None)
        reason = reason or why
    if reason is not None:
        entry["unreadable"] = reason
    return entry


def _window(access: TapeAccess, tape: queries.TapeRow, anchor: int, before: int, after: int,
            expand_until: int | None, brief: bool) -> dict:
    n = tape.n_events
    lo = max(1, anchor - before)  # offset 0 is meta
    hi = min(n - 1, anchor + after)
    if expand_until:
        look = access.read(tape, range(max(1, lo - expand_until), lo))
        for ofs, ev in reversed(look):
            if ev.get("k") == "msg.in" and not ev.get("compaction"):
                lo = ofs
                break
        else:
            if look:
                lo = look[0][0]
    result = {"events": []}
    if not brief:
        evs = access.read(tape, range(lo, hi + 1))
        result["events"] = [render_event(o, e) for o, e in evs]
    req = request_before(access, tape, anchor)
    if req is not None:
        result["request"] = req
    return result


def request_before(access: TapeAccess, tape: queries.TapeRow, anchor: int) -> dict | None:
    """The nearest user request (``msg.in``, not a compaction summary) at or before ``anchor``."""
    found = access.last_request(tape, anchor, MAX_REQUEST_LOOKBACK)
    if found is None:
        return None
    ofs, ev = found
    text, _ = _trim(ev["text"], 600)
    return {"offset": ofs, "t": ev.get("t"), "text": text}
