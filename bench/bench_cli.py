"""``engram explain`` from a shell, as an agent's loop runs it (issue 22: ≤ 150 ms p50 wall).

On an index built by ``bench/bench_scale.py`` (``--out`` of that run; pass a *copy* of its
``engram-home`` with ``--home``: ``engram serve`` writes its socket there), for a fixed sample of
truth spans, alternating call by call:

* ``in-process``: ``engram explain FILE:A-B`` with ``ENGRAM_NO_SERVE=1`` (a fresh process does
  everything: Python, imports, opening the index, the query);
* ``served``: the same command while ``engram serve`` runs (the client sends the command line to
  the warm process and prints its answer);
* ``python``: ``python -c pass``, the floor of any process.

Reports wall p50/p95 and the CPU time of each process (user + system, ``RUSAGE_CHILDREN``: the
figure a loaded machine does not distort as much), the load average, and checks that every
served answer is the in-process one (stdout, stderr, exit status; ``stats.elapsed_ms`` aside).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _cpu_ms() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r.ru_utime + r.ru_stime) * 1000


def _summ(xs: list[float]) -> dict:
    ys = sorted(xs)
    return {"n": len(ys), "p50": round(statistics.median(ys), 1),
            "p95": round(ys[min(len(ys) - 1, int(round(0.95 * (len(ys) - 1))))], 1),
            "min": round(ys[0], 1)}


def _untimed(out: str) -> str:
    try:
        obj = json.loads(out)
    except ValueError:
        return out
    if isinstance(obj, dict):
        obj.get("stats", {}).pop("elapsed_ms", None)
    return json.dumps(obj, sort_keys=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="a bench_scale.py --out directory")
    ap.add_argument("--home", type=Path, required=True, help="ENGRAM_HOME (a copy of <out>/engram-home)")
    ap.add_argument("-n", type=int, default=20, help="spans")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args(argv)

    exe = str(Path(sys.executable).parent / "engram")
    env = dict(os.environ, HOME=str(a.out / "home"), ENGRAM_HOME=str(a.home.resolve()))
    env.pop("ENGRAM_NO_SERVE", None)
    spans = [x for x in json.loads((a.out / "truth" / "spans.json").read_text())
             if x["end"] - x["start"] >= 2]
    spans = random.Random(11).sample(spans, min(a.n, len(spans)))
    repos = a.out / "repos"

    log = a.home / "bench-serve.log"
    server = subprocess.Popen([exe, "serve", "-v"], env=env, stdout=subprocess.DEVNULL,
                              stderr=log.open("w"), cwd=str(repos))
    try:
        deadline = time.monotonic() + 120
        while "answering" not in log.read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"engram serve did not start: {log.read_text()}")
            time.sleep(0.1)
        modes = {"in-process": dict(env, ENGRAM_NO_SERVE="1"), "served": env}
        wall: dict[str, list[float]] = {m: [] for m in [*modes, "python"]}
        cpu: dict[str, list[float]] = {m: [] for m in wall}
        differ, errors = [], []
        load0 = os.getloadavg()[0]
        for _ in range(a.rounds):
            for x in spans:
                answers = {}
                for mode, e in modes.items():
                    t0, c0 = time.perf_counter(), _cpu_ms()
                    p = subprocess.run([exe, "explain", f"{x['file']}:{x['start']}-{x['end']}"],
                                       cwd=repos / x["repo"], env=e, capture_output=True, text=True)
                    wall[mode].append((time.perf_counter() - t0) * 1000)
                    cpu[mode].append(_cpu_ms() - c0)
                    answers[mode] = (p.returncode, _untimed(p.stdout), p.stderr)
                    if p.returncode:
                        errors.append(p.stderr[-300:])
                if answers["served"] != answers["in-process"]:
                    differ.append(f"{x['file']}:{x['start']}-{x['end']}")
                t0, c0 = time.perf_counter(), _cpu_ms()
                subprocess.run([sys.executable, "-c", "pass"], env=env)
                wall["python"].append((time.perf_counter() - t0) * 1000)
                cpu["python"].append(_cpu_ms() - c0)
        served = log.read_text().count("serve: answered")
    finally:
        server.terminate()
        server.wait(timeout=30)
    res = {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                       "cpus": os.cpu_count(), "load_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]},
           "spans": len(spans), "rounds": a.rounds, "served_by_server": served,
           "answers_differ": differ, "errors": errors[:3],
           **{m: {"wall_ms": _summ(wall[m]), "cpu_ms": _summ(cpu[m])} for m in wall}}
    print(json.dumps(res, indent=2))
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
