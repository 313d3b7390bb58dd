"""Parse throughput per harness adapter (MB of harness log per second), on the sample logs in
tests/data/harness/ — adapter parsing plus redaction (``finish_session``), no tapes, no index.

    python bench/bench_adapters.py [--repeat 5]

Each source is parsed ``--repeat`` times; the best wall time per adapter is reported. The sample
logs are small (KB to a few MB), so per-call overheads weigh more than on a real ~/.claude.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "data" / "harness"
sys.path.insert(0, str(HERE.parent))


def size_of(p: Path) -> int:
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size


def sample_sources(name: str, root: Path) -> list[Path]:
    """The sample logs of one harness as sources (files named as in the fixtures, not as the
    harness names them on disk, so they are listed rather than discovered)."""
    if name == "opencode":
        return sorted(p for p in [*root.glob("sqlite/*.db"), root / "storage_v2"] if p.exists())
    skip = {"SOURCES.md"}
    out = []
    for p in sorted(root.iterdir()):
        if p.name in skip or p.is_dir() or p.name.endswith(".aider.input.history"):
            continue
        out.append(p)
    return out


def main(argv=None) -> int:
    from engram import adapters
    from engram.adapters import redact

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print("| adapter | sources | MB | events | best s | MB/s |")
    print("|---|---|---|---|---|---|")
    for name in sorted(adapters.REGISTRY):
        ad = adapters.get(name)
        root = DATA / name
        if not root.exists():
            continue
        sources = sample_sources(name, root)
        mb = sum(size_of(s) for s in sources) / 1e6
        best, events = None, 0
        for _ in range(a.repeat):
            redact._redact_cached.cache_clear()  # no help from an earlier repeat
            t0 = time.perf_counter()
            n = 0
            for s in sources:
                out = ad.parse_source(s)
                n += sum(len(x.events) for x in out.sessions)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
            events = n
        print(f"| {name} | {len(sources)} | {mb:.2f} | {events} | {best:.3f} | {mb / best:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
