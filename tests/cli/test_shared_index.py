"""One index per machine: every repository reads and writes ``$ENGRAM_HOME/index/``.

Two repositories (``claude_log.World``s) whose configs point Claude Code at the same logs, as
``~/.claude/projects`` is for every repository on a real machine: the second ingest reads
nothing again, answers come from every session (cross-repository provenance), a repository's
``exclude`` filters its own answers only, two ingests at once leave one consistent index, and an
older per-repository ``.engram-cache/`` is reported and removed on request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from claude_log import World

from engram import paths
from engram.cli import main
from engram.engine import Engine

SID_A = "aaaaaaaa-0000-4000-8000-000000000001"
SID_B = "bbbbbbbb-0000-4000-8000-000000000002"

HELPER = '''def moving_average(values, width):
    """The mean of each run of width consecutive values."""
    out = []
    for i in range(len(values) - width + 1):
        window = values[i:i + width]
        out.append(sum(window) / width)
    return out
'''

PARSER = '''def parse_header(line):
    """Split 'Name: value' into a lower-cased name and its stripped value."""
    name, _, value = line.partition(":")
    if not name or name != name.strip():
        raise ValueError(f"bad header line: {line!r}")
    return name.strip().lower(), value.strip()
'''


@pytest.fixture
def two_repos(tmp_path):
    """Repos ``a`` and ``b``, each with one session that wrote a file, both reading both logs."""
    a, b = World(tmp_path / "a"), World(tmp_path / "b")
    sa = a.session(session_id=SID_A, name="writer-a")
    sa.user("Add a moving average helper to stats.py.")
    sa.write("stats.py", HELPER)
    sa.say("Added moving_average to stats.py.")
    sa.save()
    sb = b.session(session_id=SID_B, name="writer-b")
    sb.user("Add a header parser to headers.py.")
    sb.write("headers.py", PARSER)
    sb.say("Added parse_header to headers.py.")
    sb.save()
    a.checkout()
    b.checkout()
    (b.root / "stats.py").write_text(HELPER)  # b vendored a's helper
    both = f"harnesses:\n  claude_code:\n    paths: [{a.logs}, {b.logs}]\n"
    for w in (a, b):
        cfg = w.root / ".engram" / "config.yml"
        cfg.write_text(both + "".join(ln + "\n" for ln in cfg.read_text().splitlines()[3:]))
    return a, b


def _explain(root: Path, file: str) -> list[str]:
    eng = Engine(root)
    try:
        return [s["session"] for s in eng.explain(str(root / file), 1, 7)["sessions"]]
    finally:
        eng.close()


def test_the_second_repository_reads_nothing_again(two_repos):
    a, b = two_repos
    first = Engine(a.root).ingest(seal=True)
    assert first["parsed"] == 2 and first["index"] == str(paths.default_index_path())
    second = Engine(b.root).ingest(seal=True)
    assert second["parsed"] == 0 and second["tapes_written"] == 0
    assert second["index"] == first["index"]
    # both repositories answer from every session of the machine
    assert _explain(a.root, "stats.py")[0] == SID_A
    assert _explain(b.root, "headers.py")[0] == SID_B
    assert _explain(b.root, "stats.py")[0] == SID_A  # cross-repository provenance


def test_a_repository_exclude_filters_its_own_answers(two_repos):
    a, b = two_repos
    Engine(a.root).ingest(seal=True)
    cfg = b.root / ".engram" / "config.yml"
    cfg.write_text(cfg.read_text() + f"exclude: ['{a.logs}/*']\n")
    assert SID_A not in _explain(b.root, "stats.py")
    assert _explain(a.root, "stats.py")[0] == SID_A  # a's answers are untouched


def test_two_ingests_at_once_leave_one_consistent_index(two_repos, tmp_path):
    a, b = two_repos
    env = {**os.environ, "ENGRAM_NO_PROGRESS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "engram.cli", "ingest", "--seal"], cwd=w.root,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in (a, b)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert sorted(r["parsed"] for r in results) == [0, 2]  # the second waited, then had nothing
    conn = apsw.Connection(str(paths.default_index_path()))
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM tapes WHERE live = 0").fetchone()[0] == 2
    conn.close()
    assert _explain(b.root, "stats.py")[0] == SID_A


def test_an_old_per_repository_cache_is_reported_and_removed(two_repos, capsys):
    a, _b = two_repos
    old = a.root / ".engram-cache"
    old.mkdir()
    (old / "index.sqlite").write_bytes(b"x" * 1000)
    (old / "vectors").mkdir()
    assert main(["status", "--root", str(a.root)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["old_cache"] == {"path": str(old), "bytes": 1000}
    assert main(["gc", "--old-caches", "--root", str(a.root)]) == 0
    assert json.loads(capsys.readouterr().out)["old_cache_removed"]["path"] == str(old)
    assert not old.exists()
    assert main(["status", "--root", str(a.root)]) == 0
    assert json.loads(capsys.readouterr().out)["old_cache"] is None


def test_an_old_cache_holding_a_users_file_is_left_alone(two_repos, capsys):
    a, _b = two_repos
    old = a.root / ".engram-cache"
    old.mkdir()
    (old / "index.sqlite").write_bytes(b"x")
    (old / "notes.txt").write_text("mine")
    assert main(["gc", "--old-caches", "--root", str(a.root)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "notes.txt" in err and "not removed" in err
    assert (old / "notes.txt").read_text() == "mine"


def test_index_path_in_config_keeps_a_private_index(two_repos):
    a, b = two_repos
    cfg = a.root / ".engram" / "config.yml"
    private = a.tmp / "private" / "index.sqlite"
    cfg.write_text(cfg.read_text() + f"index:\n  path: {private}\n")
    res = Engine(a.root).ingest(seal=True)
    assert res["index"] == str(private) and private.exists()
    assert not paths.default_index_path().exists()
    assert Engine(b.root).ingest(seal=True)["parsed"] == 2  # b has the machine's index to fill
