"""Notes tied to code: ``engram note FILE:A-B --kind warning "text"``, the MCP ``note`` tool and
``Engine.add_note``.

A note is a tape of harness ``engram`` (immutable, redacted, indexed and shared like any other):

* ``meta`` carries ``note: {kind, text, file, range, related, span_hash}`` (``tier``: ``human``
  from the CLI or an editor, ``agent`` from MCP or the SDK) and a label ``[kind] text``;
* a ``code.read`` of the span as it was when the note was written, so that explain, hover and
  brief find the note by fingerprint wherever that code lives later (moved in the file, or into
  another file). A span too short to hold a fingerprint is stored with its enclosing block;
* a ``msg.in`` with the note's text, so ``engram search`` finds it.

**Staleness** (``locate``): the note's lines are looked for, as one run, in the file's text of
today (whitespace collapsed: re-indented code has not changed). Found: ``stale: false`` and
``at`` = where they are now. Some of them found: ``stale: true`` with ``changed`` (lines kept,
lines gone, where the rest is now, a short diff). None of them (blank and one-character lines
aside), or the file is gone: a *tombstone* (``stale: true, tombstone: true``).

**Which spans show a note** (``annotate``): fingerprints find every span that *resembles* the
note's code; explain keeps a note only where its lines are today — ``at`` overlapping the
explained lines (fresh, or stale — with three quarters of its lines or more when in another file
than the note's); a tombstone only on the note's own file.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path

import orjson

from engram import paths
from engram.adapters import base
from engram.digest import text_hash
from engram.errors import BadSpan, EngramError, UnknownTape
from engram.files import read_text_file
from engram.timestamps import utc_iso

KINDS = ("warning", "decision", "discovery", "todo")
#: how a note's kind ranks where notes are listed (explain, brief): warnings first
KIND_RANK = {"warning": 0, "decision": 1, "discovery": 2, "todo": 3}
#: a note is a sentence or a paragraph
MAX_TEXT = 4000
#: the longest span a note holds
MAX_SPAN_LINES = 2000
#: lines of diff a stale note shows
DIFF_LINES = 20
HARNESS = "engram"


class BadNote(EngramError):
    """A note that cannot be written: unknown kind, empty or too long text, a bad ``--related``."""

    code = "bad-note"


class _Engram(base.Adapter):
    name = HARNESS
    tier = "human"
    version = "1"


ENGRAM = _Engram()


# ---------------------------------------------------------------------------------------------
# writing


def check_text(kind: str, text: str) -> str:
    """The note's text, stripped; ``BadNote`` for an unknown kind, empty or over-long text."""
    if kind not in KINDS:
        raise BadNote(f"unknown note kind {kind!r}; use one of {', '.join(KINDS)}")
    if not isinstance(text, str) or not text.strip():
        raise BadNote("a note needs text (what the next person or agent should know)")
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise BadNote(f"note text is {len(text)} characters; at most {MAX_TEXT} (a note is a "
                      "sentence or a paragraph: put longer text in a file and name it)")
    return text


def span_of(root: Path, file: str, start: int, end: int) -> tuple[Path, str, str, int, int]:
    """``(absolute path, path shown, the span's text, start, end)`` of lines ``start..end`` of
    ``file`` today; ``BadSpan`` when the file or the lines do not exist."""
    if not isinstance(start, int) or not isinstance(end, int) or start < 1 or end < start:
        raise BadSpan(f"bad line range {start}-{end} (1-based, start ≤ end)", path=file)
    p = Path(file)
    if not p.is_absolute():
        p = Path.cwd() / p if (Path.cwd() / p).exists() else root / p
    try:
        text = read_text_file(p, shown=file)
    except FileNotFoundError:
        raise BadSpan("no such file", path=file) from None
    lines = text.split("\n")
    n = len(lines) - (1 if lines and lines[-1] == "" else 0)
    if start > n:
        raise BadSpan(f"line {start} is past the end of the file ({n} lines)", path=file)
    end = min(end, n)
    if end - start + 1 > MAX_SPAN_LINES:
        raise BadSpan(f"a note spans at most {MAX_SPAN_LINES} lines ({end - start + 1} given)",
                      path=file)
    shown = _shown(p, root)
    return p.resolve(), shown, "\n".join(lines[start - 1:end]) + "\n", start, end


