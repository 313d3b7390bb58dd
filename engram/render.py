r"""Every ``--pretty`` text: the human-readable forms of the JSON results the CLI prints.

Logs are written by agents and the tools they ran: a transcript, a file name, a session id or a
model name may carry terminal control sequences (``ESC ] 52`` writes the clipboard, ``ESC ] 0``
sets the title, ``ESC [ 2 J`` clears the screen, C1 ``CSI`` does the same without an ESC) or
bidirectional overrides that reorder what the reader sees. None reaches the terminal as it is:
every text rendered here goes through ``printable``, which shows C0 controls other than newline
and tab, DEL, C1 controls and the Unicode bidi controls as visible escapes (``\x1b``,
``\u202e``). JSON output (``json_printable``) is already escaped by the encoder for C0; the
characters it leaves raw (DEL, C1, bidi controls) are written as ``\uXXXX`` escapes, which
decode to the same strings.
"""

from __future__ import annotations

import functools
import re

from engram.errors import EngramError
from engram.files import read_text_file

# C0 but newline and tab, DEL, C1, and Unicode's Bidi_Control characters (ALM, LRM, RLM, the
# embeddings/overrides U+202A-U+202E and the isolates U+2066-U+2069). engram_lsp.render has a twin.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_RAW_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` with terminal controls and bidi controls shown as escapes (see the module doc)."""
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def json_printable(text: str) -> str:
    r"""JSON text with the characters its encoder leaves raw (DEL, C1, bidi controls) written as
    ``\uXXXX`` escapes: the same JSON value, harmless on a terminal."""
    if not _RAW_IN_JSON.search(text):
        return text
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _printable_output(render):
    @functools.wraps(render)
    def wrapper(*args, **kwargs) -> str:
        return printable(render(*args, **kwargs))

    return wrapper


@_printable_output
def render_ingest(r: dict) -> str:
    if r.get("nothing_to_do"):
        return f"Nothing new: {r['skipped']} source(s) unchanged since the last ingest.\n"
    lines = [f"Ingested {r['parsed']} source(s) ({r['bytes'] / 1e6:.1f} MB) in {r['elapsed_s']} s: "
             f"{r['sessions']} session(s), {r['sealed']} sealed, {r['live']} live; "
             f"{r['tapes_written']} new tape(s), {r['events']} events, {r['blocks']} new text blocks, "
             f"{r['fingerprints']} fingerprints. {r['skipped']} unchanged."]
    if r.get("error_count"):
        lines.append(f"{r['error_count']} problem(s):")
        for e in r["errors"][:10]:
            err = e.get("error", e)
            where = err.get("path") or ""
            if err.get("line"):
                where += f":{err['line']}"
            lines.append(f"  {where}: {err.get('message')} [{err.get('code')}]")
    return "\n".join(lines) + "\n"


def _short(s, n=160):
    if not isinstance(s, str):
        return ""
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


@_printable_output
def render_explain(r: dict) -> str:
    sp = r["span"]
    out = [f"{sp.get('file') or '<text>'}:{sp['start']}-{sp['end']}  "
           f"({len(r['sessions'])} session{'s' if len(r['sessions']) != 1 else ''}, "
           f"{r['stats'].get('matched', 0)}/{r['stats'].get('fingerprints', 0)} fingerprints matched)"]
    if not r["sessions"]:
        out.append("  No agent session is known to have produced or read this code.")
    for i, s in enumerate(r["sessions"], 1):
        out.append("")
        out.append(f"{i}. {s['harness']} · {s.get('model') or '?'} · {s.get('last_t') or ''}  "
                   f"confidence {s['confidence']:.2f} via {s['via']}  [{s['tier']}]")
        out.append(f"   session {s['session']}  tape {s['tape_id'][:12]}"
                   + (f"  “{_short(s.get('label'), 80)}”" if s.get("label") else ""))
        if s.get("unreadable"):
            out.append(f"   (transcript unreadable: {_short(s['unreadable'], 200)}; "
                       "`engram ingest --rebuild` rewrites the tape from its log when the log is still there)")
        for w in s.get("windows", []):
            req = w.get("request")
            out.append(f"   ── anchor #{w['anchor']} {w['kind']} {w.get('file') or ''}"
                       + (f" lines {w['lines'][0]}-{w['lines'][1]}" if w.get("lines") else ""))
            if req:
                out.append(f"   ▸ user: {_short(req['text'])}")
            for ev in w.get("events", []):
                mark = "→" if ev["offset"] == w["anchor"] else " "
                out.append(f"   {mark} #{ev['offset']:<4} {ev['k']:<11} {_event_line(ev)}")
    for e in r.get("lineage", []):
        out.append(f"   lineage {e['from']['tape_id'][:10]}#{e['from']['offset']} ← "
                   f"{e['to']['tape_id'][:10]}#{e['to']['offset']} conf {e['confidence']:.2f} "
                   f"{e['location_delta']} {e['cardinality']}{' agent-link' if e.get('agent_link') else ''}")
    if any(r.get("truncated", {}).values()):
        out.append(f"   (lineage walk truncated: {r['truncated']})")
    light = [i for i, s in enumerate(r["sessions"], 1)
             if s.get("windows") and all("events" not in w for w in s["windows"])]
    if light:
        out.append("")
        out.append(f"Sessions {_ranks(light)} are listed with their anchor only: "
                   "`engram view TAPE --at ANCHOR` shows one, `--windows N` includes more.")
    return "\n".join(out) + "\n"


