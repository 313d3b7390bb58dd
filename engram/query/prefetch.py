"""What ``engram/explain`` builds for a file the first time it is asked about, built ahead.

The first explain of a file pays for its tokens (every span's k-grams are cut from them: 0.7 ms
of CPU for the scale bench's average file, 3.8 ms for click's 3,047-line ``core.py``), its edit
history (``location``: the logged edits of the file by path, their line hashes and diffs, the
file as the log leaves it, re-anchored on today's text),
the lineage rows of those edits, and the transcript windows of the sessions that edited or read
it (tapes read and verified for the first time). Asked again, the same spans answer 2-3 times
faster. Nothing of that depends on the span asked about, so it can be read when the file is
opened (``textDocument/didOpen``), between requests.

``steps`` does it as a generator of small steps (about ``STEP_S`` each: one SQL query, or as many
diffs, lineage walks or windows as fit), so that the caller can stop between two of them for a
request (see ``Backend.warm``). Every step calls the engine's own query functions, which memoise what they
read (per connection and index version: ``queries.memo``, ``queries.events``, ``queries.edit_lines``, the lineage
rows, the windows of live tapes; per process: ``location.diff_map``, the tape LRU and the windows
of sealed tapes), so an explain afterwards finds it there and answers exactly as it would have
without the warm-up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from engram.index import queries, schema

MAX_EDITS = 500  # the most recent logged edits of a file whose diffs and windows are read ahead
MAX_READS = 500  # the most recent reads of a file whose windows are read ahead
ROWS = 100  # edits whose line hashes are read in one query
STEP_S = 0.003  # a step ends after the first unit of work (a query, a diff, a walk from one
# edit, a window) that brings it past this long

_READ = schema.KIND_CODE["code.read"]


def steps(
    engine, file: str, text: str, before: int | None = None, after: int | None = None
) -> Iterator[None]:
    """Warm what explaining spans of ``file`` (its buffer ``text``) reads, on this thread's
    connection; ``before``/``after``: the transcript window explain will be asked for (None:
    Engram's config, as explain's own default). Then, once per index version and connection,
    the lineage walk's plans (``walk_steps``)."""
    yield from _file_steps(engine, file, text, before, after)
    yield from walk_steps(engine)


def walk_steps(engine) -> Iterator[None]:
    """The lineage walk's plans at the engine's floor prepared ahead (``walk.prefill``) on this
    thread's connection, in steps of about ``STEP_S``: any span's first explain then follows
    prepared steps (at 16k sessions, ~0.6 s of CPU once per index version; nothing when done)."""
    from engram.query import walk

    conn = engine.conn()
    mark = 0.0

    def due() -> bool:
        return time.perf_counter() - mark >= STEP_S

    while True:
        mark = time.perf_counter()
        if walk.prefill(conn, engine.config.min_confidence, due) is not None:
            return
        yield


def _file_steps(
    engine, file: str, text: str, before: int | None = None, after: int | None = None
) -> Iterator[None]:
    """What explaining spans of ``file`` reads (``steps``)."""
    from engram.index.access import TapeAccess
    from engram.query import explain, location, window
    from engram.query import walk as lineage
    before = engine.config.window_before if before is None else before
    after = engine.config.window_after if after is None else after
    conn = engine.conn()
    explain._file_tokens(text)  # every span's k-grams are cut from them (per process, any file)
    yield
    paths = explain.edited_paths(conn, engine._display_path(file), whole=True)
    yield
    if not paths:
        return
    now = explain._file_line_hashes(text)
    yield
    access = TapeAccess(conn)
    mark = time.perf_counter()

    def due() -> bool:
        """Whether the step under way has run for ``STEP_S`` (then the next one starts)."""
        nonlocal mark
        if time.perf_counter() - mark < STEP_S:
            return False
        mark = time.perf_counter()
        return True

    for rel, path in paths:
        hist = location.history(conn, rel, path)
        yield
        if hist is None:
            continue
        rows = hist[1]
        ids = sorted(rows, key=lambda i: (rows[i].t or "", rows[i].tape, rows[i].ofs))
        for i in range(0, len(ids), ROWS):  # line hashes of every edit (log_text needs all)
            queries.edit_lines(conn, ids[i : i + ROWS])
            yield
        location.reanchor(conn, rel, path, now)  # the file as the log leaves it, and today's map
        yield
        recent = ids[-MAX_EDITS:][::-1]  # latest first: the likeliest writers of today's lines
        queries.events(conn, recent)
        tapes = queries.tapes(conn, {rows[i].tape for i in recent})
        yield
        lines = queries.edit_lines(conn, recent)
        for eid in recent:
            if eid in lines:
                location.diff_map(*lines[eid].diff_keys())  # the edit's own before → after
            if due():
                yield
        for eid in recent:  # one edit at a time: a walk's cost grows faster than its seeds
            lineage.walk(conn, {eid: 1.0})
            if due():
                yield
        for eid in recent:
            r = rows[eid]
            window.window(access, tapes[r.tape], r.ofs, before, after)
            if due():
                yield
        reads = [
            queries.EventRow(*r)
            for r in conn.execute(
                f"SELECT {queries.EVENT_COLS} FROM events WHERE rel = ? AND file = ? AND kind = ?"
                " ORDER BY id DESC LIMIT ?",
                (rel, path, _READ, MAX_READS),
            )
        ]
        yield
        if not reads:
            continue
        queries.events(conn, [r.id for r in reads])
        tapes = queries.tapes(conn, {r.tape for r in reads})
        yield
        for r in reads:
            window.window(access, tapes[r.tape], r.ofs, before, after)
            if due():
                yield
