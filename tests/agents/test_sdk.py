"""engram.sdk.Session driven from a separate process: the inbox log is read like any harness's
(live, then sealed), and the language server, running meanwhile, shows the edit in hover."""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import run_json

from engram.tape import read_tape

LSP_DIR = Path(__file__).resolve().parents[1] / "lsp"
CODE = ('def area(width, height):\n    """Rectangle area in square metres."""\n'
        '    return width * height * SCALE_FACTOR\n')
SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2


def _agent(root: Path, env: dict, code: str = CODE, rel: str = "geo.py") -> subprocess.CompletedProcess:
    """A custom agent, in its own process, that writes ``rel`` and logs it with the SDK."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from engram.sdk import Session

        code = {code!r}
        with Session("add an area helper", cwd={str(root)!r}, agent="demo-agent", model="m-1") as s:
            s.message("user", "add an area helper to {rel} (token {SECRET})")
            Path({str(root / rel)!r}).write_text(code)
            s.edit({rel!r}, before=None, after=code)
            call = s.tool_call("shell", {{"command": "pytest -q"}})
            s.tool_result(call, stdout="1 passed", exit=0)
            s.message("assistant", "Added area().")
            print(s.path)
    """)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60, check=True)


def test_sdk_session_is_ingested_live_then_sealed(world, capsys, engram_home):
    p = _agent(world.root, dict(os.environ))
    log = Path(p.stdout.strip())
    assert log.parent == engram_home / "inbox"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    run_json(capsys, "ingest")
    out = run_json(capsys, "explain", "geo.py:1-3")
    s = out["sessions"][0]
    assert s["harness"] == "engram_sdk" and s["live"] is True and s["model"] == "m-1"
    assert s["label"] == "add an area helper" and s["confidence"] == 1.0
    run_json(capsys, "ingest", "--seal")
    out = run_json(capsys, "explain", "geo.py:1-3")
    s = out["sessions"][0]
    assert s["live"] is False
    tapes = sorted((world.root / ".engram" / "tapes").glob("*.zst"))
    events = next(read_tape(t) for t in tapes if read_tape(t)[0]["harness"] == "engram_sdk")
    assert events[0]["agent"] == "demo-agent"
    assert [e["k"] for e in events] == ["meta", "msg.in", "code.edit", "tool.call", "tool.result",
                                        "msg.out"]
    assert SECRET not in repr(events)
    brief = run_json(capsys, "brief", "geo.py", "--json")
    chain = next(i for i in brief["items"] if i["kind"] == "chain")
    assert chain["outcomes"] == [{"command": "pytest -q", "exit": 0, "event": 4}]


def test_a_file_that_is_not_an_sdk_log_is_an_error_not_a_crash(world, capsys, engram_home):
    inbox = engram_home / "inbox"
    inbox.mkdir()
    (inbox / "junk.jsonl").write_text('{"k": "message", "role": "user", "text": "hi"}\n')
    res = run_json(capsys, "ingest")
    assert any("not an Engram SDK log" in e["error"]["message"] for e in res["errors"]), res


def test_sdk_refuses_misuse():
    from engram.sdk import Session

    with pytest.raises(ValueError, match="role 'robot'"):
        with Session("x") as s:
            s.message("robot", "beep")
    s = Session("y")
    s.close()
    with pytest.raises(ValueError, match="is closed"):
        s.message("user", "late")
    with pytest.raises(ValueError, match="session id"):
        Session("z", session_id="../escape")


# ---------------------------------------------------------------------------------------------
# the language server, running while another process logs a session


def _lsp_conftest():
    spec = importlib.util.spec_from_file_location("lsp_conftest", LSP_DIR / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # puts tests/lsp on sys.path (workspaces, lsp_helpers)
    return mod


_lsp = _lsp_conftest()
lsp = _lsp.lsp
ws = _lsp.ws


@pytest.mark.e2e
async def test_sdk_session_from_another_process_shows_in_hover(lsp, ws):
    from lsp_helpers import hover, open_doc, wait_indexed
    from waiting import async_wait_until

    client = await lsp(ws)
    await wait_indexed(client)
    (ws.root / "geo.py").write_text(CODE)
    uri = open_doc(client, ws, "geo.py")
    assert await hover(client, uri, 2) is None
    t0 = time.monotonic()
    _agent(ws.root, ws.env())
    result = await async_wait_until(lambda: hover(client, uri, 2), 20.0, interval=0.1,
                                    message="the SDK session in the hover")
    assert "1 session" in result.contents.value and "add an area helper" in result.contents.value
    assert time.monotonic() - t0 < 20.0


def test_the_documented_sdk_example_runs_and_is_explained(world, capsys):
    """docs/agents.md's SDK example, as written, in its own process in the repository."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()
    example = doc.split("## Custom agents")[1].split("```python\n")[1].split("```")[0]
    assert len(example.strip().splitlines()) <= 16
    subprocess.run([sys.executable, "-c", example], cwd=world.root, env=dict(os.environ),
                   check=True, timeout=60)
    run_json(capsys, "ingest")
    out = run_json(capsys, "explain", "net.py:1-2")
    assert out["sessions"][0]["harness"] == "engram_sdk"
    assert out["sessions"][0]["label"] == "add a connect helper"
