"""The lineage walk at query time: from the events that match a span, backwards through lineage
edges, then across continuation and dispatch rows (the rules, and the constants that bound the walk,
are in ``engram/lineage/rules.py``; the rows it follows are written at ingest by ``engram/lineage``)."""

from __future__ import annotations

import functools
import json
from collections import defaultdict

import apsw

from engram.index import queries, schema
from engram.lineage.rules import MAX_DEPTH, MAX_EDGES, MAX_FANOUT, MAX_PLANS, ROUND, _chunks

_AFTER, _BEFORE = 1, 0


def continuation_neighbours(conn: apsw.Connection, tape_rowid: int) -> tuple[str | None, str | None]:
    """(tape id this tape continues, tape id that continues this one) — best scored, not dispatch."""
    prev = conn.execute(
        "SELECT t.tape_id FROM continuations c JOIN tapes t ON t.id=c.from_tape WHERE c.to_tape=?"
        " AND coalesce(c.markers,'') NOT LIKE '%dispatch%' ORDER BY c.score DESC, t.tape_id LIMIT 1",
        (tape_rowid,)).fetchone()
    nxt = conn.execute(
        "SELECT t.tape_id FROM continuations c JOIN tapes t ON t.id=c.to_tape WHERE c.from_tape=?"
        " AND coalesce(c.markers,'') NOT LIKE '%dispatch%' ORDER BY c.score DESC, t.tape_id LIMIT 1",
        (tape_rowid,)).fetchone()
    return (prev[0] if prev else None, nxt[0] if nxt else None)


def walk(conn: apsw.Connection, seeds: dict[int, float], *, min_confidence: float = 0.5,
         all: bool = False, max_depth: int = MAX_DEPTH, max_fanout: int = MAX_FANOUT,
         max_edges: int = MAX_EDGES, history: set[int] | None = None) -> dict:
    """BFS backwards from ``seeds`` ({event id: confidence}) through lineage edges, then across
    continuation and dispatch rows of every tape reached. See the module docstring.

    ``history``: seeds whose tapes' continuations and dispatches are crossed even past the
    budget of tapes crossed (``CROSS_TAPES``), with the tapes the walk reaches from them (e.g.
    explain's producers: among thousands of sessions, a popular span is read in more tapes than
    the budget, and a producer's earlier part or dispatcher must not depend on how many).

    What a node contributes does not depend on the walk that reaches it, only on the index and
    the options: its edges, continuation rows and tombstones are prepared once per index version
    (``_Plans``), with the lineage entries they add ready to copy, and a walk only follows them,
    keeping its own budget, visited set and paths."""
    truncated = {"fanout": False, "edges": False}
    lineage: list[dict] = []
    reached: dict[int, dict] = {}
    if not seeds:
        return {"lineage": [], "tombstones": [], "truncated": truncated, "reached": {}}
    plans = _Plans.of(conn, min_confidence, all, max_fanout)
    state: dict[int, tuple[float, list, bool]] = {e: (c, [], False) for e, c in seeds.items()}
    starts = plans.seeds(conn, seeds)
    tape_of = {e: starts[e][0] for e in seeds if starts[e][0] is not None}  # of a state event
    frontier = sorted(((e, starts[e][1]) for e in seeds), key=lambda n: (-seeds[n[0]], n[0]))
    visited = set(frontier)
    prio = {e for e in history or () if e in seeds}
    depth = 0
    budget_hit = False
    while frontier and depth < max_depth and not budget_hit:
        depth += 1
        steps = plans.steps(conn, frontier)
        nxt = []
        for k, node in enumerate(frontier):
            fanned, follow = steps[node]
            if fanned:
                truncated["fanout"] = True
            conf, path, agent = state[node[0]]
            for to, c, land, agent_link, to_tape, entry in follow:
                if len(lineage) >= max_edges:
                    truncated["edges"] = True
                    budget_hit = True
                    break
                if entry is None:  # the event it points to is gone
                    continue
                d = entry.copy()   # a lineage entry of this walk's own (its ends are dicts too)
                d["from"] = entry["from"].copy()
                d["to"] = entry["to"].copy()
                lineage.append(d)
                if land in visited:
                    continue
                visited.add(land)
                nxt.append(land)
                if to in state:
                    continue
                c = min(conf, c)
                if node[0] in prio:
                    prio.add(to)
                state[to] = (c, path + [d], agent or agent_link)
                tape_of[to] = to_tape
                reached[to] = {"via": "lineage", "confidence": round(c, ROUND), "path": path + [d]}
            if budget_hit:  # (the nodes left still say whether they fanned out)
                if any(steps[n][0] for n in frontier[k + 1:]):
                    truncated["fanout"] = True
                break
        frontier = nxt
    if frontier and depth >= max_depth:
        truncated["depth"] = True
    _cross_tapes(conn, plans, state, tape_of, reached, lineage, truncated, max_edges,
                 {tape_of[e] for e in prio if e in tape_of})
    tombs = [dict(t, range=list(t["range"])) for t in plans.tombstones(conn, state)]
    tombs.sort(key=lambda d: (d["t"] or "", d["tape_id"], d["offset"]))
    return {"lineage": lineage, "tombstones": tombs, "truncated": truncated, "reached": reached}


