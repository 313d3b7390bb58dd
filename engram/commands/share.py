"""Team sharing commands: ``push [REMOTE] [--dry-run]``, ``pull [REMOTE]``, ``share TAPE...``
(``engram.share``; docs/sharing.md)."""

from __future__ import annotations

from engram.commands import _engine, emit


def register(sub, common) -> None:
    s = sub.add_parser("push", parents=[common],
                       help="publish this repository's tapes on the remote's refs/engram/tapes",
                       description="Push the tapes of sessions whose cwd is inside this "
                                   "repository (and notes made in it, and tapes named with "
                                   "`engram share`) to refs/engram/tapes on the remote: no "
                                   "branch, no working-tree change. --dry-run lists what would "
                                   "leave this machine.")
    s.add_argument("remote", nargs="?", help="a remote name or URL (default: sharing.remote "
                                              "from config, else origin)")
    s.add_argument("--dry-run", action="store_true", help="list what would be pushed; push nothing")
    s.add_argument("--json", action="store_true", help="JSON output (the default)")
    s.set_defaults(fn=cmd_push)

    s = sub.add_parser("pull", parents=[common],
                       help="fetch the remote's refs/engram/tapes and index its tapes",
                       description="Fetch refs/engram/tapes from the remote, verify each tape "
                                   "(name = hash of content, size capped) and index the ones "
                                   "that pass; a bad tape is reported and skipped.")
    s.add_argument("remote", nargs="?", help="a remote name or URL (default: sharing.remote "
                                              "from config, else origin)")
    s.add_argument("--json", action="store_true", help="JSON output (the default)")
    s.set_defaults(fn=cmd_pull)

    s = sub.add_parser("share", parents=[common],
                       help="let `engram push` publish these tapes too (no TAPE: list them)",
                       description="Sessions outside this repository are private by default; "
                                   "this adds tapes (a tape file, id or unique id prefix) to "
                                   "this clone's share list.")
    s.add_argument("tapes", nargs="*", metavar="TAPE")
    s.add_argument("--json", action="store_true", help="JSON output (the default)")
    s.set_defaults(fn=cmd_share)


def _setup(args):
    """``(root, config, index connection or None)`` without the engine (push and share need no
    query machinery; their start-up stays short). The index is opened read-only when it exists."""
    from pathlib import Path

    from engram import config as config_mod
    from engram.share.select import open_index

    cfg = config_mod.load(Path(args.root) if args.root else None)
    index = Path(args.index) if args.index else cfg.index_file()
    return cfg.root, cfg, open_index(index)


def cmd_push(args) -> int:
    from engram import share

    root, cfg, conn = _setup(args)
    try:
        res = share.push(root, cfg, conn, remote=args.remote, dry_run=args.dry_run)
    finally:
        if conn is not None:
            conn.close()
    emit(res, args.pretty, render_push)
    return 0


def cmd_pull(args) -> int:
    eng = _engine(args)
    try:
        res = eng.pull(args.remote)
        summary = eng.ingest(paths=[])
        res["ingest"] = {k: summary.get(k) for k in ("tapes_indexed", "events", "error_count")}
    finally:
        eng.close()
    emit(res, args.pretty, render_pull)
    return 0


def cmd_share(args) -> int:
    from engram import share

    root, cfg, conn = _setup(args)
    try:
        res = share.share_tapes(root, cfg, conn, list(args.tapes))
    finally:
        if conn is not None:
            conn.close()
    emit(res, args.pretty, render_share)
    return 0


# -- --pretty ------------------------------------------------------------------------------------

def _tape_line(t: dict) -> str:
    label = (t.get("label") or "").replace("\n", " ")
    if len(label) > 60:
        label = label[:59] + "…"
    return f"  {t['tape_id'][:12]}  {t.get('harness') or '?':<12} {t['reason']:<7} {label}"


def render_push(r: dict) -> str:
    n = len(r["tapes"])
    if r["dry_run"]:
        head = (f"Would push {n} tape(s) to {r['remote']} {r['ref']} "
                f"({r['on_remote']} already there); nothing was sent.")
    elif r["pushed"]:
        head = (f"Pushed {r['pushed']} tape(s) to {r['remote']} {r['ref']} "
                f"({r['on_remote']} there now), commit {r['commit'][:12]}.")
    else:
        head = f"Nothing new to push to {r['remote']} {r['ref']} ({r['on_remote']} tapes there)."
    lines = [head] + [_tape_line(t) for t in r["tapes"]]
    lines += [f"  not pushed: {e['path']}: {e['error']}" for e in r["errors"]]
    return "\n".join(lines)


def render_pull(r: dict) -> str:
    if r.get("note"):
        head = r["note"] + "."
    else:
        head = (f"Pulled {r['remote']} {r['ref']}: {r['tapes']} tape(s), {r['new']} new, "
                f"{r['present']} already here, {len(r['rejected'])} rejected.")
    lines = [head] + [f"  rejected: {x['path']}: {x['error']}" for x in r["rejected"]]
    ing = r.get("ingest") or {}
    if ing.get("tapes_indexed"):
        lines.append(f"Indexed {ing['tapes_indexed']} tape(s).")
    return "\n".join(lines)


def render_share(r: dict) -> str:
    lines = [f"Added {len(r['added'])} tape(s); {len(r['shared'])} on the share list "
             f"({r['list']})."]
    lines += [f"  {t}" for t in r["shared"]]
    return "\n".join(lines)
