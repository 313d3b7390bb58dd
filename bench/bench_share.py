"""Sharing over git: ``engram push`` / ``engram pull`` of 1,000 tapes, with real git.

    python bench/bench_share.py [--tapes 1000] [--new 10] [--spans 50] [--keep DIR]

A bare remote and two clones, each with its own ``HOME`` and ``ENGRAM_HOME`` (two machines).
The pusher's Claude Code logs hold ``--tapes`` sessions (a request, then a ``Write`` of ~40 lines
of generated code into the repository: cwd inside it); ``engram ingest --seal`` makes the tapes.
Measured, each as a real ``engram`` process (wall time, Python start-up included; the command's
own ``elapsed_s`` beside it):

* the first push of all tapes, and the bytes the remote received (``git count-objects -v``);
* a push of ``--new`` new tapes on top (target: at most 2 s), and a push with nothing new;
* the pull in the other clone: fetch, verification and unpacking (target: at most 10 s for
  1,000 tapes), then the ingest of the pulled tapes, and the bytes fetched;
* why unpack: reading a tape back from the unpacked file vs. through ``git cat-file``;
* explain answers for ``--spans`` spans of the shared code, in both clones: identical
  (SHA-256 of the JSON answers, ``stats.elapsed_ms`` left out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORDS = ("parse header value name item text line data node tree index key path file config "
         "result error token buffer stream chunk offset count size limit state cache entry "
         "block span range query match score total user session event record writer reader").split()
OTHERS = ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider")


def code(i: int) -> str:
    rng = random.Random(i)
    w = rng.choice
    out = []
    for f in range(4):
        out.append(f"def {w(WORDS)}_{w(WORDS)}_{i}_{f}({w(WORDS)}, {w(WORDS)}=None):")
        for _ in range(8):
            out.append(f"    {w(WORDS)}_{w(WORDS)} = {w(WORDS)}.{w(WORDS)}({w(WORDS)}, "
                       f"{rng.randint(0, 9999)})")
        out.append(f"    return {w(WORDS)}_{w(WORDS)}[{rng.randint(1, 99)}:]\n")
    return "\n".join(out) + "\n"


def session_log(cwd: Path, i: int) -> str:
    sid = f"5ba7e000-0000-4000-8000-{i:012d}"
    t = f"2026-01-{1 + i // 1000:02d}T{(i // 60) % 24:02d}:{i % 60:02d}:00.000Z"
    base = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": str(cwd),
            "sessionId": sid, "version": "2.0.64", "gitBranch": "main"}
    user = {**base, "type": "user", "uuid": f"{sid[:-4]}u{i % 1000:03d}", "timestamp": t,
            "message": {"role": "user", "content": f"write module {i}"}}
    path = f"{cwd}/src/mod_{i}.py"
    asst = {**base, "type": "assistant", "uuid": f"{sid[:-4]}a{i % 1000:03d}", "timestamp": t,
            "parentUuid": user["uuid"],
            "message": {"model": "claude-sonnet-4-5", "id": f"msg_{i}", "type": "message",
                        "role": "assistant", "content": [
                            {"type": "text", "text": f"Writing module {i}."},
                            {"type": "tool_use", "id": f"toolu_{i:020d}", "name": "Write",
                             "input": {"file_path": path, "content": code(i)}}]}}
    return json.dumps(user) + "\n" + json.dumps(asst) + "\n"


class Machine:
    def __init__(self, base: Path, remote: Path):
        self.base = base
        base.mkdir(parents=True)
        self.home, self.engram_home, self.logs = base / "home", base / "engram-home", base / "logs"
        for d in (self.home, self.engram_home, self.logs / "-repo"):
            d.mkdir(parents=True)
        self.root = base / "repo"
        self.git("clone", "--quiet", "--no-local", str(remote), str(self.root), cwd=base)
        self.git("config", "user.name", base.name)
        self.git("config", "user.email", f"{base.name}@example.com")
        cfg = f"harnesses:\n  claude_code:\n    paths: [{self.logs}]\n"
        (self.engram_home / "config.yml").write_text(cfg + "".join(f"  {h}: false\n" for h in OTHERS))

    def env(self) -> dict:
        return {**os.environ, "HOME": str(self.home), "ENGRAM_HOME": str(self.engram_home),
                "ENGRAM_NO_PROGRESS": "1"}

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return subprocess.run(["git", *args], cwd=cwd or self.root, env=self.env(), check=True,
                              capture_output=True, text=True).stdout

    def engram(self, *argv: str) -> tuple[dict, float]:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "engram.cli", *argv], cwd=self.root,
                           env=self.env(), capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode:
            raise SystemExit(f"engram {' '.join(argv)}: {p.stderr}")
        return json.loads(p.stdout), wall

    def write_sessions(self, ids) -> None:
        for i in ids:
            (self.logs / "-repo" / f"s{i}.jsonl").write_text(session_log(self.root, i))


def pack_kib(git_dir: Path) -> int:
    """Loose + packed KiB (``git count-objects -v``). Both ends keep what they receive as the pack
    that came over the wire (``receive.unpackLimit``/``fetch.unpackLimit`` = 1), so the growth is
    the bytes transferred (plus the pack's index)."""
    out = subprocess.run(["git", "count-objects", "-v"], cwd=git_dir, capture_output=True,
                         text=True, check=True).stdout
    kv = dict(line.split(": ") for line in out.splitlines())
    return int(kv["size"]) + int(kv["size-pack"])


EXPLAIN = """
import hashlib, json, sys
from engram.engine import Engine
eng = Engine(semantic=False)
h = hashlib.sha256(); found = 0
for text in json.load(sys.stdin):
    r = eng.explain_text(text)
    r.get("stats", {}).pop("elapsed_ms", None)
    found += bool(r["sessions"])
    h.update(json.dumps(r, sort_keys=True).encode())
print(json.dumps({"sha256": h.hexdigest(), "with_sessions": found}))
"""


def explain_digest(m: Machine, spans: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-c", EXPLAIN], cwd=m.root, env=m.env(), check=True,
                       input=json.dumps(spans), capture_output=True, text=True)
    return json.loads(p.stdout)


def read_costs(m: Machine, n: int = 100) -> dict:
    """Median time to read one pulled tape: the unpacked file (verified read) vs. ``git cat-file``."""
    sys.path.insert(0, str(REPO))
    from engram.tape.reader import read_raw

    listing = m.git("ls-tree", "-r", "refs/engram/remotes/origin/tapes").splitlines()[:n]
    pulled = m.engram_home / "pulled"
    t_file, t_git = [], []
    for line in listing:
        info, path = line.split("\t")
        sha = info.split()[2]
        tid = Path(path).name.split(".")[0]
        t0 = time.perf_counter()
        read_raw(pulled / f"{tid}.jsonl.zst")
        t_file.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run(["git", "cat-file", "blob", sha], cwd=m.root, capture_output=True,
                       check=True)
        t_git.append(time.perf_counter() - t0)
    return {"file_read_ms": round(statistics.median(t_file) * 1000, 3),
            "git_cat_file_ms": round(statistics.median(t_git) * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tapes", type=int, default=1000)
    ap.add_argument("--new", type=int, default=10)
    ap.add_argument("--spans", type=int, default=50)
    ap.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir)")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-share-"))
    work.mkdir(parents=True, exist_ok=True)
    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "git": subprocess.run(["git", "--version"], capture_output=True,
                                                   text=True).stdout.strip(),
                             "load_before": os.getloadavg()[0]}}
    try:
        remote = work / "remote.git"
        subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
        subprocess.run(["git", "config", "receive.unpackLimit", "1"], cwd=remote, check=True)
        a = Machine(work / "pusher", remote)
        a.write_sessions(range(args.tapes))
        ing, wall = a.engram("ingest", "--seal")
        out["pusher_ingest"] = {"tapes": ing["tapes_indexed"], "wall_s": round(wall, 2)}
        before = pack_kib(remote)
        res, wall = a.engram("push")
        out["push_all"] = {"pushed": res["pushed"], "wall_s": round(wall, 2),
                           "elapsed_s": res["elapsed_s"], "remote_kib": pack_kib(remote) - before}
        a.write_sessions(range(args.tapes, args.tapes + args.new))
        a.engram("ingest", "--seal")
        before = pack_kib(remote)
        res, wall = a.engram("push")
        out["push_new"] = {"pushed": res["pushed"], "wall_s": round(wall, 2),
                           "elapsed_s": res["elapsed_s"], "remote_kib": pack_kib(remote) - before}
        res, wall = a.engram("push")
        out["push_nothing"] = {"pushed": res["pushed"], "wall_s": round(wall, 2),
                               "elapsed_s": res["elapsed_s"]}

        b = Machine(work / "puller", remote)
        b.git("config", "fetch.unpackLimit", "1")
        before = pack_kib(b.root / ".git")
        res, wall = b.engram("pull")
        out["pull"] = {"new": res["new"], "rejected": len(res["rejected"]),
                       "wall_s_with_ingest": round(wall, 2), "elapsed_s": res["elapsed_s"],
                       "ingested": res["ingest"]["tapes_indexed"],
                       "fetched_kib": pack_kib(b.root / ".git") - before}
        res, wall = b.engram("pull")
        out["pull_nothing"] = {"new": res["new"], "wall_s": round(wall, 2),
                               "elapsed_s": res["elapsed_s"]}
        out["read_one_tape"] = read_costs(b)
        rng = random.Random(7)
        picks = sorted(rng.sample(range(args.tapes + args.new), args.spans))
        spans = ["\n".join(code(i).split("\n")[2:12]) for i in picks]
        da, db = explain_digest(a, spans), explain_digest(b, spans)
        out["explain"] = {"spans": len(spans), "pusher": da, "puller": db,
                          "identical": da["sha256"] == db["sha256"]}
        out["machine"]["load_after"] = os.getloadavg()[0]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
