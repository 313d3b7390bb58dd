"""Fixtures for the agents' surface: a repository with real Claude Code logs (tests/claude_log.py
writes them in the harness's own record shapes) and ``run``/``run_json`` for ``main([...])``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from claude_log import World  # noqa: E402

from engram.cli import main  # noqa: E402

NET = '''import socket


def connect(host, port, retries=3):
    """Open a connection to the host, retrying on failure."""
    for attempt in range(retries):
        try:
            return socket.create_connection((host, port), timeout=5.0)
        except OSError:
            if attempt == retries - 1:
                raise
    return None


def checksum(data):
    total = 0
    for byte in data:
        total = (total * 31 + byte) % 1_000_003
    return total
'''


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    """A repository whose net.py was written by a Claude Code session that then ran the tests."""
    w = World(tmp_path)
    s = w.session()
    s.user("add a connect helper with retries to net.py")
    s.write("net.py", NET)
    s._tool("Bash", {"command": "pytest -q tests/test_net.py"}, "3 passed in 0.02s",
            {"stdout": "3 passed in 0.02s", "stderr": "", "interrupted": False})
    s.say("Added connect() with 3 retries.")
    s.save()
    w.checkout()
    monkeypatch.chdir(w.root)
    main(["ingest", "--seal"])
    return w
