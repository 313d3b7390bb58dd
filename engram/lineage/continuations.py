"""Continuation and dispatch rows between tapes (``engram/lineage/rules.py`` explains the
rules): a tape's head input (read back from the tape) against the tails of earlier tapes of the
same harness and directory (looked up in the index), boilerplate excluded, harness markers added;
and an agent tape's first request against orchestrator-tier text.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import numpy as np

from engram import paths
from engram.errors import CorruptTape, WorkerGone
from engram.index import queries, schema
from engram.index.access import TapeAccess
from engram.lineage.cache import (
    CachedAccess,
    IngestCache,
    boilerplate,
    boilerplate_keys,
    index_postings,
    postings,
    union_prints,
)
from engram.lineage.rules import (
    BOILERPLATE_SHARE,
    BOILERPLATE_TAPES,
    CONT_MIN_BASE,
    CONT_MIN_BASE_SUMMARY,
    CONT_MIN_MATCH,
    CONT_THRESHOLD,
    DISPATCH_MAX_HOURS,
    DISPATCH_THRESHOLD,
    HEAD_EVENTS,
    IMMEDIATE_MINUTES,
    MARKER_BOOST,
    MAX_PREDECESSORS,
    MAX_SUCCESSORS,
    POPULAR_POSTINGS,
    ROUND,
    SOON_MINUTES,
    TAIL_EVENTS,
    _chunks,
    _hours,
    head_input,
)
from engram.sortedset import member, uniq
from engram.tape import writer

log = logging.getLogger(__name__)

TABLE_MIN_TAPES = 8     # this many new tapes or more: predecessors etc. from one read of ``tapes``
PREFETCH_TAPES = 1024   # tapes whose heads are read and fingerprinted in one batch
FETCH_TAPES = 128       # ... whose heads' postings are read from the index at once (``TapeText.fetch``)
DISPATCH_AGENTS = 200   # later agent tapes an orchestrator tape may have dispatched
AGENT_DISPATCH_SIM = 0.9     # a non-orchestrator dispatches a task it holds this much of, ...
AGENT_DISPATCH_PRINTS = 6    # ... a task of this many fingerprints, or a shorter one quoted
AGENT_DISPATCH_QUOTED = 2    # ... within a text this many times its size


class TapeText:
    """What a tape was given at its start (head input, harness markers, first request), kept by
    the ingest run (``IngestCache.heads``) or read back from the tape's first events, fingerprinted
    and held until the tape's continuation is computed (``done``). Tails are looked up in the
    index instead."""

    def __init__(self, access: TapeAccess, prints: IngestCache):
        self.access = access
        self.prints = prints
        self.cache: dict[int, dict] = {}
        self.tasks: dict[int, str | None] = {}   # first requests of tapes ``done`` with
        self.bp: dict = {}
        # per run (the pass changes none of what they hold): sidechain flags, the offset at which
        # a tape first acted, the tape count of a harness, the tape table (when many are new)
        self.side: dict[int, bool] = {}
        self.side_all: set[int] | None = None   # every sidechain tape, with ``table``
        self.acted: dict[int, int] = {}
        self.tails = TailCache()   # a tape's tail refs (``_tail_refs``)
        self.n_tapes: dict = {}
        self.table: _TapeTable | None = None
        self.write = None
        self.bp_keys: np.ndarray | None = None   # the ``boilerplate`` table's keys (``boilerplate``)
        self.fetched = None   # the index's postings of the heads of ``fetch``'s tapes

    def boilerplate(self, conn: apsw.Connection, hashes: np.ndarray) -> set[int]:
        """``cache.boilerplate(conn, hashes)`` (the same set), from the table's keys read once
        for the pass (a few hundred rows, which the pass never changes) rather than one query
        per tape."""
        if self.bp_keys is None:
            self.bp_keys = boilerplate_keys(conn)
        return boilerplate(conn, hashes, self.bp_keys)

    def get(self, t: queries.TapeRow) -> dict:
        c = self.cache.get(t.id)
        if c is not None:
            return c
        return self._keep(t, *self._head(t))

    def task(self, t: queries.TapeRow) -> str | None:
        """The tape's first request (``get(t)["task"]``, without fingerprinting its head)."""
        c = self.cache.get(t.id)
        if c is not None:
            return c["task"]
        if t.id in self.tasks:
            return self.tasks[t.id]
        return self._head(t)[2]

    def fetch(self, conn: apsw.Connection, tapes: list[queries.TapeRow]) -> None:
        """The heads' hashes that ``_tail_hits`` looks up for ``tapes`` (prefetched, boilerplate
        decided), kept in each one's entry (``q``), and the index's postings of all of them read
        at once (``fetched``): one read of the index for many tapes rather than one each."""
        qs = []
        for t in tapes:
            hb = self.get(t)
            q = hb["q"] = _head_query(conn, t, self, hb)
            if len(q[0]):
                qs.append(q[1])
        self.fetched = (index_postings(conn, uniq(np.concatenate(qs)), self.prints)
                        if qs else None)
        if self.table is not None:
            # these tapes are the predecessors of the next heads of their directories (``todo``
            # is in first_t order): their tails read together now (the table's rows, as
            # ``predecessors`` gives them) rather than each alone as the next head asks
            tb = self.table
            _fetch_tails(conn, [tb.by_last[tb.rank[t.id]] for t in tapes
                                if t.id in tb.rank and t.id not in self.tails], self.tails)

    def done(self, t: queries.TapeRow, keep_task: bool) -> None:
        """The tape's head arrays are not needed any more (its continuation is computed): only
        its first request is kept, if ``keep_task`` (its dispatch is still to come). What the
        pass holds then does not grow with its tapes' heads (~30 KB of arrays a tape)."""
        c = self.cache.pop(t.id, None)
        if c is not None and keep_task:
            self.tasks[t.id] = c["task"]

    def prefetch(self, tapes: list[queries.TapeRow], conn: apsw.Connection | None = None) -> None:
        """Fingerprint the head texts of many tapes in batches of ``PREFETCH_TAPES`` tapes, each
        tape's head read once (``get`` then finds them); with ``conn``, the head-boilerplate
        decisions of a batch's hashes are taken together too (``decide_boilerplate``)."""
        todo = [t for t in tapes if t.id not in self.cache]
        for i in range(0, len(todo), PREFETCH_TAPES):
            batch = todo[i:i + PREFETCH_TAPES]
            self._prefetch_heads(batch)
            if conn is not None:
                self.decide_boilerplate(conn, batch)

    def decide_boilerplate(self, conn: apsw.Connection, tapes: list[queries.TapeRow]) -> None:
        """The head-boilerplate decisions (``_head_boilerplate``, kept in ``bp``) of every head
        hash of ``tapes`` (prefetched) not decided yet, one query set per harness rather than one
        per tape: a hash's decision depends on its own postings alone, so it is the same taken
        with others (each call cost ~1 ms of fixed overhead, mostly numpy on small arrays)."""
        by_harness: dict = {}
        for t in tapes:
            c = self.cache.get(t.id)
            if c is not None and len(c["head_k"]):
                by_harness.setdefault(t.harness, []).append(c["head_k"])
        for harness in sorted(by_harness, key=lambda h: (h is not None, h or "")):
            known = self.bp.setdefault(harness, {})
            hashes = uniq(np.concatenate(by_harness[harness]))
            todo = np.asarray([h for h in hashes.tolist() if h not in known], dtype=np.int64)
            if not len(todo):
                continue
            _head_boilerplate(conn, harness, todo, self.bp, self.n_tapes, self.prints)
            # ``postings`` gives a key's rows to the largest of the hashes asked for with that
            # (32-bit) key: a hash sharing its key with a larger one of the batch is decided as
            # that one (the same rows), as it would be asked for alone
            same = np.flatnonzero(queries.index_keys(todo[1:]) == queries.index_keys(todo[:-1]))
            for i in same[::-1].tolist():   # from the largest down (a run of three or more)
                known[int(todo[i])] = known[int(todo[i + 1])]

    def _prefetch_heads(self, batch: list[queries.TapeRow]) -> None:
        if batch:
            heads = [(t, *self._head(t)) for t in batch]
            # the heads' arrays from this batch, whether or not the prints cache has room for
            # them (once it is full, it would not: each text would be fingerprinted alone)
            made = self.prints.texts_prints([tx for _t, texts, _m, _task in heads for tx in texts])
            self.prints.prefetch([task for _t, _texts, _m, task in heads if task])
            k = 0
            for t, texts, markers, task in heads:
                head_w, head_k = union_prints(made[k:k + len(texts)])
                k += len(texts)
                self.cache[t.id] = {"head": head_w, "head_k": head_k, "markers": markers,
                                    "task": task}

    def _keep(self, t: queries.TapeRow, texts: list[str], markers: set[str], task: str | None
              ) -> dict:
        head_w, head_k = self.prints.many_prints(texts)
        c = self.cache[t.id] = {"head": head_w, "head_k": head_k, "markers": markers, "task": task}
        return c

    def _head(self, t: queries.TapeRow) -> tuple[list[str], set[str], str | None]:
        """(head input texts, harness markers, first request) of a tape: as the ingest run kept
        it (``IngestCache.keep_head``), else read back from the tape."""
        if not t.live:
            kept = self.prints.heads.get(t.tape_id)
            if kept is not None:
                return kept
        try:
            head = self.access.read(t, range(min(t.n_events, HEAD_EVENTS + 1)))
        except (CorruptTape, OSError):
            log.warning("lineage: cannot read tape %s", t.tape_id)
            head = []
        return head_input(head)[:3]


