"""End-to-end: the packaged VS Code extension in a real VS Code (code-server) against the real
``engram-lsp``, on a workspace whose index is built from a real Claude Code log.

Drives the workbench with playwright-core + Debian chromium (clients/vscode/test/e2e/e2e.mjs; all
traffic stays on 127.0.0.1) and asserts the code lens text, the hover, the explain view (opened from
the code lens and from the command palette) and the tape view. Screenshots and result.json go to
``test-artifacts/vscode/``.

Prerequisites (``clients/vscode/scripts/setup-e2e.sh`` installs them): code-server 4.100.3 under
``clients/vscode/.cache/code-server`` (or ``$ENGRAM_CODE_SERVER_DIR``), ``/usr/bin/chromium``, node +
npm, and ``clients/vscode/node_modules``. Without them the test is skipped, saying which is missing;
under CI=true (where .ci/run installs them first) that is a failure (tests/prerequisites.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from npm_build import npm_build_lock
from prerequisites import missing as missing_prerequisite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "clients" / "vscode"
CODE_SERVER_DIR = Path(
    os.environ.get("ENGRAM_CODE_SERVER_DIR", CLIENT / ".cache" / "code-server")
)
CHROMIUM = (
    os.environ.get("ENGRAM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
)
ARTIFACTS = REPO / "test-artifacts" / "vscode"
FIXTURE = (
    REPO
    / "tests"
    / "data"
    / "harness"
    / "claude_code"
    / "codemie__4c2ddfdc__v2.0.64.jsonl"
)
VSIX = CLIENT / "engram-vscode.vsix"


def _missing_prerequisites() -> list[str]:
    missing = []
    if not (CODE_SERVER_DIR / "node_modules" / ".bin" / "code-server").exists():
        missing.append(f"code-server (expected in {CODE_SERVER_DIR})")
    if not Path(CHROMIUM).exists():
        missing.append("chromium (apt-get install chromium)")
    for tool in ("node", "npm", "git"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if not (CLIENT / "node_modules" / "playwright-core").is_dir():
        missing.append("clients/vscode/node_modules (npm ci in clients/vscode)")
    if not FIXTURE.exists():
        missing.append(f"fixture log {FIXTURE.relative_to(REPO)}")
    return missing


def _package_vsix() -> Path:
    """Build the .vsix unless it is newer than every source file (one npm build at a time: the
    extension's unit tests write the same bundle, ``npm_build``)."""
    sources = [CLIENT / "package.json", *(CLIENT / "src").rglob("*.ts")]
    with npm_build_lock(CLIENT):
        if VSIX.exists() and VSIX.stat().st_mtime >= max(
            p.stat().st_mtime for p in sources
        ):
            return VSIX
        subprocess.run(["npm", "run", "package"], cwd=CLIENT, check=True, timeout=300)
    return VSIX


def _prepare_workspace(tmp_path: Path) -> tuple[Path, dict, dict]:
    """A workspace indexed from the fixture log, with a file whose code a session wrote.

    Returns (workspace, env for code-server/engram-lsp, what the views must show).
    """
    from engram.engine import Engine

    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(FIXTURE, logs / FIXTURE.name)
    ws = tmp_path / "workspace"
    (ws / ".engram").mkdir(parents=True)
    (ws / ".engram" / "config.yml").write_text(
        f"harnesses:\n  claude_code:\n    paths: [{json.dumps(str(logs))}]\n",
        encoding="utf-8",
    )
    engram_home = tmp_path / "engram-home"
    engram_home.mkdir()
    env = {"ENGRAM_HOME": str(engram_home)}
    old = os.environ.get("ENGRAM_HOME")
    os.environ["ENGRAM_HOME"] = str(engram_home)
    try:
        eng = Engine(ws)
        try:
            eng.ingest(seal=True)
            # The session's largest edit of hello.py becomes the workspace's hello.py.
            best = None
            for tape in eng.tapes():
                for ev in eng.show(tape["tape_id"])["events"]:
                    if ev.get("k") == "code.edit" and str(ev.get("file", "")).endswith(
                        "hello.py"
                    ):
                        text = ev.get("after_text") or ""
                        if best is None or text.count("\n") > best[1].count("\n"):
                            best = (tape, text)
            assert best, (
                "the fixture has no code.edit of hello.py: did the Claude Code adapter change?"
            )
            tape, text = best
            (ws / "hello.py").write_text(text, encoding="utf-8")
            line = next(
                i for i, s in enumerate(text.splitlines(), 1) if s.startswith("def ")
            )
            end = len(text.splitlines())
            result = eng.explain("hello.py", line, end, text=text)
        finally:
            eng.close()
    finally:
        if old is None:
            os.environ.pop("ENGRAM_HOME", None)
        else:
            os.environ["ENGRAM_HOME"] = old
    assert result["sessions"], (
        f"engram explain finds no session for hello.py:{line}-{end}"
    )
    # a real git history: hello.py committed on main, one more commit on a feature branch (what
    # "Engram: Review Branch" reviews: main..HEAD; the hover names hello.py's commit)
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "dev@example.com"],
                 ["config", "user.name", "Dev"], ["add", "hello.py"],
                 ["commit", "-q", "-m", "Add hello.py"], ["checkout", "-q", "-b", "feature"]):
        subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True)
    (ws / "NOTES.txt").write_text("Typed by hand on the feature branch.\n", encoding="utf-8")
    for args in (["add", "NOTES.txt"], ["commit", "-q", "-m", "Feature notes by hand"]):
        subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True)
    top = result["sessions"][0]
    expect = {
        "line": line,
        "lens": r"^\d+ sessions?$",
        "hover": ["Engram", "session", top["harness"]],
        "explain": [
            top["label"] or top["harness"],
            top["harness"],
            "Transcript window",
        ],
        "commit": "Add hello.py",
        "review": ["Engram: review main..HEAD", "Feature notes by hand", "No session: written by hand"],
    }
    return ws, env, expect


