"""Peak memory of ingesting one big session: ``engram ingest --seal`` on a generated Claude Code
log of a given size, in a subprocess, in a temporary directory. With ``--corpus``, of ingesting a
whole many-session corpus instead (one ``bench/corpus.py`` output: ``python bench/corpus.py --out
DIR --sessions 16000 --scenarios all`` gives ~600 MB in ~16,600 sessions).

    python bench/bench_ingest_memory.py [--sizes 200,400] [--keep DIR] [--logs DIR]
    python bench/bench_ingest_memory.py --corpus DIR [--src TREE]

The log is one session (realistic records, as Claude Code writes them: user prompts, assistant
text and thinking, one line per content block sharing ``message.id``; ``Read`` results with
line-number gutters and ``toolUseResult.file``; ``Edit`` results with ``originalFile`` and
``structuredPatch``; ``Bash`` output), over a few dozen source files that the session reads and
edits again and again, so texts repeat as they do in real logs.

Each size is measured by a fresh wrapper process that runs the ingest as its only child and reads
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``: the peak resident set of the largest process of
the ingest (the CLI itself or its parse worker, whichever peaked higher; Linux reports the
maximum, not a sum). ``--no-worker`` measures with ``ENGRAM_PARSE_PROCESS=0`` (one process).
CPU seconds are the ingest's (``ru_utime + ru_stime`` of the process tree), the figure to compare
on a loaded machine. The wrapper also samples ``/proc`` every 50 ms: the peak of each process's
anonymous memory (``RssAnon``: the heap; the CLI's and the parse worker's apart too) and of its
file pages (``RssFile``: mostly SQLite's memory-mapped index, ``PRAGMA mmap_size``, which the
kernel can drop), which ``ru_maxrss`` counts together. ``--src`` measures another source tree (a
checkout before a change) with the same logs. A log of 32 MB or more is ingested as a stream
(``engram/ingest/worker.py``'s ``stream``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

VERSION = "2.0.64"
MODEL = "claude-sonnet-4-5-20250929"
SID = "5e551011-0000-4000-8000-000000000001"
WORDS = ("parse header value name item text line data node tree index key path file config "
         "result error token buffer stream chunk offset count size limit state cache entry "
         "block span range query match score total user session event record writer reader").split()


def _code_line(rng: random.Random) -> str:
    w = rng.choice
    kind = rng.random()
    ind = " " * (4 * rng.randint(0, 3))
    if kind < 0.25:
        return f"{ind}{w(WORDS)}_{w(WORDS)} = {w(WORDS)}.{w(WORDS)}({w(WORDS)}, {rng.randint(0, 999)})"
    if kind < 0.45:
        return f"{ind}if {w(WORDS)} is not None and {w(WORDS)}_{w(WORDS)} > {rng.randint(1, 64)}:"
    if kind < 0.6:
        return f"{ind}return {w(WORDS)}_{w(WORDS)}[{w(WORDS)}:{w(WORDS)} + {rng.randint(1, 9)}]"
    if kind < 0.7:
        return f"{ind}# {' '.join(rng.choice(WORDS) for _ in range(rng.randint(4, 10)))}"
    if kind < 0.8:
        return ""
    if kind < 0.9:
        return f"def {w(WORDS)}_{w(WORDS)}({w(WORDS)}, {w(WORDS)}=None):"
    return f"{ind}for {w(WORDS)} in {w(WORDS)}_{w(WORDS)}({w(WORDS)}):"


def _hunks(before: list[str], after: list[str], start: int, n_old: int, n_new: int) -> list[dict]:
    lo = max(0, start - 3)
    hi_old = min(len(before), start + n_old + 3)
    lines = [" " + ln for ln in before[lo:start]]
    lines += ["-" + ln for ln in before[start:start + n_old]]
    lines += ["+" + ln for ln in after[start:start + n_new]]
    lines += [" " + ln for ln in before[start + n_old:hi_old]]
    return [{"oldStart": lo + 1, "oldLines": hi_old - lo, "newStart": lo + 1,
             "newLines": hi_old - lo - n_old + n_new, "lines": lines}]


class _Log:
    def __init__(self, f, cwd: str, rng: random.Random):
        self.f, self.cwd, self.rng = f, cwd, rng
        self.parent = None
        self.n = 0
        self.clock = 1_764_000_000.0
        self.bytes = 0

    def rec(self, typ: str, message: dict, **extra) -> None:
        self.n += 1
        self.clock += 2.5
        uuid = f"{self.n:08x}-0000-4000-8000-{self.n:012x}"
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.clock)) + ".000Z"
        r = {"parentUuid": self.parent, "isSidechain": False, "userType": "external",
             "cwd": self.cwd, "sessionId": SID, "version": VERSION, "gitBranch": "main",
             "type": typ, "message": message, "uuid": uuid, "timestamp": t, **extra}
        self.parent = uuid
        line = json.dumps(r, ensure_ascii=False) + "\n"
        self.bytes += len(line.encode())
        self.f.write(line)

    def say(self, blocks: list[dict]) -> None:
        mid = f"msg_{self.n:016x}"
        for b in blocks:  # streaming: one line per content block, one message id
            self.rec("assistant", {"model": MODEL, "id": mid, "type": "message",
                                   "role": "assistant", "content": [b],
                                   "usage": {"input_tokens": 1200, "output_tokens": 300}})

    def tool(self, name: str, args: dict, result: str, tur: dict) -> None:
        tid = f"toolu_{self.n:020x}"
        self.say([{"type": "tool_use", "id": tid, "name": name, "input": args}])
        self.rec("user", {"role": "user", "content": [
            {"tool_use_id": tid, "type": "tool_result", "content": result}]}, toolUseResult=tur)


def generate(path: Path, target_bytes: int, seed: int = 7, steady: bool = False) -> dict:
    """Write one Claude Code session of about ``target_bytes`` to ``path``. Its files grow by a
    line an edit on average (an edit replaces 1-8 lines by 1-10), so a longer session also reads
    and edits bigger files; ``steady``: each edit replaces as many lines as it removes, so the
    files keep their size however long the session (log length apart from file size)."""
    rng = random.Random(seed)
    cwd = "/home/dev/project"
    files = {f"{cwd}/src/{rng.choice(WORDS)}_{i}.py":
             [_code_line(rng) for _ in range(rng.randint(150, 900))] for i in range(40)}
    names = sorted(files)
    turns = 0
    with open(path, "w", encoding="utf-8") as f:
        log = _Log(f, cwd, rng)
        while log.bytes < target_bytes:
            turns += 1
            prose = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))
            log.rec("user", {"role": "user", "content": f"Please fix the {prose} in the module"})
            log.say([{"type": "thinking", "thinking": "Let me look. " + prose * 3,
                      "signature": "sig" * 20},
                     {"type": "text", "text": "I'll read the file first. " + prose}])
            fp = rng.choice(names)
            lines = files[fp]
            content = "\n".join(lines) + "\n"
            gutter = "\n".join(f"{i + 1:>6}→{ln}" for i, ln in enumerate(lines))
            log.tool("Read", {"file_path": fp}, gutter,
                     {"type": "text", "file": {"filePath": fp, "content": content,
                                               "numLines": len(lines), "startLine": 1,
                                               "totalLines": len(lines)}})
            start = rng.randrange(0, max(1, len(lines) - 12))
            n_old = rng.randint(1, 8)
            new = [_code_line(rng) for _ in range(n_old if steady else rng.randint(1, 10))]
            after = lines[:start] + new + lines[start + n_old:]
            old_s = "\n".join(lines[start:start + n_old])
            new_s = "\n".join(new)
            log.tool("Edit", {"file_path": fp, "old_string": old_s, "new_string": new_s},
                     f"The file {fp} has been updated.",
                     {"filePath": fp, "oldString": old_s, "newString": new_s,
                      "originalFile": content, "userModified": False, "replaceAll": False,
                      "structuredPatch": _hunks(lines, after, start, n_old, len(new))})
            files[fp] = after
            out = "\n".join(f"tests/test_{rng.choice(WORDS)}.py::test_{rng.choice(WORDS)} PASSED"
                            for _ in range(rng.randint(10, 60)))
            log.tool("Bash", {"command": "python -m pytest -q", "description": "Run the tests"},
                     out, {"stdout": out, "stderr": "", "interrupted": False})
            log.say([{"type": "text", "text": "Done: " + prose}])
    return {"bytes": path.stat().st_size, "records": log.n, "turns": turns}


def setup(tmp: Path, log_bytes: int, steady: bool = False) -> tuple[Path, Path, dict]:
    logs = tmp / "logs" / "-home-dev-project"
    logs.mkdir(parents=True)
    info = generate(logs / f"{SID}.jsonl", log_bytes, steady=steady)
    root = tmp / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    cfg = f"harnesses:\n  claude_code:\n    paths: [{tmp / 'logs'}]\n"
    cfg += "".join(f"  {h}: false\n" for h in ("codex", "gemini_cli", "opencode", "cursor",
                                               "openclaw", "aider"))
    (root / ".engram" / "config.yml").write_text(cfg)
    return root, tmp / "engram-home", info


_WRAPPER = r"""
import json, os, resource, subprocess, sys, threading, time
peak = {}
def status(pid):
    d = {}
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith(("RssAnon", "RssFile")):
                d[ln.split(":")[0]] = int(ln.split()[1])
    return d
