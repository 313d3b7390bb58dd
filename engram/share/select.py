"""What may leave this machine: the tapes ``engram push`` publishes.

Private by default. A tape is shared when

* its session's ``cwd`` lies inside this repository (``meta.cwd``; ``reason: "cwd"``), or
* it is a note or feedback tape (harness ``engram``) made in this repository: it sits in the
  repository's ``.engram/tapes/`` (``reason: "engram"``), or
* someone named it with ``engram share TAPE`` in this clone (``reason: "shared"``; the list is
  ``<git dir>/engram/share``, one tape id a line, private to the clone).

Candidates are the files of ``.engram/tapes/`` and the tapes the index knows whose ``cwd`` is
inside the repository (sessions ingested from elsewhere land in ``$ENGRAM_HOME/tapes/``), plus the
share list. Tapes pulled from a remote (``$ENGRAM_HOME/pulled/``) are never candidates, even when
a teammate's clone had the same path as this one: they are not this machine's to publish. A tape
is read and verified (its name against its content) before it may leave, and its ``meta``
decides; a tape that fails is not pushed and is reported.
"""

from __future__ import annotations

import os
from pathlib import Path

from engram import paths
from engram.adapters import redact
from engram.errors import EngramError, UnknownTape
from engram.share.git import Git, ShareError
from engram.share.verify import TAPE_ID
from engram.tape import reader
from engram.tape.writer import SUFFIX

ENGRAM_HARNESS = "engram"


def share_list_path(git: Git) -> Path:
    common = git.out("rev-parse", "--git-common-dir").strip()
    p = Path(common)
    return (p if p.is_absolute() else git.repo / p) / "engram" / "share"


def read_share_list(git: Git) -> list[str]:
    p = share_list_path(git)
    try:
        text = p.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return []
    return sorted({ln.strip() for ln in text.splitlines() if TAPE_ID.match(ln.strip())})


def write_share_list(git: Git, ids: list[str]) -> Path:
    p = share_list_path(git)
    paths.private_dir(p.parent)
    tmp = p.with_name(p.name + f".{os.getpid()}.tmp")
    paths.create_private(tmp)
    tmp.write_text("".join(i + "\n" for i in sorted(set(ids))), encoding="ascii")
    os.replace(tmp, p)
    return p


def tape_dirs(root: Path, config) -> list[Path]:
    """Where a tape named by id may be found on this machine."""
    out = [paths.repo_tapes_dir(root), paths.user_tapes_dir(), *config.source_dirs()]
    return list(dict.fromkeys(out))


def open_index(path: Path):
    """The index at ``path``, read-only (None when there is none): what sharing reads of it is
    the ``tapes`` table."""
    import apsw

    if not Path(path).is_file():
        return None
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.setbusytimeout(5000)
        conn.execute("SELECT tape_id, path, cwd, live FROM tapes LIMIT 1").fetchall()
    except apsw.Error:
        return None  # not an index (yet): the tape directories still count
    return conn


def index_rows(conn) -> list[tuple[str, str | None, str | None]]:
    """``(tape_id, path, cwd)`` of every sealed tape the index knows (none without an index)."""
    if conn is None:
        return []
    return [(r[0], r[1], r[2]) for r in conn.execute(
        "SELECT tape_id, path, cwd FROM tapes WHERE live=0 ORDER BY tape_id")]


def find_tape(tape_id: str, root: Path, config, conn) -> Path | None:
    for d in tape_dirs(root, config):
        p = d / f"{tape_id}{SUFFIX}"
        if p.is_file():
            return p
    if conn is not None:
        r = conn.execute("SELECT path FROM tapes WHERE tape_id=? AND live=0",
                         (tape_id,)).fetchone()
        if r and r[0] and Path(r[0]).is_file():
            return Path(r[0])
    return None


