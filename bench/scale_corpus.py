"""A heavy user's machine: ≥ 500 MB / ≥ 15k Claude Code sessions over ≥ 2,000 distinct real files.

Two parts, laid out as ``<out>/home/.claude/projects/<encoded-cwd>/<session>.jsonl`` (what Claude
Code writes, what ``deja index`` and ``engram ingest`` read):

* **the package history** — ``bench/corpus.py`` (real release diffs of more-itertools and click
  turned into edit, read, compaction-split and orchestrator sessions, with its truth files), run
  with ``--scenarios a,b --orchestrator-format claude_code``; its two final trees become two real
  git repositories, ``<out>/repos/more-itertools`` and ``<out>/repos/click`` (the targets of
  explain), its truth is rewritten relative to them (``<out>/truth/*.json``);
* **the rest of the user's work** — sessions in dozens of other projects over the ``.py`` files of
  the packages installed beside this interpreter (``site-packages``: numpy, sympy, torch, ...; the
  packages of the history part and their relatives excluded), each file distinct real code: a
  question, a ``Read`` of the file (``     N→`` gutters, offset/limit past 1,500 lines), an answer
  quoting a function, often an ``Edit`` of it (``originalFile`` = the whole file, as Claude Code
  logs it; the file's state carries to the project's next session), a test run; some split at a
  compaction, some run by a ``Task`` sub-agent (``<session>/subagents/agent-<id>.jsonl``).

Deterministic: a seeded RNG, files in sorted order, fixed timestamps (the same interpreter and
installed packages give the same bytes). ``python bench/scale_corpus.py --out DIR [--small]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpus as C  # noqa: E402  (bench/corpus.py: the Claude Code record writer and the history)

# the history part's packages and the filler of bench/corpus.py: not read again as "other work"
EXCLUDE = {"click", "more_itertools", "toolz", "attr", "attrs", "engram", "engram_lsp",
           "_pytest", "pip", "setuptools", "pkg_resources", "_distutils_hack", "cattr", "cattrs"}
MIN_BYTES, MAX_BYTES = 1500, 60_000
WORK_BASE = "/home/dev/work"
SIZES = {  # mode → (bench/corpus.py --sessions, other-work sessions, distinct files)
    "full": (3000, 12_500, 3000),
    "small": (300, 1200, 2000),
}
EDIT_SHARE = 0.6
SPLIT_SHARE = 0.06      # other-work sessions continued after a compaction
TASK_SHARE = 0.05       # other-work edits run by a Task sub-agent


def real_files(limit: int) -> list[tuple[str, Path]]:
    """``(top-level package, path)`` of up to ``limit`` distinct ``.py`` files of site-packages,
    round-robin over the packages (so no one package dominates), in sorted order."""
    site = Path(sysconfig.get_paths()["purelib"])
    by_pkg: dict[str, list[Path]] = {}
    for top in sorted(site.iterdir()):
        if not top.is_dir() or top.name in EXCLUDE or "." in top.name or top.name.startswith("__"):
            continue
        files = []
        for p in sorted(top.rglob("*.py")):
            try:
                n = p.stat().st_size
            except OSError:
                continue
            if MIN_BYTES <= n <= MAX_BYTES and "test" not in p.name:
                files.append(p)
        if files:
            by_pkg[top.name] = files
    out: list[tuple[str, Path]] = []
    seen: set[bytes] = set()
    i = 0
    while len(out) < limit and any(i < len(v) for v in by_pkg.values()):
        for pkg in sorted(by_pkg):
            if i < len(by_pkg[pkg]) and len(out) < limit:
                p = by_pkg[pkg][i]
                data = p.read_bytes()
                if data in seen:  # distinct texts only
                    continue
                try:
                    data.decode()
                except UnicodeDecodeError:
                    continue
                seen.add(data)
                out.append((pkg, p))
        i += 1
    return out


class _Gen:
    """What ``corpus.CCSession`` asks of its generator: an RNG, ids, the Claude Code version."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.ids = C.Ids(rng)

    def cc_version(self, t: dt.datetime) -> tuple[str, str]:
        span = (t - C.T0).total_seconds() / (86400 * 300)
        i = min(len(C.CC_VERSIONS) - 1, max(0, int(span * len(C.CC_VERSIONS))))
        return C.CC_VERSIONS[i]