# (block, tape) of the given blocks given as input (``msg.in``) at the head of a tape of a harness.
# CROSS JOIN keeps this order (blocks -> their refs -> events -> tapes): left to choose, the planner
# starts from ``tapes_harness`` (migration 0007) — every head event of the harness, on every call:
# quadratic in the tapes over a run (at 1.7k sessions, 3/4 of the ingest's CPU time)
HEAD_INPUT_SQL = ("SELECT r.block, e.tape FROM refs r CROSS JOIN events e ON e.id=r.event"
                  " CROSS JOIN tapes t ON t.id=e.tape WHERE r.block IN carray(?) AND r.role=?"
                  " AND e.ofs<=? AND t.harness IS ?")


def _head_boilerplate(conn: apsw.Connection, harness: str | None, hashes: np.ndarray,
                      cache: dict | None = None, n_tapes: dict | None = None,
                      prints: IngestCache | None = None) -> set[int]:
    """Hashes of ``hashes`` found in the user/harness input (``msg.in``) at the head of ≥
    ``BOILERPLATE_TAPES`` tapes of a harness (or ``BOILERPLATE_SHARE`` of them, when more): system
    prompts, AGENTS.md, environment preambles — not code that a few summaries quote.
    Code read early in many sessions is not boilerplate, only what is *given* to every session."""
    if not len(hashes):
        return set()
    if cache is not None:  # decisions are per run: hashes at the head of many tapes repeat a lot
        known = cache.setdefault(harness, {})
        todo = np.asarray([h for h in hashes.tolist() if h not in known], dtype=np.int64)
        fresh = (_head_boilerplate(conn, harness, todo, None, n_tapes, prints) if len(todo)
                 else set())
        for h in todo.tolist():
            known[h] = h in fresh
        return {h for h in hashes.tolist() if known[h]}
    rows = postings(conn, hashes, cache=prints)
    if not len(rows):
        return set()
    h_sorted = np.sort(rows[:, 0])
    popular = set(_runs_over(h_sorted, POPULAR_POSTINGS).tolist())
    # the tapes of the harness whose head input (msg.in at offset <= HEAD_EVENTS) holds a block
    tapes_in: dict[int, set[int]] = defaultdict(set)
    for ch in _chunks(uniq(rows[:, 1]).tolist()):
        for b, tape in conn.execute(
                HEAD_INPUT_SQL,
                (apsw.carray(queries._i64(ch)), schema.ROLE_MSG_IN, HEAD_EVENTS, harness)):
            tapes_in[b].add(tape)
    n = n_tapes.get(harness) if n_tapes is not None else None
    if n is None:
        n = conn.execute("SELECT count(*) FROM tapes WHERE harness IS ?", (harness,)).fetchone()[0]
        if n_tapes is not None:
            n_tapes[harness] = n
    need = max(BOILERPLATE_TAPES, int(BOILERPLATE_SHARE * n))
    return popular | _held_by_many(rows, tapes_in, need, popular)


