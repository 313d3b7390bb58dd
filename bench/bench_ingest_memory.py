"""Peak memory of ingesting one big session: ``engram ingest --seal`` on a generated Claude Code
log of a given size, in a subprocess, in a temporary directory.

    python bench/bench_ingest_memory.py [--sizes 200,400] [--keep DIR]

The log is one session (realistic records, as Claude Code writes them: user prompts, assistant
text and thinking, one line per content block sharing ``message.id``; ``Read`` results with
line-number gutters and ``toolUseResult.file``; ``Edit`` results with ``originalFile`` and
``structuredPatch``; ``Bash`` output), over a few dozen source files that the session reads and
edits again and again, so texts repeat as they do in real logs.

Each size is measured by a fresh wrapper process that runs the ingest as its only child and reads
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``: the peak resident set of the largest process of
the ingest (the CLI itself or its parse worker, whichever peaked higher; Linux reports the
maximum, not a sum). ``--no-worker`` measures with ``ENGRAM_PARSE_PROCESS=0`` (one process).
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


def generate(path: Path, target_bytes: int, seed: int = 7) -> dict:
    """Write one Claude Code session of about ``target_bytes`` to ``path``."""
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
            new = [_code_line(rng) for _ in range(rng.randint(1, 10))]
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


def setup(tmp: Path, log_bytes: int) -> tuple[Path, Path, dict]:
    logs = tmp / "logs" / "-home-dev-project"
    logs.mkdir(parents=True)
    info = generate(logs / f"{SID}.jsonl", log_bytes)
    root = tmp / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    cfg = f"harnesses:\n  claude_code:\n    paths: [{tmp / 'logs'}]\n"
    cfg += "".join(f"  {h}: false\n" for h in ("codex", "gemini_cli", "opencode", "cursor",
                                               "openclaw", "aider"))
    (root / ".engram" / "config.yml").write_text(cfg)
    return root, tmp / "engram-home", info


_WRAPPER = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[2:], cwd=sys.argv[1], capture_output=True)
dt = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "maxrss_kb": ru.ru_maxrss, "seconds": dt,
                  "stdout": p.stdout.decode(errors="replace")[-4000:],
                  "stderr": p.stderr.decode(errors="replace")[-4000:]}))
"""


def measure(root: Path, home: Path, worker: bool = True) -> dict:
    """Peak RSS (MB) and wall time of ``engram ingest --seal`` in a fresh process tree."""
    env = dict(os.environ, ENGRAM_HOME=str(home), HOME=str(home.parent / "home"),
               ENGRAM_NO_PROGRESS="1", PYTHONPATH=str(REPO))
    if not worker:
        env["ENGRAM_PARSE_PROCESS"] = "0"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(root / ".engram-cache", ignore_errors=True)
    shutil.rmtree(root / ".engram" / "tapes", ignore_errors=True)
    cmd = [sys.executable, "-c", _WRAPPER, str(root), sys.executable, "-m", "engram.cli",
           "ingest", "--seal"]
    r = json.loads(subprocess.run(cmd, env=env, capture_output=True, check=True).stdout)
    if r["rc"] != 0:
        raise SystemExit(f"ingest failed: {r['stderr']}")
    summary = json.loads(r["stdout"])
    return {"peak_rss_mb": round(r["maxrss_kb"] / 1024), "seconds": round(r["seconds"], 1),
            "events": summary["events"], "errors": summary["error_count"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200,400", help="log sizes in MB (comma separated)")
    ap.add_argument("--no-worker", action="store_true",
                    help="also measure with ENGRAM_PARSE_PROCESS=0 (parse in the CLI process)")
    ap.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    a = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs, {platform.machine()}, python "
          f"{platform.python_version()}")
    print("| log MB | records | events | peak RSS MB | RSS / log | seconds | worker |")
    print("|---|---|---|---|---|---|---|")
    for mb in [int(x) for x in a.sizes.split(",") if x.strip()]:
        tmp = Path(tempfile.mkdtemp(prefix=f"engram-mem-{mb}-", dir=a.keep))
        try:
            root, home, info = setup(tmp, mb * 1_000_000)
            for worker in ([True, False] if a.no_worker else [True]):
                m = measure(root, home, worker)
                print(f"| {info['bytes'] / 1e6:.0f} | {info['records']:,} | {m['events']:,} | "
                      f"{m['peak_rss_mb']:,} | {m['peak_rss_mb'] / (info['bytes'] / 2**20):.2f} | "
                      f"{m['seconds']} | {'yes' if worker else 'no'} |", flush=True)
        finally:
            if a.keep is None:
                shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
