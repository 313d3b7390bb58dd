"""The agents' surface on the 1,000-session corpus (``bench/corpus/full``): issue 25's targets.

1. **MCP explain latency**: ``engram mcp`` as a process, driven by the official SDK's stdio
   client; p50/p95 of the round trip of ``explain`` on a fixed sample of truth spans (target:
   p95 ≤ 20 ms), next to the same explains in-process (the protocol's share).
2. **brief**: time and size of ``Engine.brief`` on files of the corpus repository and on the
   whole repository, warm (as the MCP server answers) and as a cold ``engram brief`` process
   (target: ≤ 200 ms, within the 1,500-token budget). The token estimate is checked against the
   o200k and cl100k BPE tokenizers (``bpe-openai``, when installed): it must never count fewer.
3. **notes**: notes on ``--notes`` non-overlapping truth spans; then unrelated lines are inserted
   above them (every note's code moves) → recall = notes explain returns, not stale, at the
   moved lines (target ≥ 0.95); explain on as many *other* spans → notes shown there (target 0);
   then one line inside each noted span is changed → stale recall = notes returned with
   ``stale: true`` (target ≥ 0.95).

Works on a copy of the corpus repository under ``--out`` (the corpus is never changed), with an
isolated HOME/ENGRAM_HOME whose config reads only the corpus logs (as ``bench/accuracy.py``).
``--no-ingest`` reuses the index of an earlier run. Writes ``<out>/agents.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))], 2)


def spans(truth: list[dict], n: int, rng: random.Random, taken: list[dict]) -> list[dict]:
    """``n`` truth spans (functions and methods of 6–80 lines) overlapping neither each other
    nor ``taken``."""
    pool = [x for x in truth if x["kind"] in ("function", "method") and 6 <= x["end"] - x["start"] + 1 <= 80
            and x["file"].endswith(".py")]
    rng.shuffle(pool)
    out: list[dict] = []
    for x in pool:
        if len(out) >= n:
            break
        if any(y["file"] == x["file"] and not (x["end"] < y["start"] or y["end"] < x["start"])
               for y in out + taken):
            continue
        out.append(x)
    return out


# ---------------------------------------------------------------------------------------------
# 1. MCP


def _proc_cpu_ms(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``), in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def _mcp_times(repo: Path, xs: list[dict], rounds: int, src: Path | None = None
                     ) -> tuple[list[float], int, dict]:
    """Round trips of ``explain`` through ``engram mcp`` (run from ``src``, a source checkout,
    when given: an A/B of two trees), with the CPU time the server and this client spent."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {k: os.environ[k] for k in ("HOME", "ENGRAM_HOME", "PATH")}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    pidfile = Path(os.environ["ENGRAM_HOME"]) / "bench-mcp.pid"
    params = StdioServerParameters(
        command="/bin/sh", args=["-c", f'echo $$ > "{pidfile}"; exec "{sys.executable}" -m engram.cli mcp'],
        cwd=str(repo), env=env)
    times, errors = [], 0
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        for x in xs[:10]:  # warm-up: the first calls open the index and read its pages
            await s.call_tool("explain", {"file": x["file"], "start": x["start"], "end": x["end"]})
        pid = int(pidfile.read_text())
        server0, client0 = _proc_cpu_ms(pid), time.process_time()
        for _ in range(rounds):
            for x in xs:
                t0 = time.perf_counter()
                res = await s.call_tool("explain", {"file": x["file"], "start": x["start"],
                                                    "end": x["end"]})
                times.append((time.perf_counter() - t0) * 1000)
                errors += bool(res.is_error)
        cpu = {"server_cpu_ms_per_call": round((_proc_cpu_ms(pid) - server0) / len(times), 2),
               "client_cpu_ms_per_call": round((time.process_time() - client0) * 1000 / len(times), 2)}
    return times, errors, cpu