def _ranks(ns: list[int]) -> str:
    """``[4, 5, 6, 9]`` -> ``"4-6, 9"``."""
    parts, start = [], ns[0]
    for a, b in zip(ns, ns[1:] + [None]):
        if b != a + 1:
            parts.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ", ".join(parts)


def _event_line(ev: dict) -> str:
    k = ev.get("k")
    if k in ("msg.in", "msg.out"):
        return _short(ev.get("text"))
    if k == "tool.call":
        args = ev.get("args")
        if isinstance(args, dict):
            main = args.get("description") or args.get("file_path") or args.get("command") or args.get("path")
            return f"{ev.get('tool')} {_short(main if isinstance(main, str) else '', 120)}"
        return f"{ev.get('tool')}"
    if k == "tool.result":
        return f"{ev.get('tool') or ''} {_short(ev.get('stdout'), 120)}"
    if k == "code.edit":
        return (f"{ev.get('file')} {ev.get('before_range')} → {ev.get('after_range')}: "
                f"{_short(ev.get('after_text'), 100)}")
    if k == "code.read":
        return f"{ev.get('file')} {ev.get('range')}"
    return _short(str({k2: v for k2, v in ev.items() if k2 not in ('offset', 't', 'k')}), 120)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "(none)\n"
    widths = [max(len(h), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    lines = [fmt.format(*headers), fmt.format(*("─" * w for w in widths))]
    lines += [fmt.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(lines) + "\n"


def _vrange(vs: list[str]) -> str:
    if not vs:
        return "-"
    return vs[0] if len(vs) == 1 else f"{vs[0]}…{vs[-1]}"


@_printable_output
def render_trace(r: dict) -> str:
    out = [f"{r['file']}: {len(r['sessions'])} session(s)"
           + ("" if r.get("exists", True) else " (file no longer exists)")]
    for i, s in enumerate(r["sessions"], 1):
        out.append(f"{i}. {s['first_t'] or '?'}  {s['harness']} · {s.get('model') or '?'}  "
                   f"[{s['tier']}]  tape {s['tape_id'][:12]}  {s['edits']} edit(s), "
                   f"{s['reads']} read(s)  ({'/'.join(s['match'])})")
        if s.get("label"):
            out.append(f"   “{_clip(s['label'], 100)}”")
        for a in s["actions"][:20]:
            if a["k"] == "code.edit":
                rng = f"{_r(a['before_range'])} → {_r(a['after_range'])}"
            else:
                rng = _r(a.get("range"))
            out.append(f"   #{a['offset']:<5} {a['did']:<8} {rng}  {a['file'] or ''}")
        if len(s["actions"]) > 20:
            out.append(f"   … {len(s['actions']) - 20} more")
    if r.get("truncated"):
        from engram.query.history import MAX_TRACE_SESSIONS  # (lazy: numpy, for one number)

        out.append(f"(only the first {MAX_TRACE_SESSIONS} sessions shown)")
    return "\n".join(out) + "\n"


def _r(rng) -> str:
    if not rng or rng[0] is None:
        return "?"
    if rng[1] is not None and rng[1] < rng[0]:
        return f"@{rng[0]}"
    return f"{rng[0]}-{rng[1]}"


def _clip(s, n):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


@_printable_output
def render_blame(r: dict) -> str:
    out = []
    sess = r["sessions"]
    width = len(str(len(r["lines"])))
    for ln in r["lines"]:
        tid = ln["tape_id"]
        if tid:
            s = sess[tid]
            how = "wrote" if ln.get("produced") else "quoted"
            who = f"{tid[:10]} {(s.get('last_t') or '')[:10]} {ln['confidence']:.2f} {how:<6}"
        else:
            who = " " * 34
        out.append(f"{who} {ln['line']:>{width}}")
    text_lines = []
    try:
        text_lines = read_text_file(r.get("path") or r["file"]).split("\n")
    except (OSError, EngramError):  # blame read it a moment ago; without it, no text column
        pass
    if text_lines:
        out = [f"{o} │ {text_lines[i] if i < len(text_lines) else ''}" for i, o in enumerate(out)]
    out.append("")
    out.append(f"{len(sess)} session(s):")
    for tid, s in sess.items():
        out.append(f"  {tid[:10]}  {s['harness']} · {s.get('model') or '?'} · {s.get('last_t') or ''}"
                   f"  {s['lines']} line(s)  “{_clip(s.get('label') or '', 70)}”")
    for tid, s in (r.get("earlier") or {}).items():
        out.append(f"  earlier {tid[:10]}  {s['harness']} · {s.get('last_t') or ''}  via {s['via']}"
                   f" {s['confidence']:.2f}  “{_clip(s.get('label') or '', 60)}”")
    return "\n".join(out) + "\n"
