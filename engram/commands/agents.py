"""The agents' commands: ``mcp``, ``brief``, ``note``, ``hooks install|uninstall``.

``engram init --agents`` and ``engram gc --older-than`` are flags of commands that live in
``engram.cli``; their handlers call ``init_agents`` and ``archive`` here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engram.commands import _engine, emit

HARNESSES = ("claude", "codex", "gemini", "git")


def _budget(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens, got {text!r}") from None
    if not 50 <= n <= 100_000:
        raise argparse.ArgumentTypeError(f"expected a budget between 50 and 100000 tokens, got {n}")
    return n


def register(sub, common) -> None:
    s = sub.add_parser("note", parents=[common], help="write a note tied to FILE:A-B (a tape)",
                       description="A note on a span of code, kept as a tape: explain, hover and "
                                   "brief find it by the code's fingerprints even after the code "
                                   "moves, and flag it stale once the code changes.")
    s.add_argument("span", help="FILE:START-END (1-based, inclusive) or FILE:LINE")
    s.add_argument("text", help="what the next person or agent should know")
    s.add_argument("--kind", default="discovery",
                   choices=("warning", "decision", "discovery", "todo"),
                   help="warning (shown first), decision, discovery (default) or todo")
    s.add_argument("--related", metavar="TAPE#N", help="the tape event this note is about")
    s.set_defaults(fn=cmd_note)

    s = sub.add_parser("brief", parents=[common],
                       help="what to know before touching PATHS (Markdown; --json for tools)",
                       description="Notes in scope (warnings first, then decisions), the recent "
                                   "sessions that changed these paths and the causal chain of the "
                                   "latest work, within a token budget. No paths: the "
                                   "repository's recent work.")
    s.add_argument("paths", nargs="*", help="files or directories (default: the whole repository)")
    s.add_argument("--budget", type=_budget, default=1500,
                   help="at most this many tokens (default 1500; counted as docs/agents.md says)")
    s.add_argument("--json", action="store_true", help="the JSON object instead of Markdown")
    s.add_argument("--hook", action="store_true",
                   help="run as a harness hook: never fail (exit 0, one line on stderr), "
                        "stop after 2 s")
    s.set_defaults(fn=cmd_brief)

    s = sub.add_parser("mcp", parents=[common], help="serve Engram to agents over MCP (stdio)",
                       description="An MCP server on stdin/stdout: tools explain, search, trace, "
                                   "blame, brief, note, feedback; tapes as resources "
                                   "engram://tape/<id>. See docs/agents.md for client configs.")
    s.set_defaults(fn=cmd_mcp)

    s = sub.add_parser("hooks", parents=[common],
                       help="install or remove Engram's hooks in a harness's configuration")
    s.add_argument("action", choices=("install", "uninstall"))
    s.add_argument("harness", choices=HARNESSES)
    s.add_argument("--post-tool", action="store_true",
                   help="claude: also ingest the session's transcript after each tool call")
    s.set_defaults(fn=cmd_hooks)

    s = sub.add_parser("hook-ingest", parents=[common],
                       help="(run by harness hooks) ingest the transcript the hook names")
    s.add_argument("--codex", action="store_true", help="called by Codex's notify")
    s.add_argument("payload", nargs="?", help="Codex's notify JSON")
    s.set_defaults(fn=cmd_hook_ingest)


def cmd_note(args) -> int:
    from engram.engine import parse_span

    file, a, b = parse_span(args.span)
    eng = _engine(args)
    try:
        res = eng.add_note(file, a, b, args.kind, args.text, related=args.related)
    finally:
        eng.close()
    emit(res, args.pretty, lambda r: (
        f"Noted ({r['note']['kind']}) {r['note']['file']}:{r['note']['range'][0]}-"
        f"{r['note']['range'][1]} as tape {r['tape_id'][:12]}\n"))
    return 0


def cmd_brief(args) -> int:
    if args.hook:
        from engram.agents import hooks

        return hooks.run_guarded(lambda: _brief(args), what="engram brief")
    return _brief(args)


def _brief(args) -> int:
    eng = _engine(args)
    try:
        res = eng.brief(args.paths, budget=args.budget)
    finally:
        eng.close()
    if args.json or args.pretty:
        emit({k: v for k, v in res.items() if k != "markdown"}, args.pretty)
    else:
        sys.stdout.write(res["markdown"])
        sys.stdout.flush()
    return 0


def cmd_mcp(args) -> int:
    from engram.mcp import server

    root = Path(args.root) if args.root else None
    index = Path(args.index) if args.index else None
    server.serve(root, index)
    return 0


def cmd_hooks(args) -> int:
    from engram import paths
    from engram.agents import hooks

    root = Path(args.root) if args.root else paths.find_root()
    if args.harness == "git":
        res = _git_hooks(root, args.action)
    else:
        res = hooks.apply(root, args.action, args.harness, post_tool=args.post_tool)
    emit(res, args.pretty, lambda r: (
        f"{'Installed' if r['action'] == 'install' else 'Removed'} Engram's {r['harness']} hooks "
        f"in {r['file']}" + ("" if r["changed"] else " (nothing to change)") + "\n"))
    return 0


def _git_hooks(root: Path, action: str) -> dict:
    try:
        from engram.commits import hooks as git_hooks  # the commits engineer's module
    except ImportError:
        from engram.errors import EngramError

        raise EngramError("git hooks are not part of this version of Engram") from None
    res = (git_hooks.install if action == "install" else git_hooks.uninstall)(root)
    return {"action": action, "harness": "git", "file": res.get("hook"),
            "changed": bool(res.get("installed") or res.get("removed")), **res}


def cmd_hook_ingest(args) -> int:
    """``engram hook-ingest`` (Claude Code PostToolUse, Gemini AfterTool, Codex notify): ingest
    the transcript the hook names. Never fails the agent."""
    from engram.agents import hooks

    def run() -> None:
        transcript = hooks.transcript_of(args.payload if args.codex else sys.stdin.read(1_000_000))
        eng = _engine(args)
        try:
            eng.ingest(paths=[transcript] if transcript else None)
        finally:
            eng.close()

    return hooks.run_guarded(run, what="engram ingest")


def init_agents(root: Path) -> dict:
    """``engram init --agents``: the marked section in AGENTS.md (and CLAUDE.md when present)."""
    from engram.agents import agents_md

    return agents_md.write(root)


def archive_old(eng, older_than: str, dry_run: bool) -> dict:
    """``engram gc --older-than AGE [--dry-run]`` (``engram.agents.archive``), under the ingest
    lock the caller holds."""
    from engram.agents import archive

    return archive.archive(eng.conn(), eng.index_path, archive.parse_age(older_than),
                           dry_run=dry_run)