def _held_by_many(rows: np.ndarray, tapes_in: dict[int, set[int]], need: int,
                  known: set[int]) -> set[int]:
    """The hashes of ``rows`` (hash, block, line) whose blocks' tapes (``tapes_in``) number ≥
    ``need`` together, ``known`` ones aside. The same set as uniting the tapes of every row, without
    doing it: a block that alone has ``need`` tapes decides, blocks whose tapes add up to fewer
    cannot (the sum bounds the union); only the hashes in between unite sets, and stop at ``need``.
    (Uniting per row was quadratic: a system prompt's block is at the head of every tape.)"""
    if not tapes_in:
        return set()
    blocks = uniq(np.fromiter(tapes_in, np.int64, len(tapes_in)))
    hb = rows[member(rows[:, 1], blocks), :2]
    if not len(hb):
        return set()
    hb = hb[np.lexsort((hb[:, 1], hb[:, 0]))]
    distinct = np.r_[True, (hb[1:] != hb[:-1]).any(axis=1)]
    hb = hb[distinct]
    n_of = np.fromiter((len(tapes_in[b]) for b in blocks.tolist()), np.int64, len(blocks))
    c = n_of[np.searchsorted(blocks, hb[:, 1])]
    start = np.flatnonzero(np.r_[True, hb[1:, 0] != hb[:-1, 0]])
    end = np.r_[start[1:], len(hb)]
    hs = hb[start, 0]
    most, total = np.maximum.reduceat(c, start), np.add.reduceat(c, start)
    out = set(hs[most >= need].tolist())
    for i in np.flatnonzero((most < need) & (total >= need)).tolist():
        h = int(hs[i])
        if h in known:
            continue
        ts: set[int] = set()
        for b in hb[start[i]:end[i], 1].tolist():
            ts |= tapes_in[b]
            if len(ts) >= need:
                out.add(h)
                break
    return out


def _runs_over(sorted_values: np.ndarray, limit: int) -> np.ndarray:
    """The values occurring more than ``limit`` times in ``sorted_values``."""
    if not len(sorted_values):
        return sorted_values
    start = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    cnt = np.diff(np.r_[start, len(sorted_values)])
    return sorted_values[start[cnt > limit]]


def compute(conn: apsw.Connection, new_tapes: list[queries.TapeRow], access: TapeAccess,
            stats: dict, prints: IngestCache | None = None, write=None, write_dispatch=None,
            claims: Claims | None = None) -> None:
    """Continuation and dispatch rows for ``new_tapes`` (and the tapes they may precede).
    ``write(sql, args)``: where the row changes go (default: executed on ``conn``; the dispatch
    rows' to ``write_dispatch`` if given). Nothing here reads ``continuations``, and a tape's
    changes touch only the rows that end at it, so the changes may be applied later with the
    same result as long as every continuation change comes before every dispatch change (the
    parse worker computes them beside the edges: ``compute_remote``). ``claims``: only the
    (harness, cwd) groups of tapes this side claims (the pass shared by two processes)."""
    text = TapeText(access, prints if prints is not None else IngestCache())
    write = write if write is not None else conn.execute
    write_dispatch = write_dispatch if write_dispatch is not None else write
    if len(new_tapes) >= TABLE_MIN_TAPES:
        text.table = _TapeTable.load(conn)
        if text.table is not None:
            text.side_all = _all_sidechains(conn)
    todo, agents = _todo(conn, new_tapes, text.table)
    if claims is None:
        _compute_part(conn, text, stats, todo, agents, write, write_dispatch)
        return
    by_group: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
    for i, tapes in enumerate((todo, agents)):
        for t in tapes:   # (each group's tapes in the lists' order)
            by_group[_group(t)][i].append(t)
    for key in claims.take(_groups([*todo, *agents])):
        _compute_part(conn, text, stats, *by_group[key], write, write_dispatch)


def _compute_part(conn: apsw.Connection, text: TapeText, stats: dict, todo: list, agents: list,
                  write, write_dispatch) -> None:
    """The continuations of ``todo``'s tapes, then the dispatch rows of ``agents``'."""
    text.write = write
    dispatching = {a.id for a in agents}
    # many tapes: their heads fingerprinted a batch at a time, each tape's arrays dropped once
    # its continuation is computed (a batch's decisions and prints are the same taken alone)
    step = PREFETCH_TAPES if text.table is not None else max(1, len(todo))
    for i in range(0, len(todo), step):
        batch = todo[i:i + step]
        if text.table is not None:
            text.prefetch(batch, conn)
        for j in range(0, len(batch), FETCH_TAPES):
            part = batch[j:j + FETCH_TAPES]
            if text.table is not None:
                text.fetch(conn, part)
            for b in part:
                _continuation_of(conn, b, text, stats)
                text.done(b, b.id in dispatching)
            text.fetched = None
    text.write = write_dispatch
    for a in agents:
        _dispatch_of(conn, a, text, stats)


def _todo(conn: apsw.Connection, new_tapes: list[queries.TapeRow], table: _TapeTable | None
          ) -> tuple[list[queries.TapeRow], list[queries.TapeRow]]:
    """The tapes whose continuations and whose dispatch rows the pass computes, each list in
    (first_t, tape_id) order."""
    todo: dict[int, queries.TapeRow] = {t.id: t for t in new_tapes}
    # a new tape may be the predecessor of tapes that started after it
    for t in new_tapes:
        if table is not None:
            for r in table.successors(t):
                todo.setdefault(r.id, r)
            continue
        for r in conn.execute(f"SELECT {queries.TAPE_COLS} FROM tapes WHERE harness IS ? AND first_t > ?"
                              " AND id<>? AND (cwd IS ? OR ? IS NULL) ORDER BY first_t, tape_id"
                              " LIMIT ?", (t.harness, t.first_t or "", t.id, t.cwd, t.cwd,
                                           MAX_SUCCESSORS)):
            todo.setdefault(r[0], queries.TapeRow(*r))
    # dispatch: tapes holding an agent tape's first request in what they wrote (orchestrators:
    # also in what they were given); a new tape may have dispatched agents that started after it
    # began, and, unless it is an orchestrator's, before it ended
    agents: dict[int, queries.TapeRow] = {t.id: t for t in new_tapes if t.tier != "orchestrator"}
    for o in new_tapes:
        until = None if o.tier == "orchestrator" else (o.last_t or o.first_t or "")
        if table is not None:
            for r in table.agents_from(o.first_t or "", DISPATCH_AGENTS, until):
                agents.setdefault(r.id, r)
            continue
        for r in conn.execute(f"SELECT {queries.TAPE_COLS} FROM tapes WHERE tier IS NOT 'orchestrator'"
                              " AND first_t >= ? AND (? IS NULL OR first_t <= ?)"
                              " ORDER BY first_t, tape_id LIMIT ?",
                              (o.first_t or "", until, until, DISPATCH_AGENTS)):
            agents.setdefault(r[0], queries.TapeRow(*r))
    return (sorted(todo.values(), key=_in_time), sorted(agents.values(), key=_in_time))


