"""The lineage pass of an ingest: edges, tombstones and continuations for the tapes not processed
yet (the rules are in ``rules.py``; the work in ``edges.py`` and ``continuations.py``)."""

from __future__ import annotations

import logging
import time

import apsw

from engram.index import queries
from engram.lineage import continuations, edges
from engram.lineage.cache import IngestCache
from engram.tape import reader

log = logging.getLogger(__name__)

TAPE_CACHE_BYTES = 16 << 20
"""The tape reader's LRU during the pass (``reader.capped``): it reads each new tape's edits once
(those the ingest did not keep) and few tapes again, so a fuller LRU saves little; at the reader's
own budget (128 MiB) what the ingest held grew with the tapes read, up to that."""


def after_ingest(conn: apsw.Connection, cache=None) -> dict:
    """Compute edges, tombstones and continuations for tapes not processed yet (incremental).
    ``cache``: what the ingest run kept of its sessions (``cache.IngestCache``), if any."""
    t0 = time.perf_counter()
    stats = {"tapes": 0, "edits": 0, "edges": 0, "location_only": 0, "agent_links": 0,
             "tombstones": 0, "continuations": 0, "dispatch": 0}
    with reader.capped(TAPE_CACHE_BYTES):
        _after_ingest(conn, cache, stats)
    if stats["tapes"]:
        stats["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return stats


def _after_ingest(conn: apsw.Connection, cache, stats: dict) -> None:
    with conn:
        tapes = {r[0]: r for r in conn.execute(
            "SELECT tape_id, id, (SELECT min(id) FROM events WHERE tape=tapes.id), n_events"
            " FROM tapes")}
        done = dict(conn.execute("SELECT tape_id, sig FROM lineage_done"))
        gone = [t for t in done if t not in tapes]
        for t in gone:
            conn.execute("DELETE FROM lineage_done WHERE tape_id=?", (t,))
        new_rows = []
        for tid, (_, rowid, first, n) in sorted(tapes.items()):
            sig = f"{rowid}:{first}:{n}"
            if done.get(tid) != sig:
                new_rows.append((tid, rowid, sig))
        if not new_rows:
            return
        trows = queries.tapes(conn, [r[1] for r in new_rows])
        linker = edges.Linker(conn, stats, cache if cache is not None else IngestCache())
        # continuations in the parse worker (a process of its own), if the run has one, while
        # the edges are computed here; when many tapes are new, the two share the pass (this
        # process takes the groups of tapes the worker has not taken once its edges are done)
        new_trows = [trows[r[1]] for r in new_rows]
        remote = continuations.submit_remote(conn, [r[1] for r in new_rows], cache)
        t_edges = time.thread_time()
        linker.run(new_trows)
        t_edges = time.thread_time() - t_edges
        continuations.compute_here(conn, remote, new_trows, linker.access, linker.cache)
        if not continuations.apply_remote(conn, remote, stats):
            continuations.compute(conn, new_trows, linker.access, stats, linker.cache)
        elif remote is not None:
            log.info("lineage: edges %.1f CPU-s; continuations %.1f CPU-s here, %.1f in the worker",
                     t_edges, remote.cpu.get("here", 0.0), remote.cpu.get("worker", 0.0))
        conn.executemany("INSERT OR REPLACE INTO lineage_done VALUES (?,?)",
                         [(tid, sig) for tid, _, sig in new_rows])
        stats["tapes"] = len(new_rows)
