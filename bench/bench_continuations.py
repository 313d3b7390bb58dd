"""The continuation pass alone on an ingested index (issue 22): ``continuations.compute`` over every
tape of the index, as the ingest's pass computes it over a whole corpus's new tapes, its row changes
written to a list (the index is only read; a ``cp -a`` of a home is not needed). Prints process CPU
seconds, peak traced memory (``--trace``), and a hash of the change list (same rows either way).

``--heads``: the run's ``IngestCache`` holds every tape's head input first (``keep_head`` of each
tape's events read back from its file, as the ingest keeps them while it writes the tapes); the
reading is not timed. Without it, every head is read back from its tape by the pass.

    PYTHONPATH=<tree> python bench/bench_continuations.py --home <ENGRAM_HOME> [--heads] [--profile N]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import time
import tracemalloc
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", required=True, help="an ENGRAM_HOME whose index is ingested")
    ap.add_argument("--heads", action="store_true", help="every tape's head input kept first")
    ap.add_argument("--profile", type=int, default=0, help="print the top N functions (cProfile, CPU clock)")
    ap.add_argument("--sort", default="cumulative", help="cProfile sort key")
    ap.add_argument("--trace", action="store_true", help="tracemalloc peak (slower)")
    a = ap.parse_args()

    from engram.index import db, queries
    from engram.lineage import continuations
    from engram.lineage.cache import CachedAccess, IngestCache
    from engram.tape import reader

    conn = db.connect(Path(a.home) / "index" / "index.sqlite", readonly=True, mmap=False)
    ids = [r[0] for r in conn.execute("SELECT id FROM tapes ORDER BY id")]
    trows = queries.tapes(conn, ids)
    cache = IngestCache()
    if a.heads:
        if not hasattr(cache, "keep_head"):
            raise SystemExit("--heads: this tree's IngestCache keeps no heads")
        import orjson
        for t in trows.values():
            if t.live or not t.path:
                continue
            lines = reader.raw_lines_cached(t.path)
            events = [orjson.loads(x) for x in lines[:min(t.n_events, 13)]]
            cache.keep_head(t.tape_id, events, events)
    ops: list = []
    stats = {"continuations": 0, "dispatch": 0}
    prof = cProfile.Profile(time.process_time) if a.profile else None
    if a.trace:
        tracemalloc.start()
    t0 = time.process_time()
    if prof:
        prof.enable()
    with conn:
        continuations.compute(conn, [trows[i] for i in ids], CachedAccess(conn, cache), stats, cache,
                              write=lambda sql, args: ops.append((sql, args)),
                              write_dispatch=lambda sql, args: ops.append((sql, args)))
    if prof:
        prof.disable()
    cpu = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1] if a.trace else None
    digest = hashlib.sha256(json.dumps(ops, default=str).encode()).hexdigest()[:16]
    print(json.dumps({"tapes": len(ids), "cpu_s": round(cpu, 2), "peak_traced_mb":
                      round(peak / 1e6, 1) if peak else None, "changes": len(ops), "hash": digest,
                      **stats}))
    if prof:
        pstats.Stats(prof).sort_stats(a.sort).print_stats(a.profile)


if __name__ == "__main__":
    main()
