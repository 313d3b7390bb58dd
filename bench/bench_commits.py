"""Commit provenance benchmark (issue 23): the bench corpus given a real git history.

The corpus's Claude Code logs (``bench/corpus/full/logs``: more-itertools and click, real release
diffs as sessions) are replayed in time order into one git repository, ``<pkg>/<path>`` per file,
with real ``git`` commands:

* one commit per session that edits code (a *release step*), dated at the session's end;
* hand-written commits (new modules and comment blocks nobody logged) every ``HAND_EVERY`` steps;
* a **squashed branch** (``SQUASH`` sessions committed on a branch, ``git merge --squash``);
* a **rebased branch** (``REBASE`` sessions on a branch while main gets a hand-written commit;
  ``git rebase`` then a fast-forward: the branch's commits are rewritten);
* a **formatter commit** at the end: whitespace-only reformatting of whole files (what the text
  of a formatter run keeps: tokens).

Per-line truth: every applied edit is diffed line by line (``difflib``); changed lines take the
editing session, unchanged lines keep theirs; hand-written lines are ``"hand"``; reformatted
lines keep their writer. For each commit, the lines git says it adds (non-blank) are looked up
in the truth as the commit leaves the file.

Reports: commit→session precision and recall (micro, over every commit), the error of the share
of agent-written lines per commit (mean and max, points), commits by hand with any session,
line-level accuracy, and the time of ``engram log`` over ``--timed`` commits first (empty
cache) and second (cached), and of ``engram review`` over a 50-commit range (cached and cold).

    python bench/bench_commits.py [--packages more-itertools] [--out bench/out/commits]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
CORPUS = HERE / "corpus" / "full"
CWD_BASE = "/home/dev/src/"
HAND_EVERY = 8
SQUASH = 5
REBASE = 4
HAND = "hand"


def git(repo: Path, *args: str, env: dict | None = None, input_: str | None = None) -> str:
    e = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
         "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com", **(env or {})}
    return subprocess.run(["git", *args], cwd=repo, env=e, check=True, capture_output=True,
                          text=True, input=input_).stdout


def sessions_of(corpus: Path, packages: list[str]) -> list[dict]:
    """Every log's edits in order: ``{"sid", "t0", "t1", "label", "ops": [(op, path, a, b)]}``."""
    out = []
    for pkg in packages:
        d = corpus / "logs" / ("-home-dev-src-" + pkg)
        for p in sorted(d.glob("*.jsonl")):
            calls, ok, ts, sid = {}, set(), [], None
            for raw in p.read_text().splitlines():
                r = json.loads(raw)
                sid = sid or r.get("sessionId")
                if r.get("timestamp"):
                    ts.append(r["timestamp"])
                content = (r.get("message") or {}).get("content")
                if not isinstance(content, list):
                    continue
                for b in content:
                    if b.get("type") == "tool_use":
                        calls[b["id"]] = (b["name"], b["input"])
                    elif b.get("type") == "tool_result" and not b.get("is_error"):
                        ok.add(b["tool_use_id"])
            ops = []
            for cid, (name, inp) in calls.items():
                if cid not in ok:
                    continue
                if name == "Edit":
                    ops.append(("edit", inp["file_path"], inp["old_string"], inp["new_string"]))
                elif name == "Write":
                    ops.append(("write", inp["file_path"], inp["content"], None))
                elif name == "Bash" and inp.get("command", "").startswith("git rm "):
                    ops.append(("rm", CWD_BASE + pkg + "/" + inp["command"][7:].strip(), None, None))
            if ops:
                out.append({"sid": sid, "t0": min(ts), "t1": max(ts), "ops": ops, "pkg": pkg})
    out.sort(key=lambda s: (s["t0"], s["sid"]))
    return out