class _Plans:
    """What the walk needs of each node, tape and event, prepared once per index version and
    walk options (``queries.memo``): explains of nearby code walk the same edges and tapes again and
    again, and which of a node's edges a walk follows, in which order, and what each adds to the
    lineage, depends on nothing else. Lineage entries are kept ready (copied into each
    walk's output, never handed out themselves)."""

    def __init__(self, min_confidence: float, all: bool, max_fanout: int):
        self.min_confidence = min_confidence
        self.all = all
        self.max_fanout = max_fanout
        self.clear()

    def clear(self) -> None:
        self._seeds: dict[int, tuple[int | None, int]] = {}
        self._steps: dict[tuple[int, int], tuple[bool, tuple]] = {}
        self._hops: dict[int, tuple] = {}
        self._tombs: dict[int, tuple[dict, ...]] = {}
        self.prefilled = False  # every node, tape and tombstone ``prefill`` prepares is here
        self.prefill_todo = None  # its batches still to run (``_prefill_jobs``)

    @classmethod
    def of(cls, conn: apsw.Connection, min_confidence: float, all: bool, max_fanout: int) -> _Plans:
        """The plans for this index version and these options (fresh inside a transaction)."""
        plans = queries.memo(conn, ("lineage.plans", min_confidence, all, max_fanout),
                       lambda: cls(min_confidence, all, max_fanout))
        if (len(plans._seeds) + len(plans._steps) + len(plans._hops) + len(plans._tombs)
                > MAX_PLANS):
            plans.clear()
        return plans

    def seeds(self, conn: apsw.Connection, events) -> dict[int, tuple[int | None, int]]:
        """event → ``(its tape row, None when the event is gone; the side of it a walk starts
        from)``: its after-text, unless it deleted outright (an empty after-text)."""
        memo = self._seeds
        missing = [e for e in events if e not in memo]
        if missing:
            rows = queries.events(conn, missing)
            tomb = _tomb_events(conn, missing)
            for e in missing:
                r = rows.get(e)
                memo[e] = (r.tape if r is not None else None,
                           _BEFORE if e in tomb and _empty_after(r) else _AFTER)
        return memo

    def steps(self, conn: apsw.Connection, nodes) -> dict[tuple[int, int], tuple[bool, tuple]]:
        """``(event, side)`` → ``(fanned out, edges to follow)``. ``fanned out``: the node had
        more than ``max_fanout`` edges to follow. Each edge, best first, is ``(target event,
        confidence, the node it lands on, agent link, target's tape row, lineage entry)``, the
        entry None when the target event is gone (the walk skips it, but it counts against the
        fan-out, and the edge budget is checked before it)."""
        memo = self._steps
        missing = [n for n in nodes if n not in memo]  # (a frontier has no node twice)
        if not missing:
            return memo
        ids = [n[0] for n in missing]
        out = _edges_from(conn, ids, None if self.all else self.min_confidence)
        tomb = _tomb_events(conn, ids)
        chosen = []
        every, floor = self.all, self.min_confidence
        for node, side in missing:
            # which edges explain this side of the edit: the before-text's edges explain the
            # before-text, and the after-text too unless the edit replaced its text by unrelated
            # text (a tombstone), whose after-text is explained only by its own (move /
            # re-insertion) edges. Crossing from the after-text to the before-text's history
            # costs the edit's own before→after similarity (the lower of the two counts). One
            # plain loop: a node has up to a few hundred edges
            is_tomb = node in tomb
            ok = []
            for e in out.get(node, ()):
                if e[5]:  # an agent link explains the after-text
                    if side != _AFTER:
                        continue
                    ok.append(e)
                    continue
                if e[8] == 0:  # the before-text's edge
                    if side == _AFTER:
                        if is_tomb:
                            continue
                        if e[10] is not None and e[10] < e[2]:  # costs the edit's similarity
                            e = e[:2] + (e[10],) + e[3:]
                elif side == _BEFORE or (is_tomb and e[8] != 1):
                    continue
                if every or (not e[6] and e[2] >= floor):
                    ok.append(e)
            ok.sort(key=lambda e: (-e[5], -e[2], e[1]))
            chosen.append((len(ok) > self.max_fanout, ok[:self.max_fanout]))
        refs = self._refs(conn, ids + [e[1] for _f, ok in chosen for e in ok])
        for (node, side), (fanned, ok) in zip(missing, chosen):
            frm = refs[node][0] if node in refs else None
            follow = []
            for e in ok:
                entry = None
                if e[1] in refs:
                    entry = {"from": frm, "to": refs[e[1]][0],
                             "confidence": round(e[2], ROUND), "location_delta": e[3],
                             "cardinality": e[4], "agent_link": bool(e[5]), "kind": e[7]}
                    if e[6]:
                        entry["location_only"] = True
                follow.append((e[1], e[2], (e[1], _BEFORE if e[9] == schema.ROLE_EDIT_BEFORE else _AFTER),
                               bool(e[5]), refs[e[1]][1] if e[1] in refs else None, entry))
            memo[node, side] = (fanned, tuple(follow))
        return memo

    def hops(self, conn: apsw.Connection, tapes) -> dict[int, tuple]:
        """tape row → the continuation and dispatch rows a walk crosses from it (strongest
        first): ``(earlier tape row, score, anchor event, its tape row, lineage entry)``, the
        entry None when the anchor event is gone; its ``from`` is the later tape's first event,
        None for a tape without events (the walk puts the event it reached there)."""
        memo = self._hops
        missing = [t for t in tapes if t not in memo]
        if not missing:
            return memo
        rows_of = _by_key(conn, "lineage.continuations", missing,
                          "SELECT to_tape, from_tape, score, markers, anchor FROM continuations"
                          " WHERE to_tape IN carray(?) ORDER BY to_tape, score DESC, from_tape",
                          default=())
        rows_of = {t: [r for r in rows_of[t]
                       if r[4] is not None and (r[2] >= self.min_confidence or self.all)]
                   for t in missing}
        crossing = [t for t in missing if rows_of[t]]
        firsts = _first_events(conn, crossing)
        refs = self._refs(conn, [r[4] for t in crossing for r in rows_of[t]] + list(firsts.values()))
        for t in missing:
            start = refs[firsts[t]][0] if firsts.get(t) in refs else None
            hops = []
            for _to, from_tape, score, markers, anchor in rows_of[t]:
                ms = _markers(markers)
                kind = "dispatch" if "dispatch" in ms else "continuation"
                entry = None
                if anchor in refs:
                    entry = {"from": start, "to": refs[anchor][0], "confidence": round(score, ROUND),
                             "location_delta": "absent", "cardinality": "1:1", "agent_link": False,
                             "kind": kind, "markers": ms}
                hops.append((from_tape, score, anchor, refs[anchor][1] if anchor in refs else None,
                             entry))
            memo[t] = tuple(hops)
        return memo

    def tombstones(self, conn: apsw.Connection, events) -> list[dict]:
        """The tombstones the given events left (prepared entries: copy before handing out)."""
        memo = self._tombs
        missing = [e for e in events if e not in memo]
        if missing:
            rows = _tomb_rows(conn, missing)
            left = [e for e in missing if rows[e]]
            refs = self._refs(conn, left)
            for e in missing:
                memo[e] = tuple({**refs[e][0], "file": file, "rel": rel, "range": [s, end], "t": t}
                                for _e, file, rel, s, end, t in rows[e]) if e in refs else ()
        return [t for e in events for t in memo[e]]

    @staticmethod
    def _refs(conn: apsw.Connection, ids) -> dict[int, tuple[dict, int]]:
        """event → ``({"tape_id", "offset"}, its tape row)``, for the events that exist."""
        rows = queries.events(conn, ids)
        tapes = queries.tapes(conn, {r.tape for r in rows.values()})
        return {i: ({"tape_id": tapes[r.tape].tape_id, "offset": r.ofs}, r.tape)
                for i, r in rows.items()}


