"""Where one big session's ingest holds its memory, phase by phase: ``engram ingest --seal`` run in
this process (the parse worker as usual) on a log that ``bench/bench_ingest_memory.py --logs DIR``
generated (``DIR/log<MB>``; its home and tapes are removed first), with

* the CLI's and the worker's ``RssAnon`` sampled every 100 ms, each sample's peak kept under the
  phase running then (the index transaction ``commit``, the lineage pass ``lineage`` and inside it
  ``link``, ``postings`` — a pass's fetch —, ``match_all``, ``cardinality``); a phase's label gets
  a ``+`` each time a phase nested in it ends;
* at each edge of the outer phases: CPU seconds, ``RssAnon``, glibc's heap (``mallinfo2``: in use,
  free, mapped apart), SQLite's own memory, and what the ingest cache keeps (lines, prints, rows);
* ``--census PHASE>,PHASE<``: the live Python objects by type at those edges (``gc``; a dict
  holding only atoms is not tracked, so what it holds is not counted);
* ``--trace PHASE``: ``tracemalloc`` over that phase (``--frames`` deep): what was allocated in it
  and still lives at its end, by traceback (slow: ~3x on the lineage pass).

Memory outside glibc's heap (``RssAnon`` less in use, free and mapped) is mostly Python's own
arenas of small objects.

    python bench/bench_ingest_phases.py DIR/log400 [--src TREE] [--census 'link>,lineage<']
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import os
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def _anon(pid: int | str = "self") -> int:
    """``RssAnon`` of ``pid`` in MB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith("RssAnon"):
                    return int(ln.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _worker_anon() -> int:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return max([_anon(int(c)) for c in f.read().split()] or [0])
    except OSError:
        return 0


class Phases:
    def __init__(self, census: set[str], trace: str | None, frames: int):
        self.label, self.peaks, self.cache = "start", {}, None
        self.census, self.trace, self.frames = census, trace, frames
        self.t0 = time.process_time()
        self._traced = None
        libc = ctypes.CDLL(None)
        self.mallinfo = getattr(libc, "mallinfo2", None)
        if self.mallinfo is not None:
            self.mallinfo.restype = _MallInfo2
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            peak = self.peaks.setdefault(self.label, [0, 0])
            peak[0], peak[1] = max(peak[0], _anon()), max(peak[1], _worker_anon())
            time.sleep(0.1)

    def edge(self, label: str) -> None:
        import apsw

        heap = ""
        if self.mallinfo is not None:
            m = self.mallinfo()
            heap = f" heap in use {m.uordblks >> 20} free {m.fordblks >> 20} mapped {m.hblkhd >> 20}"
        c = self.cache
        kept = (f" | cache lines {c.lines_bytes / 1e6:.1f} MB prints {c.prints_bytes / 1e6:.1f} MB"
                f" rows {c._post_rows / 1e6:.2f} M" if c is not None else "")
        print(f"[{label}] cpu {time.process_time() - self.t0:.1f} s | RssAnon {_anon()} MB, worker "
              f"{_worker_anon()} MB |{heap} | sqlite {apsw.status(apsw.SQLITE_STATUS_MEMORY_USED)[0] >> 20}"
              f"{kept}", flush=True)
        if label in self.census:
            self._census(label)

    def _census(self, label: str) -> None:
        size, count = collections.Counter(), collections.Counter()
        for o in gc.get_objects():
            size[type(o).__name__] += sys.getsizeof(o)
            count[type(o).__name__] += 1
        top = ", ".join(f"{k} {v / 1e6:.1f} MB ({count[k]:,})" for k, v in size.most_common(10))
        print(f"  objects at {label}: {top}", flush=True)

    def wrap(self, owner, name: str, label: str, edges: bool = True) -> None:
        inner = getattr(owner, name)

        def phase(*args, **kwargs):
            outer, self.label = self.label, label
            if edges:
                self.edge(label + ">")
            if label == self.trace:
                import tracemalloc

                tracemalloc.start(self.frames)
                self._traced = tracemalloc.take_snapshot()
            try:
                return inner(*args, **kwargs)
            finally:
                if label == self.trace:
                    self._report_trace()
                if edges:
                    self.edge(label + "<")
                self.label = outer + "+"

        setattr(owner, name, phase)

    def _report_trace(self) -> None:
        import tracemalloc

        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = snap.compare_to(self._traced, "traceback")
        print(f"  traced in {self.trace}, still alive at its end (top 15 of {len(grown)}):", flush=True)
        for st in grown[:15]:
            where = " <- ".join(f"{Path(fr.filename).name}:{fr.lineno}" for fr in reversed(st.traceback))
            print(f"    {st.size_diff / 1e6:+.2f} MB ({st.count_diff:+,}): {where}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="a DIR/log<MB> of bench_ingest_memory.py --logs DIR")
    ap.add_argument("--src", type=Path, default=REPO, help="the source tree to run engram from")
    ap.add_argument("--census", default="", help="edges (e.g. 'link>,lineage<') to count objects at")
    ap.add_argument("--trace", help="a phase to run under tracemalloc (e.g. link)")
    ap.add_argument("--frames", type=int, default=4)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(a.src.resolve()))
    tmp = a.log.resolve()
    root, home = tmp / "repo", tmp / "engram-home"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(root / ".engram" / "tapes", ignore_errors=True)
    shutil.rmtree(root / ".engram-cache", ignore_errors=True)
    os.environ.update(ENGRAM_HOME=str(home), HOME=str(tmp / "home"), ENGRAM_NO_PROGRESS="1")
    os.chdir(root)
    from engram import cli
    from engram.index import store
    from engram.ingest import ingestor
    from engram.lineage import continuations, derive, edges

    ph = Phases({x for x in a.census.split(",") if x}, a.trace, a.frames)
    made = ingestor._ingest_cache

    def cache():
        ph.cache = made()
        return ph.cache

    ingestor._ingest_cache = cache
    ph.wrap(store.Batch, "commit", "commit")
    ph.wrap(derive, "after_ingest", "lineage")
    ph.wrap(edges.Linker, "_link", "link")
    ph.wrap(edges.Postings, "__init__", "postings", edges=False)
    ph.wrap(edges.Postings, "match_all", "match_all", edges=False)
    ph.wrap(edges.Linker, "_cardinality", "cardinality")
    ph.wrap(continuations, "compute_here", "continuations")
    load0 = os.getloadavg()[0]
    rc = cli.main(["ingest", "--seal"])
    ph.edge("end")
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print("peak RssAnon by phase, CLI / worker MB: " + ", ".join(
        f"{k} {v[0]}/{v[1]}" for k, v in ph.peaks.items()))
    print(f"CLI CPU {me.ru_utime + me.ru_stime:.1f} s, peak RSS {me.ru_maxrss >> 10} MB; worker CPU "
          f"{kids.ru_utime + kids.ru_stime:.1f} s, peak RSS {kids.ru_maxrss >> 10} MB; load "
          f"{load0:.1f}-{os.getloadavg()[0]:.1f}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
