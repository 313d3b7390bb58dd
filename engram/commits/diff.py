"""First-parent patches of many commits from one ``git log --no-walk --stdin`` → added lines.

A merge is diffed against its first parent (``--diff-merges=first-parent``), a root commit
against the empty tree. Renames are detected (a moved file adds no lines); binary files and
files over ``BIG_FILE`` are listed with ``binary: true`` and no lines. One commit keeps at most
``MAX_ADDED`` added lines and ``MAX_FILES`` files; past that it is marked ``truncated`` with the
reason, never attributed from a part silently.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from engram.commits.git import _ENV, Git, GitError
from engram.timestamps import utc_iso

MAX_ADDED = 200_000      # added lines kept per commit
MAX_FILES = 5_000        # files kept per commit
CONTEXT = 2              # unchanged lines kept around each hunk (their tokens help judge its edges)
BIG_FILE = "16m"         # git treats larger files as binary (core.bigFileThreshold)
SEP = "\x1f"
FORMAT = ("%x00%H%x1f%P%x1f%an%x1f%ae%x1f%at%x1f%ct%x1f%s"
          "%x1f%(trailers:key=Engram-Session,valueonly,separator=%x1d)%x1e")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class FileDiff:
    path: str                       # path in the commit (new side)
    old_path: str | None = None     # before a rename
    status: str = "M"               # A added, M modified, D deleted, R renamed
    binary: bool = False
    added: list[tuple[int, str]] = field(default_factory=list)   # (line in the new file, text)
    context: list[tuple[int, str]] = field(default_factory=list)  # unchanged lines around them
    deleted: int = 0
    removed: list[str] = field(default_factory=list)   # the deleted lines' text (moved-line rule)


@dataclass
class CommitDiff:
    sha: str
    parents: list[str]
    author: str
    email: str
    t: str                          # author time (UTC ISO 8601, ``Z``)
    committed: str                  # committer time (UTC ISO 8601, ``Z``)
    subject: str
    trailers: list[str]
    files: list[FileDiff] = field(default_factory=list)
    truncated: str | None = None    # why some of the commit was left out
    parent_t: str | None = None     # the first parent's committer time (None: a root commit)


def _unquote(p: str) -> str:
    """A path as git prints it (C-quoted when it holds odd characters)."""
    if len(p) >= 2 and p[0] == '"' and p[-1] == '"':
        return p[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode(
            "latin-1", "replace").decode("utf-8", "replace")
    return p


def _utc(epoch: str) -> str:
    try:
        return utc_iso(float(epoch))
    except ValueError:
        return ""


def _strip_side(p: str) -> str:
    p = _unquote(p)
    return p[2:] if p[:2] in ("a/", "b/") else p


def commit_diffs(git: Git, shas: list[str]) -> dict[str, CommitDiff]:
    """``{sha: CommitDiff}`` for ``shas`` (each a full commit id), one git process."""
    if not shas:
        return {}
    args = [git.exe, "-c", "core.quotepath=off", "-c", f"core.bigFileThreshold={BIG_FILE}",
            "log", "--no-walk=unsorted", "--stdin", "--diff-merges=first-parent", "-p",
            f"-U{CONTEXT}",
            "-M", "--no-color", "--no-ext-diff", "--no-textconv", "--encoding=UTF-8",
            f"--format={FORMAT}"]
    import os

    p = subprocess.Popen(args, cwd=str(git.root), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**os.environ, **_ENV})
    assert p.stdin is not None and p.stdout is not None
    import threading

    def feed() -> None:
        try:
            p.stdin.write(("\n".join(shas) + "\n").encode())
            p.stdin.close()
        except BrokenPipeError:
            pass

    th = threading.Thread(target=feed, daemon=True)
    th.start()
    out = _parse(p.stdout)
    err = p.stderr.read().decode("utf-8", "replace").strip() if p.stderr else ""
    rc = p.wait()
    th.join()
    if rc != 0:
        raise GitError((err.splitlines() or [f"git log exited with {rc}"])[0].removeprefix("fatal: "))
    _parent_times(git, out)
    return out


def _parent_times(git: Git, out: dict[str, CommitDiff]) -> None:
    want = sorted({d.parents[0] for d in out.values() if d.parents} - set(out))
    times = {sha: d.committed for sha, d in out.items()}
    if want:
        raw = git.run_bytes(["log", "--no-walk=unsorted", "--stdin", "--format=%H %ct"],
                            input_=("\n".join(want) + "\n").encode()).decode()
        for line in raw.splitlines():
            sha, _, ct = line.partition(" ")
            times[sha] = _utc(ct)
    for d in out.values():
        if d.parents:
            d.parent_t = times.get(d.parents[0])


def _parse(stream) -> dict[str, CommitDiff]:
    """Commits and their patches from ``git log --format=FORMAT -p`` output. Inside a hunk the
    line counts of its ``@@`` header say which lines belong to it (an added line may itself
    begin with ``++ ``); only the lines kept are decoded."""
    out: dict[str, CommitDiff] = {}
    cur: CommitDiff | None = None
    f: FileDiff | None = None
    new_line = old_left = new_left = 0
    n_added = 0
    for raw in stream:
        if new_left > 0 or old_left > 0:
            c = raw[:1]
            if c == b"+":
                new_left -= 1
                if f is not None:
                    if n_added >= MAX_ADDED:
                        cur.truncated = f"more than {MAX_ADDED} added lines: the rest are not attributed"
                    else:
                        f.added.append((new_line, raw[1:].decode("utf-8", "replace").rstrip("\n")))
                        n_added += 1
                new_line += 1
                continue
            if c == b" ":
                new_left -= 1
                old_left -= 1
                if f is not None and len(f.context) < MAX_ADDED:
                    f.context.append((new_line, raw[1:].decode("utf-8", "replace").rstrip("\n")))
                new_line += 1
                continue
            if c == b"-":
                old_left -= 1
                if f is not None:
                    f.deleted += 1
                    if len(f.removed) < MAX_ADDED:
                        f.removed.append(raw[1:].decode("utf-8", "replace").rstrip("\n"))
                continue
            if c == b"\\":
                continue
            new_left = old_left = 0   # a malformed hunk: read on as headers
        if raw.startswith(b"\x00"):
            header = raw[1:]
            while b"\x1e" not in header:
                nxt = stream.readline()
                if not nxt:
                    break
                header += nxt
            head, _, _rest = header.partition(b"\x1e")
            parts = head.decode("utf-8", "replace").split(SEP)
            parts += [""] * (8 - len(parts))
            cur = CommitDiff(sha=parts[0], parents=parts[1].split(), author=parts[2],
                             email=parts[3], t=_utc(parts[4]), committed=_utc(parts[5]),
                             subject=parts[6],
                             trailers=[s.strip() for s in parts[7].replace("\n", "\x1d").split("\x1d")
                                       if s.strip()])
            out[cur.sha] = cur
            f = None
            n_added = 0
            continue
        if cur is None:
            continue
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if line.startswith("diff --git "):
            if len(cur.files) >= MAX_FILES:
                cur.truncated = f"more than {MAX_FILES} files: the rest are not attributed"
                f = None
                continue
            f = FileDiff(path="")
            cur.files.append(f)
            continue
        if f is None:
            continue
        if line.startswith("@@"):
            m = _HUNK.match(line)
            if m:
                new_line = int(m.group(3))
                old_left = int(m.group(2)) if m.group(2) is not None else 1
                new_left = int(m.group(4)) if m.group(4) is not None else 1
        elif line.startswith("+++ "):
            target = line[4:]
            if target != "/dev/null":
                f.path = _strip_side(target)
        elif line.startswith("--- "):
            src = line[4:]
            if src == "/dev/null":
                f.status = "A"
            elif not f.old_path:
                f.old_path = _strip_side(src)
        elif line.startswith("rename from "):
            f.old_path, f.status = _unquote(line[12:]), "R"
        elif line.startswith("rename to "):
            f.path = _unquote(line[10:])
        elif line.startswith("new file mode"):
            f.status = "A"
        elif line.startswith("deleted file mode"):
            f.status = "D"
        elif line.startswith("Binary files "):
            f.binary = True
            m = re.match(r"Binary files (.*) and (.*) differ$", line)
            if m and not f.path:
                b = m.group(2)
                f.path = _strip_side(b) if b != "/dev/null" else _strip_side(m.group(1))
    for c in out.values():
        for fd in c.files:
            if not fd.path:
                fd.path = fd.old_path or ""
            if fd.status == "D":
                fd.added, fd.context, fd.removed = [], [], []
    return out


def staged_diff(git: Git, now: str) -> CommitDiff:
    """The staged changes (``git diff --cached``) as a commit that would be made at ``now``."""
    head = git.head()
    raw = git.run_bytes(["-c", f"core.bigFileThreshold={BIG_FILE}", "diff", "--cached", "-p",
                         f"-U{CONTEXT}", "-M", "--no-color", "--no-ext-diff", "--no-textconv"])
    header = SEP.join(["STAGED", head or "", "", "", "", "", "", ""]).encode() + b"\x1e\n"
    import io

    d = _parse(io.BytesIO(b"\x00" + header + raw))["STAGED"]
    d.t = d.committed = now
    if head:
        _parent_times(git, {"STAGED": d})
    return d
