"""Feedback on answers: append-only events in tapes, replayed into each session's confidence.

``engram feedback SESSION helpful|not_relevant|incorrect [--span FILE:A-B] [--note TEXT]`` writes
one tape of harness ``engram`` (``meta.engram: "feedback"``, tier ``human``, cwd the repository)
into the repository's ``.engram/tapes/``: immutable, content-addressed, shared by ``engram push``
like every tape made in the repository. Its one ``feedback`` event names the target session (and
tape), the verdict, the note, and for ``--span`` the file, lines and the span's winnowed
fingerprint hashes — hashes, not the span's text, so the tape never makes the feedback itself a
session that "quoted" the code.

**Replay** (``replay``): every feedback event in the index, ordered by (time, tape id) — a total
order, so the result is the same on every machine that has the same tapes. A session's confidence
starts at ``START`` (0.5) and moves by ``DELTA`` (helpful +0.08, not relevant 0, incorrect −0.15),
clamped to [0, 1] after each step; helpful ones also count as validations (count, last time).

**Incorrect for a span**: an ``incorrect`` with ``--span`` applies to an explain of any span whose
fingerprints and the feedback span's mostly coincide (at least ``SPAN_MATCH`` of each set in the
other) — the same code, or that code after it moved or was lightly edited (its lineage); not a
span nested in it or around it — and which is either where the feedback was given (same file, lines
overlapping by ``SPAN_LINES`` of their union) or elsewhere while the code is no longer at the feedback's place (it moved
there). A copy of the code while the original still stands is another span. Explain then ranks that
session below every session without such feedback, labelled ``feedback: incorrect``; other spans
are untouched (``incorrect_sessions``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

import numpy as np
import orjson

from engram import fingerprint, paths
from engram.errors import EngramError
from engram.files import read_text_file
from engram.timestamps import utc_iso

log = logging.getLogger(__name__)

VERDICTS = ("helpful", "not_relevant", "incorrect")
DELTA = {"helpful": 0.08, "not_relevant": 0.0, "incorrect": -0.15}
START = 0.5
SPAN_MATCH = 0.5
SPAN_LINES = 0.8
KIND = "feedback"          # the event kind, and meta["engram"]
HARNESS = "engram"
ROUND = 6


class BadFeedback(EngramError):
    """A feedback command with a verdict, session or span Engram cannot use: the message says
    which and what is expected."""

    code = "bad-feedback"


@dataclasses.dataclass
class SessionFeedback:
    """What the feedback replay knows about one session."""

    confidence: float = START
    validations: int = 0
    last_validated: str | None = None
    verdicts: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(VERDICTS, 0))
    incorrect_spans: list = dataclasses.field(default_factory=list)  # [(file, a, b, hashes)]

    def summary(self) -> dict:
        return {"confidence": round(self.confidence, ROUND), "validations": self.validations,
                "last_validated": self.last_validated, "verdicts": dict(self.verdicts)}


def parse_span(spec: str) -> tuple[str, int, int]:
    """``FILE:A-B`` or ``FILE:LINE`` → (file, a, b)."""
    import re

    m = re.match(r"^(.+?):(\d+)(?:-(\d+))?$", spec or "")
    if not m:
        raise BadFeedback(f"expected --span FILE:START-END, got {spec!r}")
    a, b = int(m.group(2)), int(m.group(3) or m.group(2))
    if a < 1 or b < a:
        raise BadFeedback(f"bad line range {a}-{b} in --span (1-based, start ≤ end)")
    return m.group(1), a, b


def span_hashes(text: str) -> list[int]:
    """The distinct winnowed fingerprint hashes of a span's text, sorted (what explain computes
    for the same text)."""
    _allk, _lines, win = fingerprint.span_prints(text)
    return [int(h) for h in np.unique(np.asarray(win, dtype=np.int64))]


def _span_text(root: Path, file: str, a: int, b: int) -> str:
    p = Path(file)
    if not p.is_absolute():
        p = Path.cwd() / p if (Path.cwd() / p).exists() else Path(root) / p
    try:
        text = read_text_file(p, shown=file)
    except FileNotFoundError:
        raise BadFeedback(f"{file}: no such file (--span)") from None
    lines = text.split("\n")
    if a > len(lines):
        raise BadFeedback(f"{file}: line {a} is past the end of the file (--span)")
    return "\n".join(lines[a - 1:b]) + "\n"


def feedback_events(session: str, verdict: str, *, span: tuple[str, int, int] | None = None,
                    hashes: list[int] | None = None, note: str | None = None,
                    tape_id: str | None = None, t: str | None = None, cwd: str | None = None
                    ) -> list[dict]:
    """The events of one feedback tape (``meta`` first), checked."""
    if verdict not in VERDICTS:
        raise BadFeedback(f"verdict must be one of {', '.join(VERDICTS)}, not {verdict!r}")
    if not isinstance(session, str) or not session.strip():
        raise BadFeedback("give the session (id or tape id) the feedback is about")
    t = t or utc_iso(millis=True)
    ev: dict = {"t": t, "k": KIND, "target_session": session, "target_tape": tape_id,
                "verdict": verdict}
    if span is not None:
        ev["span"] = {"file": span[0], "start": span[1], "end": span[2],
                      "fingerprints": [format(h & 0xFFFFFFFFFFFFFFFF, "016x") for h in hashes or []]}
    if note:
        ev["note"] = note
    sid = hashlib.blake2b(orjson.dumps(ev, option=orjson.OPT_SORT_KEYS), digest_size=8).hexdigest()
    meta = {"t": t, "k": "meta", "harness": HARNESS, "harness_version": None,
            "session": f"feedback-{sid}", "model": None, "cwd": cwd, "repo_head": None,
            "tier": "human", "label": f"feedback: {verdict}", "adapter": HARNESS,
            "adapter_version": "1", "source_path": None, "engram": KIND}
    from engram.adapters import base

    return base.finish_session([meta, ev])


def record_feedback(root, session: str, verdict: str, span=None, note: str | None = None, *,
                    tape_id: str | None = None, span_text: str | None = None,
                    t: str | None = None, file_path: str | None = None):
    """Write a feedback tape into ``root``'s ``.engram/tapes/`` and return its ``TapeRef``.
    ``span``: ``"FILE:A-B"`` or ``(file, a, b)``; its text is read from the file (``file_path``
    when given; relative to the current directory, else to ``root``) unless ``span_text`` is
    given."""
    from engram.tape import writer

    root = Path(root)
    sp = parse_span(span) if isinstance(span, str) else (tuple(span) if span else None)
    hashes = None
    if sp is not None:
        text = span_text if span_text is not None else _span_text(root, file_path or sp[0], *sp[1:])
        hashes = span_hashes(text)
    events = feedback_events(session, verdict, span=sp, hashes=hashes, note=note,
                             tape_id=tape_id, t=t, cwd=str(root))
    return writer.write_tape(paths.repo_tapes_dir(root), events)


def _signed(hex_hash: str) -> int:
    v = int(hex_hash, 16)
    return v - (1 << 64) if v >= (1 << 63) else v


def replay(items: list[tuple[str, dict]]) -> dict[str, SessionFeedback]:
    """``[(tape_id, feedback event), ...]`` → ``{session: SessionFeedback}``, replayed in
    (time, tape id) order whatever the input order."""
    out: dict[str, SessionFeedback] = {}
    for _tape_id, ev in sorted(items, key=lambda it: (str(it[1].get("t") or ""), it[0])):
        verdict = ev.get("verdict")
        session = ev.get("target_session")
        if verdict not in DELTA or not isinstance(session, str):
            continue
        st = out.setdefault(session, SessionFeedback())
        st.confidence = min(1.0, max(0.0, round(st.confidence + DELTA[verdict], ROUND)))
        st.verdicts[verdict] += 1
        if verdict == "helpful":
            st.validations += 1
            st.last_validated = ev.get("t")
        span = ev.get("span")
        if verdict == "incorrect" and isinstance(span, dict):
            try:
                hs = frozenset(_signed(h) for h in span.get("fingerprints") or ())
            except (TypeError, ValueError):
                hs = frozenset()
            st.incorrect_spans.append((span.get("file"), span.get("start"), span.get("end"), hs))
    return out


_CACHE: dict[str, tuple[tuple, dict[str, SessionFeedback]]] = {}


def feedback_tapes(conn) -> list[tuple[int, str]]:
    """``[(tape row id, tape id)]`` of the indexed feedback tapes, by tape id."""
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT id, tape_id FROM tapes WHERE harness=? AND json_extract(meta_json, '$.engram')=?"
        " ORDER BY tape_id", (HARNESS, KIND))]


def load(conn) -> dict[str, SessionFeedback]:
    """The replayed feedback of every indexed feedback tape (memoised per index file on the set of
    feedback tapes). A tape that cannot be read is skipped with a warning."""
    tapes = feedback_tapes(conn)
    key = tuple(t for _i, t in tapes)
    hit = _CACHE.get(conn.filename)
    if hit is not None and hit[0] == key:
        return hit[1]
    from engram.index import queries
    from engram.index.access import TapeAccess

    access = TapeAccess(conn)
    rows = queries.tapes(conn, [i for i, _t in tapes])
    items: list[tuple[str, dict]] = []
    for i, tape_id in tapes:
        t = rows.get(i)
        if t is None:
            continue
        try:
            evs = access.read(t, range(t.n_events))
        except (OSError, EngramError) as e:
            log.warning("feedback tape %s not read: %s", tape_id, e)
            continue
        items += [(tape_id, ev) for _o, ev in evs if ev.get("k") == KIND]
    out = replay(items)
    _CACHE[conn.filename] = (key, out)
    return out


def incorrect_sessions(states: dict[str, SessionFeedback], hashes, file: str | None = None,
                       lines: tuple[int, int] | None = None, read=None) -> set[str]:
    """Sessions with ``incorrect`` feedback for this span: a feedback span whose fingerprints and
    ``hashes`` mostly coincide (at least ``SPAN_MATCH`` of each set is in the other: the same code,
    moved or lightly edited — not a method inside a class marked incorrect, nor the class around
    a method marked incorrect), or, for a feedback span
    too short to have fingerprints, the same file with overlapping lines."""
    q = {int(h) for h in hashes}
    out = set()
    for session, st in states.items():
        for f, a, b, hs in st.incorrect_spans:
            if hs and q:
                if not _coincide(hs, q):
                    continue
                here = file == f and _same_lines(lines, a, b)
                # the same code elsewhere: the feedback's span moved there (its lineage), unless
                # the code is still where the feedback was given (then this is a copy of it)
                if here or read is None or not _still_there(read, f, a, b, hs):
                    out.add(session)
                    break
            elif not hs and file and lines and f == file and isinstance(a, int) and isinstance(b, int):
                if a <= lines[1] and lines[0] <= b:
                    out.add(session)
                    break
    return out


INCORRECT_LABEL = "feedback: incorrect"


def _same_lines(lines, a, b) -> bool:
    """The explained lines are the feedback's: their overlap is at least ``SPAN_LINES`` of their
    union (an edit moved the ends a little), not a method inside a class or the class around it."""
    if lines is None or not isinstance(a, int) or not isinstance(b, int):
        return False
    inter = min(lines[1], b) - max(lines[0], a) + 1
    union = max(lines[1], b) - min(lines[0], a) + 1
    return inter > 0 and inter / union >= SPAN_LINES


def _coincide(a: frozenset | set, b: set) -> bool:
    shared = len(a & b)
    return shared / len(a) >= SPAN_MATCH and shared / len(b) >= SPAN_MATCH


def _still_there(read, file, a, b, hs) -> bool:
    """Whether lines ``a..b`` of ``file`` today still hold the feedback span's code."""
    if not isinstance(file, str) or not isinstance(a, int) or not isinstance(b, int):
        return False
    text = read(file)
    if text is None:
        return False
    lines = text.split("\n")[a - 1:b]
    return bool(lines) and _coincide(hs, set(span_hashes("\n".join(lines) + "\n")))