async def _mcp_interleaved(repo: Path, xs: list[dict], rounds: int, srcs: list[Path | None]
                           ) -> list[tuple[list[float], int, dict]]:
    """``_mcp_times`` for several trees at once: one server per tree, all driven by one client,
    each span asked of every server in turn (the order flipped from span to span), so that every
    tree meets the same moments of a shared machine's load."""
    import contextlib

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    sessions, pidfiles = [], []
    async with contextlib.AsyncExitStack() as stack:
        for k, src in enumerate(srcs):
            env = {key: os.environ[key] for key in ("HOME", "ENGRAM_HOME", "PATH")}
            if src is not None:
                env["PYTHONPATH"] = str(src)
            pidfile = Path(os.environ["ENGRAM_HOME"]) / f"bench-mcp-{k}.pid"
            params = StdioServerParameters(
                command="/bin/sh",
                args=["-c", f'echo $$ > "{pidfile}"; exec "{sys.executable}" -m engram.cli mcp'],
                cwd=str(repo), env=env)
            r, w = await stack.enter_async_context(stdio_client(params))
            s = await stack.enter_async_context(ClientSession(r, w))
            await s.initialize()
            sessions.append(s)
            pidfiles.append(pidfile)
        for s in sessions:
            for x in xs[:10]:  # warm-up
                await s.call_tool("explain", {"file": x["file"], "start": x["start"], "end": x["end"]})
        pids = [int(f.read_text()) for f in pidfiles]
        server0 = [_proc_cpu_ms(pid) for pid in pids]
        times: list[list[float]] = [[] for _ in srcs]
        client = [0.0] * len(srcs)
        errors = [0] * len(srcs)
        for r in range(rounds):
            for i, x in enumerate(xs):
                order = list(range(len(srcs)))
                if (i + r) % 2:
                    order.reverse()
                for k in order:
                    c0, t0 = time.process_time(), time.perf_counter()
                    res = await sessions[k].call_tool("explain", {"file": x["file"], "start": x["start"],
                                                                  "end": x["end"]})
                    times[k].append((time.perf_counter() - t0) * 1000)
                    client[k] += time.process_time() - c0
                    errors[k] += bool(res.is_error)
        out = []
        for k, pid in enumerate(pids):
            n = len(times[k])
            out.append((times[k], errors[k], {
                "server_cpu_ms_per_call": round((_proc_cpu_ms(pid) - server0[k]) / n, 2),
                "client_cpu_ms_per_call": round(client[k] * 1000 / n, 2)}))
    return out


def bench_mcp_interleaved(repo: Path, xs: list[dict], rounds: int, srcs: list[Path | None]
                          ) -> list[dict]:
    load = os.getloadavg()[0]
    runs = asyncio.run(_mcp_interleaved(repo, xs, rounds, srcs))
    return [{"calls": len(times), "errors": errors, "p50_ms": pct(times, 0.5),
             "p95_ms": pct(times, 0.95), "max_ms": round(max(times), 2), **cpu,
             "load_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
             "src": str(src) if src else "this checkout", "interleaved": True}
            for (times, errors, cpu), src in zip(runs, srcs)]


def bench_mcp(eng, repo: Path, xs: list[dict], rounds: int, src: Path | None = None) -> dict:
    inproc, cpu0 = [], 0.0
    for x in xs[:10]:
        eng.explain(x["file"], x["start"], x["end"])
    cpu0 = time.thread_time()
    for _ in range(rounds):
        for x in xs:
            t0 = time.perf_counter()
            eng.explain(x["file"], x["start"], x["end"], client="bench")
            inproc.append((time.perf_counter() - t0) * 1000)
    inproc_cpu = (time.thread_time() - cpu0) * 1000 / len(inproc)
    load = os.getloadavg()[0]
    times, errors, cpu = asyncio.run(_mcp_times(repo, xs, rounds, src))
    return {"calls": len(times), "errors": errors, "p50_ms": pct(times, 0.5), "p95_ms": pct(times, 0.95),
            "max_ms": round(max(times), 2), "in_process_p50_ms": pct(inproc, 0.5),
            "in_process_p95_ms": pct(inproc, 0.95), "in_process_cpu_ms_per_call": round(inproc_cpu, 2),
            **cpu, "load_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
            "src": str(src) if src else "this checkout"}


