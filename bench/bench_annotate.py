"""Line annotation latency: ``engram/annotate`` on 5,000-line files of real code, over stdio.

The same setting as ``bench_lsp.py`` (its corpus, its index, its minimal JSON-RPC client): one
server process, startup ingest done and its background reading settled, then

* ``first``: the first ``engram/annotate`` of a 5,000-line text the server has not seen (each
  trial a different 5,000-line window of the corpus's largest Python files joined, so no cache
  helps: every line is blamed afresh; an edit to a buffer costs the same, blame is not incremental);
* ``cached``: the same buffer asked again (cached per buffer version and index generation).

By default the next window is opened as soon as the previous one is closed (a few ms after its
answers), so each ``first`` request also meets the server's background work for the previous
buffer (the tree-sitter parse hovers need, 15-150 ms of CPU for these windows, started 50 ms after
an open); ``--pause S`` waits S seconds after each close, as a person opening one file after
another would, so that ``first`` measures the request alone.

Also reported: lines marked, sessions and runs of the first window (what the editor draws), and
``in_process_cpu``: the CPU time (``time.thread_time``) of what the server computes for each
window (``Engine.annotate`` with the postings held in memory, as the server holds them), in this
process after the LSP run — the figure that does not depend on the neighbours' load.
Target (issue 23): ≤ 50 ms for a 5,000-line file. The machine is shared: ``uptime``'s load is
recorded with the figures; compare runs taken close together.

Run: ``python bench/bench_annotate.py [--n 15] [--pause 0] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_lsp  # noqa: E402

LINES = 5000


def windows(repo: Path, n: int) -> list[str]:
    """``n`` different 5,000-line texts of real code: windows into the largest files joined."""
    text = "\n\n".join(p.read_text() for p in bench_lsp.big_parts(repo, LINES * 2))
    lines = text.split("\n")
    step = max(1, (len(lines) - LINES) // max(n, 1))
    return ["\n".join(lines[i * step: i * step + LINES]) + "\n" for i in range(n)]


def _proc_cpu_ms(pid: int) -> float | None:
    """User + system CPU of process ``pid`` so far (Linux ``/proc``), milliseconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def in_process_cpu(repo: Path, index: Path, texts: list[str]) -> list[float]:
    """Milliseconds of CPU (this thread) of ``Engine.annotate`` per window, postings held."""
    from engram.engine import Engine

    eng = Engine(repo, index_path=index, semantic=False)
    try:
        eng.hold_postings()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (eng.postings_status() or {}).get("postings") is None:
            time.sleep(0.05)  # read in the background: until then lookups go to SQLite
        eng.annotate(str(repo / "_bench_annotate_warm.py"), texts[0])  # connections, memos
        out = []
        for i, text in enumerate(texts):
            t0 = time.thread_time()
            eng.annotate(str(repo / f"_bench_annotate_{i}.py"), text)
            out.append((time.thread_time() - t0) * 1000)
        return out
    finally:
        eng.close()


async def run(args) -> dict:
    corpus = bench_lsp.find_corpus(args.corpus)
    work = Path(args.work) if args.work else HERE / "out" / "lsp"
    repo, env, settings = bench_lsp.prepare(corpus, work, False)
    index = repo / ".engram-cache" / "index.sqlite"
    settings = {**settings, "indexPath": str(index)}  # the index bench_lsp built
    client, _init_ms, status = await bench_lsp.launch(repo, env, settings)
    try:
        await bench_lsp.settle(client)
        texts = windows(repo, args.n)
        first, cached, shape, server_cpu = [], [], None, []
        for i, text in enumerate(texts):
            c0 = _proc_cpu_ms(client.proc.pid)
            uri = bench_lsp.did_open(client, repo / f"_bench_annotate_{i}.py", text)
            params = {"textDocument": {"uri": uri}}
            t0 = time.perf_counter()
            result = await client.request("engram/annotate", params)
            first.append((time.perf_counter() - t0) * 1000)
            c1 = _proc_cpu_ms(client.proc.pid)
            if c0 is not None and c1 is not None:
                server_cpu.append(c1 - c0)
            t0 = time.perf_counter()
            await client.request("engram/annotate", params)
            cached.append((time.perf_counter() - t0) * 1000)
            if shape is None:
                shape = {"lines": result["lines"], "sessions": len(result["sessions"]),
                         "runs": len(result["runs"]),
                         "marked": sum(r["end"] - r["start"] + 1 for r in result["runs"])}
            client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
            if args.pause:
                await asyncio.sleep(args.pause)
    finally:
        await client.stop()
    cpu = in_process_cpu(repo, index, texts)
    return {
        "in_process_cpu": bench_lsp.summary(cpu),
        "first": bench_lsp.summary(first),
        # the server process's CPU (all its threads) from the didOpen to the first answer, in
        # clock ticks (10 ms): the mean is the figure
        "server_cpu_open_to_first_answer_ms": bench_lsp.summary(server_cpu) if server_cpu else None,
        "cached": bench_lsp.summary(cached),
        "first_window": shape,
        "sessions_indexed": (status.get("counts") or {}).get("sessions"),
        "n": args.n,
        "pause_s": args.pause,
        "machine": {"cpus": os.cpu_count(), "load": os.getloadavg(), "python": platform.python_version()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--n", type=int, default=15)
    ap.add_argument("--work", default=None,
                    help="bench_lsp's working directory (default bench/out/lsp; a copy keeps runs apart)")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds to wait after closing one window before opening the next")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    out = asyncio.run(run(args))
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
