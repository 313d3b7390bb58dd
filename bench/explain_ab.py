"""Compare explain latency of two or more versions of the code on one built index.

This VM's speed moves by 10-20% from one minute to the next. A single pass's p95 cannot tell a 5%
change from noise. This script runs fresh-process passes over every truth span of the corpus,
alternating between the versions (A B, then B A, ...). It reports each version's per-run p95 and
also the **p95 of each span's minimum** over the runs. A span's minimum drops the moments the
host was slow. What remains is what the code costs, and it moves by a few percent between
sessions, not 20%.

Each pass is what ``accuracy.py`` times: one process, ``Engine.explain`` on every span in
``truth.json`` order, on the index ``accuracy.py`` built (run it first; ``--no-ingest`` keeps the
index). A version is a directory that holds an engram source tree, or a git revision: its tree is
checked out into a temporary worktree, removed at the end. Every version must read the same index
(the same schema and fingerprint parameters).

    python bench/accuracy.py                                   # builds the index once
    python bench/explain_ab.py HEAD~1 HEAD                     # JSON
    python bench/explain_ab.py --runs 6 --pretty HEAD~1 .      # a table; "." is the working tree

``--mcp`` times what a fresh ``engram mcp`` meets instead: the MCP part of ``bench_agents.py``
(its 200-span sample, asked twice, by file path as the tool asks, on the index and repository
copy that ``bench_agents.py --out OUT`` left: ``--out bench/out/agents``); ``--cpu`` times each
explain by the thread's CPU (``time.thread_time``) rather than the wall clock, which a machine
shared with other work inflates by whatever else runs. The report adds each run's p50 and the
first and second pass's p95 (a fresh process meets every file, tape and lineage row for the
first time in the first).

    python bench/bench_agents.py --only mcp                   # builds its index once
    python bench/explain_ab.py --mcp --cpu --out bench/out/agents --runs 6 --pretty HEAD~3 .

``--scale DIR --engram-home COPY`` times the scale corpus's (``bench_scale.py --out DIR``) spans
that its language-server part explains (100 spans of ``click``), twice, with the file's text, on
``COPY``: a ``cp -a`` of ``DIR/engram-home`` (explain writes its retrieval log there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accuracy import pct  # (this directory; the percentile accuracy.py reports)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def one_pass(src: Path, corpus: Path, mcp: Path | None = None, cpu: bool = False,
             scale: Path | None = None) -> list[float]:
    """Milliseconds of each truth span's explain, in this process (imports engram from ``src``);
    with ``mcp`` (``bench_agents.py``'s repository copy), of its MCP sample twice, asked by path;
    with ``scale`` (``bench_scale.py``'s --out), of its language-server spans twice; with ``cpu``,
    the thread's CPU time."""
    sys.path.insert(0, str(src))
    import engram
    from engram.engine import Engine

    if not Path(engram.__file__).resolve().is_relative_to(src.resolve()):
        raise SystemExit(f"explain_ab: engram was imported from {engram.__file__}, not from {src}")

    clock = time.thread_time if cpu else time.perf_counter
    if scale is not None:
        import random

        repo = scale / "repos" / "click"
        pool = [x for x in json.loads((scale / "truth" / "spans.json").read_text())
                if x["repo"] == repo.name and x["end"] - x["start"] >= 2]
        sample = random.Random(5).sample(pool, min(100, len(pool)))  # bench_scale.py's lsp
        eng = Engine(root=repo, semantic=False)
        eng.conn()
        return with_texts(eng, repo, sample + sample, clock)
    truth = json.loads((corpus / "truth.json").read_text())
    if mcp is not None:
        import random

        from bench_agents import spans  # (after engram: it puts this checkout first on sys.path)

        os.chdir(mcp)
        eng = Engine(root=mcp, semantic=False)
        eng.conn()
        sample = spans(truth, 200, random.Random(25), [])
        lat = []
        for x in sample + sample:
            t0 = clock()
            eng.explain(x["file"], x["start"], x["end"], client="bench")
            lat.append((clock() - t0) * 1000)
        return lat
    repo = corpus / "repo"
    return with_texts(Engine(root=repo), repo, truth, clock)


def with_texts(eng, repo: Path, spans: list[dict], clock) -> list[float]:
    """Milliseconds of each span's explain by ``clock``, the file's text given (read once)."""
    texts: dict[str, str] = {}
    lat = []
    for x in spans:
        f = x["file"]
        if f not in texts:
            texts[f] = (repo / f).read_text()
        t0 = clock()
        eng.explain(str(repo / f), x["start"], x["end"], text=texts[f])
        lat.append((clock() - t0) * 1000)
    return lat


def resolve(version: str, scratch: Path) -> tuple[Path, bool]:
    """``(source tree, made a worktree for it)``."""
    p = Path(version)
    if (p / "engram" / "engine.py").exists():
        return p.resolve(), False
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{version}^{{commit}}"],
                         capture_output=True, text=True)
    if rev.returncode != 0:
        raise SystemExit(f"explain_ab: {version!r} is neither a source tree nor a git revision")
    wt = scratch / f"v{len(list(scratch.iterdir()))}-{rev.stdout.strip()[:10]}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(wt),
                    rev.stdout.strip()], check=True)
    return wt, True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("versions", nargs="*", help="source trees or git revisions (two or more)")
    ap.add_argument("--corpus", type=Path, default=HERE / "corpus" / "full")
    ap.add_argument("--out", type=Path, default=HERE / "out",
                    help="accuracy.py's --out (the index's HOME is <out>/home-<corpus name>)")
    ap.add_argument("--runs", type=int, default=5, help="passes per version (default 5)")
    ap.add_argument("--pretty", action="store_true", help="a table instead of JSON")
    ap.add_argument("--mcp", action="store_true",
                    help="bench_agents.py's MCP sample, twice, on its --out (see above)")
    ap.add_argument("--scale", type=Path, help="bench_scale.py's --out (see above)")
    ap.add_argument("--engram-home", type=Path, help="with --scale: a copy of its engram-home")
    ap.add_argument("--cpu", action="store_true", help="thread CPU time instead of the wall clock")
    ap.add_argument("--pass", dest="one", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    corpus = a.corpus.resolve()
    mcp = (a.out / "repo").resolve() if a.mcp else None
    scale = a.scale.resolve() if a.scale else None
    if a.one is not None:  # a child: one pass, latencies as JSON on stdout
        print(json.dumps(one_pass(a.one, corpus, mcp, a.cpu, scale)))
        return 0
    if scale is not None:
        home = a.engram_home.resolve() if a.engram_home else None
        if home is None or not (home / "index" / "index.sqlite").exists() \
                or not (scale / "truth" / "spans.json").exists():
            print("explain_ab: --scale needs bench_scale.py's --out and --engram-home, a copy of "
                  "its engram-home", file=sys.stderr)
            return 2
        env = dict(os.environ, HOME=str(scale / "home"), ENGRAM_HOME=str(home))
    else:
        home = (a.out / f"home-{corpus.name}").resolve()
        if not (corpus / "truth.json").exists() or not (home / "index" / "index.sqlite").exists() \
                or not home.exists() or (mcp is not None and not mcp.is_dir()):
            print(f"explain_ab: no built index for {corpus} (run: python bench/"
                  f"{'bench_agents.py --only mcp' if a.mcp else 'accuracy.py'} "
                  f"--corpus {a.corpus} --out {a.out})", file=sys.stderr)
            return 2
        env = dict(os.environ, HOME=str(home), ENGRAM_HOME=str(home))
    if len(a.versions) < 2 or a.runs < 1:
        ap.error("give two or more versions and --runs of at least 1")
    with tempfile.TemporaryDirectory(prefix="engram-ab-") as tmp:
        scratch = Path(tmp)
        trees = [resolve(v, scratch) for v in a.versions]
        runs: dict[int, list[list[float]]] = {i: [] for i in range(len(trees))}
        try:
            for r in range(a.runs):
                order = list(range(len(trees)))
                for i in (order if r % 2 == 0 else order[::-1]):
                    p = subprocess.run([sys.executable, __file__, "--corpus", str(corpus),
                                        "--out", str(a.out.resolve()), "--pass", str(trees[i][0]),
                                        *(["--mcp"] if a.mcp else []), *(["--cpu"] if a.cpu else []),
                                        *(["--scale", str(scale)] if scale else [])],
                                       env=env, capture_output=True, text=True)
                    if p.returncode != 0:
                        print(f"explain_ab: a pass of {a.versions[i]} failed:\n{p.stderr[-2000:]}",
                              file=sys.stderr)
                        return 1
                    runs[i].append(json.loads(p.stdout))
                    if sys.stderr.isatty():
                        print(f"\rrun {r + 1}/{a.runs}", end="", file=sys.stderr, flush=True)
            if sys.stderr.isatty():
                print(file=sys.stderr)
        finally:
            for tree, made in trees:
                if made:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                                    str(tree)], capture_output=True)
    out = []
    for i, v in enumerate(a.versions):
        per_run = runs[i]
        mins = [min(xs) for xs in zip(*per_run)]
        p95s = [round(pct(xs, 0.95), 3) for xs in per_run]
        p50s = [round(pct(xs, 0.5), 3) for xs in per_run]
        half = len(per_run[0]) // 2
        out.append({"version": v, "spans": len(mins), "runs": len(per_run),
                    "p95_per_run": p95s, "p95_median_of_runs": round(statistics.median(p95s), 3),
                    "p50_per_run": p50s, "p50_median_of_runs": round(statistics.median(p50s), 3),
                    "mean_median_of_runs": round(statistics.median(statistics.fmean(xs) for xs in per_run), 3),
                    **({"p95_first_pass_median_of_runs": round(statistics.median(
                        pct(xs[:half], 0.95) for xs in per_run), 3),
                        "p95_second_pass_median_of_runs": round(statistics.median(
                            pct(xs[half:], 0.95) for xs in per_run), 3)} if a.mcp or scale else {}),
                    "p95_of_span_min": round(pct(mins, 0.95), 3),
                    "p50_of_span_min": round(pct(mins, 0.5), 3),
                    "mean_of_span_min": round(statistics.fmean(mins), 3)})
    if a.pretty:
        print("| version | p95 per run (ms) | median | p50 median | p95 of span min | p50 of span min "
              "| mean of span min |")
        print("|---|---|---|---|---|---|---|")
        for o in out:
            print(f"| {o['version']} | {' '.join(f'{x:.2f}' for x in o['p95_per_run'])} | "
                  f"{o['p95_median_of_runs']:.2f} | {o['p50_median_of_runs']:.2f} | "
                  f"**{o['p95_of_span_min']:.2f}** | {o['p50_of_span_min']:.2f} | "
                  f"{o['mean_of_span_min']:.3f} |")
        if a.mcp or scale:
            print("\n| version | mean, median of runs | p95 first pass | p95 second pass |")
            print("|---|---|---|---|")
            for o in out:
                print(f"| {o['version']} | {o['mean_median_of_runs']:.2f} | "
                      f"{o['p95_first_pass_median_of_runs']:.2f} | "
                      f"{o['p95_second_pass_median_of_runs']:.2f} |")
    else:
        print(json.dumps({"corpus": str(corpus), "versions": out}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
