"""Git-native provenance commands: ``log``, ``show COMMIT``, ``review``, ``stats``, ``graph``,
``export agent-trace``.

``engram stats`` can be extended by another feature: ``extend_stats(add_arguments, extend)``
adds arguments to its parser and a function ``extend(args, engine, result)`` that may add keys
to its result (``--retrieval`` does).
"""

from __future__ import annotations

import re

from engram.commands import _engine, emit

_STATS_PARSER = []      # the ``stats`` parser once registered
_STATS_EXTENSIONS = []  # (add_arguments, extend) pairs
_TAPE_ID = re.compile(r"^[0-9a-f]{32}$")


def extend_stats(add_arguments, extend) -> None:
    """Let another feature add options to ``engram stats`` and keys to its result."""
    _STATS_EXTENSIONS.append((add_arguments, extend))
    for p in _STATS_PARSER:
        add_arguments(p)


def register(sub, common) -> None:
    s = sub.add_parser("log", parents=[common], help="commits with the sessions behind them (git log syntax)")
    s.add_argument("revs", nargs="*", help="revisions as git log takes them (default HEAD)")
    s.add_argument("-n", "--max-count", type=int, default=None, dest="limit", help="at most N commits")
    s.add_argument("--agent", help="only commits with a session of this harness/model/session")
    s.add_argument("--json", action="store_true", help="JSON (the default)")
    s.set_defaults(fn=cmd_log)

    s = sub.add_parser("review", parents=[common], help="a range's provenance (A..B), for pull requests")
    s.add_argument("range", help="A..B, e.g. origin/main..HEAD")
    s.add_argument("--markdown", action="store_true", help="a GitHub comment (Markdown)")
    s.add_argument("--json", action="store_true", help="JSON (the default)")
    s.set_defaults(fn=cmd_review)

    s = sub.add_parser("stats", parents=[common], help="sessions, tokens, cost, agent lines at HEAD")
    s.add_argument("--by", default="model", choices=["harness", "model", "week", "file", "session"])
    s.add_argument("--since", help="sessions that began on or after DATE (YYYY-MM-DD)")
    s.add_argument("--all", action="store_true", dest="all_", help="every indexed session, not only this repository's")
    s.add_argument("--no-head", action="store_true", help="skip counting the agents' lines at HEAD")
    s.add_argument("--json", action="store_true", help="JSON (the default)")
    s.set_defaults(fn=cmd_stats)
    _STATS_PARSER.append(s)
    for add_arguments, _extend in _STATS_EXTENSIONS:
        add_arguments(s)

    s = sub.add_parser("graph", parents=[common], help="the lineage graph of a span, file or tape")
    s.add_argument("target", help="FILE:START-END, FILE or a tape id")
    s.add_argument("--format", default="json", choices=["json", "dot", "mermaid"])
    s.set_defaults(fn=cmd_graph)

    s = sub.add_parser("export", parents=[common], help="export provenance in a peer format")
    s.add_argument("format", choices=["agent-trace"])
    s.add_argument("range", help="A..B")
    s.set_defaults(fn=cmd_export)


def cmd_log(args) -> int:
    import os
    from pathlib import Path

    from engram import commands, render
    from engram.commits import quick

    res = None
    if commands.kept_engines is None:  # a fresh process: from the cache without the engine
        from engram import config as config_mod

        cfg = config_mod.load(Path(args.root) if args.root else None)
        res = quick.log(args, cfg)
    if res is None:
        if commands.kept_engines is None:
            from engram.engine import Engine

            eng = Engine(Path(args.root) if args.root else None, config=cfg,
                         index_path=Path(args.index) if args.index else None,
                         semantic=os.environ.get("ENGRAM_SEMANTIC") == "1")
            eng.client = "cli"
        else:
            eng = _engine(args)
        try:
            res = eng.log(args.revs, limit=args.limit, agent=args.agent)
        finally:
            eng.close()
    emit(res, args.pretty and not args.json, getattr(render, "render_log", _render_log))
    return 0


def show_commit(args) -> bool:
    """``engram show COMMIT|HEAD``: print the commit's sessions and return True, or False when
    the argument is not a commit of this repository (then it is a tape id)."""
    spec = args.tape_id
    if _TAPE_ID.match(spec) or getattr(args, "raw", False):
        return False
    eng = _engine(args)
    try:
        from engram.commits.log import looks_like_commit

        sha = looks_like_commit(eng, spec)
        if sha is None:
            return False
        res = eng.show_commit(sha)
    finally:
        eng.close()
    emit(res, args.pretty, _render_show)
    return True


