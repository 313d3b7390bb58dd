"""Everything Engram writes is private to its owner, whatever the umask: directories 0700, files
0600 -- tapes, the index with its WAL and shared memory (live sessions' whole events are in it),
the ingest lock, recorded tapes, the vector cache. The repository's ``.engram/config.yml`` and
``.gitignore`` are the user's committed files and follow the umask (docs/security.md).

Real Claude Code logs, the real CLI as processes started with the umask under test.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from engram_process import DATA, engram_json

from engram.paths import index_dir

COMMITTED = {".engram", ".engram/config.yml", ".gitignore"}  # the repo's, not Engram's data


def engram(*argv: str, cwd: Path, umask: int, stdin: str | None = None) -> dict | list:
    return engram_json(*argv, cwd=cwd, stdin=stdin, preexec=lambda: os.umask(umask))


def modes(top: Path) -> dict[str, str]:
    """Mode of every directory and file under ``top`` (``top`` included, as ".")."""
    out = {".": oct(stat.S_IMODE(top.stat().st_mode))}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            p = Path(dirpath) / name
            out[str(p.relative_to(top))] = oct(stat.S_IMODE(p.lstat().st_mode))
    return out


def not_private(top: Path) -> dict[str, str]:
    return {p: m for p, m in modes(top).items() if p not in COMMITTED and m not in (
        "0o700" if (top / p).is_dir() else "0o600",)}


@pytest.fixture
def repo(tmp_path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    for log in DATA.glob("*.jsonl"):
        shutil.copy(log, logs / log.name)
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "hello.py").write_text('def main():\n    print("Hello, World!")\n')
    return root


def configure(root: Path) -> None:
    cfg = root / ".engram" / "config.yml"
    text = f"harnesses:\n  claude_code:\n    paths: [{root.parent / 'logs'}]\n"
    text += "".join(f"  {h}: false\n" for h in
                    ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider"))
    cfg.write_text(text)


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-022", "umask-000"])
def test_everything_engram_writes_is_private(repo, umask):
    home = Path(os.environ["ENGRAM_HOME"])
    shutil.rmtree(home)  # created by Engram under the umask, not by the test
    engram("init", cwd=repo, umask=umask)
    configure(repo)
    assert engram("ingest", cwd=repo, umask=umask)["live"] == 8  # live: whole events in the index
    # a reader held open keeps the WAL and shared-memory files (SQLite deletes them at the last
    # close) for the commands below to write, so their modes can be seen at the end
    import apsw

    reader = apsw.Connection(str(index_dir() / "index.sqlite"))
    assert reader.execute("SELECT count(*) FROM tapes").fetchone()[0] == 8
    assert engram("explain", "hello.py:1-2", cwd=repo, umask=umask)["sessions"]
    assert engram("ingest", "--seal", cwd=repo, umask=umask)["sealed"] == 8
    rec = engram("record", "--stdin", "--label", "permissions", cwd=repo, umask=umask,
                 stdin="user: where do tapes go?\nassistant: into .engram/tapes\n")
    assert Path(rec["path"]).parent == repo / ".engram" / "tapes"
    assert engram("search", "hello", cwd=repo, umask=umask)["results"]
    engram("gc", cwd=repo, umask=umask)

    old = os.umask(umask)  # the vector cache, as `engram embed` writes it
    try:
        from engram.embed.store import VectorStore

        with VectorStore(index_dir() / "vectors", "test/model", device="numpy") as vs:
            v = np.eye(4, dtype=np.float32)[:2]
            vs.add(["a" * 32, "b" * 32], v, [("a" * 32, "t" * 32, 1)])
            assert len(vs) == 2
    finally:
        os.umask(old)
    assert reader.execute("SELECT count(*) FROM tapes WHERE live = 0").fetchone()[0] == 9

    written = {**{f"home/{p}": m for p, m in modes(home).items()},
               **{f"repo/{p}": m for p, m in modes(repo).items()
                  if p.startswith(".engram/tapes")}}
    assert len([p for p in written if p.endswith(".jsonl.zst")]) == 9  # 8 sessions + the record
    for must in ("home/index/index.sqlite", "home/index/index.sqlite-wal",
                 "home/index/index.sqlite-shm", "home/index/index.lock",
                 "home/index/vectors/test_model-"):
        assert any(p.startswith(must) for p in written), must
    assert not_private(home) == {}
    assert not_private(index_dir()) == {}
    assert not_private(repo / ".engram" / "tapes") == {}
    reader.close()


def test_an_older_install_left_readable_is_narrowed(repo):
    """An index and tape directories written with 0755/0644 by an older Engram: the next ingest
    takes group and other bits off the directories and the index files (the tapes inside are
    then out of others' reach; Engram never rewrites a tape)."""
    (repo / ".engram").mkdir()
    configure(repo)
    engram("ingest", "--seal", cwd=repo, umask=0o022)
    home = Path(os.environ["ENGRAM_HOME"])
    for d in (home, home / "tapes", index_dir()):
        d.chmod(0o755)
        for f in d.iterdir():
            if f.is_file():
                f.chmod(0o644)
    engram("ingest", "--seal", "--rebuild", cwd=repo, umask=0o022)
    assert not_private(index_dir()) == {}
    assert oct(stat.S_IMODE((home / "tapes").stat().st_mode)) == "0o700"
