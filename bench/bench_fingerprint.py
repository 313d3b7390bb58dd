"""Fingerprinting throughput on real code: MB/s of UTF-8 input, per stage.

Corpus: ``.py`` files from this interpreter's site-packages (sorted, so runs are comparable),
up to ``--mb`` megabytes. Prints a table:
``.venv/bin/python bench/bench_fingerprint.py [--mb 20] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import site
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled
from engram.fingerprint import (  # noqa: E402
    DEFAULT_K,
    DEFAULT_W,
    all_kgrams,
    fingerprint,
    fingerprint_batch,
    tokenize,
)


def corpus(mb: float) -> list[str]:
    budget = int(mb * 1e6)
    texts: list[str] = []
    for root in site.getsitepackages():
        for path in sorted(Path(root).rglob("*.py")):
            try:
                text = path.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            texts.append(text)
            budget -= len(text.encode("utf-8"))
            if budget <= 0:
                return texts
    return texts


def best_of(fn, repeat: int) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds of ``repeat`` runs (CPU time is the fairer figure on
    a shared machine: numpy runs these kernels on one thread)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=20.0, help="corpus size in MB (default 20)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    ap.add_argument("-k", type=int, default=DEFAULT_K)
    ap.add_argument("-w", type=int, default=DEFAULT_W)
    args = ap.parse_args(argv)

    texts = corpus(args.mb)
    size = sum(len(t.encode("utf-8")) for t in texts)
    joined = "\n".join(texts)
    fps = fingerprint_batch(texts, args.k, args.w)
    n_tok = sum(f.n_tokens for f in fps)
    n_fp = sum(len(f.hashes) for f in fps)
    chunks = [joined[i:i + 1_000_000] for i in range(0, len(joined), 1_000_000)]
    rows = [
        ("tokenize (one text)", lambda: tokenize(joined)),
        ("all_kgrams (one text)", lambda: all_kgrams(joined, args.k)),
        ("fingerprint (one text)", lambda: fingerprint(joined, args.k, args.w)),
        (f"fingerprint_batch ({len(texts)} files)",
         lambda: fingerprint_batch(texts, args.k, args.w)),
        (f"fingerprint_batch x{len(chunks)} (1 MB batches)",
         lambda: [fingerprint_batch([c], args.k, args.w) for c in chunks]),
    ]
    print(f"corpus: {len(texts)} files, {size / 1e6:.1f} MB, {n_tok:,} tokens, "
          f"{n_fp:,} fingerprints (k={args.k}, w={args.w}, density {n_fp / max(n_tok, 1):.3f}); "
          f"numpy {np.__version__}, python {sys.version.split()[0]}")
    print(f"{'stage':<44} {'wall s':>8} {'MB/s':>8} {'cpu s':>8} {'MB/cpu-s':>9}")
    for name, fn in rows:
        wall, cpu = best_of(fn, args.repeat)
        mb = size / 1e6
        print(f"{name:<44} {wall:>8.3f} {mb / wall:>8.1f} {cpu:>8.3f} {mb / cpu:>9.1f}")


if __name__ == "__main__":
    main()
