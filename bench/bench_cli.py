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

``--mode default`` measures what a new user's agent gets with no action of theirs: no server at
first (any server of this ``ENGRAM_HOME`` is stopped), then the loop of calls back to back with
the user's environment (no ``ENGRAM_NO_SERVE``): the first call answers in-process and starts
``engram serve`` itself (``engram.warm.start``), the next are served once it is up. It reports
the first call, the loop after it (each call marked served or not by the server's log), the
started server's CPU time (``/proc``), and then, in the same run, the in-process calls
(``ENGRAM_NO_SERVE=1``) and ``python -c pass`` as references. The server is stopped at the end.

Run it from a snapshot of the tree (``git archive HEAD``), not the working tree: a server stops
when a module it loaded changes on disk. An editable install (``pip install -e``) loads
``pathlib``, ``re`` and more into every Python process through its ``.pth`` finder; to measure what
an ordinary install gives, run it with the ``python`` of a venv whose ``site-packages`` has a
``.pth`` naming the snapshot and the dependencies' directory, and an ``engram`` script there
(docs/benchmarks.md says how the figures were taken).
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


def _server_pid(home: Path) -> int | None:
    """The process id of the server of this ``ENGRAM_HOME`` (written in its start lock), if it
    lives."""
    try:
        pid = int((home / "run" / "serve.lock").read_text().split()[0])
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, IndexError):
        return None


def _proc_cpu_ms(pid: int | None) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return 0.0


def _rss_mb(pid: int | None) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            kb = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
        return round(kb / 1024, 1)
    except (OSError, ValueError, StopIteration):
        return None


def _stop_server(home: Path) -> None:
    """Stop the server of this ``ENGRAM_HOME``, one still starting included: until its start
    lock is free, kill the process id written in it (a starting server writes its own there
    before it binds its socket)."""
    import fcntl
    import signal

    lock = home / "run" / "serve.lock"
    if not lock.exists():
        return
    fd = os.open(lock, os.O_RDONLY)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except OSError:  # held: a server lives or starts
                pass
            pid = _server_pid(home)
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
            time.sleep(0.05)
        raise SystemExit(f"{lock}: the server did not stop")
    finally:
        os.close(fd)


def _answered(home: Path) -> int:
    try:
        return (home / "run" / "serve.log").read_text().count("serve: answered")
    except OSError:
        return 0


def _call(exe: str, x: dict, repos: Path, env: dict) -> tuple[float, float, tuple]:
    t0, c0 = time.perf_counter(), _cpu_ms()
    p = subprocess.run([exe, "explain", f"{x['file']}:{x['start']}-{x['end']}"],
                       cwd=repos / x["repo"], env=env, capture_output=True, text=True)
    return ((time.perf_counter() - t0) * 1000, _cpu_ms() - c0,
            (p.returncode, _untimed(p.stdout), p.stderr))