class OtherWork:
    """Sessions over real files in many projects (see the module docstring)."""

    def __init__(self, projects: Path, files: list[tuple[str, Path]], seed: int):
        self.projects = projects
        self.rng = random.Random(seed)
        self.gen = _Gen(self.rng)
        site = Path(sysconfig.get_paths()["purelib"])
        self.files = []  # (project, rel, lines)
        for pkg, p in files:
            self.files.append((pkg, str(p.relative_to(site)), C.split_lines(p.read_text())))
        self.bytes = 0
        self.counts: dict[str, int] = {}

    def _save(self, s: C.CCSession, sub: str | None = None) -> None:
        d = self.projects / C.encode_cwd(s.cwd)
        if sub:
            d = d / sub
        d.mkdir(parents=True, exist_ok=True)
        data = b"\n".join(s.records) + b"\n"
        name = f"{s.sid}.jsonl" if sub is None else f"agent-{s.agent}.jsonl"
        (d / name).write_bytes(data)
        self.bytes += len(data)

    def run(self, n: int) -> dict:
        rng = self.rng
        t = C.T0
        per_day = max(1, n // 330)
        for _i in range(n):
            t += dt.timedelta(minutes=rng.uniform(0.5, 2 * 24 * 60 / per_day))
            k = rng.randrange(len(self.files))
            self.session(k, t)
        return {"sessions": sum(self.counts.values()), "by_kind": dict(sorted(self.counts.items())),
                "bytes": self.bytes, "files": len(self.files),
                "projects": len({f[0] for f in self.files})}

    def session(self, k: int, t: dt.datetime) -> None:
        rng = self.rng
        pkg, rel, lines = self.files[k]
        cwd = f"{WORK_BASE}/{pkg}"
        path = f"{cwd}/{rel}"
        text = C.join_lines(lines)
        try:
            syms = [x for x in C.symbols(text) if 3 <= x.end - x.start <= 120]
        except (SyntaxError, ValueError, RecursionError):
            syms = []
        s = C.CCSession(self.gen, cwd, t, "other")
        sym = rng.choice(syms) if syms else None
        name = sym.name if sym else rel
        s.user(rng.choice(C.READ_QUESTIONS).format(name=f"`{name}`", file=rel))
        if len(lines) > C.BIG_FILE_LINES and sym:
            off = max(1, sym.start - rng.randint(0, 40))
            s.read(path, lines, off, sym.end - off + 1 + rng.randint(0, 80))
        else:
            s.read(path, lines)
        if sym is None:
            s.say(f"{rel} holds module-level code only; nothing to change there.")
            self._done(s, "other-read")
            return
        code = C.code_of(lines, sym)
        s.say(rng.choice(C.READ_ANSWERS).format(name=sym.name, code=code[:3000], file=rel,
                                                start=sym.start, end=sym.end))
        if rng.random() >= EDIT_SHARE:
            self._done(s, "other-read")
            return
        if rng.random() < SPLIT_SHARE:  # continued after a compaction: the edit in a new log
            self._done(s, "other-part1")
            s2 = C.CCSession(self.gen, cwd, s.t + dt.timedelta(seconds=rng.uniform(20, 120)), "other",
                             version=(s.version, s.model))
            s2.user("This session is being continued from a previous conversation that ran out of "
                    f"context. The conversation is summarized below:\nSummary:\n1. Primary Request: "
                    f"review `{sym.name}` in {rel}.\n2. Code:\n```python\n{code[:2000]}\n```\n"
                    "Please continue the conversation from where we left it off.",
                    isCompactSummary=True, isVisibleInTranscriptOnly=True)
            s = s2
        agent = None
        if rng.random() < TASK_SHARE:
            agent = self._task(s, rel, sym, code)
        self._edit(agent or s, path, k, sym)
        if agent is not None:
            agent.say("Done: the comment is in place and the tests pass.")
            self._save(agent, sub=f"{s.sid}/subagents")
            s.say("The sub-agent finished the change.")
        s.bash("python -m pytest -q", "Run the tests", f"{rng.randint(20, 900)} passed in "
               f"{rng.uniform(0.5, 40):.2f}s")
        self._done(s, "other-edit" if agent is None else "other-task")

    def _task(self, s: C.CCSession, rel: str, sym, code: str) -> C.CCSession:
        """A ``Task`` tool call whose sub-agent transcript is a separate sidechain log."""
        prompt = (f"In {rel}, add a short comment at the top of `{sym.name}` explaining its edge "
                  f"cases. The current code:\n```python\n{code[:1500]}\n```")
        agent_id = self.gen.ids.b62(8).lower()
        s.tool("Task", {"description": f"Comment {sym.name}", "prompt": prompt,
                        "subagent_type": "general-purpose"},
               f"agentId: {agent_id}\nDone.", {"status": "completed", "agentId": agent_id,
                                               "content": [{"type": "text", "text": "Done."}]})
        a = C.CCSession(self.gen, s.cwd, s.t, "other", sid=s.sid,
                        version=(s.version, s.model))
        a.agent = agent_id
        a.parent = None
        rec = a._env("user", isSidechain=True, agentId=agent_id)
        rec["message"] = {"role": "user", "content": prompt}
        rec["timestamp"] = a.tick(1, 3)
        a._emit(rec)
        a._env = _sidechain_env(a._env, agent_id)
        return a

    def _edit(self, s: C.CCSession, path: str, k: int, sym) -> None:
        pkg, rel, lines = self.files[k]
        body = sym.start  # the line after the def/class header (decorators aside)
        while body < len(lines) and not lines[body - 1].rstrip().endswith(":"):
            body += 1
        if body >= len(lines):
            return
        nxt = lines[body]
        indent = nxt[: len(nxt) - len(nxt.lstrip())] or "    "
        note = self.rng.choice(["empty input returns early", "callers rely on the order kept here",
                                "the fast path covers the common case", "see the module docstring",
                                "keep in sync with the C implementation", "None means the default"])
        new_line = f"{indent}# Note ({self.rng.randint(1, 9999)}): {note}."
        before = C.join_lines(lines)
        old = "\n".join(lines[body - 1: body + 1])
        after_lines = lines[:body] + [new_line] + lines[body:]
        patch = C.structured_patch(lines, after_lines, body, body, body + 1)
        s.edit(path, before, C.join_lines(after_lines), old,
               "\n".join([lines[body - 1], new_line, lines[body]]), patch, after_lines, body + 1,
               body + 1)
        self.files[k] = (pkg, rel, after_lines)

    def _done(self, s: C.CCSession, kind: str) -> None:
        self._save(s)
        self.counts[kind] = self.counts.get(kind, 0) + 1


def _sidechain_env(env, agent_id: str):
    def wrapped(typ: str, **extra):
        return env(typ, **{"isSidechain": True, "agentId": agent_id, **extra})
    return wrapped


def build(out: Path, mode: str, seed: int = 20261125) -> dict:
    """Build the corpus under ``out`` (see the module docstring); returns its summary (also
    written to ``<out>/scale.json``). Reuses a finished build."""
    done = out / "scale.json"
    if done.exists():
        return json.loads(done.read_text())
    hist_n, other_n, n_files = SIZES[mode]
    if out.exists():
        shutil.rmtree(out)
    projects = out / "home" / ".claude" / "projects"
    projects.mkdir(parents=True)
    base = out / "history"
    subprocess.run([sys.executable, str(HERE / "corpus.py"), "--out", str(base), "--sessions",
                    str(hist_n), "--scenarios", "a,b", "--orchestrator-format", "claude_code"],
                   check=True, stdout=subprocess.DEVNULL)
    for d in sorted((base / "logs").iterdir()):
        d.rename(projects / d.name)
    hist = json.loads((base / "corpus.json").read_text())
    repos = {}
    for pkg_dir in sorted((base / "repo").iterdir()):
        r = out / "repos" / pkg_dir.name
        r.parent.mkdir(parents=True, exist_ok=True)
        pkg_dir.rename(r)
        env = dict(os.environ, GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
                   GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid",
                     "commit", "-q", "-m", "release"]):
            subprocess.run(cmd, cwd=r, check=True, env=env)
        repos[pkg_dir.name] = str(r.relative_to(out))
    # truth relative to each repo: "click/src/x.py" → repo "click", file "src/x.py"
    tdir = out / "truth"
    tdir.mkdir()
    for name, src in (("spans", base / "truth.json"),
                      ("continuation", base / "scenarios" / "continuation.json"),
                      ("orchestrator", base / "scenarios" / "orchestrator.json")):
        xs = json.loads(src.read_text()) if src.exists() else []
        for x in xs:
            x["repo"], x["file"] = x["file"].split("/", 1)
        (tdir / f"{name}.json").write_text(json.dumps(xs, indent=1))
    files = real_files(n_files)
    other = OtherWork(projects, files, seed).run(other_n)
    raw = sum(f.stat().st_size for f in projects.rglob("*.jsonl"))
    summary = {"mode": mode, "sessions": hist["sessions"] + other["sessions"],
               "log_files": sum(1 for _ in projects.rglob("*.jsonl")),
               "raw_log_bytes": raw, "raw_log_mb": round(raw / 1e6, 1),
               "projects": sum(1 for _ in projects.iterdir()),
               "history": {k: hist[k] for k in ("sessions", "by_kind", "raw_log_mb", "scenarios")},
               "other_work": other, "distinct_real_files": other["files"] + sum(
                   1 for r in repos.values() for _ in (out / r).rglob("*.py")),
               "repos": repos}
    shutil.rmtree(base / "repo", ignore_errors=True)
    done.write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--small", action="store_true", help="~1.5k sessions (quick runs)")
    a = ap.parse_args(argv)
    print(json.dumps(build(a.out.resolve(), "small" if a.small else "full"), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
