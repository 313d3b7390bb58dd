"""The VS Code extension's own unit tests (Node's test runner), run from the Python suite so that
`make test` covers them. Needs `npm ci` in clients/vscode (done by clients/vscode/scripts/setup-e2e.sh).
Without npm or node_modules the test is skipped, or fails under CI=true (tests/prerequisites.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from npm_build import npm_build_lock
from prerequisites import missing

EXT = Path(__file__).resolve().parents[2] / "clients" / "vscode"


def test_extension_unit_tests():
    if shutil.which("npm") is None:
        missing("npm is not installed")
    if not (EXT / "node_modules").is_dir():
        missing("clients/vscode/node_modules missing: run clients/vscode/scripts/setup-e2e.sh")
    with npm_build_lock(EXT):  # the end-to-end test packages the same bundle
        proc = subprocess.run(["npm", "test", "--silent"], cwd=EXT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "# fail 0" in proc.stdout