PREFILL_BATCH = 64           # nodes, tapes or events ``prefill`` prepares between two ``stop()``
PREFILL_ROWS = 2048          # ... or edge rows
PREFILL_NODES = 16           # ... or nodes whose steps it prepares (up to ``MAX_FANOUT`` entries each)


def prefill(conn: apsw.Connection, min_confidence: float, stop=None, *,
            max_fanout: int = MAX_FANOUT) -> bool | None:
    """Prepare the walk's plans (``_Plans``) at these options for every node a walk can be at
    after following an edge (each edge's target, on the side it lands on), every event with
    lineage edges as a seed, every tape's continuation and dispatch rows and every landing
    event's tombstones: for a long-running process (the language server, the MCP server),
    between requests, so that a span's first explain walks prepared steps instead of reading
    and preparing each node's rows as the walk meets them (at 16k sessions: 7,640 nodes,
    16,622 tapes, ~0.6 s of CPU, ~65 MB). The plans are what a walk would prepare itself, by
    the same code, in batches: a walk afterwards gives the same answer, only sooner.

    True when every plan is there; False when the index has more than half of ``MAX_PLANS``
    of them (a prefill would push out what it prepared: the walks prepare their own), or
    inside a transaction; None when ``stop()`` (asked after each batch) said to leave the rest
    for later (a later call goes on from there)."""
    if conn.in_transaction:
        return False
    plans = _Plans.of(conn, min_confidence, False, max_fanout)
    if plans.prefilled:
        return True
    if plans.prefill_todo is None:
        plans.prefill_todo = _prefill_jobs(conn, plans)
    # ``stop`` is asked after each batch: a call always makes progress
    for _job in plans.prefill_todo:
        if _job is False:  # the index has too many
            plans.prefill_todo = iter([False])
            return False
        if stop is not None and stop():
            return None
    if _Plans.of(conn, min_confidence, False, max_fanout) is not plans:  # (cleared meanwhile)
        return None
    plans.prefilled = True
    return True