def _shown(p: Path, root: Path) -> str:
    try:
        return str(p.resolve().relative_to(root))
    except ValueError:
        return str(p)


def _stored_span(path: Path, text: str, start: int, end: int) -> tuple[str, int, int]:
    """The text the note's ``code.read`` holds: the span, or its enclosing block when the span is
    too short to hold a fingerprint (a note on one line of a function is found by the function)."""
    from engram import fingerprint
    from engram.query import symbols

    span = "\n".join(text.split("\n")[start - 1:end]) + "\n"
    if len(fingerprint.span_prints(span)[2]) > 0:
        return span, start, end
    try:
        s, _ = symbols.enclosing_block(text, str(path), start)
        _, e = symbols.enclosing_block(text, str(path), end)
    except Exception:  # symbol lookup is a convenience
        return span, start, end
    s, e = min(s, start), max(e, end)
    return "\n".join(text.split("\n")[s - 1:e]) + "\n", s, e


def resolve_related(conn, related: str | None) -> dict | None:
    """``TAPE#N`` (a tape id or unique prefix, an event offset) → ``{tape_id, event}``;
    ``BadNote`` when the tape is not indexed or has no such event."""
    if related is None:
        return None
    from engram.index import queries

    tape, _, ofs = str(related).partition("#")
    try:
        n = int(ofs) if ofs else 0
    except ValueError:
        raise BadNote(f"--related wants TAPE#EVENT (e.g. 9e5f65a47d18#7), got {related!r}") from None
    t = queries.tape_by_id(conn, tape.strip()) if tape.strip() else None
    if t is None:
        raise UnknownTape(f"--related: no indexed tape {tape!r}; see `engram tapes`")
    if not 0 <= n < t.n_events:
        raise BadNote(f"--related: tape {t.tape_id[:12]} has events 0-{t.n_events - 1}, not {n}")
    return {"tape_id": t.tape_id, "event": n}


def note_events(root: Path, file: str, start: int, end: int, kind: str, text: str, *,
                related: dict | None = None, tier: str = "human", t: str | None = None,
                via: str = "cli") -> list[dict]:
    """The events of a note tape (``meta``, ``code.read`` of the span, ``msg.in``), redacted."""
    text = check_text(kind, text)
    path, shown, span, start, end = span_of(root, file, start, end)
    stored, s, e = _stored_span(path, read_text_file(path, shown=file), start, end)
    ts = t or utc_iso(millis=True)
    note = {"kind": kind, "text": text, "file": shown, "range": [start, end],
            "stored_range": [s, e], "related": related, "span_hash": text_hash(span), "via": via}
    session = text_hash(orjson.dumps([shown, start, end, kind, text, ts, tier]).decode())[:16]
    meta = base.ev_meta(ts, harness=HARNESS, session=session, adapter=ENGRAM,
                        source_path="<note>", cwd=str(root), tier=tier,
                        label=base.label_of(f"[{kind}] {text}"), note=note)
    read = base.ev_read(ts, str(path), s, stored, cwd=str(root), note=True)
    msg = base.ev_msg(ts, "msg.in", text, note_kind=kind)
    return base.finish_session([meta, read, msg])


def tape_dir(root: Path, events: list[dict]) -> Path:
    """Where a note's tape goes: the repository's tapes when its file is inside it (shared by
    ``engram push``), else ``$ENGRAM_HOME/tapes``."""
    f = events[1].get("file")
    return paths.repo_tapes_dir(root) if paths.is_within(f, root) else paths.user_tapes_dir()


# ---------------------------------------------------------------------------------------------
# staleness


