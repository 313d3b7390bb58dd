"""A missing prerequisite skips a test locally and fails it under CI=true (tests/prerequisites.py),
for the VS Code suites in particular (.ci/run installs their prerequisites first)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from prerequisites import in_ci, missing

TESTS = Path(__file__).resolve().parents[1]


def _load(relpath: str):
    """A test module loaded under a private name (its constants are patched, not the real one)."""
    path = TESTS / relpath
    spec = importlib.util.spec_from_file_location(f"_prereq_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("value, ci", [("true", True), ("1", True), ("yes", True),
                                       ("", False), ("0", False), ("false", False)])
def test_in_ci(monkeypatch, value, ci):
    monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_missing_skips_locally_and_fails_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no widget"):
        missing("no widget")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no widget"):
        missing("no widget")


@pytest.mark.parametrize("ci", [False, True])
def test_vscode_unit_without_node_modules(monkeypatch, tmp_path, ci):
    mod = _load("vscode/test_vscode_unit.py")
    monkeypatch.setattr(mod, "EXT", tmp_path)  # no node_modules here
    monkeypatch.setattr(mod.shutil, "which", lambda name: "/usr/bin/" + name)
    if ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="node_modules missing"):
        mod.test_extension_unit_tests()


@pytest.mark.parametrize("ci", [False, True])
def test_vscode_e2e_without_code_server(monkeypatch, tmp_path, ci):
    mod = _load("vscode/test_vscode_e2e.py")
    monkeypatch.setattr(mod, "CODE_SERVER_DIR", tmp_path / "no-code-server")
    if ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="code-server"):
        mod.test_vscode_extension_end_to_end(tmp_path)
