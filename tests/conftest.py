"""Shared fixtures: every test runs with ENGRAM_HOME in a temp dir (never the real home)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
GOLDEN = ROOT / "tests" / "golden"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files from current output instead of comparing")


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(autouse=True)
def engram_home(tmp_path_factory, monkeypatch) -> Path:
    home = tmp_path_factory.mktemp("engram-home")
    monkeypatch.setenv("ENGRAM_HOME", str(home))
    # harness default locations resolve under a fake HOME so no test reads the real one
    fake_home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(fake_home))
    for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    # `engram explain` / `log` neither ask nor start a warm `engram serve` (engram.warm): no test
    # leaves a daemon behind; the tests of it (tests/cli/test_serve*.py) take this out themselves
    monkeypatch.setenv("ENGRAM_NO_SERVE", "1")
    return home


def pytest_collection_modifyitems(config, items):
    """End-to-end tests (real server / editor processes) run last, as pygls does."""
    items.sort(key=lambda it: 1 if it.get_closest_marker("e2e") else 0)


@pytest.fixture
def golden_compare(update_golden):
    """``golden_compare(path, text)``: compare text with a golden file; a missing file fails
    unless ``--update-golden`` is given, which (re)writes it (tests/golden_files.py)."""
    from golden_files import compare_golden

    def compare(path: Path, text: str) -> None:
        compare_golden(path, text, update=update_golden)

    return compare


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A ``claude_log.World`` (repo, logs, config) in tmp_path, with the repo as current dir."""
    from claude_log import World

    w = World(tmp_path)
    monkeypatch.chdir(w.root)
    return w