def cmd_review(args) -> int:
    eng = _engine(args)
    try:
        res = eng.review(args.range)
    finally:
        eng.close()
    if args.markdown and not args.json:
        import sys

        from engram.commits.review import markdown
        from engram.render import printable

        sys.stdout.write(printable(markdown(res)))
        return 0
    emit(res, args.pretty, None)
    return 0


def cmd_stats(args) -> int:
    eng = _engine(args)
    try:
        res = eng.stats(by=args.by, since=args.since, all_=args.all_, head=not args.no_head)
        for _add, extend in _STATS_EXTENSIONS:
            extend(args, eng, res)
    finally:
        eng.close()
    emit(res, args.pretty and not args.json, _render_stats)
    return 0


def cmd_graph(args) -> int:
    import sys

    eng = _engine(args)
    try:
        res = eng.graph(args.target, fmt=args.format)
    finally:
        eng.close()
    if args.format == "json":
        emit(res, args.pretty, None)
    else:
        sys.stdout.write(res["text"])
    return 0


def cmd_export(args) -> int:
    import sys

    import orjson

    eng = _engine(args)
    try:
        from engram.commits import agent_trace

        records = agent_trace.export(eng, args.range)
    finally:
        eng.close()
    for r in records:
        sys.stdout.write(orjson.dumps(r, option=orjson.OPT_SORT_KEYS).decode() + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# --pretty texts (kept here until engram/render.py grows its own)


def _pct(x) -> str:
    return "  –" if x is None else f"{round(100 * x):3d}%"


def _render_log(r: dict) -> str:
    out = [f"⚠ {w}" for w in r.get("warnings", [])]
    for c in r["commits"]:
        mark = "◆" if c["sessions"] else "○"
        out.append(f"{mark} {c['sha'][:10]} {c['t'][:10]} {c['subject'][:60]}  "
                   f"+{c['added_lines']} agent {_pct(c['agent_share'])}")
        for s in c["sessions"]:
            out.append(f"    {s.get('harness') or '?'} · {s.get('model') or '?'} · {s['lines']} lines "
                       f"via {s['via']}  {(s.get('session') or '')[:12]}  “{(s.get('label') or '')[:70]}”")
    return "\n".join(out) + "\n"


def _render_show(r: dict) -> str:
    c = r["commit"]
    out = [f"commit {c['sha']}", f"{c['author']} · {c['t']}", f"    {c['subject']}", "",
           f"+{c['added_lines']} lines, {c['agent_lines']} by agents ({_pct(c['agent_share']).strip()}),"
           f" {c['hand_lines']} by hand"]
    for s in c["sessions"]:
        tk = s.get("tokens") or {}
        out.append(f"\n◆ {s.get('harness')} · {s.get('model')} · {s['lines']} lines via {s['via']}"
                   f"  session {s.get('session')}")
        out.append(f"  request: {s.get('label')}")
        if tk:
            out.append(f"  tokens: in {tk.get('input_tokens')} out {tk.get('output_tokens')} "
                       f"cache read {tk.get('cache_read_tokens')} write {tk.get('cache_write_tokens')}")
        for x in s.get("reasoning", []):
            out.append(f"  #{x['offset']} {x['file']}: {x.get('reasoning') or ''}")
    out.append("")
    for f in c["files"]:
        out.append(f"  {f['path']}  +{f['added_lines']} agent {f['agent_lines']}")
    return "\n".join(out) + "\n"


def _render_stats(r: dict) -> str:
    out = [f"{'key':<40} {'sessions':>8} {'input':>10} {'output':>10} {'cache r':>10} "
           f"{'cache w':>10} {'cost $':>10} {'lines@HEAD':>10}"]
    for row in [*r["rows"], {"key": "total", **r["total"]}]:
        cost = "?" if row["cost_usd"] is None else f"{row['cost_usd']:.2f}"
        out.append(f"{row['key'][:40]:<40} {row['sessions']:>8} {row['input_tokens']:>10} "
                   f"{row['output_tokens']:>10} {row['cache_read_tokens']:>10} "
                   f"{row['cache_write_tokens']:>10} {cost:>10} {row['lines_at_head']:>10}")
    h = r["head"]
    out.append(f"\nHEAD: {h['agent_lines']} of {h['lines']} lines written by agents "
               f"({_pct(h['agent_share']).strip()}), {h['files']} files")
    p = r["prices"]
    out.append(f"prices: table v{p['version']} of {p['date']}; unknown models have no cost")
    return "\n".join(out) + "\n"
