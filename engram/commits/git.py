"""The user's own ``git``, run as a subprocess: read-only queries with clear errors.

Every call passes ``--no-pager``-like settings (no colour, no external diff, no textconv, no
optional locks) so that nothing in the user's configuration changes what we parse, and nothing
is written to the repository. Errors become ``GitError`` with one line the user can act on:
git missing, not a repository, a revision that does not exist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from engram.errors import EngramError

TIMEOUT_S = 120.0
_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_PAGER": "cat"}


class GitError(EngramError):
    """git is missing, the directory is not a repository, or a revision does not exist."""

    code = "git"


class Git:
    """One repository. ``root`` is its top-level directory (``git rev-parse --show-toplevel``)."""

    def __init__(self, where: Path | str):
        self.exe = shutil.which("git")
        if self.exe is None:
            raise GitError("git is not installed (or not on PATH): commit provenance needs it")
        where = Path(where)
        self._head: dict | None = None
        # one git process for the top-level directory, whether the clone is shallow, the commit
        # HEAD names and its branch ("HEAD": detached). It fails where HEAD names no commit yet
        # (or a file named HEAD makes it ambiguous): then the steps below, which also give the
        # errors (not a repository, ...)
        # (and whether git-ai's notes ref exists: ``--glob`` lists it when it does, fails never)
        self.has_ai_notes: bool | None = None   # None: not asked
        out = self._run(["rev-parse", "--show-toplevel", "--is-shallow-repository", "HEAD",
                         "--glob=refs/notes/a[i]", "--abbrev-ref", "HEAD"], cwd=where, what=str(where),
                        ok_codes=(0, 128)).splitlines()
        if len(out) in (4, 5) and all(len(x.strip()) >= 40 for x in out[2:-1]) and out[-1].strip():
            self.root = Path(out[0].strip())
            self._shallow = out[1].strip() == "true"
            self._head_sha = out[2].strip()
            self.has_ai_notes = len(out) == 5
            branch = out[-1].strip()
            self._head = {"head": self._head_sha, "branch": None if branch == "HEAD" else branch,
                          "empty": False}
            return
        # (exit status 1 and no third line: no commit yet)
        out = self._run(["rev-parse", "--show-toplevel", "--is-shallow-repository", "--verify", "-q",
                         "HEAD"], cwd=where, what=str(where), ok_codes=(0, 1)).splitlines()
        if len(out) < 2:
            raise GitError(f"not a git repository: {where}")
        self.root = Path(out[0].strip())
        self._shallow = out[1].strip() == "true"
        self._head_sha = out[2].strip() if len(out) > 2 and out[2].strip() else None

    # -- running ------------------------------------------------------------------------------
    def _run(self, args: list[str], *, cwd: Path | None = None, input_: bytes | None = None,
             what: str | None = None, ok_codes: tuple[int, ...] = (0,)) -> str:
        return self.run_bytes(args, cwd=cwd, input_=input_, what=what,
                              ok_codes=ok_codes).decode("utf-8", "replace")

    def run_bytes(self, args: list[str], *, cwd: Path | None = None, input_: bytes | None = None,
                  what: str | None = None, ok_codes: tuple[int, ...] = (0,)) -> bytes:
        env = {**os.environ, **_ENV}
        cmd = [self.exe, "-c", "core.quotepath=off", "-c", "color.ui=never", *args]
        try:
            p = subprocess.run(cmd, cwd=str(cwd or self.root), input=input_, capture_output=True,
                               env=env, timeout=TIMEOUT_S, check=False)
        except FileNotFoundError as e:
            raise GitError(f"cannot run git in {cwd or getattr(self, 'root', '?')}: {e.strerror}") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} took more than {TIMEOUT_S:.0f} s; gave up") from None
        if p.returncode not in ok_codes:
            err = p.stderr.decode("utf-8", "replace").strip().splitlines()
            msg = err[0] if err else f"git {args[0]} exited with {p.returncode}"
            if "not a git repository" in msg:
                raise GitError(f"not a git repository: {what or cwd}")
            raise GitError(msg.removeprefix("fatal: "))
        return p.stdout

    # -- questions ----------------------------------------------------------------------------
    def is_shallow(self) -> bool:
        """Whether the clone is shallow (asked once, with the top-level directory)."""
        return self._shallow

    def head_state(self) -> dict:
        """``{"head": sha or None, "branch": name or None (detached), "empty": bool}``, asked once
        per ``Git`` (one command's answer sees one state of the repository)."""
        if self._head is None:
            branch = self._run(["symbolic-ref", "-q", "--short", "HEAD"], ok_codes=(0, 1)).strip() or None
            self._head = {"head": self._head_sha, "branch": branch, "empty": self._head_sha is None}
        return dict(self._head)

    def head(self) -> str | None:
        """The commit HEAD names (None: no commit yet), as it was when this ``Git`` was made."""
        return self._head_sha

    def resolve(self, rev: str) -> str:
        """The commit a revision names; ``GitError`` when there is none."""
        if rev.startswith("-"):
            raise GitError(f"not a revision: {rev!r}")
        out = self._run(["rev-parse", "--verify", "-q", "--end-of-options", rev + "^{commit}"],
                        ok_codes=(0, 1)).strip()
        if not out:
            raise GitError(f"no such revision: {rev!r} (see `git log`)")
        return out

    def rev_list(self, revs: list[str], limit: int | None = None,
                 first_parent: bool = False) -> list[str]:
        """Commits of ``revs`` (git's own revision syntax), newest first as ``git log`` lists them."""
        for r in revs:
            if r.startswith("-"):
                raise GitError(f"not a revision: {r!r}")
        if not revs:
            revs = ["HEAD"]
        self._check_revs(revs)
        args = ["rev-list"]
        if limit is not None:
            args.append(f"--max-count={int(limit)}")
        if first_parent:
            args.append("--first-parent")
        out = self._run([*args, "--end-of-options", *revs, "--"])
        return out.split()

    def _check_revs(self, revs: list[str]) -> None:
        if self.head() is None:
            raise GitError("the repository has no commits yet")
        for r in revs:
            for part in (r.split("...") if "..." in r else r.split("..")):
                part = part.lstrip("^")
                if part and part != "HEAD":  # (HEAD exists: checked above)
                    self.resolve(part)

    def parents(self, sha: str) -> list[str]:
        return self._run(["rev-list", "--parents", "-n", "1", sha]).split()[1:]

    def cat_files(self, specs: list[str], max_bytes: int | None = None) -> dict[str, bytes | None]:
        """``{"<rev>:<path>": content or None}`` through one ``git cat-file --batch``; blobs over
        ``max_bytes`` (sizes asked first with ``--batch-check``) are None, never read."""
        if not specs:
            return {}
        if max_bytes is not None:
            sizes = self._run(["cat-file", "--batch-check=%(objecttype) %(objectsize)"],
                              input_="\n".join(specs).encode() + b"\n").splitlines()
            keep = [s for s, h in zip(specs, sizes, strict=False)
                    if h.split()[0] == "blob" and int(h.split()[1]) <= max_bytes]
            got = self.cat_files(keep) if keep else {}
            return {s: got.get(s) for s in specs}
        raw = self.run_bytes(["cat-file", "--batch"], input_="\n".join(specs).encode() + b"\n")
        out: dict[str, bytes | None] = {}
        pos = 0
        for spec in specs:
            nl = raw.index(b"\n", pos)
            header = raw[pos:nl].split()
            pos = nl + 1
            if len(header) == 2 and header[1] == b"missing":
                out[spec] = None
                continue
            size = int(header[2])
            out[spec] = raw[pos:pos + size] if header[1] == b"blob" else None
            pos += size + 1
        return out