def test_vscode_extension_end_to_end(tmp_path):
    missing = _missing_prerequisites()
    if missing:
        missing_prerequisite(
            "VS Code e2e prerequisites missing: "
            + "; ".join(missing)
            + " — run clients/vscode/scripts/setup-e2e.sh"
        )
    vsix = _package_vsix()
    ws, env, expect = _prepare_workspace(tmp_path)
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    config = {
        "codeServerDir": str(CODE_SERVER_DIR),
        "vsix": str(vsix),
        "workspace": str(ws),
        "file": "hello.py",
        "line": expect["line"],
        "chromium": CHROMIUM,
        "artifacts": str(ARTIFACTS),
        # The server is this interpreter's engram_lsp: exercises engram.server.pythonPath.
        "settings": {"engram.server.pythonPath": sys.executable},
        "env": {
            **env,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
            ),
        },
        "expect": {k: expect[k] for k in ("lens", "hover", "explain", "commit", "review")},
        "timeoutMs": 60000,
        # e.g. ENGRAM_E2E_THEME="Default Light Modern" to look at the light theme
        "theme": os.environ.get("ENGRAM_E2E_THEME") or "Default Dark Modern",
    }
    cfg = tmp_path / "e2e.json"
    cfg.write_text(json.dumps(config), encoding="utf-8")
    proc = subprocess.run(
        ["node", str(CLIENT / "test" / "e2e" / "e2e.mjs"), str(cfg)],
        check=False,
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(proc.stdout[-6000:], proc.stderr[-3000:])
    result_file = ARTIFACTS / "result.json"
    assert result_file.exists(), (
        f"e2e driver wrote no result (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    )
    result = json.loads(result_file.read_text(encoding="utf-8"))
    failed = [c for c in result["checks"] if not c["ok"]]
    assert not failed, json.dumps(failed, indent=2)
    names = {c["name"] for c in result["checks"]}
    assert "code lens text" in names and any(
        n.startswith("hover contains") for n in names
    )
    assert any(n.startswith("explain view (code lens)") for n in names)
    assert result["observed"].get("blockedOrigins") == [] or all(
        "127.0.0.1" not in o for o in result["observed"]["blockedOrigins"]
    )
    assert proc.returncode == 0