def candidates(root: Path, config, conn, git: Git) -> dict[str, tuple[Path, str | None]]:
    """``{tape_id: (path, reason known without reading it or None)}`` of every tape that might be
    shared; ``reason`` is settled by ``judge`` once the tape is read."""
    out: dict[str, tuple[Path, str | None]] = {}
    repo_dir = paths.repo_tapes_dir(root)
    if repo_dir.is_dir():
        for p in sorted(repo_dir.glob("*" + SUFFIX)):
            tid = p.name[:-len(SUFFIX)]
            if TAPE_ID.match(tid) and p.is_file():
                out[tid] = (p, None)
    pulled = paths.user_dir() / "pulled"  # teammates' tapes are theirs to share, never ours
    for tid, path, cwd in index_rows(conn):
        if tid in out or not path or not paths.is_within(cwd, root) or not os.path.isabs(cwd):
            continue
        if paths.is_within(path, pulled):
            continue
        if Path(path).is_file():
            out[tid] = (Path(path), None)
    for tid in read_share_list(git):
        p = out[tid][0] if tid in out else find_tape(tid, root, config, conn)
        if p is not None:
            out[tid] = (p, "shared")
    return out


class Unredacted(EngramError):
    """Today's redaction rules still find a secret in a tape (one written by an older Engram):
    it does not leave the machine."""

    code = "unredacted-tape"


def judge(path: Path, root: Path, forced: str | None) -> tuple[str | None, dict]:
    """Read and verify a candidate; ``(reason it may be shared or None, its meta)``. A tape that
    may be shared is also scanned with today's redaction rules (tapes are redacted when written,
    but an older Engram's rules found less): one they still find a secret in raises
    ``Unredacted``, like a corrupt one raises ``CorruptTape``; the caller reports both."""
    lines = reader.parse_lines(reader.read_raw(path), path)
    meta = lines[0]
    why = forced or _reason(meta, path, root)
    if why is not None:
        found = sum(redact.redact_event(ev) for ev in lines)
        if found:
            raise Unredacted(f"today's redaction rules find {found} secret(s) in this tape "
                             "(written by an older Engram); not pushed", path=str(path))
    return why, meta


def _reason(meta: dict, path: Path, root: Path) -> str | None:
    cwd = meta.get("cwd")
    if isinstance(cwd, str) and os.path.isabs(cwd) and paths.is_within(cwd, root):
        return "cwd"
    if meta.get("harness") == ENGRAM_HARNESS and Path(path).parent == paths.repo_tapes_dir(root):
        return "engram"
    return None


def describe(tape_id: str, meta: dict, reason: str) -> dict:
    """What a listing shows of a tape that leaves (ids and the redacted label; no transcript)."""
    return {"tape_id": tape_id, "harness": meta.get("harness"), "session": meta.get("session"),
            "label": meta.get("label"), "cwd": meta.get("cwd"), "reason": reason}


def resolve(spec: str, root: Path, config, conn) -> tuple[str, Path]:
    """A ``TAPE`` argument of ``engram share``: a tape file, a tape id, or a unique prefix of an
    indexed tape id (at least 6 characters)."""
    p = Path(spec)
    if spec.endswith(SUFFIX) and p.is_file():
        return reader.tape_id_of(p), p
    if TAPE_ID.match(spec):
        found = find_tape(spec, root, config, conn)
        if found is not None:
            return spec, found
    if conn is not None and len(spec) >= 6 and all(c in "0123456789abcdef" for c in spec):
        rows = list(conn.execute("SELECT tape_id, path FROM tapes WHERE live=0 AND tape_id >= ?"
                                 " AND tape_id < ? LIMIT 2", (spec, spec + "g")))
        if len(rows) == 1 and rows[0][1] and Path(rows[0][1]).is_file():
            return rows[0][0], Path(rows[0][1])
        if len(rows) > 1:
            raise ShareError(f"tape prefix {spec!r} names more than one tape; give more of it")
    raise UnknownTape(f"no sealed tape {spec!r} here; see `engram tapes`")