def _prefill_jobs(conn: apsw.Connection, plans: _Plans):
    """``prefill``'s batches, one a ``next()`` (a few ms each at 16k sessions): what to prepare,
    read from the edges ``PREFILL_ROWS`` rows at a time, then the seeds, tombstones and tapes'
    hops, ``PREFILL_BATCH`` at a time, and the nodes' steps, ``PREFILL_NODES`` or about
    ``PREFILL_ROWS`` edge rows at a time (each call prepares only what is not there yet);
    False, once, when they would not fit."""
    top = conn.execute("SELECT max(id) FROM edges").fetchone()[0] or 0
    lands: set[tuple[int, int]] = set()
    out_rows: dict[int, int] = defaultdict(int)  # from_event → its edge rows
    for lo in range(0, top + 1, PREFILL_ROWS):
        for frm, to, role in conn.execute("SELECT from_event, to_event, to_role FROM edges"
                                          " WHERE id >= ? AND id < ?", (lo, lo + PREFILL_ROWS)):
            lands.add((to, role))
            out_rows[frm] += 1
        yield True
    froms = sorted(out_rows)
    tapes = [r[0] for r in conn.execute("SELECT id FROM tapes ORDER BY id")]
    if len(lands) + 2 * len(froms) + len(tapes) > MAX_PLANS // 2:
        yield False
        return
    yield True
    landed = sorted({e for e, _r in lands})
    for fn, keys in ((plans.seeds, froms), (plans.tombstones, landed), (plans.hops, tapes)):
        for i in range(0, len(keys), PREFILL_BATCH):
            fn(conn, keys[i:i + PREFILL_BATCH])
            yield True
    seeds = plans.seeds(conn, froms)
    nodes = {(e, _BEFORE if role == schema.ROLE_EDIT_BEFORE else _AFTER) for e, role in lands}
    batch, rows = [], 0
    for n in sorted(nodes | {(e, seeds[e][1]) for e in froms}):
        batch.append(n)
        rows += out_rows.get(n[0], 0)
        if rows >= PREFILL_ROWS or len(batch) >= PREFILL_NODES:
            plans.steps(conn, batch)
            yield True
            batch, rows = [], 0
    if batch:
        plans.steps(conn, batch)
        yield True