class Tree:
    """The working tree as text + per-line owners (the truth)."""

    def __init__(self, repo: Path):
        self.repo = repo
        self.text: dict[str, list[str]] = {}
        self.owner: dict[str, list[str]] = {}

    def rel(self, path: str) -> str:
        return path.removeprefix(CWD_BASE)

    def set(self, rel: str, new_lines: list[str], who: str) -> None:
        old = self.text.get(rel, [])
        own = self.owner.get(rel, [])
        # common head and tail first: the line differ runs on the changed middle only
        lo = 0
        while lo < len(old) and lo < len(new_lines) and old[lo] == new_lines[lo]:
            lo += 1
        hi = 0
        while (hi < len(old) - lo and hi < len(new_lines) - lo
               and old[len(old) - 1 - hi] == new_lines[len(new_lines) - 1 - hi]):
            hi += 1
        mid_old, mid_new = old[lo:len(old) - hi], new_lines[lo:len(new_lines) - hi]
        sm = difflib.SequenceMatcher(None, mid_old, mid_new, autojunk=False)
        new_own: list[str] = list(own[:lo])
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                new_own += own[lo + i1:lo + i2]
            else:
                new_own += [who] * (j2 - j1)
        new_own += own[len(old) - hi:]
        self.text[rel], self.owner[rel] = new_lines, new_own
        p = self.repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(new_lines))

    def apply(self, s: dict) -> set[str]:
        touched = set()
        for op, path, a, b in s["ops"]:
            rel = self.rel(path)
            touched.add(rel)
            if op == "rm":
                self.text.pop(rel, None)
                self.owner.pop(rel, None)
                (self.repo / rel).unlink(missing_ok=True)
                continue
            cur = "".join(self.text.get(rel, []))
            if op == "edit":
                if a not in cur:
                    continue
                new = cur.replace(a, b, 1)
            else:
                new = a
            self.set(rel, new.splitlines(keepends=True), s["sid"])
        return touched


def hand_code(rng: random.Random, n: int) -> str:
    words = ["ledger", "quota", "spool", "beacon", "tariff", "gauge", "harbor", "lantern", "parcel",
             "quarry", "ripple", "saddle", "tundra", "vessel", "walnut", "zephyr", "mortar", "pylon"]
    out = [f"# Local helpers kept by hand ({n}); not generated.\n", "\n"]
    for _ in range(rng.randint(2, 4)):
        a, b, c = rng.sample(words, 3)
        k = rng.randint(2, 9)
        out += [f"def {a}_{b}_{n}({c}, limit={k}):\n",
                f"    \"\"\"Return the {c} entries over {k}, as {a} {b} records.\"\"\"\n",
                f"    kept = [x for x in {c} if x.{b}_{a} > limit * {rng.randint(3, 97)}]\n",
                f"    return sorted(kept, key=lambda r: (r.{c}_{n}, r.{a}))[:{rng.randint(5, 50)}]\n",
                "\n", "\n"]
    return "".join(out)


def reformat(line: str) -> str:
    """Whitespace-only formatting: two spaces before an inline ``#``, one after each comma,
    trailing spaces stripped (tokens unchanged)."""
    body, nl = (line[:-1], "\n") if line.endswith("\n") else (line, "")
    import re

    body = re.sub(r",(?=\S)", ", ", body)
    body = re.sub(r"(?<=\S) ?#(?=[ \w])", "  #", body) if "'" not in body and '"' not in body else body
    return body.rstrip() + nl


