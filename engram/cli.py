"""The ``engram`` command. JSON on stdout by default (compact, ``[]`` when empty), ``--pretty`` for
people; progress and logs go to stderr so ``engram explain ... | jq`` always works.

Errors print one line, ``Error: <file>: <message>``, to stderr and exit 1: Engram's own errors and
the environment's (disk full, ``ulimit -f``, permissions, a path too long; ``main`` is the
boundary). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys

from engram import __version__
from engram.errors import EngramError

TYPE_CHECKING = False  # (``typing`` itself costs a served call several ms)
if TYPE_CHECKING:
    from pathlib import Path

# Loading this module stays cheap (``engram explain`` answered by ``engram serve`` imports nothing
# else, not even ``pathlib``: ~10-20 ms of a served call's start where ``site`` has not loaded it):
# the parser, the commands' helpers, ``Path`` and the renderers load when a command runs.


def _engine(args):
    from engram.commands import _engine

    return _engine(args)


def emit(obj, pretty: bool, render=None) -> None:
    from engram.commands import emit

    emit(obj, pretty, render)


def _lazy(name: str):
    """``engram.render.<name>``, imported when first called."""

    def call(*args, **kwargs):
        from engram import render

        return getattr(render, name)(*args, **kwargs)

    call.__name__ = name
    return call


_event_line, _short, _table, _vrange = (_lazy(n) for n in ("_event_line", "_short", "_table",
                                                           "_vrange"))
render_blame, render_explain, render_ingest, render_trace = (
    _lazy(n) for n in ("render_blame", "render_explain", "render_ingest", "render_trace"))


# ---------------------------------------------------------------------------------------------
# output


class ProgressBar:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, label: str):
        self.label = label
        self.enabled = sys.stderr.isatty() and not os.environ.get("ENGRAM_NO_PROGRESS")
        self.last = ""

    def __call__(self, done: int, total: int, what: str) -> None:
        if not self.enabled:
            return
        frac = (done / total) if total else 1.0
        width = 28
        bar = "█" * int(frac * width) + "░" * (width - int(frac * width))
        name = what if len(what) <= 40 else "…" + what[-39:]
        line = f"\r{self.label} {bar} {frac * 100:5.1f}% {done / 1e6:8.1f}/{total / 1e6:.1f} MB {name}"
        sys.stderr.write(line.ljust(len(self.last)))
        sys.stderr.flush()
        self.last = line

    def close(self) -> None:
        if self.enabled and self.last:
            sys.stderr.write("\r" + " " * len(self.last) + "\r")
            sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# commands


def _read_stdin() -> str:
    """The text to explain from stdin, at most ``max_file_bytes()`` of it (the limit a file read
    has): a larger input is refused, not held in memory whole."""
    from engram.files import ENV_MAX_FILE_BYTES, max_file_bytes

    limit = max_file_bytes()
    stream = getattr(sys.stdin, "buffer", None)
    data = stream.read(limit + 1) if stream is not None else sys.stdin.read(limit + 1)
    if len(data) > limit:
        raise EngramError(f"stdin: more than {limit} bytes to explain "
                          f"(set {ENV_MAX_FILE_BYTES} to change the limit)")
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data


def cmd_init(args) -> int:
    from pathlib import Path

    from engram import config, paths

    root = Path(args.root) if args.root else paths.find_root()
    res = config.init_repo(root)
    if getattr(args, "agents", False):  # the AGENTS.md section (engram.agents.agents_md)
        from engram.commands.agents import init_agents

        res["agents"] = init_agents(root)
    emit(res, args.pretty, lambda r: (
        f"{'Wrote' if r['created'] else 'Kept existing'} {r['config']}\n"
        f"{'Added .engram/tapes/ and .engram-cache/ to' if r['gitignore_updated'] else 'Already ignored in'}"
        f" {r['gitignore']}\n"
        + "".join(f"{'Updated' if f['changed'] else 'Already current:'} {f['path']}\n"
                  for f in r.get("agents", {}).get("files", []))
        + "Next: engram ingest\n"))
    return 0


def cmd_ingest(args) -> int:
    from engram.ingest.worker import bound_heap

    bound_heap()  # a one-shot process: its big arrays go back to the system once freed
    eng = _engine(args)
    bar = ProgressBar("ingest")
    try:
        res = eng.ingest(seal=args.seal, rebuild=args.rebuild, progress=bar)
    finally:
        bar.close()
        eng.close()
    emit(res, args.pretty, render_ingest)
    return 0


def cmd_explain(args) -> int:
    from engram.engine import parse_span

    eng = _engine(args)
    try:
        opts = {"before": args.before, "after": args.after, "min_confidence": args.min_confidence,
                "all": args.all, "expand_until": args.expand_until, "brief": args.brief,
                "window_sessions": args.windows}
        if args.stdin:
            res = eng.explain_text(_read_stdin(), **{k: v for k, v in opts.items() if v is not None})
        else:
            if not args.span:
                raise EngramError("give FILE:START-END (or --stdin)")
            f, a, b = parse_span(args.span)
            res = eng.explain(f, a, b, **opts)
    finally:
        eng.close()
    emit(res, args.pretty, render_explain)
    return 0


def cmd_view(args) -> int:
    eng = _engine(args)
    try:
        res = eng.view(args.tape_id, at=args.at, before=args.before, after=args.after)
    finally:
        eng.close()

    def render(r):
        out = [f"tape {r['tape_id']} ({r['harness']}, session {r['session']}) events "
               f"{r['range'][0]}-{r['range'][1]} of {r['n_events']}"]
        if r.get("previous_tape"):
            out.append(f"  ↑ continues {r['previous_tape']}")
        for ev in r["events"]:
            mark = "→" if ev["offset"] == r["at"] else " "
            out.append(f"{mark} #{ev['offset']:<4} {ev.get('t') or '':<25} {ev['k']:<11} {_event_line(ev)}")
        if r.get("next_tape"):
            out.append(f"  ↓ continued by {r['next_tape']}")
        return "\n".join(out) + "\n"

    emit(res, args.pretty, render)
    return 0


def cmd_show(args) -> int:
    from engram.commands.commits import show_commit

    if show_commit(args):  # COMMIT|HEAD: the sessions behind a commit (engram/commits)
        return 0
    eng = _engine(args)
    try:
        res = eng.show(args.tape_id, raw=args.raw)
    finally:
        eng.close()
    if args.raw:
        import orjson

        for ev in res:
            sys.stdout.write(orjson.dumps(ev, option=orjson.OPT_SORT_KEYS).decode() + "\n")
        return 0
    emit(res, args.pretty, lambda r: "\n".join(
        f"#{e['offset']:<4} {e.get('t') or '':<25} {e['k']:<11} {_event_line(e)}" for e in r["events"]) + "\n")
    return 0


def cmd_tapes(args) -> int:
    eng = _engine(args)
    try:
        res = eng.tapes()
    finally:
        eng.close()
    emit(res, args.pretty, lambda rows: _table(
        ["tape", "harness", "tier", "coverage", "events", "first", "label"],
        [[r["tape_id"][:12] + ("*" if r["live"] else ""), r["harness"], r["tier"], r["coverage"],
          str(r["events"]), r["first_t"] or "", _short(r["label"], 50)] for r in rows]))
    return 0


def cmd_search(args) -> int:
    eng = _engine(args)
    try:
        res = eng.search(args.query, limit=args.limit, intent=args.intent, agent=args.agent,
                         since=args.since, file=args.file, kind=args.kind,
                         min_confidence=args.min_confidence)
    finally:
        eng.close()

    def render(r):
        out = [f"{len(r['results'])} result(s) for “{r['query']}” (semantic: {r['semantic']})"]
        for i, s in enumerate(r["results"], 1):
            sig = s["signals"]
            out.append(f"{i}. {s['harness']} · {s.get('model') or '?'} · {s.get('last_t') or ''} "
                       f"score {s['score']} (keyword {sig['keyword']} semantic {sig['semantic']}, "
                       f"confidence {s['confidence']}, {s['validations']} validations)  "
                       f"tape {s['tape_id'][:12]}")
            for w in s["windows"]:
                for ev in w.get("events", []):
                    mark = "→" if ev["offset"] == w["anchor"] else " "
                    out.append(f"   {mark} #{ev['offset']:<4} {ev['k']:<11} {_event_line(ev)}")
        return "\n".join(out) + "\n"

    emit(res, args.pretty, render)
    return 0


def cmd_status(args) -> int:
    eng = _engine(args)
    try:
        res = eng.status()
    finally:
        eng.close()

    def render(r):
        old = r.get("old_cache")
        note = (f"{old['path']}: an older per-repository index ({old['bytes'] / 1e6:.1f} MB), no "
                "longer read: `engram gc --old-caches` removes it\n") if old else ""
        if not r["indexed"]:
            return f"No index at {r['index']} yet. Run `engram ingest`.\n" + note
        c = r["counts"]
        emb = r["embedding"]
        return (f"index {r['index']} ({r['index_bytes'] / 1e6:.1f} MB), last ingest {r['last_ingest']}\n"
                f"{c['tapes']} tapes, {c['live_sessions']} live, {c['events']} events, {c['blocks']} blocks, "
                f"{c['fingerprints']} fingerprints, {c['edges']} lineage edges, {c['errors']} errors\n"
                f"embedding: {emb.get('state') or ('available' if emb.get('available') else 'off')}"
                f"{'' if emb.get('state') else ' (' + str(emb.get('reason') or '') + ')'}"
                f", {emb.get('vectors', 0)} vectors\n" + note)

    emit(res, args.pretty, render)
    return 0


def cmd_adapters(args) -> int:
    eng = _engine(args)
    try:
        rows = eng.adapters_report()
    finally:
        eng.close()
    emit(rows, args.pretty, lambda rs: _table(
        ["harness", "tier", "found", "sources", "sessions", "versions", "coverage", "paths"],
        [[r["harness"], r.get("tier", ""), "yes" if r.get("found") else "no", str(r.get("sources", 0)),
          str(r.get("sessions", 0)), _vrange(r.get("versions_seen") or []), r.get("coverage") or "-",
          ", ".join(r.get("paths", []))] for r in rs]))
    return 0


def cmd_record(args) -> int:
    from pathlib import Path

    from engram import paths
    from engram.engine import Engine
    from engram.ingest import record
    from engram.tape import writer

    root = Path(args.root) if args.root else paths.find_root()
    if args.stdin:
        events = record.record_stdin(sys.stdin, label=args.label)
        code = 0
    else:
        cmd = args.command
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise EngramError("give a command after --, or --stdin")
        code, events = record.record_command(cmd, Path.cwd(), label=args.label)
    ref = writer.write_tape(paths.repo_tapes_dir(root), events)
    eng = Engine(root)
    try:
        eng.ingest()
    finally:
        eng.close()
    emit({"tape_id": ref.tape_id, "path": str(ref.path), "events": ref.n_events, "exit": code},
         args.pretty, lambda r: f"Recorded tape {r['tape_id']} ({r['events']} events)\n")
    return code


def cmd_watch(args) -> int:
    """Ingest, then ingest what changes (``engram.ingest.watcher``): one line of JSON (or a pretty
    summary) per ingest that changed the index; a failed ingest is reported on stderr."""
    from engram.ingest.watcher import watch_forever

    def report(summary: dict) -> None:
        emit(summary, args.pretty, render_ingest)

    def failed(exc: BaseException) -> None:
        sys.stderr.write(f"Error: ingest failed: {exc}\n")
        sys.stderr.flush()

    eng = _engine(args)
    try:
        watch_forever(eng, report, on_error=failed)
    except KeyboardInterrupt:
        pass
    finally:
        eng.close()
    return 0


def cmd_gc(args) -> int:
    from engram import paths
    from engram.index import packed
    from engram.tape import writer

    eng = _engine(args)
    try:
        old = remove_old_cache(eng.root) if args.old_caches else None
        with eng._ingest_lock():  # the index is shared: one writer at a time
            archived = None  # --older-than: archival first (engram.agents.archive)
            if args.older_than:
                from engram.commands.agents import archive_old

                archived = archive_old(eng, args.older_than, args.dry_run)
                if args.dry_run:
                    emit({"archive": archived}, args.pretty)
                    return 0
            # temp files of tape writers killed before their rename (kill -9, power loss)
            temps = sum(len(writer.sweep_temp(d)) for d in
                        dict.fromkeys((paths.repo_tapes_dir(eng.root), paths.user_tapes_dir())))
            conn = eng.conn()
            with conn:
                n = conn.execute("SELECT count(*) FROM blocks WHERE id NOT IN (SELECT block FROM refs)").fetchone()[0]
                packed.delete_blocks(conn, [r[0] for r in conn.execute(
                    "SELECT id FROM blocks WHERE id NOT IN (SELECT block FROM refs)")])
                conn.execute("DELETE FROM blocks WHERE id NOT IN (SELECT block FROM refs)")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
    finally:
        eng.close()
    res = {"orphan_blocks_removed": n, "temp_files_removed": temps}
    if archived is not None:
        res["archive"] = archived
    if args.old_caches:
        res["old_cache_removed"] = old
    emit(res, args.pretty, lambda r: (
        f"Removed {r['orphan_blocks_removed']} unreferenced text block(s) and "
        f"{r['temp_files_removed']} abandoned temp file(s); index compacted.\n"
        + (f"Removed the old per-repository cache {r['old_cache_removed']['path']} "
           f"({r['old_cache_removed']['bytes'] / 1e6:.1f} MB).\n" if r.get("old_cache_removed") else "")))
    return 0


def remove_old_cache(root: Path) -> dict | None:
    """Remove ``<root>/.engram-cache`` (an older Engram's per-repository index) when it holds
    only what Engram put there; anything else in it is a user's, and the whole is left alone."""
    import shutil

    from engram import paths
    from engram.engine import old_cache_report

    found = old_cache_report(root)
    if found is None:
        return None
    d = paths.old_cache_dir(root)
    foreign = [p.name for p in d.iterdir() if not (p.name.startswith("index.") or p.name == "vectors")]
    if foreign:
        raise EngramError(f"{d}: holds {', '.join(sorted(foreign)[:3])}, which Engram did not "
                          "write: not removed (delete it yourself if it is not needed)")
    shutil.rmtree(d)
    return found


def cmd_trace(args) -> int:
    from engram.query import history

    eng = _engine(args)
    try:
        res = history.trace(eng, args.file)
    finally:
        eng.close()
    emit(res, args.pretty, render_trace)
    return 0


def cmd_blame(args) -> int:
    from engram.query import history

    eng = _engine(args)
    try:
        res = history.blame(eng, args.file)
    finally:
        eng.close()
    emit(res, args.pretty, render_blame)
    return 0


def cmd_embed(args) -> int:
    from engram.embed import run as embed_run

    eng = _engine(args)
    bar = ProgressBar("embed")
    try:
        res = embed_run.embed_index(eng, progress=lambda d, t: bar(d, t, "chunks"))
    finally:
        bar.close()
        eng.close()
    emit(res, args.pretty)
    return 0


def cmd_serve(args) -> int:
    """``engram serve`` (``engram.commands.serve``): it runs ``run`` on the clients' commands."""
    import signal

    from engram.commands.serve import Server

    def stop(_signum, _frame):
        raise KeyboardInterrupt  # a kill ends it as ^C does: its socket is removed

    signal.signal(signal.SIGTERM, stop)
    if args.lock_fd is not None:  # started by a CLI (engram.warm.start): no terminal's ^C, and
        signal.signal(signal.SIGINT, stop)  # its working directory is its own
        from engram import warm

        os.chdir(warm.run_dir())
    server = Server(run, lock_fd=args.lock_fd)
    global parsers
    parsers = {}
    try:
        server.warm()  # (inside: a kill while it loads still removes its socket)
        sys.stderr.write(f"engram serve: answering `engram explain` at {server.path}\n")
        sys.stderr.flush()
        server.run(idle_exit=args.idle_exit)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


# ---------------------------------------------------------------------------------------------
# parser


def _count(text: str) -> int:
    """An argparse type: a whole number ≥ 0 (event counts, limits)."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {n}")
    return n


def _unit(text: str) -> float:
    """An argparse type: a confidence in [0, 1]."""
    import argparse

    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return x


def _register_core(sub, common) -> None:
    """The subcommands defined in this module (the others: ``engram.commands``)."""
    import argparse

    s = sub.add_parser("init", parents=[common],
                       help="write .engram/config.yml; git-ignore .engram/tapes/ and .engram-cache/")
    s.add_argument("--agents", action="store_true",
                   help="also write the Engram section of AGENTS.md (and CLAUDE.md when present)")
    s.set_defaults(fn=cmd_init)

    s = sub.add_parser("ingest", parents=[common], help="read harness logs into tapes and the index",
                       description="Read new harness log lines (incremental), write tapes for quiet "
                                   "sessions, index live ones provisionally.")
    s.add_argument("--seal", action="store_true", help="seal live sessions into tapes now")
    s.add_argument("--rebuild", action="store_true", help="delete the index and rebuild it from tapes and logs")
    s.set_defaults(fn=cmd_ingest)

    s = sub.add_parser("explain", parents=[common], help="which sessions produced FILE:START-END, and why",
                       description="Explain a span: the sessions that produced it (edits first), "
                                   "with transcript windows around each anchor.")
    s.add_argument("span", nargs="?", help="FILE:START-END (1-based, inclusive), FILE:LINE or FILE")
    s.add_argument("--stdin", action="store_true", help="explain text read from stdin instead of a file span")
    s.add_argument("--before", type=_count, help="events before each anchor (default 3)")
    s.add_argument("--after", type=_count, help="events after each anchor (default 3)")
    s.add_argument("--brief", action="store_true", help="no transcript events, just sessions and anchors")
    s.add_argument("--windows", type=_count, metavar="N",
                   help="how many of the ranked sessions get transcript windows (default 3; config "
                        "window.sessions); the others list their anchor, which `engram view` opens")
    s.add_argument("--min-confidence", type=_unit, help="lineage edges below this are skipped (default 0.5)")
    s.add_argument("--all", action="store_true", help="include weak evidence and location-only edges")
    s.add_argument("--expand-until", type=_count, metavar="N",
                   help="extend each window back (up to N events) to the user request")
    s.add_argument("--semantic", action="store_true",
                   help="also add sessions whose reasoning is semantically close (needs the embed "
                        "extra and `engram embed`; loads the model: a few seconds per call). The "
                        "language server does this by default.")
    s.set_defaults(fn=cmd_explain)

    s = sub.add_parser("view", parents=[common], help="navigate a tape around an event offset")
    s.add_argument("tape_id", help="tape id or unique prefix")
    s.add_argument("--at", type=_count, default=0, help="event offset to centre on (default 0, the meta event)")
    s.add_argument("--before", type=_count, default=5, help="events before --at (default 5)")
    s.add_argument("--after", type=_count, default=5, help="events after --at (default 5)")
    s.set_defaults(fn=cmd_view)

    s = sub.add_parser("show", parents=[common],
                       help="the sessions behind a commit (COMMIT, HEAD), or a whole tape (TAPE)")
    s.add_argument("tape_id", metavar="COMMIT|TAPE")
    s.add_argument("--raw", action="store_true", help="the tape's JSONL lines, untrimmed")
    s.set_defaults(fn=cmd_show)

    s = sub.add_parser("tapes", parents=[common], help="list indexed tapes (harness, tier, coverage)")
    s.set_defaults(fn=cmd_tapes)

    s = sub.add_parser("search", parents=[common], help="full-text (+ semantic) search of reasoning")
    s.add_argument("query")
    s.add_argument("--limit", type=_count, default=20, help="results to return (default 20)")
    s.add_argument("--intent", choices=("general", "planning", "design", "debugging", "review",
                                        "history"), help="weighs the matched event's role "
                   "(docs/retrieval.md; default general)")
    s.add_argument("--agent", help="only sessions of this harness (or whose model contains it)")
    s.add_argument("--since", help="only sessions active on or after this ISO date/time")
    s.add_argument("--file", help="only events on, or sessions that touched, this file")
    s.add_argument("--kind", choices=("edit", "read", "request", "reply", "message", "tool", "note"),
                   help="only matches of this role")
    s.add_argument("--min-confidence", type=_unit, help="only sessions whose feedback confidence "
                   "is at least this (0.5 without feedback)")
    s.set_defaults(fn=cmd_search)

    s = sub.add_parser("status", parents=[common], help="index counts, live sessions, last ingest")
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("adapters", parents=[common], help="harnesses found, their logs and coverage")
    s.set_defaults(fn=cmd_adapters)

    s = sub.add_parser("trace", parents=[common], help="every session that touched FILE, in time order")
    s.add_argument("file")
    s.set_defaults(fn=cmd_trace)

    s = sub.add_parser("blame", parents=[common], help="per line of FILE: the best session")
    s.add_argument("file")
    s.set_defaults(fn=cmd_blame)

    s = sub.add_parser("record", parents=[common], help="make a tape from stdin or a command run",
                       description="engram record --stdin < transcript.txt | engram record -- CMD ARGS")
    s.add_argument("--stdin", action="store_true", help="read a transcript (text or JSONL {role,text})")
    s.add_argument("--label", help="a label for the tape")
    s.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    s.set_defaults(fn=cmd_record)

    s = sub.add_parser("watch", parents=[common], help="ingest continuously as harness logs change")
    s.set_defaults(fn=cmd_watch)

    s = sub.add_parser("gc", parents=[common], help="drop unreferenced index rows and compact")
    s.add_argument("--old-caches", action="store_true",
                   help="also remove this repository's .engram-cache/ (an older per-repo index)")
    s.add_argument("--older-than", metavar="AGE",
                   help="first move sessions older than AGE (90d, 12w, 36h) out of the hot index "
                        "into the archive (tapes stay; explain --all still finds them; warning and "
                        "decision notes never age out)")
    s.add_argument("--dry-run", action="store_true", help="with --older-than: only list them")
    s.set_defaults(fn=cmd_gc)

    s = sub.add_parser("embed", parents=[common], help="embed reasoning text for semantic search")
    s.set_defaults(fn=cmd_embed)

    s = sub.add_parser("serve", parents=[common],
                       help="answer `engram explain` from a warm process (agents' loops)",
                       description="Keep Engram warm for this ENGRAM_HOME: `engram explain` in any "
                                   "shell of this user is then answered by this process over a "
                                   "private unix socket, with the same output (in-process when "
                                   "no server runs). Runs until interrupted, or --idle-exit. You "
                                   "need not start it: `engram explain` / `log` start one when "
                                   "none runs (serve.auto: false or ENGRAM_NO_SERVE=1: never).")
    s.add_argument("--idle-exit", type=float, metavar="SECONDS",
                   help="stop after this long without a request")
    s.add_argument("--lock-fd", type=int, help=argparse.SUPPRESS)  # (engram.warm.start)
    s.set_defaults(fn=cmd_serve)


class _Skipped:
    """Stands in for the parser of a subcommand that is not being run: every call is accepted
    and ignored (``add_argument``, ``set_defaults``, groups, nested subparsers)."""

    def __getattr__(self, name):
        return lambda *a, **kw: _Skipped()


class _OnlyOne:
    """The subparsers action, building only the subcommand ``name`` (an ``engram explain`` in an
    agent's loop does not pay for the other ~30 parsers); ``found`` tells whether it was one."""

    def __init__(self, sub, name: str):
        self.sub, self.name, self.found = sub, name, False

    def add_parser(self, name: str, **kw):
        if name != self.name and self.name not in kw.get("aliases", ()):
            return _Skipped()
        self.found = True
        return self.sub.add_parser(name, **kw)


def build_parser(only: str | None = None):
    """The whole parser, or with ``only`` the subcommand of that name alone (None when there is
    no such subcommand)."""
    import argparse

    from engram.commands import register_all

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--pretty", action="store_true", help="human-readable output instead of JSON")
    common.add_argument("--root", help="repository root (default: nearest dir with .engram/ or .git)")
    common.add_argument("--index", help="index file (default: index.path from config, else the "
                                        "machine's one index, $ENGRAM_HOME/index/index.sqlite)")
    common.add_argument("-v", "--verbose", action="store_true", help="log to stderr")

    p = argparse.ArgumentParser(
        prog="engram",
        description="Provenance for agent-written code: which agent sessions produced this span, "
                    "and what was the reasoning? Output is JSON unless --pretty.",
        epilog="Start with: engram ingest && engram explain src/file.py:10-30 --pretty")
    p.add_argument("--version", action="version", version=f"engram {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    if only is not None:
        sub = _OnlyOne(sub, only)

    _register_core(sub, common)
    register_all(sub, common)
    if only is not None and not sub.found:
        return None
    return p


# ---------------------------------------------------------------------------------------------
# the error boundary: every failure the user can act on is one line, ``Error: <file>: <what to do>``


def main(argv: list[str] | None = None) -> int:
    _ignore_sigxfsz()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("explain", "log"):  # a warm `engram serve` answers them, when one runs
        from engram import warm

        code = warm.ask(argv)
        if code is not None:
            return code
        code = run(argv)
        if warm.absent:  # no server: start one for the next call (engram.warm.start)
            _start_server(warm)
        return code
    return run(argv)


#: ``engram serve`` keeps the parsers ``run`` built, by command (argparse's ``parse_args`` leaves
#: a parser as it was); None in any other process
parsers: dict | None = None

#: the arguments ``run`` parsed last (``main`` reads the repository root of an in-process
#: ``explain`` / ``log`` from them)
_parsed = None


def _start_server(warm) -> None:
    """Start ``engram serve`` when this repository's config allows it (``serve.auto``), quietly:
    the answer is printed already, and a config error was reported by the command itself."""
    from pathlib import Path

    from engram import config

    try:
        root = getattr(_parsed, "root", None)
        auto, idle_exit = config.serve_options(Path(root) if root else None)
    except (OSError, EngramError, ValueError):
        return
    if auto:
        warm.start(idle_exit)


def run(argv: list[str]) -> int:
    """``engram <argv>`` in this process."""
    import logging

    key = argv[0] if argv and not argv[0].startswith("-") else None
    parser = parsers.get(key) if parsers is not None else None
    if parser is None:
        if key is not None:
            parser = build_parser(only=key)
        if parser is None:  # no command, an option first, or no such command: the whole parser
            parser = build_parser()
        if parsers is not None:
            parsers[key] = parser
    global _parsed
    args = _parsed = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help(sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return args.fn(args)
    except EngramError as e:
        return _fail(_engram_message(e))
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        return 130
    except OSError as e:  # the environment: disk full, ulimit -f, permissions, long paths
        return _fail(os_error_message(e, args.cmd))
    except Exception as e:
        if type(e).__module__ != "apsw":  # a bug: the traceback is what helps
            raise
        return _fail(_sqlite_message(e, args))


def _fail(message: str) -> int:
    try:
        sys.stderr.write("Error: " + " ".join(message.split("\n")) + "\n")
        sys.stderr.flush()
    except OSError:
        pass
    return 1


def _ignore_sigxfsz() -> None:
    """Past ``ulimit -f`` the kernel sends SIGXFSZ, whose default action kills the process with no
    word; ignored, the write fails with EFBIG and the boundary says what happened. (Child
    processes, ``engram record -- CMD``, get the default back from ``subprocess``.)"""
    import _signal  # (``signal`` wraps it in enums: ~5 ms of every command's start)

    try:
        _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)
    except (AttributeError, ValueError, OSError):  # no such signal; not the main thread
        pass


def short_path(path) -> str:
    """A path for a one-line message: whole up to 200 characters, else its two ends."""
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    if len(text) <= 200:
        return text
    return f"{text[:80]}…{text[-100:]} ({len(text)} characters)"


def _engram_message(e: EngramError) -> str:
    text = str(e)
    if e.path and len(str(e.path)) > 200:
        where = short_path(e.path) + (f":{e.line}" if e.line is not None else "")
        text = f"{where}: {e.message}"
    if e.code == "corrupt-tape":
        text += "; `engram ingest --rebuild` writes it again from its log, if the log is still there"
    return text


def os_error_message(e: OSError, cmd: str | None = None) -> str:
    """``<file>: <what happened>: <what to do>`` for an ``OSError`` (a subclass names its errno)."""
    import errno

    again = f"run `engram {cmd}` again" if cmd else "run the command again"
    name = e.filename if e.filename is not None else e.filename2
    where = short_path(name) + ": " if name is not None else ""
    code = e.errno
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        what = "disk full" if code == errno.ENOSPC else "disk quota exceeded"
        it = " while writing it" if name is not None else ""
        return f"{where}{what}{it}: free space and {again}; nothing was lost"
    if code == errno.EFBIG:
        it = " while writing it" if name is not None else ""
        return (f"{where}file too large: the file-size limit{_fsize_limit()} was reached{it}: "
                f"raise it and {again}; nothing was lost")
    if code == errno.ENAMETOOLONG:
        return (f"{where}path too long: the system allows {_path_max()} characters, 255 per "
                "file name; use a shorter path")
    if code in (errno.EACCES, errno.EPERM):
        return (f"{where}permission denied: check the owner and mode of the file and of its "
                "directories (ls -ld), or run as the user who owns them")
    if code == errno.EROFS:
        return f"{where}read-only file system: point --root or ENGRAM_HOME at a writable place"
    if code == errno.ENOENT:
        return f"{where}no such file or directory"
    if code == errno.ENOTDIR:
        return f"{where}a part of this path is not a directory"
    if code == errno.EISDIR:
        return f"{where}is a directory, not a file"
    if code in (errno.EMFILE, errno.ENFILE):
        return f"{where}too many open files: raise the limit (ulimit -n) and {again}"
    if code == errno.EIO:
        return f"{where}input/output error: the disk or network file system is failing; {again}"
    return f"{where}{e.strerror or e}"


def _fsize_limit() -> str:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return " (ulimit -f)"
    return " (ulimit -f)" if soft == resource.RLIM_INFINITY else f" (ulimit -f: {soft} bytes)"


def _path_max() -> int:
    try:
        return os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


def _sqlite_message(e: Exception, args) -> str:
    """An SQLite failure, on the index (or, for ``engram embed``, the vector cache)."""
    where = _index_path(args)
    if args.cmd == "embed":
        where = where.parent / "vectors"
    again = f"run `engram {args.cmd}` again"
    kind = type(e).__name__
    if kind == "FullError":
        return (f"{short_path(where)}: disk full while writing it: free space and {again}; "
                "nothing was lost (SQLite keeps the last complete state)")
    if kind == "IOError":
        return (f"{short_path(where)}: input/output error writing it ({e}): a full disk, the "
                f"file-size limit{_fsize_limit()} or a failing device; fix that and {again}; "
                "nothing was lost (SQLite keeps the last complete state)")
    if kind in ("CantOpenError", "PermissionsError", "ReadOnlyError", "AuthError"):
        return (f"{short_path(where)}: cannot write it ({e}): check that you own it and its "
                "directory (ls -ld), or point --index elsewhere")
    if kind in ("BusyError", "LockedError"):
        return f"{short_path(where)}: busy: another engram holds it; {again} when it is done"
    return f"{short_path(where)}: {e}"


def _index_path(args) -> Path:
    from pathlib import Path

    from engram import paths

    if getattr(args, "index", None):
        return Path(args.index)
    from engram import config

    try:
        root = Path(args.root) if getattr(args, "root", None) else paths.find_root()
        return config.load(root).index_file()
    except (OSError, EngramError):
        return paths.default_index_path()


if __name__ == "__main__":
    sys.exit(main())