# ---------------------------------------------------------------------------------------------
# 2. brief


def _tokenizers():
    try:
        import bpe_openai
    except ImportError:
        return {}
    return {name: bpe_openai.get_encoding(name) for name in ("o200k_base", "cl100k_base")}


def bench_brief(eng, repo: Path, files: list[str], budget: int, cold: int) -> dict:
    eng.brief([files[0]], budget=budget)  # warm-up
    warm, tokens, over, items = [], [], 0, []
    mds = []
    for f in [None, *files]:
        t0 = time.perf_counter()
        res = eng.brief([f] if f else [], budget=budget)
        warm.append((time.perf_counter() - t0) * 1000)
        tokens.append(res["tokens"])
        over += res["tokens"] > budget
        items.append(len(res["items"]))
        mds.append(res["markdown"])
    cold_ms = []
    env = dict(os.environ)
    for f in files[:cold]:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "engram.cli", "brief", f], cwd=repo, env=env,
                       capture_output=True, check=True)
        cold_ms.append((time.perf_counter() - t0) * 1000)
    out = {"briefs": len(warm), "budget": budget, "warm_p50_ms": pct(warm, 0.5),
           "warm_p95_ms": pct(warm, 0.95), "warm_max_ms": round(max(warm), 2),
           "cold_process_p50_ms": pct(cold_ms, 0.5) if cold_ms else None,
           "cold_process_max_ms": round(max(cold_ms), 2) if cold_ms else None,
           "tokens_mean": round(statistics.mean(tokens), 1), "tokens_max": max(tokens),
           "over_budget": over, "items_mean": round(statistics.mean(items), 1)}
    toks = _tokenizers()
    for name, enc in toks.items():
        ratios = [t / max(1, len(enc.encode(md))) for t, md in zip(tokens, mds, strict=True)]
        out[f"estimate_over_{name}_min"] = round(min(ratios), 3)
        out[f"estimate_over_{name}_mean"] = round(statistics.mean(ratios), 3)
        out[f"{name}_max"] = max(len(enc.encode(md)) for md in mds)
    if not toks:
        out["tokenizer_check"] = "bpe-openai not installed: pip install bpe-openai==0.1.4"
    return out


# ---------------------------------------------------------------------------------------------
# 3. notes


SHIFT = ["# --- inserted by bench_agents: unrelated lines above the noted code ---",
         "import functools as _bench_functools",
         "_BENCH_SENTINEL = object()", "", "", "def _bench_unrelated_helper(value):",
         "    return _bench_functools.reduce(lambda a, b: a ^ b, [value, 7, 11])", ""]
_IDENT = re.compile(r"\b(?!(?:def|return|if|else|elif|for|while|in|not|and|or|is|None|True|False|"
                    r"self|lambda|yield|import|from|as|with|try|except|raise|class|pass)\b)"
                    r"[A-Za-z_][A-Za-z0-9_]{2,}\b")


def _change_one_line(lines: list[str], start: int, end: int) -> int | None:
    """Rename the first identifier of the non-trivial line nearest the span's middle; returns the
    1-based line changed."""
    mid = (start + end) // 2
    order = sorted(range(start + 1, end + 1), key=lambda i: (abs(i - mid), i))
    for i in order:
        m = _IDENT.search(lines[i - 1])
        if m and lines[i - 1].strip() and not lines[i - 1].strip().startswith(("#", '"', "'")):
            ln = lines[i - 1]
            lines[i - 1] = ln[:m.end()] + "_renamed" + ln[m.end():]
            return i
    return None


def _note_of(res: dict, tape_id: str) -> dict | None:
    for s in res["sessions"]:
        if s["tape_id"] == tape_id:
            return s.get("note")
    return None