def _reader(span: dict, path: str | None):
    """``read(file) -> text | None`` for files of the explained span's repository (its root: the
    explained file's absolute ``path`` less the span's relative ``file``), memoised."""
    shown = span.get("file")
    if not path or not shown or not str(path).endswith(str(shown)):
        return None
    root = Path(str(path)[: len(str(path)) - len(str(shown))])
    cache: dict[str, str | None] = {}

    def read(f: str) -> str | None:
        if f not in cache:
            try:
                cache[f] = read_text_file(root / f, shown=f)
            except (OSError, EngramError):
                cache[f] = None
        return cache[f]

    return read


def _score_semantic(conn, sessions: list[dict], states: dict) -> list[dict]:
    """Explain's semantic tier (``via: "semantic"``, after every fingerprint session) scored like
    search results (``engram.retrieval.signals``: similarity = the cosine, salience, confidence,
    type × general intent of the anchor) and ordered by that score among themselves; each gets
    ``score`` and the named signals beside ``fingerprint``/``semantic``."""
    from engram.retrieval import log as rlog
    from engram.retrieval import signals

    head = [x for x in sessions if x.get("via") != "semantic"]
    tail = [x for x in sessions if x.get("via") == "semantic"]
    uses = rlog.uses(Path(conn.filename))
    row = conn.execute("SELECT max(last_t) FROM tapes").fetchone()
    times = [row[0]] if row and row[0] else []
    times += [max(v) for v in uses.values() if v]
    now = max(times) if times else None  # the index's own clock, as search's
    kinds = {"code.edit": "edit", "code.read": "read", "msg.in": "request", "msg.out": "reply",
             "tool.call": "tool", "tool.result": "tool", "sidecar": "note"}
    cands = []
    for x in tail:
        st = states.get(x.get("session") or "") or states.get(x.get("tape_id") or "")
        kind = (x.get("windows") or [{}])[0].get("kind")
        cands.append({"s": x, "similarity": float((x.get("signals") or {}).get("semantic") or 0.0),
                      "keyword": False,
                      "salience": signals.salience(x.get("last_t"), uses.get(x.get("session") or "", []), now),
                      "authority": 1.0, "confidence": st.confidence if st else START,
                      "type_intent": signals.type_intent(kinds.get(kind, "reply"), "general")})
    kept = signals.score(cands, "general")
    for c in kept:
        c["s"]["score"] = c["score"]
        c["s"]["signals"] = {**c["s"].get("signals", {}), **c["signals"]}
    kept.sort(key=lambda c: (-c["score"], c["s"].get("tape_id") or ""))
    return head + [c["s"] for c in kept]


def rerank_explain(conn, hashes, span: dict, sessions: list[dict], path: str | None = None
                   ) -> list[dict]:
    """Explain's sessions with feedback applied: each session with feedback carries ``feedback``
    (confidence, validations, last validated, verdict counts); sessions with ``incorrect`` for this
    span (``incorrect_sessions``) move below every other session, in their order, labelled
    ``feedback.label: "feedback: incorrect"``. The list is returned unchanged (the same object)
    when the index holds no feedback."""
    states = load(conn)
    if any(x.get("via") == "semantic" for x in sessions):
        sessions = _score_semantic(conn, sessions, states)
    if not states:
        return sessions
    lines = (span.get("start"), span.get("end")) if span.get("file") else None
    bad = incorrect_sessions(states, hashes, span.get("file"), lines, _reader(span, path))
    kept, demoted = [], []
    for s in sessions:
        st = states.get(s.get("session") or "") or states.get(s.get("tape_id") or "")
        if st is not None:
            s["feedback"] = st.summary()
        if bad and (s.get("session") in bad or s.get("tape_id") in bad):
            s["feedback"]["label"] = INCORRECT_LABEL
            demoted.append(s)
        else:
            kept.append(s)
    return kept + demoted