def _in_time(t: queries.TapeRow) -> tuple[str, str]:
    return (t.first_t or "", t.tape_id)


def _group(t: queries.TapeRow) -> tuple:
    return (t.harness, t.cwd)


def _groups(tapes: list[queries.TapeRow]) -> list[tuple]:
    """The (harness, cwd) groups of ``tapes``, the largest first (then by name): claimed in this
    order, the last ones taken are small and the two sides end close together."""
    sizes: dict[tuple, int] = defaultdict(int)
    for t in tapes:
        sizes[_group(t)] += 1
    return sorted(sizes, key=lambda g: (-sizes[g], g[0] or "", g[0] is not None,
                                         g[1] or "", g[1] is not None))


class Claims:
    """Groups of tapes handed out to two processes sharing a pass, each group once, in order: a
    counter in a private file, taken under an exclusive ``flock``. Each side computes the same
    group list (from the same tapes), so the counter is all they share."""

    def __init__(self, path: str):
        self.path = path

    @classmethod
    def create(cls) -> Claims:
        """A new counter at 0, in the user's tape directory under a tape temp file's name:
        ``writer.sweep_temp`` removes it if this process is killed before ``remove``."""
        work = paths.private_dir(paths.user_tapes_dir())
        path = os.path.join(work, writer.temp_name("lineage-claims"))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (0).to_bytes(8, "little"))
        finally:
            os.close(fd)
        return cls(path)

    def take(self, groups: list[tuple]):
        """Yield the groups this side claims, until none is left."""
        while True:
            fd = os.open(self.path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                n = int.from_bytes(os.pread(fd, 8, 0), "little")
                if n < len(groups):
                    os.pwrite(fd, (n + 1).to_bytes(8, "little"), 0)
            finally:
                os.close(fd)  # (and the lock with it)
            if n >= len(groups):
                return
            yield groups[n]

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class _TapeTable:
    """Every tape row, for choosing the predecessors, successors and dispatched agents of many new
    tapes without one full scan of ``tapes`` per tape: the same rows in the same order as the SQL
    beside each use (text compared as SQLite's BINARY collation does, NULLs as SQL treats them).
    Only when every compared column holds text or NULL (``load`` returns None otherwise)."""

    def __init__(self, rows: list[queries.TapeRow]):
        by_tape_id = sorted(rows, key=lambda r: r.tape_id)
        # ORDER BY last_t DESC, tape_id (NULL last): a stable sort by last_t, reversed
        by_last = sorted(by_tape_id, key=lambda r: (r.last_t is not None, r.last_t or ""),
                         reverse=True)
        # ORDER BY first_t, tape_id, rows with a NULL first_t left out (they never compare true)
        by_first = sorted((r for r in by_tape_id if r.first_t is not None),
                          key=lambda r: r.first_t)
        self.first: dict[tuple, list[queries.TapeRow]] = defaultdict(list)
        for r in by_first:
            self.first[(r.harness,)].append(r)
            self.first[(r.harness, r.cwd)].append(r)
        self.all_first = by_first
        self.first_keys = {k: [r.first_t for r in v] for k, v in self.first.items()}
        self.all_first_keys = [r.first_t for r in by_first]
        self.by_last = by_last
        self.rank = {r.id: i for i, r in enumerate(by_last)}
        # per group: (rows of ``first`` taken so far, their ranks in ``by_last`` sorted, the
        # bound they were taken under) — predecessors are asked for in first_t order
        self._taken: dict[tuple, tuple[int, list[int], str]] = {}

    @classmethod
    def load(cls, conn: apsw.Connection) -> _TapeTable | None:
        rows = [queries.TapeRow(*r) for r in conn.execute(f"SELECT {queries.TAPE_COLS} FROM tapes")]
        texty = all(isinstance(v, str) or v is None for r in rows
                    for v in (r.harness, r.cwd, r.tier, r.first_t, r.last_t, r.tape_id))
        return cls(rows) if texty else None

    def predecessors(self, b: queries.TapeRow) -> list[queries.TapeRow]:
        """``harness IS b.harness AND id<>b.id AND first_t < b.first_t AND (cwd IS b.cwd OR
        b.cwd IS NULL) ORDER BY last_t DESC, tape_id LIMIT MAX_PREDECESSORS``."""
        x = b.first_t or ""
        key = (b.harness,) if b.cwd is None else (b.harness, b.cwd)
        rows = self.first.get(key, ())
        n, ranks, bound = self._taken.get(key, (0, [], ""))
        if x < bound:
            n, ranks = 0, []
        while n < len(rows) and rows[n].first_t < x:   # the rows with first_t < x, by rank
            bisect.insort(ranks, self.rank[rows[n].id])
            n += 1
        self._taken[key] = (n, ranks, x)
        out = []
        for rk in ranks:
            r = self.by_last[rk]
            if r.id != b.id:
                out.append(r)
                if len(out) >= MAX_PREDECESSORS:
                    break
        return out

    def successors(self, t: queries.TapeRow) -> list[queries.TapeRow]:
        """``harness IS t.harness AND first_t > t.first_t AND id<>t.id AND (cwd IS t.cwd OR
        t.cwd IS NULL) ORDER BY first_t, tape_id LIMIT MAX_SUCCESSORS``."""
        key = (t.harness,) if t.cwd is None else (t.harness, t.cwd)
        rows = self.first.get(key, ())
        out = []
        if rows:
            for r in rows[bisect.bisect_right(self.first_keys[key], t.first_t or ""):]:
                if r.id != t.id:
                    out.append(r)
                    if len(out) >= MAX_SUCCESSORS:
                        break
        return out

    def agents_from(self, first_t: str, limit: int, until: str | None = None
                    ) -> list[queries.TapeRow]:
        """``tier IS NOT 'orchestrator' AND first_t >= ? ORDER BY first_t, tape_id LIMIT ?``,
        cut before the first row whose ``first_t`` is past ``until`` (if given)."""
        out = []
        rows = self.all_first
        for i in range(bisect.bisect_left(self.all_first_keys, first_t), len(rows)):
            r = rows[i]
            if until is not None and r.first_t > until:
                break
            if r.tier != "orchestrator":
                out.append(r)
                if len(out) >= limit:
                    break
        return out


SPLIT_MIN_TAPES = 512   # this many new tapes or more: the pass is shared by both processes


@dataclass
class Remote:
    """A pass computed in the parse worker (``submit_remote``); when the two processes share it
    (``claims``), the part computed here (``compute_here``)."""

    worker: object
    future: object
    claims: Claims | None = None
    here: tuple[list, list, dict] | None = None  # (continuation changes, dispatch changes, stats)
    cpu: dict = field(default_factory=dict)      # CPU seconds of each side (``-v`` logs them)


def submit_remote(conn: apsw.Connection, tape_rows: list[int], cache) -> Remote | None:
    """Ask the run's parse worker (``cache.worker``, when the run has one and many tapes are
    new) for ``compute_remote``; None if there is none. With at least ``SPLIT_MIN_TAPES`` new
    tapes the pass is shared: the worker claims groups of tapes (``Claims``) from the start,
    this process too once its edges are done (``compute_here``)."""
    worker = getattr(cache, "worker", None)
    path = getattr(conn, "filename", "")
    if worker is None or len(tape_rows) < TABLE_MIN_TAPES or not path:
        return None
    kept = cache.for_worker()
    claims = None
    if len(tape_rows) >= SPLIT_MIN_TAPES:
        claims = Claims.create()
        kept["claims"] = claims.path
    try:
        return Remote(worker, worker.submit_continuations(path, list(tape_rows), kept), claims)
    except BaseException:
        if claims is not None:
            claims.remove()
        raise


def compute_here(conn: apsw.Connection, remote: Remote | None, new_tapes: list[queries.TapeRow],
                 access: TapeAccess, prints: IngestCache | None) -> None:
    """The groups of a shared pass that the worker has not claimed yet, computed here, their
    changes kept for ``apply_remote`` to apply in order."""
    if remote is None or remote.claims is None:
        return
    cont: list = []
    disp: list = []
    stats = {"continuations": 0, "dispatch": 0}
    t0 = time.thread_time()
    compute(conn, new_tapes, access, stats, prints, write=lambda sql, args: cont.append((sql, args)),
            write_dispatch=lambda sql, args: disp.append((sql, args)), claims=remote.claims)
    remote.cpu["here"] = time.thread_time() - t0
    remote.here = (cont, disp, stats)


def apply_remote(conn: apsw.Connection, remote: Remote | None, stats: dict) -> bool:
    """Apply what the worker computed (and, for a shared pass, what was computed here): every
    continuation change, then every dispatch change; False (nothing applied) if there is
    nothing or the worker failed — the caller then computes the whole pass here."""
    if remote is None:
        return False
    try:
        try:
            res = remote.worker.result(remote.future)
        except WorkerGone:
            log.warning("lineage: the parse worker exited; continuations computed here")
            return False
    finally:
        if remote.claims is not None:
            remote.claims.remove()
    if res[0] != "ok":
        log.warning("lineage: continuations in the parse worker failed (%s); computed here\n%s",
                    res[1], res[2])
        return False
    if remote.claims is not None and remote.here is None:
        return False  # (this side's part was not computed)
    ops, n_cont = res[1], res[3] if len(res) > 3 else len(res[1])
    if len(res) > 4:
        remote.cpu["worker"] = res[4]
    here = remote.here if remote.here is not None else ([], [], {})
    for part in (ops[:n_cont], here[0], ops[n_cont:], here[1]):
        for sql, args in part:
            conn.execute(sql, args)
    for part in (res[2], here[2]):
        for k, v in part.items():
            stats[k] += v
    return True


def compute_remote(db_path: str, tape_rows: list[int], kept: dict | None = None) -> tuple:
    """``compute`` on a read-only connection of its own (in the parse worker, while the ingest's
    connection computes edges): ``("ok", [(sql, args), ...], stats, n, cpu)`` — the changes to
    apply, the first ``n`` of them the continuation rows', and the CPU seconds it took.
    ``kept``: what the run's ``IngestCache`` holds that is of use here (``for_worker``): tape
    heads and this run's postings, so that neither is read again; and, for a shared pass, the
    claims file (``claims``)."""
    from engram.index import db

    t0 = time.process_time()
    conn = db.connect(Path(db_path), readonly=True, mmap=False)
    try:
        ops: list[tuple] = []
        disp: list[tuple] = []
        stats = {"continuations": 0, "dispatch": 0}
        cache = IngestCache.from_worker_part(kept) if kept is not None else IngestCache()
        claims = kept.get("claims") if kept is not None else None
        with conn:  # one snapshot
            trows = queries.tapes(conn, tape_rows)
            compute(conn, [trows[t] for t in tape_rows], CachedAccess(conn, cache), stats, cache,
                    write=lambda sql, args: ops.append((sql, args)),
                    write_dispatch=lambda sql, args: disp.append((sql, args)),
                    claims=Claims(claims) if claims is not None else None)
        return ("ok", ops + disp, stats, len(ops), time.process_time() - t0)
    finally:
        conn.close()


def _sidechains(conn: apsw.Connection, tape_rows: set[int], known: dict[int, bool] | None = None
                ) -> set[int]:
    """The tapes among ``tape_rows`` whose meta marks a subagent transcript (sidechain)."""
    known = {} if known is None else known
    todo = sorted(t for t in tape_rows if t not in known)
    for ch in _chunks(todo):
        for tid, meta in conn.execute("SELECT id, meta_json FROM tapes WHERE id IN carray(?)",
                                      (apsw.carray(queries._i64(ch)),)):
            known[tid] = bool(meta and '"sidechain":true' in meta.replace(" ", ""))
    return {t for t in tape_rows if known.get(t)}


def _all_sidechains(conn: apsw.Connection) -> set[int]:
    """Every tape whose meta marks a subagent transcript (``_sidechains``' test, in SQLite:
    ``instr`` is case-sensitive as ``in`` is), read once for a pass that loads the tape table."""
    return {r[0] for r in conn.execute("SELECT id FROM tapes WHERE instr(replace(meta_json, ' ', ''),"
                                       " '\"sidechain\":true') > 0")}


def _continuation_of(conn: apsw.Connection, b: queries.TapeRow, text: TapeText, stats: dict) -> None:
    text.write("DELETE FROM continuations WHERE to_tape=? AND coalesce(markers,'') NOT LIKE"
               " '%dispatch%'", (b.id,))
    preds: dict[int, queries.TapeRow] = {}
    if text.table is not None:
        for r in text.table.predecessors(b):
            preds[r.id] = r
    else:
        for r in conn.execute(f"SELECT {queries.TAPE_COLS} FROM tapes WHERE harness IS ? AND id<>?"
                              " AND first_t < ? AND (cwd IS ? OR ? IS NULL)"
                              " ORDER BY last_t DESC, tape_id LIMIT ?",
                              (b.harness, b.id, b.first_t or "", b.cwd, b.cwd, MAX_PREDECESSORS)):
            preds[r[0]] = queries.TapeRow(*r)
    if b.session:
        for r in conn.execute(f"SELECT {queries.TAPE_COLS} FROM tapes WHERE session=? AND id<>?"
                              " AND first_t <= ?", (b.session, b.id, b.first_t or "")):
            preds.setdefault(r[0], queries.TapeRow(*r))
    if b.continues:
        r = queries.tape_by_id(conn, b.continues)
        if r is not None and r.id != b.id:
            preds.setdefault(r.id, r)
    preds = {k: v for k, v in preds.items()
             if not (v.first_t and b.first_t and v.first_t > b.first_t)}
    # a subagent transcript (sidechain) shares its parent's session id but never continues it,
    # nor does the parent continue it
    if text.side_all is not None:
        side = text.side_all
    else:
        side = _sidechains(conn, set(preds) | {b.id}, text.side)
    b_side = b.id in side
    preds = {k: v for k, v in preds.items() if (k in side) == b_side}
    if not preds:
        return
    hb = text.get(b)
    q = hb.get("q")
    head, head_k = q if q is not None else _head_query(conn, b, text, hb)
    # a compaction summary restates the earlier session's request: with that marker the earlier
    # tape's preamble counts too; without it, the preamble (often shared scaffolding) does not
    found = (_tail_hits(conn, preds, head_k, "summary" in hb["markers"], text.acted, text.prints,
                        text.tails, text.fetched if q is not None else None)
             if len(head) else {})
    best = None
    for a in preds.values():
        hits = found.get(a.id, {})
        matched = set().union(*hits.values()) if hits else ()
        resumed = bool(b.session and a.session == b.session
                       and (a.last_t or "") <= (b.first_t or "~"))
        explicit = b.continues == a.tape_id
        if len(matched) < CONT_MIN_MATCH and not explicit and not resumed:
            continue   # (base 0, below either floor: most candidates, skipped before the rest)
        base = min(1.0, len(matched) / len(head)) if len(head) else 0.0
        if len(matched) < CONT_MIN_MATCH:
            base = 0.0
        markers = sorted(hb["markers"])
        if resumed:
            markers.append("resumed")  # same session, picked up after the earlier part ended
        if explicit:
            markers.append("continues")
        floor = CONT_MIN_BASE_SUMMARY if "summary" in markers else CONT_MIN_BASE
        if not explicit and "resumed" not in markers and base < floor:
            continue
        gap = _hours(a.last_t, b.first_t) * 60 if a.last_t and b.first_t else None
        if gap is not None and gap <= IMMEDIATE_MINUTES:
            markers.append("immediate")   # a continued session starts as the earlier one ends
        elif gap is not None and gap <= SOON_MINUTES:
            markers.append("soon")
        # ranked on the uncapped sum (two candidates at 1.0 still differ), stored capped
        score = 2.0 if explicit else base + sum(MARKER_BOOST.get(m, 0) for m in markers)
        if score < CONT_THRESHOLD:
            continue
        # a compaction summary is written as its session starts, right after the earlier part
        # ran out of context: among the candidates whose tails hold enough of it, the one that
        # ended just before comes first (in a busy project, sessions that read or edited the
        # same file hold more of the code the summary quotes than the part it continues)
        when = ((2 if "immediate" in markers else 1 if "soon" in markers else 0)
                if "summary" in markers else 0)
        cand = (when, round(score, ROUND), round(base, ROUND), a.last_t or "", a.tape_id, a,
                markers, hits)
        if best is None or cand[:5] > best[:5]:
            best = cand
    if best is None:
        return
    _when, score, _base, _, _, a, markers, hits = best
    score = min(1.0, score)
    if hits:
        anchor = max(hits, key=lambda e: (len(hits[e]), e))
    else:
        r = conn.execute("SELECT id FROM events WHERE tape=? ORDER BY ofs DESC LIMIT 1",
                         (a.id,)).fetchone()
        anchor = r[0] if r else None
    text.write("INSERT OR REPLACE INTO continuations(from_tape, to_tape, score, markers, anchor)"
               " VALUES (?,?,?,?,?)", (a.id, b.id, score, json.dumps(markers), anchor))
    stats["continuations"] += 1


def _head_query(conn: apsw.Connection, b: queries.TapeRow, text: TapeText, hb: dict
                ) -> tuple[np.ndarray, np.ndarray]:
    """(winnowed hashes, k-grams) of tape ``b``'s head (``hb``) less its boilerplate: what its
    continuation looks for in the tails of earlier tapes."""
    head, head_k = hb["head"], hb["head_k"]
    bp = (_head_boilerplate(conn, b.harness, head_k, text.bp, text.n_tapes, text.prints)
          | text.boilerplate(conn, head_k))
    if bp:
        bpa = np.fromiter(bp, np.int64, len(bp))
        bpa = uniq(bpa)
        head, head_k = head[~member(head, bpa)], head_k[~member(head_k, bpa)]
    return head, head_k


def _tail_hits(conn: apsw.Connection, preds: dict[int, queries.TapeRow], hashes: np.ndarray,
               with_preamble: bool = False, acted: dict | None = None,
               prints: IngestCache | None = None, tails: TailCache | None = None,
               fetched: tuple | None = None) -> dict[int, dict[int, set[int]]]:
    """{tape: {event: head hashes found}} over the tails of ``preds`` (the last ``TAIL_EVENTS``
    events), leaving out each tape's preamble (the input before it first acted) unless
    ``with_preamble``. ``tails``: each tape's tail refs, kept across calls (``_tail_refs``).
    ``fetched``: ``cache.index_postings`` of keys including the hashes' (``TapeText.fetch``)."""
    rows = postings(conn, uniq(hashes), prints, fetched)
    if not len(rows):
        return {}
    if len(rows) > POPULAR_POSTINGS:   # (fewer rows: no hash has more than that many)
        rows = rows[~member(rows[:, 0], _runs_over(np.sort(rows[:, 0]), POPULAR_POSTINGS))]
        if not len(rows):
            return {}
    rows = rows[np.argsort(rows[:, 1], kind="stable")]
    blocks = uniq(rows[:, 1])
    bstart = np.searchsorted(rows[:, 1], blocks)
    bend = np.searchsorted(rows[:, 1], blocks, "right")
    by_block: dict[int, set[int]] = {}

    def hashes_of(i: int) -> set[int]:
        hs = by_block.get(i)
        if hs is None:
            hs = by_block[i] = set(rows[bstart[i]:bend[i], 0].tolist())
        return hs

    acted = {} if acted is None else acted
    tails = TailCache() if tails is None else tails
    out: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    # the refs of each tail (a few hundred rows), matched against the blocks here: the same rows
    # as asking the index for every ref of these blocks among the tapes — without reading the refs
    # of a block held by thousands of other tapes (a preamble every session reads)
    order = sorted(preds)
    _fetch_tails(conn, [preds[tape] for tape in order if tape not in tails], tails)
    parts = [_tail_refs(conn, preds[tape], tails) for tape in order]
    lens = [len(p) for p in parts]
    if not sum(lens):
        return {}
    refs = np.concatenate(parts)
    ref_tape = np.repeat(np.asarray(order, dtype=np.int64), lens)
    pos = np.searchsorted(blocks, refs[:, 0])
    pos[pos == len(blocks)] = 0
    ks = np.flatnonzero(blocks[pos] == refs[:, 0])
    for tape, (_blk, eid, role, ofs), i in zip(ref_tape[ks].tolist(), refs[ks].tolist(),
                                                pos[ks].tolist()):
        if role == schema.ROLE_MSG_IN and not with_preamble:
            if tape not in acted:
                r = conn.execute("SELECT min(ofs) FROM events WHERE tape=? AND kind IN (?,?)",
                                 (tape, schema.kind_code("msg.out"), schema.kind_code("tool.call"))).fetchone()
                acted[tape] = r[0] if r and r[0] is not None else 1 << 30
            if ofs < acted[tape]:
                continue
        out[tape][eid] |= hashes_of(i)
    return out


# tails kept by ``_tail_refs`` for the whole pass (a tape is a predecessor of the next tapes of its
# directory, ~26 heads each at 16k sessions): at most this many rows (32 bytes each: 16 MB; 16k sessions
# hold 244k) and tapes. Kept by tape count alone (2,048), the cache emptied every few hundred heads
# and read 37.5k tails for 16.4k tapes at 16k sessions.
TAIL_CACHE_ROWS = 1 << 19
TAIL_CACHE_TAPES = 1 << 16


class TailCache(dict):
    """``_tail_refs``' tails by tape row id: at most ``TAIL_CACHE_ROWS`` rows (``rows``) and
    ``TAIL_CACHE_TAPES`` tapes, then it starts afresh."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0

    def keep(self, tid: int, got: np.ndarray) -> None:
        if len(self) >= TAIL_CACHE_TAPES or self.rows + len(got) > TAIL_CACHE_ROWS:
            self.clear()
            self.rows = 0
        self[tid] = got
        self.rows += len(got)


# ``_tail_refs``' query for many tapes at once: each carray value is a tape's row id (high 32 bits)
# and its first tail offset + 2**31 (low 32 bits); per value, the same index searches (events by
# (tape, ofs), then refs by event) and so the same rows in the same order as the query of one tape
TAILS_SQL = ("SELECT c.value, r.block, r.event, r.role, e.ofs FROM carray(?) c CROSS JOIN events e"
             " CROSS JOIN refs r ON r.event=e.id WHERE e.tape=(c.value >> 32)"
             " AND e.ofs>=(c.value & 4294967295) - 2147483648")
_TAIL_BIAS = 1 << 31


def _fetch_tails(conn: apsw.Connection, tapes: list[queries.TapeRow], tails: TailCache) -> None:
    """``_tail_refs`` of each of ``tapes`` (not in ``tails``) kept in ``tails``, read in one query
    (``TAILS_SQL``) rather than one a tape; tapes whose id or offset do not fit its encoding are
    left to ``_tail_refs``."""
    todo = sorted((a.id, a.n_events - TAIL_EVENTS) for a in tapes
                  if isinstance(a.id, int) and isinstance(a.n_events, int)
                  and 0 <= a.id < 1 << 31 and -_TAIL_BIAS <= a.n_events - TAIL_EVENTS < _TAIL_BIAS)
    if len(todo) < 2:
        return
    for ch in _chunks(todo):
        vals = [tid << 32 | (start + _TAIL_BIAS) for tid, start in ch]
        got = np.asarray(conn.execute(TAILS_SQL, (apsw.carray(queries._i64(vals)),)).fetchall(),
                         dtype=np.int64).reshape(-1, 5)
        ids = got[:, 0] >> 32
        lo = np.searchsorted(ids, [tid for tid, _s in ch], "left").tolist()
        hi = np.searchsorted(ids, [tid for tid, _s in ch], "right").tolist()
        for (tid, _s), i, j in zip(ch, lo, hi):
            tails.keep(tid, got[i:j, 1:].copy())


def _tail_refs(conn: apsw.Connection, a: queries.TapeRow, tails: TailCache) -> np.ndarray:
    """(block, event, role, ofs) rows of every ref of the last ``TAIL_EVENTS`` events of tape
    ``a``, as an ``(n, 4)`` array, kept in ``tails``."""
    got = tails.get(a.id)
    if got is None:
        rows = conn.execute(
            "SELECT r.block, r.event, r.role, e.ofs FROM events e JOIN refs r ON r.event=e.id"
            " WHERE e.tape=? AND e.ofs>=?", (a.id, a.n_events - TAIL_EVENTS)).fetchall()
        got = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
        tails.keep(a.id, got)
    return got


def _quotes(text: TapeText, o: queries.TapeRow, ofs: int, task: str) -> bool:
    """Whether the event at ``ofs`` of tape ``o`` holds ``task`` verbatim (whitespace aside): a
    task too short for its fingerprints to tell a quote from a sentence naming the same things."""
    try:
        got = text.access.read(o, [ofs])
    except (CorruptTape, OSError):
        return False
    words = " ".join(task.split())
    return any(words in " ".join(s.split()) for _o, ev in got for s in _strings(ev))


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)


def _block_sizes(conn: apsw.Connection, blocks) -> dict[int, int]:
    """block → its number of fingerprints."""
    out: dict[int, int] = {}
    for ch in _chunks(sorted(blocks)):
        out.update(conn.execute("SELECT id, n_fp FROM blocks WHERE id IN carray(?)",
                                (apsw.carray(queries._i64(ch)),)))
    return out


def _hashes_per_block(rows: np.ndarray) -> dict[int, int]:
    """``{block: distinct hashes}`` of postings ``rows`` (hash, block, line), the blocks in the
    order they first occur in ``rows`` (one sort, not a set per block)."""
    if not len(rows):
        return {}
    o = np.lexsort((rows[:, 0], rows[:, 1]))   # by block, then hash
    h, b = rows[o, 0], rows[o, 1]
    new_pair = np.r_[True, (b[1:] != b[:-1]) | (h[1:] != h[:-1])]
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    counts = np.add.reduceat(new_pair.astype(np.int64), starts)
    first = np.minimum.reduceat(o, starts)       # where each block first occurs in ``rows``
    order = np.argsort(first, kind="stable")
    return dict(zip(b[starts][order].tolist(), counts[order].tolist()))


# The refs of a dispatch's candidate blocks that may dispatch (``_dispatch_of``), with their
# event's tape, time and offset and the tape's tier: what an agent or a session wrote, or an
# orchestrator's input, outside the agent tape itself — the rows of ``refs_for_blocks`` that its
# loop would not skip on role, tier or tape, in the same (block, event, role) order, without an
# event and a tape row made in Python for each of the many others (most refs of a task's blocks
# are the task given as input to sessions that are not orchestrators)
DISPATCH_REFS_SQL = ("SELECT r.block, r.event, r.role, e.tape, e.t, e.ofs, t.tier FROM refs r"
                     " CROSS JOIN events e ON e.id=r.event CROSS JOIN tapes t ON t.id=e.tape"
                     " WHERE r.block IN carray(?) AND r.role IN (?,?,?) AND e.tape<>?"
                     " AND (r.role<>? OR t.tier IS 'orchestrator') ORDER BY r.block, r.event, r.role")


def _dispatch_refs(conn: apsw.Connection, blocks: list[int], agent: int) -> list[tuple]:
    """``(block, event, role, tape, t, ofs, tier)`` of ``DISPATCH_REFS_SQL`` for ``blocks``
    (distinct), in block order; ``agent``: the agent tape's row id."""
    out: list[tuple] = []
    for ch in _chunks(sorted(blocks)):
        out.extend(conn.execute(DISPATCH_REFS_SQL, (
            apsw.carray(queries._i64(ch)), schema.ROLE_MSG_OUT, schema.ROLE_TOOL_CALL,
            schema.ROLE_MSG_IN, agent, schema.ROLE_MSG_IN)))
    return out


def _dispatch_of(conn: apsw.Connection, a: queries.TapeRow, text: TapeText, stats: dict) -> None:
    text.write("DELETE FROM continuations WHERE to_tape=? AND markers LIKE '%dispatch%'", (a.id,))
    task = text.task(a)
    if not task:
        return
    win, q = text.prints.text_prints(task)
    bp = text.boilerplate(conn, q)
    if bp:
        bpa = np.fromiter(bp, np.int64, len(bp))
        bpa = uniq(bpa)
        q, win = q[~member(q, bpa)], win[~member(win, bpa)]
    nq = len(win)
    if nq < 2:
        return
    n_of = _hashes_per_block(postings(conn, q, text.prints))
    blocks = [b for b, n in n_of.items() if n / nq >= DISPATCH_THRESHOLD]
    if not blocks:
        return
    best = None
    n_fp: dict[int, int] | None = None
    for b, eid, role, tape, et, ofs, tier in _dispatch_refs(conn, blocks, a.id):
        if a.first_t and et and (et > a.first_t or _hours(et, a.first_t) > DISPATCH_MAX_HOURS):
            continue
        sim = round(min(1.0, n_of[b] / nq), ROUND)
        orch = tier == "orchestrator"
        if not orch:
            # any session dispatches by handing the whole task over (a Claude Code session that
            # gives work to another agent is of the agent tier) in what it wrote: a task of some
            # length, or a short one quoted within a longer text of its own. A sentence that
            # merely names the same functions and file as a short request, or the request typed
            # into another session, dispatches nothing
            if role == schema.ROLE_MSG_IN or sim < AGENT_DISPATCH_SIM:
                continue
            if nq < AGENT_DISPATCH_PRINTS:
                if n_fp is None:
                    n_fp = _block_sizes(conn, blocks)
                if n_fp.get(b, 0) < AGENT_DISPATCH_QUOTED * nq or not _quotes(
                        text, queries.tapes(conn, [tape])[tape], ofs, task):
                    continue
        cand = (orch, sim, et or "", -eid, tape, eid)
        if best is None or cand[:4] > best[:4]:
            best = cand
    if best is None:
        return
    _orch, sim, _, _, o, eid = best
    text.write("INSERT OR REPLACE INTO continuations(from_tape, to_tape, score, markers, anchor)"
               " VALUES (?,?,?,?,?)", (o, a.id, sim, json.dumps(["dispatch"]), eid))
    stats["dispatch"] += 1