def _norm(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


@functools.lru_cache(maxsize=8)
def _file_keys(file_text: str) -> tuple[list[str], list[str]]:
    """A file's lines (trailing blanks cut) and their keys (``_key``), memoised: a brief or an
    explain locates several notes in one file."""
    raw = [ln.rstrip() for ln in file_text.split("\n")]
    return raw, [_key(x) for x in raw]


def _key(line: str) -> str:
    return " ".join(line.split())


def _trivial(line: str) -> bool:
    return len(line.strip()) <= 1


def locate(span_text: str, file_text: str | None, near: tuple[int, int] | None = None) -> dict:
    """Where the note's lines are in ``file_text`` today: ``{stale, tombstone, at, changed}``
    (module docstring). ``near``: lines (1-based) where the code is expected (the explained
    span, the note's range): among equally good places, the nearest wins — tests and
    boilerplate repeat code, and the note is about this copy."""
    want_raw = _norm(span_text)
    if file_text is None:
        return {"stale": True, "tombstone": True, "at": None,
                "changed": {"reason": "the file is gone"}}
    if not want_raw:
        return {"stale": False, "tombstone": False, "at": None, "changed": None}
    have_raw, have = _file_keys(file_text)
    # lines compared with their whitespace collapsed: re-indented code has not changed
    want = [_key(x) for x in want_raw]
    n = len(want)
    centre = (near[0] + near[1]) / 2 - 1 if near else 0.0
    exact = [i for i, ln in enumerate(have) if ln == want[0] and have[i:i + n] == want]
    if exact:
        i = min(exact, key=lambda i: (abs(i + (n - 1) / 2 - centre), i)) if near else exact[0]
        return {"stale": False, "tombstone": False, "at": [i + 1, i + n], "changed": None}
    found = None
    if near:  # first in a window around the expected place: kept when it holds half the lines
        lo = max(0, int(near[0]) - 1 - 2 * n)
        found = _best_region(want, have[lo:int(near[1]) + 2 * n], lo)
    if found is None or found[2] * 2 < n:  # else the whole file; the window wins a tie
        whole = _best_region(want, have, 0)
        if whole is not None and (found is None or whole[2] > found[2]):
            found = whole
    if found is None:
        return {"stale": True, "tombstone": True, "at": None,
                "changed": {"reason": "none of the note's lines is in the file any more",
                            "lines_then": n}}
    lo, hi, kept = found
    diff = list(difflib.unified_diff(want_raw, have_raw[lo:hi], "then", "now", n=0,
                                     lineterm=""))[2:]
    return {"stale": True, "tombstone": False, "at": [lo + 1, hi],
            "changed": {"lines_then": n, "lines_kept": kept, "lines_now": hi - lo,
                        "diff": diff[:DIFF_LINES], "diff_truncated": len(diff) > DIFF_LINES}}


def _best_region(want: list[str], have: list[str], offset: int) -> tuple[int, int, int] | None:
    """``(first, end, lines kept)`` (0-based, ``offset`` added) of the region of ``have`` that
    keeps most of ``want``: the longest matching run and the runs within ``2 * len(want)`` lines
    of it; None when no non-trivial line matches."""
    from engram.linediff import SequenceMatcher

    n = len(want)
    blocks = [b for b in SequenceMatcher(None, want, have, autojunk=False).get_matching_blocks()
              if b.size and any(not _trivial(x) for x in want[b.a:b.a + b.size])]
    if not blocks:
        return None
    best = max(blocks, key=lambda b: (b.size, -b.b))
    near = [b for b in blocks if abs(b.b - best.b) <= 2 * n]
    lo = min(b.b for b in near)
    hi = max(b.b + b.size for b in near)
    return lo + offset, hi + offset, sum(b.size for b in near)


# ---------------------------------------------------------------------------------------------
# reading notes back


def note_meta(conn, tape_ids: list[str]) -> dict[str, dict]:
    """``tape_id → meta`` of the note tapes among ``tape_ids`` (one query)."""
    out: dict[str, dict] = {}
    if not tape_ids:
        return out
    marks = ",".join("?" * len(tape_ids))
    for tid, mj in conn.execute(
            f"SELECT tape_id, meta_json FROM tapes WHERE harness=? AND tape_id IN ({marks})",
            (HARNESS, *tape_ids)):
        meta = orjson.loads(mj or b"{}")
        if isinstance(meta.get("note"), dict):
            out[tid] = meta
    return out


def all_notes(conn) -> list[tuple[str, str | None, dict]]:
    """Every indexed note: ``(tape_id, first_t, meta)``, oldest first."""
    out = []
    for tid, t, mj in conn.execute("SELECT tape_id, first_t, meta_json FROM tapes WHERE harness=?"
                                   " ORDER BY first_t, tape_id", (HARNESS,)):
        meta = orjson.loads(mj or b"{}")
        if isinstance(meta.get("note"), dict):
            out.append((tid, t, meta))
    return out


def stored_text(access, conn, tape_id: str) -> str | None:
    """The span text a note tape holds (its ``code.read`` event), read from the tape."""
    from engram.index import queries

    t = queries.tape_by_id(conn, tape_id)
    if t is None or t.n_events < 2:
        return None
    for _o, ev in access.read(t, range(1, min(t.n_events, 3))):
        if ev.get("k") == "code.read":
            return ev.get("text")
    return None


def note_object(meta: dict, span_text: str | None, file_text: str | None, t: str | None,
                near: tuple[int, int] | None = None) -> dict:
    """The ``note`` object of an explain entry or a brief item (``near``: see ``locate``; default:
    the note's own range)."""
    n = meta["note"]
    if near is None and isinstance(n.get("range"), list) and len(n["range"]) == 2:
        near = (n["range"][0], n["range"][1])
    where = locate(span_text, file_text, near) if span_text is not None else {
        "stale": None, "tombstone": False, "at": None, "changed": None}
    return {"kind": n.get("kind"), "text": n.get("text"), "file": n.get("file"),
            "range": n.get("range"), "related": n.get("related"), "written": t,
            "stale": where["stale"], "tombstone": where["tombstone"], "at": where["at"],
            "changed": where["changed"]}


def annotate(conn, result: dict, file_text: str | None) -> dict:
    """Give each note session of an explain ``result`` its ``note`` object (staleness judged on
    ``file_text``, the span's file today) and move warning notes to the front, in their order.
    Returns ``result``."""
    sessions = result.get("sessions") or []
    ids = [s["tape_id"] for s in sessions if s.get("harness") == HARNESS]
    if not ids:
        return result
    metas = note_meta(conn, ids)
    if not metas:
        return result
    from engram.index.access import TapeAccess

    access = TapeAccess(conn)
    span = result.get("span") or {}
    drop = set()
    for s in sessions:
        meta = metas.get(s["tape_id"])
        if meta is not None:
            near = (span["start"], span["end"]) if span.get("file") and span.get("start") else None
            s["note"] = note_object(meta, stored_text(access, conn, s["tape_id"]), file_text,
                                    s.get("first_t"), near)
            if not _about(s["note"], span):
                drop.add(s["tape_id"])
    if drop:  # notes whose code is elsewhere: the span only resembles it
        sessions = result["sessions"] = [s for s in sessions if s["tape_id"] not in drop]
    warnings = [s for s in sessions if (s.get("note") or {}).get("kind") == "warning"]
    if warnings:
        result["sessions"] = warnings + [s for s in sessions if s not in warnings]
    return result


def _about(note: dict, span: dict) -> bool:
    """Whether a note found by fingerprint is about ``span`` (the explained lines of a file):
    its lines are found today where they overlap the span (fresh; stale in another file than the
    note's: with three quarters of them kept — a similar function is not the noted code); a
    tombstone only on the note's own file. Without a file span: always."""
    if not span.get("file") or not span.get("start"):
        return True
    at = note.get("at")
    if at is None:
        return note.get("file") == span["file"]
    if at[1] < span["start"] or at[0] > span["end"]:
        return False
    ch = note.get("changed") or {}
    if note.get("stale") and note.get("file") != span["file"]:
        return ch.get("lines_kept", 0) * 4 >= 3 * max(ch.get("lines_then", 1), 1)
    return True

