"""The parse worker's CPU on a fixed set of logs: ``worker.parse_many`` (adapter, redaction, block
preparation, tapes compressed into a scratch directory) as the whole-corpus ingest runs it, in
groups, in this process; prints the process CPU seconds (``resource.getrusage``) and a digest of
what came back (the tape files' bytes and the prepared rows), so two trees can be compared on the
same logs. Run each tree in a fresh process (the redaction memo and caches start empty), e.g.

    cd /tmp && PYTHONPATH=<tree> python <tree>/bench/bench_parse.py --logs /tmp/scale/full/home --every 16

``--profile FILE``: cProfile (``time.process_time`` as its clock) into FILE as well.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import resource
import shutil
import sys
import tempfile
from pathlib import Path


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", default="/tmp/scale/full/home", help="a tree of Claude Code logs (*.jsonl)")
    ap.add_argument("--every", type=int, default=16, help="take every Nth log, sorted by path")
    ap.add_argument("--limit", type=int, default=0, help="at most this many logs (0: all taken)")
    ap.add_argument("--group", type=int, default=24, help="logs per parse_many call")
    ap.add_argument("--no-tapes", action="store_true", help="no tapes made (the parse and block work only)")
    ap.add_argument("--profile", default=None, help="cProfile output file")
    ap.add_argument("--digest", action="store_true", help="print a digest of the results (slower)")
    a = ap.parse_args()

    # imported before the clock starts (the worker imports them at its first parse)
    import engram.adapters.claude_code  # noqa: F401
    import engram.index.store  # noqa: F401
    import engram.lineage.cache  # noqa: F401
    import engram.tape.writer  # noqa: F401
    from engram.ingest import worker

    logs = sorted(str(p) for p in Path(a.logs).rglob("*.jsonl"))[::a.every]
    if a.limit:
        logs = logs[:a.limit]
    size = sum(os.path.getsize(p) for p in logs)
    root = tempfile.mkdtemp(prefix="bench-parse-")
    prof = None
    if a.profile:
        import cProfile
        import time
        prof = cProfile.Profile(time.process_time)
    h = hashlib.sha256()
    cpu = 0.0
    try:
        for i in range(0, len(logs), a.group):
            items = [("claude_code", p) for p in logs[i:i + a.group]]
            tapes = None if a.no_tapes else (root, [True] * len(items), True)
            c0 = _cpu()
            if prof is not None:
                prof.enable()
            res = worker.parse_many(items, "permissive", False, tapes)
            if prof is not None:
                prof.disable()
            cpu += _cpu() - c0
            bad = [r for r in res if r[0] == "crash"]
            if bad:
                sys.exit(f"a crash: {bad[0][1]}")
            if a.digest:
                for r in res:
                    if r[0] != "ok":
                        h.update(repr(r[:2]).encode())
                        continue
                    h.update(pickle.dumps([s.events for s in r[1].sessions], 5))
                    h.update(pickle.dumps(r[2], 5))
                    for ref, tmp, kept in (r[4] if len(r) > 4 else ()):
                        h.update(repr((ref, sorted(kept.items()))).encode())
                        if tmp:
                            h.update(Path(tmp).read_bytes())
                            os.unlink(tmp)
            else:
                for r in res:
                    for _ref, tmp, _kept in (r[4] if r[0] == "ok" and len(r) > 4 else ()):
                        if tmp:
                            os.unlink(tmp)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if prof is not None:
        prof.dump_stats(a.profile)
    dig = f" digest {h.hexdigest()[:16]}" if a.digest else ""
    print(f"logs {len(logs)} {size / 1e6:.1f} MB cpu {cpu:.3f} s{dig}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
