"""engram mcp as a real process, driven by the official MCP SDK's own stdio client: the tools
answer what the CLI prints, bad calls are clear errors and the server keeps serving, tapes are
resources, a client that goes away mid-call ends the server quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import run_json
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = pytest.mark.e2e


def _params(root) -> StdioServerParameters:
    env = {k: os.environ[k] for k in ("ENGRAM_HOME", "HOME", "PATH") if k in os.environ}
    return StdioServerParameters(command=sys.executable, args=["-m", "engram.cli", "mcp"],
                                 cwd=str(root), env=env)


def _no_timing(obj):
    obj = json.loads(json.dumps(obj))
    obj.get("stats", {}).pop("elapsed_ms", None)
    return obj


async def test_tools_answer_what_the_cli_prints(world, capsys):
    cli = run_json(capsys, "explain", "net.py:4-12")
    cli_trace = run_json(capsys, "trace", "net.py")
    async with stdio_client(_params(world.root)) as (r, w), ClientSession(r, w) as s:
        init = await s.initialize()
        assert init.server_info.name == "engram" and "brief" in init.instructions
        names = [t.name for t in (await s.list_tools()).tools]
        assert names[:7] == ["explain", "search", "trace", "blame", "brief", "note", "feedback"]
        res = await s.call_tool("explain", {"file": "net.py", "start": 4, "end": 12})
        assert res.is_error is not True
        assert _no_timing(res.structured_content) == _no_timing(cli)
        assert _no_timing(json.loads(res.content[0].text)) == _no_timing(cli)
        res = await s.call_tool("trace", {"file": "net.py"})
        assert res.structured_content == cli_trace
        res = await s.call_tool("blame", {"file": "net.py"})
        assert res.structured_content["lines"][3]["tape_id"] == cli["sessions"][0]["tape_id"]
        res = await s.call_tool("search", {"query": "retries", "limit": 5})
        assert res.structured_content["results"]

        # an agent leaves a note; explain and brief see it at once, warning first
        res = await s.call_tool("note", {"file": "net.py", "start": 4, "end": 12, "kind": "warning",
                                         "text": "the balancer drops a 4th attempt"})
        assert res.is_error is not True
        note_tape = res.structured_content["tape_id"]
        res = await s.call_tool("explain", {"file": "net.py", "start": 4, "end": 12, "brief": True})
        first = res.structured_content["sessions"][0]
        assert first["tape_id"] == note_tape and first["tier"] == "agent"
        assert first["note"] == {**first["note"], "kind": "warning", "stale": False}
        res = await s.call_tool("brief", {"paths": ["net.py"]})
        assert res.content[0].text.startswith("# Engram brief: net.py")
        assert "**WARNING**" in res.content[0].text
        assert res.structured_content["items"][0]["tape_id"] == note_tape

        res = await s.call_tool("feedback", {"session": cli["sessions"][0]["session"],
                                             "verdict": "helpful"})
        assert res.is_error is not True and res.structured_content["verdict"] == "helpful"

        # tapes as resources
        listed = (await s.list_resources()).resources
        uris = {str(r.uri) for r in listed}
        assert f"engram://tape/{note_tape}" in uris
        read = await s.read_resource(f"engram://tape/{note_tape}")
        shown = json.loads(read.contents[0].text)
        assert shown["tape_id"] == note_tape and shown["events"][0]["harness"] == "engram"
        templates = (await s.list_resource_templates()).resource_templates
        assert templates[0].uri_template == "engram://tape/{tape_id}"


@pytest.mark.parametrize("name, args, message", [
    ("explain", {"file": "net.py", "start": 4}, "explain: 'end' is a required property"),
    ("explain", {"file": "net.py", "start": "4", "end": 5}, "explain: start: '4' is not of type 'integer'"),
    ("explain", {"file": "net.py", "start": 0, "end": 5}, "explain: start: 0 is less than the minimum of 1"),
    ("explain", {"file": "net.py", "start": 9, "end": 5}, "explain: end (5) is before start (9)"),
    ("explain", {"file": "net.py", "start": 1, "end": 2, "color": "red"}, "Additional properties are not allowed"),
    ("explain", {"file": "gone.py", "start": 1, "end": 2}, "explain: gone.py: no such file"),
    ("explain", {"file": "net.py", "start": 400, "end": 401}, "past the end of the file"),
    ("note", {"file": "net.py", "start": 1, "end": 2, "kind": "rant", "text": "x"}, "is not one of"),
    ("note", {"file": "net.py", "start": 4, "end": 6, "kind": "todo", "text": "x" * 1_048_576},
     "note: text: 1048576 characters long; at most 4000"),
    ("note", {"file": "net.py", "start": 4, "end": 6, "kind": "todo", "text": "x",
              "related": "ffffffffffff#1"}, "no indexed tape 'ffffffffffff'"),
    ("feedback", {"session": "nobody", "verdict": "helpful"}, "no indexed session or tape 'nobody'"),
    ("teleport", {}, "unknown tool 'teleport'; tools: explain, search"),
])
async def test_bad_calls_are_clear_errors_and_the_server_keeps_serving(world, name, args, message):
    async with stdio_client(_params(world.root)) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        res = await s.call_tool(name, args)
        assert res.is_error is True
        text = res.content[0].text
        assert text.startswith("Error: ") and "\n" not in text and message in text, text[:300]
        assert len(text) < 400
        assert res.structured_content["error"]["message"] in text
        ok = await s.call_tool("explain", {"file": "net.py", "start": 4, "end": 12})
        assert ok.is_error is not True and ok.structured_content["sessions"]


async def test_unknown_resource_is_an_error_not_a_crash(world):
    from mcp.shared.exceptions import MCPError

    async with stdio_client(_params(world.root)) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        with pytest.raises(MCPError, match="no indexed tape"):
            await s.read_resource("engram://tape/ffffffffffff")
        assert (await s.call_tool("trace", {"file": "net.py"})).is_error is not True


def test_a_client_that_disconnects_mid_call_ends_the_server_quietly(world):
    from mcp_types import LATEST_PROTOCOL_VERSION

    proc = subprocess.Popen([sys.executable, "-m", "engram.cli", "mcp"], cwd=world.root,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "brief", "arguments": {"paths": ["net.py"]}}}]
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode())
    proc.stdin.flush()
    time.sleep(0.05)
    proc.stdin.close()  # gone, mid-call
    proc.stdout.close()
    try:
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().decode()
    assert code == 0 and "Traceback" not in err, err


async def test_log_review_stats_answer_what_the_cli_prints(world, capsys):
    def git(*a):
        subprocess.run(["git", *a], cwd=world.root, check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "root")
    git("add", "net.py")
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "add net.py")
    cli_log = run_json(capsys, "log", "-n", "5")
    cli_review = run_json(capsys, "review", "HEAD~1..HEAD")
    async with stdio_client(_params(world.root)) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        names = [t.name for t in (await s.list_tools()).tools]
        assert {"log", "review", "stats"} <= set(names)
        res = await s.call_tool("log", {"limit": 5})
        assert res.is_error is not True and res.structured_content == cli_log
        assert res.structured_content["commits"][0]["subject"] == "add net.py"
        res = await s.call_tool("review", {"range": "HEAD~1..HEAD"})
        assert res.structured_content == cli_review
        res = await s.call_tool("stats", {"by": "harness"})
        assert res.is_error is not True and "rows" in res.structured_content
        bad = await s.call_tool("stats", {"since": "last week"})
        assert bad.is_error is True and "does not match" in bad.content[0].text


def _exchange(root, msgs: list[dict]) -> dict:
    """``msgs`` written to a fresh ``engram mcp`` at once; the raw response lines by id, read
    until every request is answered (then stdin is closed)."""
    proc = subprocess.Popen([sys.executable, "-m", "engram.cli", "mcp"], cwd=root,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode())
        proc.stdin.flush()
        want, got = {m["id"] for m in msgs if "id" in m}, {}
        while want - got.keys():
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()[-2000:]
            got[json.loads(line)["id"]] = line
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    return got


def test_explains_fast_path_answers_as_the_sdks_way_does(world):
    """explain's fast path (``server._inline_calls``) and the SDK's own way (a request with
    ``_meta`` takes it) give the same answer; the fast path writes the answer's JSON once as the
    text and as the structured content, byte for byte. Malformed params still get the SDK's
    error, bad arguments our one-line tool error, and a client that has not initialised the
    SDK's refusal."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    version = HANDSHAKE_PROTOCOL_VERSIONS[-1]  # what the SDK's client settles on with us

    args = {"file": "net.py", "start": 4, "end": 12}
    call = {"jsonrpc": "2.0", "method": "tools/call"}
    got = _exchange(world.root, [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": version, "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {**call, "id": 2, "params": {"name": "explain", "arguments": args}},
        {**call, "id": 3, "params": {"name": "explain", "arguments": args,
                                     "_meta": {"progressToken": 9}}},
        {**call, "id": 4, "params": {"name": "explain", "arguments": {**args, "start": "4"}}},
        {**call, "id": 5, "params": {"name": "explain", "arguments": "net.py:4-12"}}])
    fast, sdk = json.loads(got[2])["result"], json.loads(got[3])["result"]
    text = fast["content"][0]["text"]
    assert got[2].count(text.encode()) == 1  # the structured content: the text's bytes
    assert got[3].count(sdk["content"][0]["text"].encode()) == 0
    assert fast["structuredContent"]["sessions"] and fast["isError"] is False
    assert _no_timing(fast["structuredContent"]) == _no_timing(sdk["structuredContent"])
    assert _no_timing(json.loads(text)) == _no_timing(json.loads(sdk["content"][0]["text"]))
    bad = json.loads(got[4])["result"]
    assert bad["isError"] is True
    assert bad["content"][0]["text"] == "Error: explain: start: '4' is not of type 'integer'"
    assert json.loads(got[5])["error"]["code"] == -32602  # INVALID_PARAMS, from the SDK
    early = _exchange(world.root, [{**call, "id": 1, "params": {"name": "explain",
                                                                 "arguments": args}}])
    assert json.loads(early[1])["error"]["code"] == -32602
