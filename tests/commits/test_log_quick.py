"""``engram log`` answered from the per-commit cache without the engine (``engram.commits.quick``):
as fresh processes, over the real git repository and sessions of ``test_commits``, the answer is
the full path's byte for byte, without numpy or the engine imported; anything it cannot answer
from the cache goes to the full path."""

from __future__ import annotations

import os
import subprocess
import sys

from test_commits import git, repo  # noqa: F401  (the fixture: real git history, real sessions)

PROBE = ("import sys; from engram.cli import main; code = main(sys.argv[1:]); "
         "sys.stderr.write('HEAVY=%s' % sorted(m for m in ('numpy', 'engram.engine', "
         "'engram.commits.attribute') if m in sys.modules)); sys.exit(code)")


def fresh(*argv, **env):
    e = {**os.environ, "ENGRAM_NO_SERVE": "1", **env}
    p = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                       env=e, timeout=120)
    err, _, heavy = p.stderr.rpartition("HEAVY=")
    return p.returncode, p.stdout, err, heavy


def test_cached_log_is_the_full_paths_answer_without_the_engine(repo):  # noqa: F811
    cold = fresh("log")
    assert cold[0] == 0 and cold[3] != "[]"  # nothing cached: the full path ran (and cached)
    for argv in (["log"], ["log", "-n", "2"], ["log", "HEAD~1"], ["log", "--pretty"],
                 ["log", "--agent", "claude"], ["log", "--agent", "nobody"]):
        quick = fresh(*argv)
        full = fresh(*argv, ENGRAM_NO_QUICK="1")
        assert quick[:3] == full[:3], argv
        assert quick[0] == 0 and quick[3] == "[]", (argv, quick)  # the cache alone
        assert full[3] != "[]"
    assert fresh("log")[1] == cold[1]


def test_what_the_cache_cannot_answer_goes_to_the_full_path(repo, tmp_path):  # noqa: F811
    assert fresh("log")[0] == 0
    (repo.root / "app" / "extra.py").write_text("def extra(a, b):\n    return a - b * 2\n")
    git(repo.root, "add", "app/extra.py")
    git(repo.root, "commit", "-q", "-m", "extra (by hand)")
    got = fresh("log")  # the new commit is not cached yet
    assert got[0] == 0 and got[3] != "[]" and '"extra (by hand)"' in got[1]
    assert fresh("log")[3] == "[]"  # now it is
    # errors are the full path's: not a revision, not a repository
    assert fresh("log", "nope")[:3] == fresh("log", "nope", ENGRAM_NO_QUICK="1")[:3]
    assert fresh("log", "nope")[0] == 1
    plain = tmp_path / "plain"
    plain.mkdir()
    a = fresh("log", "--root", str(plain))
    assert a[0] == 1 and a[2].startswith("Error: ") and "Traceback" not in a[2]
    assert a[:3] == fresh("log", "--root", str(plain), ENGRAM_NO_QUICK="1")[:3]
    # another index (none there yet): the full path creates and fills it
    idx = tmp_path / "other" / "index.sqlite"
    b = fresh("log", "--index", str(idx))
    assert b[0] == 0 and b[3] != "[]" and idx.is_file(), b
    assert fresh("log", "--index", str(idx))[3] == "[]"