def tree(pid):
    out = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            for c in f.read().split():
                out += tree(int(c))
    except OSError:
        pass
    return out
def sample(p):
    while p.poll() is None:
        for i, pid in enumerate(tree(p.pid)):
            try:
                d = status(pid)
            except OSError:
                continue
            for k, v in d.items():
                peak[(i, k)] = max(peak.get((i, k), 0), v)
        time.sleep(0.05)
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[2:], cwd=sys.argv[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
th = threading.Thread(target=sample, args=(p,), daemon=True)
th.start()
out, err = p.communicate()
dt = time.perf_counter() - t0
th.join()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
anon = max((v for (i, k), v in peak.items() if k == "RssAnon"), default=0)
filep = max((v for (i, k), v in peak.items() if k == "RssFile"), default=0)
procs = {f"{i}.{k}": v for (i, k), v in sorted(peak.items())}
print(json.dumps({"rc": p.returncode, "maxrss_kb": ru.ru_maxrss, "seconds": dt, "procs": procs,
                  "cpu_s": ru.ru_utime + ru.ru_stime,
                  "anon_kb": anon, "file_kb": filep,
                  "stdout": out.decode(errors="replace")[-4000:],
                  "stderr": err.decode(errors="replace")[-4000:]}))
"""


def measure(root: Path, home: Path, worker: bool = True, src: Path = REPO) -> dict:
    """Peak RSS (MB) and wall time of ``engram ingest --seal`` in a fresh process tree."""
    env = dict(os.environ, ENGRAM_HOME=str(home), HOME=str(home.parent / "home"),
               ENGRAM_NO_PROGRESS="1", PYTHONPATH=str(src))
    if not worker:
        env["ENGRAM_PARSE_PROCESS"] = "0"
    keep = home / "config.yml"
    config = keep.read_bytes() if keep.exists() else None
    shutil.rmtree(home, ignore_errors=True)
    if config is not None:
        home.mkdir(parents=True)
        keep.write_bytes(config)
    shutil.rmtree(root / ".engram-cache", ignore_errors=True)
    shutil.rmtree(root / ".engram" / "tapes", ignore_errors=True)
    cmd = [sys.executable, "-c", _WRAPPER, str(root), sys.executable, "-m", "engram.cli",
           "ingest", "--seal"]
    load0 = _load()
    r = json.loads(subprocess.run(cmd, env=env, capture_output=True, check=True).stdout)
    load = f"{load0}-{_load()}"
    if r["rc"] != 0:
        raise SystemExit(f"ingest failed: {r['stderr']}")
    summary = json.loads(r["stdout"])
    return {"peak_rss_mb": round(r["maxrss_kb"] / 1024), "seconds": round(r["seconds"], 1),
            "anon_mb": round(r["anon_kb"] / 1024), "file_mb": round(r["file_kb"] / 1024),
            "cpu_s": round(r["cpu_s"], 1),
            "procs": {k: round(v / 1024) for k, v in r["procs"].items()},
            "events": summary["events"], "errors": summary["error_count"],
            "sessions": summary["sessions"], "bytes": summary["bytes"], "load": load}


def _load() -> str:
    """The 1-minute load average (the machine's other work: the seconds depend on it)."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def corpus_setup(corpus: Path, tmp: Path) -> tuple[Path, Path]:
    """An isolated home whose config reads only the corpus's logs (``bench/accuracy.py``'s)."""
    home = tmp / "engram-home"
    home.mkdir(parents=True)
    hs = {h: {"enabled": False} for h in ("codex", "gemini_cli", "opencode", "cursor", "aider")}
    hs["claude_code"] = {"enabled": True, "paths": [str((corpus / "logs").resolve())]}
    hs["openclaw"] = {"enabled": (corpus / "openclaw").exists(),
                      "paths": [str((corpus / "openclaw").resolve())]}
    (home / "config.yml").write_text(json.dumps({"harnesses": hs}, sort_keys=True))
    root = tmp / "repo"
    (root / ".git").mkdir(parents=True)
    return root, home


def main_corpus(corpus: Path, src: Path, keep: Path | None) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="engram-mem-corpus-", dir=keep))
    try:
        root, home = corpus_setup(corpus, tmp)
        m = measure(root, home, True, src)
        print("| logs MB | sessions | events | peak RSS MB | of it: heap MB / file pages MB "
              "| seconds | MB/s | CPU s | load |")
        print("|---|---|---|---|---|---|---|---|---|")
        print(f"| {m['bytes'] / 1e6:.0f} | {m['sessions']:,} | {m['events']:,} | "
              f"{m['peak_rss_mb']:,} | {m['anon_mb']:,} / {m['file_mb']:,} | {m['seconds']} | "
              f"{m['bytes'] / 1e6 / m['seconds']:.1f} | {m['cpu_s']} | {m['load']} |", flush=True)
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200,400", help="log sizes in MB (comma separated)")
    ap.add_argument("--no-worker", action="store_true",
                    help="also measure with ENGRAM_PARSE_PROCESS=0 (parse in the CLI process)")
    ap.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    ap.add_argument("--logs", type=Path,
                    help="reuse the logs generated in DIR/log<MB>/ (generated there if missing): "
                         "two trees measured on the same logs without generating them again")
    ap.add_argument("--corpus", type=Path, help="ingest this bench/corpus.py corpus instead")
    ap.add_argument("--src", type=Path, default=REPO, help="the source tree to run engram from")
    ap.add_argument("--steady", action="store_true",
                    help="files that keep their size (an edit replaces as many lines as it removes): "
                         "the log's length apart from its files' size (logs in DIR/log<MB>-steady/)")
    a = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs, {platform.machine()}, python "
          f"{platform.python_version()}; source {a.src}")
    if a.corpus is not None:
        main_corpus(a.corpus.resolve(), a.src.resolve(), a.keep)
        return 0
    print("| log MB | records | events | peak RSS MB | of it: heap MB / file pages MB "
          "| CLI heap / worker heap MB | RSS / log | CPU s | seconds | load | worker |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for mb in [int(x) for x in a.sizes.split(",") if x.strip()]:
        if a.logs is not None:
            tmp = a.logs / (f"log{mb}-steady" if a.steady else f"log{mb}")
            if (tmp / "info.json").exists():
                root, home, info = (tmp / "repo", tmp / "engram-home",
                                    json.loads((tmp / "info.json").read_text()))
            else:
                tmp.mkdir(parents=True)
                root, home, info = setup(tmp, mb * 1_000_000, a.steady)
                (tmp / "info.json").write_text(json.dumps(info))
        else:
            tmp = Path(tempfile.mkdtemp(prefix=f"engram-mem-{mb}-", dir=a.keep))
        try:
            if a.logs is None:
                root, home, info = setup(tmp, mb * 1_000_000, a.steady)
            for worker in ([True, False] if a.no_worker else [True]):
                m = measure(root, home, worker, a.src.resolve())
                print(f"| {info['bytes'] / 1e6:.0f} | {info['records']:,} | {m['events']:,} | "
                      f"{m['peak_rss_mb']:,} | {m['anon_mb']:,} / {m['file_mb']:,} | "
                      f"{m['procs'].get('0.RssAnon', 0):,} / {m['procs'].get('1.RssAnon', 0):,} | "
                      f"{m['peak_rss_mb'] / (info['bytes'] / 2**20):.2f} | {m['cpu_s']} | "
                      f"{m['seconds']} | {m['load']} | {'yes' if worker else 'no'} |",
                      flush=True)
        finally:
            if a.logs is not None:
                shutil.rmtree(home, ignore_errors=True)
                shutil.rmtree(root / ".engram" / "tapes", ignore_errors=True)
            elif a.keep is None:
                shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
