"""The agent example in docs/editors.md runs as written and prints the session."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parents[2] / "docs" / "editors.md"


def test_python_agent_example(ws, tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks, "no python example in docs/editors.md"
    script = tmp_path / "who_wrote.py"
    script.write_text(blocks[0])
    proc = subprocess.run(
        [sys.executable, str(script), str(ws.root), "hello.py", "4", "5"],
        env=ws.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "claude_code claude-sonnet-4-5-20250929 100% create hello.py, md and js" in proc.stdout
