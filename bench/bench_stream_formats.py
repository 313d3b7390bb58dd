"""Peak memory of ingesting one big Gemini CLI or Aider log: ``engram ingest --seal`` on a
generated single log of a given size (one session; ``aider-many``: many), in a fresh process
tree (``bench_ingest_memory.measure``: ``ru_maxrss`` of the largest process, CPU seconds, heap
and file pages sampled apart).

    python bench/bench_stream_formats.py --harness gemini|aider|aider-many [--sizes 200,800]
                                         [--src TREE] [--keep DIR]

The logs are made of the real fixture logs of ``tests/data/harness`` repeated with varied text:

* ``gemini``: one legacy ``session-*.json`` document (``{sessionId, projectHash, startTime,
  lastUpdated, messages[]}``, indented as Gemini CLI writes it) whose ``messages`` are the
  messages of both real sessions, pass after pass; in each pass the words of every string value
  (prompts, replies, thoughts, tool arguments and results, file contents and paths) get a suffix
  of the pass, so texts differ from pass to pass but agree within one (a ``replace`` still finds
  the text its ``read_file`` showed), and ids get the pass number;
* ``aider``: one ``.aider.chat.history.md`` holding one session (one ``# aider chat started at``
  header) whose body is the bodies of every real session, pass after pass, words suffixed the
  same way (the markers Aider writes — ``####``, ``>``, SEARCH/REPLACE, ``Applied edit to`` — kept);
* ``aider-many``: one ``.aider.chat.history.md`` holding many sessions: every real session, header
  included (its minutes and seconds made those of the session's number), pass after pass, words
  suffixed the same way — ~7 sessions for each 330 kB.

``--src`` runs another checkout on the same logs (the tree before a change: ``git worktree add
/tmp/base-stream <commit>``). Byte-compile both trees first (``python -m compileall -q``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_ingest_memory as bim  # noqa: E402

HARNESS = REPO / "tests" / "data" / "harness"
GEMINI_SID = "5e551011-0000-4000-8000-0000000000g1"
_WORD = re.compile(r"[A-Za-z]{5,}")
_KEEP_VALUES = {"type", "status", "name", "timestamp", "model", "id", "kind"}
#: ``--same-paths``: the arguments naming files keep their value, so every pass reads and edits
#: the same files (as real sessions do); without it each pass touches files of its own, and what
#: the adapter knows of each file (the text later ``replace`` calls are placed against) grows
_PATH_KEYS = {"file_path", "absolute_path", "path", "dir_path", "directory"}
_AIDER_KEEP = {"aider", "applied", "search", "replace", "model", "tokens", "create", "started",
               "thinking", "content", "format", "weak", "whole", "fenced", "message", "messages",
               "sent", "received", "commit", "chat", "added", "readonly", "files", "repo",
               "yes", "main", "editor", "architect", "using", "sonnet", "claude", "anthropic",
               "openai", "gemini", "ollama", "deepseek", "history", "diff"}


def _suffix(n: int) -> str:
    digits = "abcdefghijklmnopqrstuvwxyz"
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = digits[r] + out
    return out


def _vary_text(text: str, sfx: str, keep: set[str] = frozenset()) -> str:
    return _WORD.sub(lambda m: m.group() if m.group().lower() in keep else m.group() + sfx,
                     text)


def _vary(value, sfx: str, key: str | None = None, keep=_KEEP_VALUES):
    if isinstance(value, str):
        return value if key in keep else _vary_text(value, sfx)
    if isinstance(value, list):
        return [_vary(v, sfx, key, keep) for v in value]
    if isinstance(value, dict):
        return {k: _vary(v, sfx, k, keep) for k, v in value.items()}
    return value


def gemini_log(path: Path, target: int, same_paths: bool = False) -> dict:
    msgs = []
    for p in sorted((HARNESS / "gemini_cli").glob("*session-*.json")):
        msgs.extend(json.loads(p.read_text())["messages"])
    n = passes = 0
    with open(path, "w") as f:
        f.write('{\n  "sessionId": "%s",\n  "projectHash": "b3ac4c",\n'
                '  "startTime": "2026-01-16T11:01:00.000Z",\n'
                '  "lastUpdated": "2026-01-16T18:00:00.000Z",\n  "messages": [' % GEMINI_SID)
        first = True
        while f.tell() < target:
            sfx = _suffix(passes)
            for m in msgs:
                m = _vary(m, sfx, keep=_KEEP_VALUES | _PATH_KEYS if same_paths else _KEEP_VALUES)
                m["id"] = f"{m.get('id')}-{passes}"
                body = json.dumps(m, indent=2, ensure_ascii=False).replace("\n", "\n    ")
                f.write(("\n    " if first else ",\n    ") + body)
                first = False
                n += 1
            passes += 1
        f.write("\n  ]\n}\n")
    return {"bytes": path.stat().st_size, "messages": n, "passes": passes}


def _aider_bodies() -> list[str]:
    out = []
    for p in sorted((HARNESS / "aider").glob("*.aider.chat.history.md")):
        parts = re.split(r"(?m)^# aider chat started at .*\n", p.read_text())
        out.extend(x for x in parts if x.strip())
    return out


def aider_log(path: Path, target: int) -> dict:
    bodies = _aider_bodies()
    passes = 0
    with open(path, "w") as f:
        f.write("# aider chat started at 2026-01-16 11:01:00\n")
        while f.tell() < target:
            sfx = _suffix(passes)
            for b in bodies:
                f.write(_vary_text(b, sfx, _AIDER_KEEP))
            passes += 1
    return {"bytes": path.stat().st_size, "passes": passes}


def aider_many_log(path: Path, target: int) -> dict:
    sessions = []
    for p in sorted((HARNESS / "aider").glob("*.aider.chat.history.md")):
        sessions.extend(x for x in re.split(r"(?m)^(?=# aider chat started at )", p.read_text())
                        if x.strip())
    n = passes = 0
    with open(path, "w") as f:
        while f.tell() < target:
            sfx = _suffix(passes)
            for body in sessions:
                head, _, rest = body.partition("\n")
                if head.startswith("# aider chat started at "):
                    head = head[:-5] + f"{n // 60 % 60:02d}:{n % 60:02d}"
                f.write(head + "\n" + _vary_text(rest, sfx, _AIDER_KEEP))
                n += 1
            passes += 1
    return {"bytes": path.stat().st_size, "passes": passes, "bodies": n}


def setup(tmp: Path, harness: str, log_bytes: int,
          same_paths: bool = False) -> tuple[Path, Path, dict]:
    root = tmp / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    if harness == "gemini":
        logs = tmp / "gemini" / "b3ac4c" / "chats"
        logs.mkdir(parents=True)
        info = gemini_log(logs / f"session-2026-01-16T11-01-{GEMINI_SID[:8]}.json", log_bytes,
                          same_paths)
        name, where = "gemini_cli", tmp / "gemini"
    else:
        logs = tmp / "aider-project"
        logs.mkdir(parents=True)
        make = aider_many_log if harness == "aider-many" else aider_log
        info = make(logs / ".aider.chat.history.md", log_bytes)
        name, where = "aider", logs
    cfg = f"harnesses:\n  {name}:\n    paths: [{where}]\n"
    cfg += "".join(f"  {h}: false\n" for h in ("claude_code", "codex", "gemini_cli", "opencode",
                                               "cursor", "openclaw", "aider") if h != name)
    (root / ".engram" / "config.yml").write_text(cfg)
    return root, tmp / "engram-home", info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--harness", choices=("gemini", "aider", "aider-many"), required=True)
    ap.add_argument("--sizes", default="200,800", help="log sizes in MB (comma separated)")
    ap.add_argument("--src", type=Path, action="append",
                    help="source tree(s) to run engram from, each on the same logs "
                         "(default: this one)")
    ap.add_argument("--keep", type=Path, help="generate into (and keep) this directory")
    ap.add_argument("--same-paths", action="store_true",
                    help="gemini: every pass reads and edits the same files (default: its own)")
    a = ap.parse_args(argv)
    srcs = a.src or [REPO]
    print(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(),
                      "python": platform.python_version()}), flush=True)
    for mb in (int(x) for x in a.sizes.split(",")):
        base = a.keep or Path(tempfile.mkdtemp(prefix="engram-stream-bench-"))
        tmp = base / f"{a.harness}-{mb}" if not a.same_paths else base / f"{a.harness}-{mb}-same"
        if (tmp / "repo").exists():
            root, home = tmp / "repo", tmp / "engram-home"
            info = {"bytes": sum(p.stat().st_size for p in tmp.rglob("*")
                                 if p.is_file() and ("chats" in p.parts
                                                     or p.name.endswith(".history.md")))}
        else:
            root, home, info = setup(tmp, a.harness, mb * 1_000_000, a.same_paths)
        for src in srcs:
            r = bim.measure(root, home, True, src.resolve())
            print(json.dumps({"harness": a.harness, "log_mb": round(info["bytes"] / 1e6),
                              "src": str(src), **info, **r}), flush=True)
        if a.keep is None:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