def default_mode(a, exe: str, env: dict, spans: list[dict], repos: Path) -> dict:
    """What a new user gets: no server, then an agent's loop (see the module's docstring)."""
    home = a.home.resolve()
    load = [round(os.getloadavg()[0], 2)]
    firsts = ([], [])  # first calls with no server, the started one stopped after each
    for x in spans[:a.first]:
        _stop_server(home)
        wall, cpu, _answer = _call(exe, x, repos, env)
        firsts[0].append(wall)
        firsts[1].append(cpu)
    _stop_server(home)
    loop = [x for _ in range(a.rounds) for x in spans]
    calls = []  # (wall, cpu, served, answer)
    for i, x in enumerate(loop):
        before = _answered(home)
        wall, cpu, answer = _call(exe, x, repos, env)
        time.sleep(0.002)  # (the server logs its answer just after sending it)
        calls.append((wall, cpu, _answered(home) > before if i else False, answer))
    pid = _server_pid(home)
    server_cpu = _proc_cpu_ms(pid)
    server_rss = _rss_mb(pid)
    load.append(round(os.getloadavg()[0], 2))
    local = dict(env, ENGRAM_NO_SERVE="1")
    ref = {"in-process": ([], []), "python": ([], [])}
    differ, errors = [], []
    for i, x in enumerate(spans):
        wall, cpu, answer = _call(exe, x, repos, local)
        ref["in-process"][0].append(wall)
        ref["in-process"][1].append(cpu)
        if answer != calls[i][3]:
            differ.append(f"{x['file']}:{x['start']}-{x['end']}")
        if answer[0]:
            errors.append(answer[2][-300:])
        t0, c0 = time.perf_counter(), _cpu_ms()
        subprocess.run([sys.executable, "-c", "pass"], env=env)
        ref["python"][0].append((time.perf_counter() - t0) * 1000)
        ref["python"][1].append(_cpu_ms() - c0)
    load.append(round(os.getloadavg()[0], 2))
    _stop_server(home)
    rest = calls[1:]
    served = [c for c in rest if c[2]]
    return {
        "mode": "default", "load_1m": load, "spans": len(spans), "rounds": a.rounds,
        "first_call": {"wall_ms": round(calls[0][0], 1), "cpu_ms": round(calls[0][1], 1)},
        "first_calls": {"wall_ms": _summ(firsts[0]), "cpu_ms": _summ(firsts[1])} if firsts[0] else None,
        "loop_after_first": {"wall_ms": _summ([c[0] for c in rest]),
                             "cpu_ms": _summ([c[1] for c in rest]),
                             "served": len(served), "in_process": len(rest) - len(served),
                             "first_served_call": next((i + 1 for i, c in enumerate(calls) if c[2]), None)},
        "loop_head": [{"wall_ms": round(c[0], 1), "cpu_ms": round(c[1], 1), "served": c[2]}
                      for c in calls[:5]],
        "whole_loop": {"wall_ms": _summ([c[0] for c in calls]), "cpu_ms": _summ([c[1] for c in calls])},
        "served_calls": {"wall_ms": _summ([c[0] for c in served]),
                         "cpu_ms": _summ([c[1] for c in served])} if served else None,
        "server": {"pid_alive_after_loop": pid is not None,
                   "cpu_ms_warmup_and_answers": round(server_cpu, 1), "rss_mb": server_rss},
        **{m: {"wall_ms": _summ(w), "cpu_ms": _summ(c)} for m, (w, c) in ref.items()},
        "answers_differ_from_in_process": differ, "errors": errors[:3]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="a bench_scale.py --out directory")
    ap.add_argument("--home", type=Path, required=True, help="ENGRAM_HOME (a copy of <out>/engram-home)")
    ap.add_argument("-n", type=int, default=20, help="spans")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--first", type=int, default=5,
                    help="default mode: first calls measured on their own first (no server)")
    ap.add_argument("--mode", choices=("served", "default"), default="served",
                    help="served: in-process vs a server started by hand, alternating; default: "
                         "what a new user gets (no server at first; the CLI starts one)")
    a = ap.parse_args(argv)

    exe = str(Path(sys.executable).parent / "engram")
    env = dict(os.environ, HOME=str(a.out / "home"), ENGRAM_HOME=str(a.home.resolve()))
    env.pop("ENGRAM_NO_SERVE", None)
    spans = [x for x in json.loads((a.out / "truth" / "spans.json").read_text())
             if x["end"] - x["start"] >= 2]
    spans = random.Random(11).sample(spans, min(a.n, len(spans)))
    repos = a.out / "repos"
    machine = {"platform": platform.platform(), "python": platform.python_version(),
               "cpus": os.cpu_count()}
    if a.mode == "default":
        res = {"machine": machine, **default_mode(a, exe, env, spans, repos)}
        print(json.dumps(res, indent=2))
        return 0 if not res["answers_differ_from_in_process"] else 1

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