def _empty_after(r: queries.EventRow | None) -> bool:
    return r is not None and r.a_start is not None and r.a_end is not None and r.a_end < r.a_start


def _by_key(conn: apsw.Connection, name, keys, sql: str, default=None, params: tuple = ()) -> dict:
    """``{key: rows}`` for the given keys from ``sql`` (``... WHERE <key> IN carray(?)``, the key
    first in each row), memoised per index version: explains of nearby code walk the same edges
    and tapes again and again. A key with no row maps to ``default`` (a fresh list if None)."""
    memo = queries.memo(conn, name, dict)
    missing = sorted({k for k in keys if k not in memo})
    if missing:
        got: dict = defaultdict(list)
        for ch in _chunks(missing):
            for r in conn.execute(sql, (apsw.carray(queries._i64(ch)), *params)):
                got[r[0]].append(r)
        for k in missing:
            memo[k] = got.get(k, default if default is not None else [])
    return memo


_EDGE_COLS = ("SELECT from_event, to_event, confidence, location_delta, cardinality, agent_link,"
              " location_only, kind, coalesce(from_side, 0), to_role, span_sim FROM edges"
              " WHERE from_event IN carray(?)")


def _edges_from(conn: apsw.Connection, events, floor: float | None = None) -> dict[int, list]:
    """event → the lineage edge rows leaving it; with a ``floor``, only those a walk at that
    ``min_confidence`` may follow (an agent link, or a whole-text edge at the floor or above: a
    before-text edge's confidence can only fall when it crosses to the after-text), the others
    never leaving SQLite (about a quarter of the rows a first explain reads at 16k sessions)."""
    if floor is None:
        return _by_key(conn, "lineage.edges", events, _EDGE_COLS)
    return _by_key(conn, ("lineage.edges", floor), events,
                   _EDGE_COLS + " AND (agent_link OR (location_only = 0 AND confidence >= ?))",
                   params=(floor,))


