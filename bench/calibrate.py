"""Calibrate the fingerprint parameters k (tokens per k-gram) and w (winnowing window).

Runs bench/accuracy.py once per (k, w) on the same corpus, each with a fresh index, and prints
origin@1, explain latency, ingest throughput and index size per setting. The defaults in
engram/fingerprint/winnow.py are the chosen row (see docs/benchmarks.md).

    python bench/calibrate.py --grid 5:8 5:12 4:8 6:10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", nargs="+", default=["5:8", "5:12", "4:8", "6:10", "5:16"])
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--no-lineage", action="store_true",
                    help="measure the direct pass only (faster ingest)")
    a = ap.parse_args(argv)
    rows = []
    for kw in a.grid:
        k, w = kw.split(":")
        env = dict(os.environ, ENGRAM_CALIBRATE_K=k, ENGRAM_CALIBRATE_W=w)
        out = HERE / "out" / f"calib-k{k}-w{w}"
        cmd = [sys.executable, str(HERE / "accuracy.py"), "--cli-sample", "0", "--out", str(out)]
        if a.limit:
            cmd += ["--limit", str(a.limit)]
        if a.no_lineage:
            cmd += ["--no-lineage"]
        print(f"k={k} w={w}: {' '.join(cmd)}", file=sys.stderr)
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        res = json.loads(next(out.glob("accuracy-*.json")).read_text())
        rows.append((k, w, res["origin_at_1"], res["explain_ms"]["p50"], res["explain_ms"]["p95"],
                     res.get("ingest", {}).get("mb_per_s"), res["index"]["ratio"]))
    print("| k | w | origin@1 | explain p50 ms | explain p95 ms | ingest MB/s | index/raw |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
