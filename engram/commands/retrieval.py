"""The retrieval loop's commands: ``feedback`` (helpful / not relevant / incorrect on a session,
optionally for one span) and ``used`` (an answer's session was used); ``--retrieval`` for
``engram stats`` (through ``engram.commands.commits.extend_stats``)."""

from __future__ import annotations

from engram.commands import _engine, emit

VERDICTS = ("helpful", "not_relevant", "incorrect")


def cmd_feedback(args) -> int:
    from engram.retrieval.feedback import parse_span

    file = start = end = None
    if args.span:
        file, start, end = parse_span(args.span)
    eng = _engine(args)
    try:
        res = eng.feedback(args.session, args.verdict, file, start, end, note=args.note)
    finally:
        eng.close()
    emit(res, args.pretty, lambda r: (
        f"Feedback {r['verdict']} on {r['session']}"
        + (f" for {r['span']['file']}:{r['span']['start']}-{r['span']['end']}" if r["span"] else "")
        + f": confidence {r['confidence']}, {r['validations']} validation(s) (tape {r['tape_id'][:12]})\n"))
    return 0


def cmd_used(args) -> int:
    eng = _engine(args)
    try:
        res = eng.used(args.session, answer=args.answer)
    finally:
        eng.close()
    emit(res, args.pretty, lambda r: (
        f"Use of {r['session']} recorded.\n" if r["recorded"] else
        "Not recorded: the retrieval log is off (retrieval.log: false).\n"))
    return 0


def _stats_arguments(parser) -> None:
    parser.add_argument("--retrieval", action="store_true",
                        help="also report the retrieval log: answers, and how often one was used")


def _stats_extend(args, engine, result: dict) -> None:
    """``engram stats --retrieval``: the result's ``retrieval`` key (``Engine.retrieval_report``)."""
    if getattr(args, "retrieval", False):
        result["retrieval"] = engine.retrieval_report(since=getattr(args, "since", None))


def register(sub, common) -> None:
    from engram.commands import commits

    if (_stats_arguments, _stats_extend) not in commits._STATS_EXTENSIONS:  # once per process
        commits.extend_stats(_stats_arguments, _stats_extend)
    s = sub.add_parser("feedback", parents=[common],
                       help="tell Engram an answer's session was helpful, not relevant or incorrect",
                       description="Record feedback on a session (an append-only tape in this "
                                   "repository, shared by `engram push`). Confidence starts at 0.5: "
                                   "helpful +0.08, not_relevant 0, incorrect -0.15. `incorrect` "
                                   "with --span ranks the session last for that span and its "
                                   "lineage only.")
    s.add_argument("session", help="session id or tape id (or a unique prefix of one)")
    s.add_argument("verdict", choices=VERDICTS)
    s.add_argument("--span", metavar="FILE:A-B", help="the span the feedback is about")
    s.add_argument("--note", help="a short comment kept with the feedback")
    s.set_defaults(fn=cmd_feedback)

    s = sub.add_parser("used", parents=[common],
                       help="record that an answer's session was used (raises its salience)")
    s.add_argument("session", help="session id or tape id (or a unique prefix of one)")
    s.add_argument("--answer", help="the answer id from the retrieval log, when known")
    s.set_defaults(fn=cmd_used)
