"""Golden files never (re)create themselves: a missing one fails unless --update-golden."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from golden_files import compare_golden

TESTS = Path(__file__).resolve().parents[1]


def test_missing_golden_fails_and_writes_nothing(tmp_path):
    path = tmp_path / "tapes" / "x.jsonl"
    with pytest.raises(pytest.fail.Exception, match="golden file missing"):
        compare_golden(path, "output\n", update=False)
    assert not path.exists() and not path.parent.exists()


def test_differing_golden_fails_and_is_left_alone(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("expected\n")
    with pytest.raises(AssertionError, match="differs from golden"):
        compare_golden(path, "actual\n", update=False)
    assert path.read_text() == "expected\n"
    compare_golden(path, "expected\n", update=False)  # equal: passes


def test_update_golden_writes_missing_and_changed_files(tmp_path):
    path = tmp_path / "new" / "x.jsonl"
    compare_golden(path, "one\n", update=True)
    assert path.read_text() == "one\n"
    compare_golden(path, "two\n", update=True)
    assert path.read_text() == "two\n"
    compare_golden(path, "two\n", update=False)


def test_golden_compare_fixture_fails_on_a_missing_file(tmp_path):
    """The fixture the golden tests use, in a real pytest run with this repository's conftest:
    a missing file fails (CI set or not) and is not written; --update-golden writes it; the next
    run compares with it."""
    for name in ("conftest.py", "golden_files.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "test_g.py").write_text(
        "from pathlib import Path\n\n\n"
        "def test_g(golden_compare):\n"
        "    golden_compare(Path(__file__).parent / 'golden' / 'g.txt', 'hello\\n')\n")
    golden = tmp_path / "golden" / "g.txt"
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the conftest needs pytest alone (fast start)

    def pytest_run(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    res = pytest_run()
    assert res.returncode == 1 and "golden file missing" in res.stdout, res.stdout + res.stderr
    assert not golden.exists()
    res = pytest_run("--update-golden")
    assert res.returncode == 0, res.stdout + res.stderr
    assert golden.read_text() == "hello\n"
    res = pytest_run()
    assert res.returncode == 0, res.stdout + res.stderr
    golden.write_text("changed\n")
    res = pytest_run()
    assert res.returncode == 1 and "differs from golden" in res.stdout, res.stdout + res.stderr