def bench_notes(eng, repo: Path, noted: list[dict], other: list[dict]) -> dict:
    t0 = time.perf_counter()
    tapes = {}
    for x in noted:
        r = eng.add_note(x["file"], x["start"], x["end"], "warning",
                         f"bench note on {x['symbol']}: keep its behaviour")
        tapes[id(x)] = r["tape_id"]
    write_s = time.perf_counter() - t0
    note_ids = set(tapes.values())
    # every file with a note gets unrelated lines inserted above its first line
    shift = len(SHIFT)
    for f in sorted({x["file"] for x in noted}):
        p = repo / f
        p.write_text("\n".join(SHIFT) + "\n" + p.read_text())
    moved_files = {x["file"] for x in noted}
    found = fresh = 0
    misses = []
    for x in noted:
        res = eng.explain(x["file"], x["start"] + shift, x["end"] + shift)
        n = _note_of(res, tapes[id(x)])
        found += n is not None
        ok = n is not None and n["stale"] is False and n["at"] == [x["start"] + shift, x["end"] + shift]
        fresh += ok
        if not ok and len(misses) < 10:
            misses.append({"span": f"{x['file']}:{x['start']}-{x['end']}", "found": n is not None,
                           "note": n and {k: n[k] for k in ("stale", "at", "range")}})
    leaked, leaks = 0, []
    for x in other:
        d = shift if x["file"] in moved_files else 0
        res = eng.explain(x["file"], x["start"] + d, x["end"] + d)
        shown = [s["tape_id"] for s in res["sessions"] if s["tape_id"] in note_ids]
        leaked += bool(shown)
        if shown and len(leaks) < 10:
            leaks.append({"span": f"{x['file']}:{x['start']}-{x['end']}", "notes": len(shown)})
    # one line inside each noted span changes
    by_file: dict[str, list[dict]] = {}
    for x in noted:
        by_file.setdefault(x["file"], []).append(x)
    changed = {}
    for f, xs in by_file.items():
        p = repo / f
        lines = p.read_text().split("\n")
        for x in xs:
            changed[id(x)] = _change_one_line(lines, x["start"] + shift, x["end"] + shift)
        p.write_text("\n".join(lines))
    stale = stale_found = 0
    for x in noted:
        res = eng.explain(x["file"], x["start"] + shift, x["end"] + shift)
        n = _note_of(res, tapes[id(x)])
        stale_found += n is not None
        stale += n is not None and n["stale"] is True and not n["tombstone"]
    k = len(noted)
    return {"notes": k, "write_s": round(write_s, 2), "write_ms_per_note": round(write_s * 1000 / k, 1),
            "moved_by_lines": shift, "recall_after_moves": round(fresh / k, 4),
            "found_after_moves": round(found / k, 4), "unrelated_spans": len(other),
            "unrelated_spans_showing_a_note": leaked, "lines_changed": sum(1 for v in changed.values() if v),
            "stale_recall": round(stale / k, 4), "found_after_change": round(stale_found / k, 4),
            "misses": misses, "leaks": leaks}


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=HERE / "corpus" / "full")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "agents")
    ap.add_argument("--no-ingest", action="store_true", help="reuse the index of an earlier run")
    ap.add_argument("--spans", type=int, default=200, help="MCP explain sample")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the MCP sample")
    ap.add_argument("--briefs", type=int, default=100, help="files to brief")
    ap.add_argument("--cold", type=int, default=10, help="cold `engram brief` processes")
    ap.add_argument("--notes", type=int, default=100)
    ap.add_argument("--budget", type=int, default=1500)
    ap.add_argument("--only", default="mcp,brief,notes", help="parts to run (comma-separated)")
    ap.add_argument("--mcp-src", type=Path, action="append", default=[],
                    help="also run the MCP part's server from this source checkout (repeatable; "
                         "an A/B of two trees, alternated with this checkout's)")
    ap.add_argument("--mcp-repeat", type=int, default=1, help="runs of the MCP part per tree")
    ap.add_argument("--mcp-interleave", action="store_true",
                    help="with --mcp-src: the trees' servers side by side, each span asked of "
                         "each in turn (the same moments of the machine's load for every tree)")
    a = ap.parse_args(argv)

    import accuracy

    corpus = a.corpus.resolve()
    truth = json.loads((corpus / "truth.json").read_text())
    a.out.mkdir(parents=True, exist_ok=True)
    repo = a.out / "repo"
    home = accuracy.setup_home(corpus, a.out, wipe=not a.no_ingest)
    from engram.engine import Engine

    result: dict = {"corpus": str(corpus), "machine": {
        "platform": platform.platform(), "python": platform.python_version(),
        "cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2)}}
    # a fresh copy of the repository every run (the notes part edits it)
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(corpus / "repo", repo, ignore=shutil.ignore_patterns(".engram*"))
    (repo / ".git").mkdir(exist_ok=True)
    if a.no_ingest:  # the notes of an earlier run leave the index
        from engram.index import store

        eng = Engine(root=repo)
        conn = eng.conn()
        with conn:
            for (tid,) in list(conn.execute("SELECT tape_id FROM tapes WHERE harness='engram'")):
                store.delete_tape(conn, tid)
        eng.close()
    else:
        eng = Engine(root=repo)
        t0 = time.perf_counter()
        s = eng.ingest(seal=True, rebuild=True)
        result["ingest"] = {"seconds": round(time.perf_counter() - t0, 1), "sessions": s.get("sessions"),
                            "tapes": s.get("tapes_indexed")}
        eng.close()
    os.chdir(repo)
    eng = Engine(root=repo, semantic=False)
    result["tapes_indexed"] = eng.conn().execute("SELECT count(*) FROM tapes").fetchone()[0]
    parts = set(a.only.split(","))
    rng = random.Random(25)
    sample = spans(truth, a.spans, rng, [])
    if "mcp" in parts:
        print(f"MCP explain: {len(sample)} spans x {a.rounds}", file=sys.stderr)
        runs = []
        for _ in range(a.mcp_repeat):
            if a.mcp_interleave:
                runs.extend(bench_mcp_interleaved(repo, sample, a.rounds, [None, *a.mcp_src]))
                print("\n".join(json.dumps(r) for r in runs[-1 - len(a.mcp_src):]), file=sys.stderr)
                continue
            for src in [None, *a.mcp_src]:
                runs.append(bench_mcp(eng, repo, sample, a.rounds, src))
                print(json.dumps(runs[-1]), file=sys.stderr)
        result["mcp_explain"] = runs[0] if len(runs) == 1 else runs
    files = sorted({x["file"] for x in truth if x["file"].endswith(".py")})
    rng.shuffle(files)
    if "brief" in parts:
        print(f"brief: {min(a.briefs, len(files))} files + the repository", file=sys.stderr)
        result["brief"] = bench_brief(eng, repo, files[:a.briefs], a.budget, a.cold)
        print(json.dumps(result["brief"]), file=sys.stderr)
    if "notes" in parts:
        noted = spans(truth, a.notes, random.Random(2525), [])
        other = spans(truth, a.notes, random.Random(2526), noted)
        print(f"notes: {len(noted)} noted spans, {len(other)} unrelated", file=sys.stderr)
        result["notes"] = bench_notes(eng, repo, noted, other)
        print(json.dumps({k: v for k, v in result["notes"].items() if k not in ("misses", "leaks")}),
              file=sys.stderr)
        # the same briefs once the corpus holds the notes (warnings in scope, some stale)
        result["brief_with_notes"] = bench_brief(
            eng, repo, sorted({x["file"] for x in noted})[:a.briefs], a.budget, 0)
    eng.close()
    result["machine"]["load_1m_end"] = round(os.getloadavg()[0], 2)
    (a.out / f"agents-{'-'.join(sorted(parts))}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    del home
    return 0


if __name__ == "__main__":
    sys.exit(main())
