"""``engram stats --retrieval``: how often an answer was used, from the retrieval log.

An answer (an explain, search, brief or MCP line of the log) counts as **used** when a use
(``engram used``, the editors' "open session") names it by its answer id, or names one of its
sessions within ``USE_WINDOW_S`` after it and no later answer holding that session came between
(the use goes to the most recent answer that showed the session).
"""

from __future__ import annotations

from pathlib import Path

from engram.retrieval import log as rlog
from engram.retrieval.signals import epoch

USE_WINDOW_S = 3600.0
ANSWER_OPS = ("explain", "search", "brief", "mcp")


def usage(index_path: Path, since: str | None = None) -> dict:
    """``{"answers", "used", "used_rate", "uses", "unattributed_uses", "by_op": {op: {...}},
    "by_client": {client: {...}}, "log": dir, "since": since}``."""
    answers: list[dict] = []
    uses: list[dict] = []
    for rec in rlog.read(index_path):
        t = rec.get("t")
        if not isinstance(t, str) or (since and t < since):
            continue
        if rec.get("op") in ANSWER_OPS:
            answers.append(rec)
        elif rec.get("op") == "used":
            uses.append(rec)
    answers.sort(key=lambda r: (r["t"], str(r.get("answer"))))
    uses.sort(key=lambda r: (r["t"], str(r.get("session"))))
    by_id = {r.get("answer"): r for r in answers if r.get("answer")}
    used: set[str] = set()
    unattributed = 0
    for u in uses:
        target = by_id.get(u.get("answer")) if u.get("answer") else _latest_with(answers, u)
        if target is None:
            unattributed += 1
        else:
            used.add(target["answer"])
    out = {"answers": len(answers), "used": len(used),
           "used_rate": round(len(used) / len(answers), 4) if answers else None,
           "uses": len(uses), "unattributed_uses": unattributed,
           "by_op": _group(answers, used, "op"), "by_client": _group(answers, used, "client"),
           "log": str(rlog.log_dir(index_path)), "since": since}
    return out


def _latest_with(answers: list[dict], use: dict) -> dict | None:
    tu = epoch(use["t"])
    best = None
    for a in answers:
        if a["t"] > use["t"]:
            break
        if any(r.get("session") == use.get("session") for r in a.get("results") or ()):
            best = a
    if best is None or tu is None:
        return None
    ta = epoch(best["t"])
    return best if ta is not None and tu - ta <= USE_WINDOW_S else None


def _group(answers: list[dict], used: set[str], key: str) -> dict:
    out: dict[str, dict] = {}
    for a in answers:
        g = out.setdefault(str(a.get(key)), {"answers": 0, "used": 0})
        g["answers"] += 1
        g["used"] += a.get("answer") in used
    return {k: {**v, "used_rate": round(v["used"] / v["answers"], 4)} for k, v in sorted(out.items())}


def render(r: dict) -> str:
    """The ``--pretty`` text."""
    if not r["answers"]:
        return f"No answers logged yet ({r['log']}).\n"
    lines = [f"{r['answers']} answers, {r['used']} used ({100 * r['used_rate']:.1f} %), "
             f"{r['uses']} uses ({r['unattributed_uses']} not matched to an answer)"]
    for name in ("by_op", "by_client"):
        for k, v in r[name].items():
            lines.append(f"  {name[3:]:<7} {k:<8} {v['answers']:>6} answers  {v['used']:>6} used"
                         f"  ({100 * v['used_rate']:.1f} %)")
    return "\n".join(lines) + "\n"