def _tomb_rows(conn: apsw.Connection, ids) -> dict[int, list]:
    """event → the tombstone rows it left (``(event, file, rel, start, end, t)``; mostly none)."""
    return _by_key(conn, "lineage.tombstones", ids,
                   "SELECT event, file, rel, start, end, t FROM tombstones WHERE event IN carray(?)",
                   default=())


def _tomb_events(conn: apsw.Connection, ids) -> set[int]:
    """The given events that left a tombstone."""
    rows = _tomb_rows(conn, ids)
    return {e for e in ids if rows[e]}


CROSS_TAPES = MAX_DEPTH * 8   # tapes whose continuation / dispatch rows a walk crosses


def _cross_tapes(conn, plans: _Plans, state, tape_of, reached, lineage, truncated,
                 max_edges, prio: set[int] | None = None) -> None:
    """Cross continuation / dispatch rows from every tape reached (repeatedly: chains), the
    strongest first, up to ``CROSS_TAPES`` tapes; past that, only the ``prio`` tapes and the
    chains found from them. ``tape_of``: the tape row of each event in ``state`` (an event that
    is gone has none)."""
    prio = set() if prio is None else prio
    best_in_tape: dict[int, tuple[float, int]] = {}
    for eid, (c, _p, _a) in state.items():
        tid = tape_of.get(eid)
        if tid is None:
            continue
        cur = best_in_tape.get(tid)
        if cur is None or c > cur[0]:
            best_in_tape[tid] = (c, eid)
    todo = sorted(best_in_tape, key=lambda t: (-best_in_tape[t][0], t))
    seen = set(todo)
    steps = 0
    while todo:
        # one wave: the rows of every queued tape looked up together (the order of the queue,
        # and so the output, is that of popping tapes one by one)
        if steps >= CROSS_TAPES:  # past the budget: the prio tapes' chains alone
            wave, todo = [t for t in todo if t in prio], []
            if not wave:
                break
        else:
            wave, todo = todo[:CROSS_TAPES - steps], todo[CROSS_TAPES - steps:]
        hops = plans.hops(conn, wave)
        for tid in wave:
            steps += 1
            conf, eid = best_in_tape[tid]
            for from_tape, score, anchor, anchor_tape, entry in hops[tid]:
                if len(lineage) >= max_edges:
                    truncated["edges"] = True
                    return
                if entry is None:  # the anchor event is gone
                    continue
                d = entry.copy()
                d["from"] = (entry["from"] or plans._refs(conn, [eid])[eid][0]).copy()
                d["to"] = entry["to"].copy()
                d["markers"] = list(entry["markers"])
                lineage.append(d)
                if anchor in state or from_tape in seen:
                    continue
                c = min(conf, score)
                path = state[eid][1] + [d]
                state[anchor] = (c, path, state[eid][2])
                tape_of[anchor] = anchor_tape
                reached[anchor] = {"via": "lineage" if d["kind"] == "dispatch" else "continuation",
                                   "confidence": round(c, ROUND), "path": path}
                best_in_tape[from_tape] = (c, anchor)
                seen.add(from_tape)
                todo.append(from_tape)
                if tid in prio:
                    prio.add(from_tape)


@functools.lru_cache(maxsize=1024)
def _markers(markers: str | None) -> tuple[str, ...]:
    """A continuation's ``markers`` column, parsed (memoised: a handful of combinations recur)."""
    return tuple(json.loads(markers)) if markers else ()


def _first_events(conn, tape_rows) -> dict[int, int]:
    """tape row → id of its first event (lowest offset): one probe of ``events_tape`` (tape, ofs)
    a tape, not a scan of all its events (a long session has hundreds)."""
    rows = _by_key(conn, "lineage.first_event", tape_rows,
                   "SELECT c.value, (SELECT e.id FROM events e WHERE e.tape=c.value"
                   " ORDER BY e.ofs LIMIT 1) FROM carray(?) c",
                   default=())
    return {t: rows[t][0][1] for t in tape_rows if rows[t] and rows[t][0][1] is not None}