class Builder:
    def __init__(self, repo: Path, rng: random.Random):
        self.repo, self.rng, self.tree = repo, rng, Tree(repo)
        self.truth: dict[str, dict] = {}   # sha -> {"kind", "lines": {(path, n): owner}}
        self.n_hand = 0

    def commit(self, msg: str, when: str, kind: str, paths: set[str] | None = None) -> str | None:
        git(self.repo, "add", "-A")
        if not git(self.repo, "status", "--porcelain"):
            return None
        env = {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
        git(self.repo, "commit", "-q", "-m", msg, env=env)
        sha = git(self.repo, "rev-parse", "HEAD").strip()
        self.snapshot(sha, kind)
        return sha

    def snapshot(self, sha: str, kind: str) -> None:
        """The truth of the lines ``sha`` adds (its first-parent diff, as git computes it)."""
        out = git(self.repo, "show", "--diff-merges=first-parent", "-U0", "--format=", "-M",
                  "--no-color", sha)
        lines, path, n = {}, None, 0
        for ln in out.splitlines():
            if ln.startswith("+++ "):
                path = None if ln[4:] == "/dev/null" else ln[6:]
            elif ln.startswith("@@"):
                n = int(ln.split("+")[1].split(",")[0].split(" ")[0])
            elif ln.startswith("+") and path is not None:
                if ln[1:].strip():
                    own = self.tree.owner.get(path, [])
                    lines[(path, n)] = own[n - 1] if n - 1 < len(own) else HAND
                n += 1
        self.truth[sha] = {"kind": kind, "lines": lines}

    def hand_commit(self, when: str) -> None:
        self.n_hand += 1
        rel = f"local/helpers_{self.n_hand:03d}.py"
        self.tree.set(rel, hand_code(self.rng, self.n_hand).splitlines(keepends=True), HAND)
        self.commit(f"Local helpers {self.n_hand} (by hand)", when, "hand")

    def session_commit(self, s: dict, kind: str = "step") -> None:
        """One commit per file the session changed (as people commit an agent's work piece by
        piece), in path order."""
        touched = sorted(self.tree.apply(s))
        for rel in touched:
            git(self.repo, "add", "-A", "--", rel)
            if not git(self.repo, "diff", "--cached", "--name-only"):
                continue
            env = {"GIT_AUTHOR_DATE": s["t1"], "GIT_COMMITTER_DATE": s["t1"]}
            git(self.repo, "commit", "-q", "-m", f"{s['pkg']}: release step ({s['sid'][:8]}) {rel}", env=env)
            self.snapshot(git(self.repo, "rev-parse", "HEAD").strip(), kind)


def build(repo: Path, sessions: list[dict], seed: int = 7) -> Builder:
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    b = Builder(repo, random.Random(seed))
    i, n = 0, len(sessions)
    squash_at, rebase_at = n // 3, (2 * n) // 3
    while i < n:
        s = sessions[i]
        if i == squash_at:
            git(repo, "checkout", "-q", "-b", "feature-squash")
            for s2 in sessions[i:i + SQUASH]:
                b.tree.apply(s2)
                git(repo, "add", "-A")
                git(repo, "commit", "-q", "-m", f"wip {s2['sid'][:8]}",
                    env={"GIT_AUTHOR_DATE": s2["t1"], "GIT_COMMITTER_DATE": s2["t1"]})
            git(repo, "checkout", "-q", "main")
            git(repo, "merge", "-q", "--squash", "feature-squash")
            b.commit(f"Squashed feature ({SQUASH} sessions)", sessions[i + SQUASH - 1]["t1"], "squash")
            i += SQUASH
            continue
        if i == rebase_at:
            git(repo, "checkout", "-q", "-b", "feature-rebase")
            branch = sessions[i:i + REBASE]
            old = []
            for s2 in branch:
                b.tree.apply(s2)
                git(repo, "add", "-A")
                git(repo, "commit", "-q", "-m", f"{s2['pkg']}: branch step ({s2['sid'][:8]})",
                    env={"GIT_AUTHOR_DATE": s2["t1"], "GIT_COMMITTER_DATE": s2["t1"]})
                sha = git(repo, "rev-parse", "HEAD").strip()
                b.snapshot(sha, "rebased")
                old.append(b.truth.pop(sha))
            git(repo, "checkout", "-q", "main")
            # main moves on with a hand-written commit in a file the branch does not touch
            b.n_hand += 1
            rel = f"local/helpers_{b.n_hand:03d}.py"
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(hand_code(b.rng, b.n_hand))
            b.tree.text[rel] = (repo / rel).read_text().splitlines(keepends=True)
            b.tree.owner[rel] = [HAND] * len(b.tree.text[rel])
            when = branch[0]["t0"]
            git(repo, "add", rel)
            git(repo, "commit", "-q", "-m", f"Local helpers {b.n_hand} (by hand)",
                env={"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when})
            b.snapshot(git(repo, "rev-parse", "HEAD").strip(), "hand")
            git(repo, "rebase", "-q", "main", "feature-rebase",
                env={"GIT_COMMITTER_DATE": branch[-1]["t1"]})
            git(repo, "checkout", "-q", "main")
            git(repo, "merge", "-q", "--ff-only", "feature-rebase")
            new = git(repo, "rev-list", "--reverse", f"main~{REBASE}..main").split()
            for sha, tr in zip(new, old, strict=True):
                b.truth[sha] = tr
            i += REBASE
            continue
        b.session_commit(s)
        if (i + 1) % HAND_EVERY == 0:
            b.hand_commit(s["t1"])
        i += 1
    # a formatter run over the files with the most lines
    last = sessions[-1]["t1"]
    big = sorted((f for f in b.tree.text if f.endswith(".py") and not f.startswith("local/")),
                 key=lambda f: -len(b.tree.text[f]))[:3]
    for f in big:  # one line in, one line out: each keeps its writer
        b.tree.text[f] = [reformat(x) for x in b.tree.text[f]]
        (repo / f).write_text("".join(b.tree.text[f]))
    b.commit("Format with the project's formatter", last, "formatter")
    return b


def score(b: Builder, got: dict[str, dict]) -> dict:
    tp = fp = fn = 0
    errs, hand_with, _lines_ok, lines_n = [], [], 0, 0
    by_kind: dict[str, int] = {}
    for sha, tr in b.truth.items():
        c = got.get(sha)
        if c is None:
            continue
        by_kind[tr["kind"]] = by_kind.get(tr["kind"], 0) + 1
        truth_s = {o for o in tr["lines"].values() if o != HAND}
        pred_s = {s["session"] for s in c["sessions"] if s.get("lines")}
        tp += len(truth_s & pred_s)
        fp += len(pred_s - truth_s)
        fn += len(truth_s - pred_s)
        n = len(tr["lines"])
        if n:
            share_t = sum(1 for o in tr["lines"].values() if o != HAND) / n
            share_p = (c["agent_lines"] / c["added_lines"]) if c["added_lines"] else 0.0
            errs.append(abs(share_t - share_p) * 100)
        if tr["kind"] == "hand" and pred_s:
            hand_with.append(sha)
        lines_n += n
    prec = tp / (tp + fp) if tp + fp else 1.0
    rec = tp / (tp + fn) if tp + fn else 1.0
    errs.sort()
    return {"commits": len(got), "by_kind": by_kind, "precision": round(prec, 4),
            "recall": round(rec, 4), "tp": tp, "fp": fp, "fn": fn,
            "agent_share_error_points": {"mean": round(sum(errs) / max(len(errs), 1), 3),
                                         "p95": round(errs[int(0.95 * (len(errs) - 1))], 3) if errs else 0,
                                         "max": round(errs[-1], 3) if errs else 0},
            "hand_commits_with_sessions": len(hand_with), "lines_scored": lines_n}


def per_kind(b: Builder, got: dict[str, dict]) -> dict:
    out = {}
    for kind in sorted({t["kind"] for t in b.truth.values()}):
        sub = Builder.__new__(Builder)
        sub.truth = {s: t for s, t in b.truth.items() if t["kind"] == kind}
        r = score(sub, got)
        out[kind] = {k: r[k] for k in ("commits", "precision", "recall", "agent_share_error_points")}
    return out


def engram_exe() -> list[str]:
    """The installed ``engram`` command beside this Python (as a user runs it), else ``-m``."""
    exe = Path(sys.executable).with_name("engram")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "engram.cli"]


def _timed_runs(cmd: list[str], cwd: Path, runs: int, env: dict) -> dict:
    """``runs`` fresh processes back to back: wall (``perf_counter`` around ``subprocess.run``)
    and CPU (the child's and its git children's user + system time, ``RUSAGE_CHILDREN``)."""
    walls, cpus = [], []
    out = None
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
        walls.append(time.perf_counter() - t)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        assert out is None or p.stdout == out, "fresh runs disagree"
        out = p.stdout
    walls.sort()
    cpus.sort()
    return {"runs": runs, "wall_median": round(walls[len(walls) // 2], 3), "wall_min": round(walls[0], 3),
            "wall_max": round(walls[-1], 3), "cpu_median": round(cpus[len(cpus) // 2], 3),
            "cpu_min": round(cpus[0], 3), "load": [round(x, 2) for x in os.getloadavg()],
            "sha256": __import__("hashlib").sha256(out or b"").hexdigest()[:16]}


def fresh_log(repo: Path, n: int, runs: int) -> dict:
    """``engram log -n N`` with the cache warm, as fresh processes: the cache-only path (the
    default), the full path (``ENGRAM_NO_QUICK=1``: the engine opened), and answered by a warm
    ``engram serve`` (started here, asked once before timing). Every way's output must be the
    same bytes."""
    cmd = [*engram_exe(), "log", "-n", str(n)]
    base = {k: v for k, v in os.environ.items() if k not in ("ENGRAM_NO_SERVE", "ENGRAM_NO_QUICK")}
    local = {**base, "ENGRAM_NO_SERVE": "1"}
    got = {"quick": _timed_runs(cmd, repo, runs, local),
           "full": _timed_runs(cmd, repo, runs, {**local, "ENGRAM_NO_QUICK": "1"})}
    log_path = repo.parent / "serve.log"
    with open(log_path, "w") as err:
        srv = subprocess.Popen([*engram_exe(), "serve", "-v"], cwd=repo, env=base,
                               stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while "engram serve: answering" not in log_path.read_text():
            if srv.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("engram serve did not start: " + log_path.read_text())
            time.sleep(0.05)
        subprocess.run(cmd, cwd=repo, env=base, check=True, capture_output=True)  # its first
        got["served"] = _timed_runs(cmd, repo, runs, base)
        answered = log_path.read_text().count("serve: answered")
        got["served"]["answered_by_server"] = answered - 1
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    shas = {w["sha256"] for w in got.values()}
    assert len(shas) == 1, f"the ways disagree: {got}"
    for name, w in got.items():
        print(f"engram log -n {n}, fresh process, {name}: wall median {w['wall_median']} s "
              f"(min {w['wall_min']}), CPU median {w['cpu_median']} s, load {w['load'][0]}",
              file=sys.stderr)
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--packages", default="more-itertools,click")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "commits")
    ap.add_argument("--timed", type=int, default=1000)
    ap.add_argument("--min-commits", type=int, default=1000,
                    help="top the history up with hand-written commits to at least this many")
    ap.add_argument("--no-ingest", action="store_true", help="reuse the index of the last run")
    ap.add_argument("--no-build", action="store_true", help="reuse the repository of the last run")
    ap.add_argument("--fresh-runs", type=int, default=7,
                    help="fresh `engram log` processes timed per way (cache-only, full, served)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    home = a.out / "home"
    repo = a.out / "repo"
    pk = a.packages.split(",")
    t0 = time.perf_counter()
    sessions = sessions_of(a.corpus, pk)
    truth_file = a.out / "truth.json"
    if a.no_build and truth_file.exists():
        b = Builder.__new__(Builder)
        b.truth = {sha: {"kind": t["kind"], "lines": {(p, n): o for p, n, o in t["lines"]}}
                   for sha, t in json.loads(truth_file.read_text()).items()}
    else:
        b = build(repo, sessions)
        truth_file.write_text(json.dumps(
            {sha: {"kind": t["kind"], "lines": [[p, n, o] for (p, n), o in sorted(t["lines"].items())]}
             for sha, t in b.truth.items()}))
    if len(b.truth) < a.min_commits:  # top the history up with hand-written commits
        extra = Builder(repo, random.Random(99))
        extra.n_hand = 900
        while len(b.truth) + len(extra.truth) < a.min_commits:
            extra.hand_commit("2026-01-01T00:00:00Z")
        b.truth.update(extra.truth)
        truth_file.write_text(json.dumps(
            {sha: {"kind": t["kind"], "lines": [[p, n, o] for (p, n), o in sorted(t["lines"].items())]}
             for sha, t in b.truth.items()}))
    print(f"history: {len(b.truth)} commits from {len(sessions)} sessions in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if not a.no_ingest and home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True, exist_ok=True)
    os.environ["HOME"] = os.environ["ENGRAM_HOME"] = str(home)
    import yaml

    from engram.adapters import REGISTRY
    hs = {h: {"enabled": False} for h in REGISTRY}
    hs["claude_code"] = {"enabled": True, "paths": [str((a.corpus / "logs" / ("-home-dev-src-" + p)).resolve())
                                                     for p in pk]}
    (home / "config.yml").write_text(yaml.safe_dump({"harnesses": hs}, sort_keys=True))
    from engram.commits import log as log_mod
    from engram.engine import Engine

    eng = Engine(repo, semantic=False)
    if not a.no_ingest:
        t = time.perf_counter()
        eng.ingest(seal=True)
        print(f"ingest {time.perf_counter() - t:.1f} s", file=sys.stderr)
    eng.conn().execute("DELETE FROM commit_attr")
    n_all = len(b.truth)
    timed = min(a.timed, n_all)
    cpu: dict[str, float] = {}

    def clock() -> tuple[float, float, float]:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.perf_counter(), time.process_time(), r.ru_utime + r.ru_stime

    def took(name: str, t0: tuple[float, float, float]) -> float:
        """Wall seconds since ``t0``; the CPU of this process and of its git children kept in
        ``cpu`` (the machine is shared: CPU does not depend on the neighbours, wall does)."""
        t1 = clock()
        cpu[name] = round(t1[1] - t0[1], 3)
        cpu[name + "_git"] = round(t1[2] - t0[2], 3)
        return t1[0] - t0[0]

    t = clock()
    res = log_mod.log(eng, [], limit=timed)
    first = took("log_first", t)
    print(f"log first {first:.2f} s (CPU {cpu['log_first']} s + git {cpu['log_first_git']} s)",
          file=sys.stderr)
    t = clock()
    log_mod.log(eng, [], limit=timed)
    second = took("log_cached", t)
    got = {c["sha"]: c for c in log_mod.log(eng, [], limit=None)["commits"]}
    # the CLI, cached, as a user runs it: fresh processes (cache-only path, full path), and
    # through a warm `engram serve`
    fresh = fresh_log(repo, timed, a.fresh_runs)
    cli_cached = fresh["quick"]["wall_median"]
    from engram.commits import review as review_mod
    heads = list(got)
    rng = f"{heads[min(50, len(heads) - 1)]}..{heads[0]}"
    t = clock()
    review_mod.review(eng, rng)
    review_cached = took("review_50_cached", t)
    eng.conn().execute("DELETE FROM commit_attr")
    t = clock()
    review_mod.review(eng, rng)
    review_cold = took("review_50_cold", t)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "engram.cli", "review", rng, "--markdown"], cwd=repo,
                   check=True, capture_output=True)
    review_cli = time.perf_counter() - t
    result = {"score": score(b, got), "by_kind": per_kind(b, got),
              "timing_s": {"log_commits": len(res["commits"]), "log_first": round(first, 3),
                           "log_cached": round(second, 3), "log_cli_cached": round(cli_cached, 3),
                           "log_cli_fresh": fresh,
                           "review_50_cached": round(review_cached, 3),
                           "review_50_cold": round(review_cold, 3),
                           "review_50_cli_markdown": round(review_cli, 3)},
              "cpu_s": cpu,
              "machine": {"cpus": os.cpu_count(), "load": os.getloadavg()}}
    (a.out / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
