"""``engram.mcp.stdio``: what ``engram mcp`` writes on the wire is byte for byte what the SDK's own
``stdio_server`` would write (``model_dump_json``), for real answers shaped by the SDK's own
result pipeline; what ``orjson`` cannot write goes through the SDK's serialiser."""

from __future__ import annotations

import mcp_types as types
from mcp_types import methods

from engram.mcp import stdio
from engram.mcp.server import EngramMCP


def _sdk(message) -> bytes:
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


def _wire(result: dict, version: str = "2025-11-25") -> dict:
    """A tool's result as the SDK's server pipeline shapes it for the wire."""
    return methods.serialize_server_result("tools/call", version, dict(result))


def test_answers_are_written_as_the_sdk_writes_them(world):
    app = EngramMCP(world.root)
    try:
        calls = [("explain", {"file": "net.py", "start": 4, "end": 12}),
                 ("explain", {"file": "net.py", "start": 1, "end": 20, "brief": True}),
                 ("trace", {"file": "net.py"}), ("blame", {"file": "net.py"}),
                 ("brief", {"paths": ["net.py"]}), ("search", {"query": "retries"}),
                 ("explain", {"file": "gone.py", "start": 1, "end": 2}),  # an error result
                 ("teleport", {})]
        for i, (name, args) in enumerate(calls):
            result = app.call(name, args)
            assert isinstance(result["structuredContent"], dict)
            msg = types.JSONRPCResponse(jsonrpc="2.0", id=i, result=_wire(result))
            assert stdio.encode(msg) == _sdk(msg), name
            msg = types.JSONRPCResponse(jsonrpc="2.0", id=f"req-{i}", result=_wire(result))
            assert stdio.encode(msg) == _sdk(msg), name
        assert b'"sessions":[{' in stdio.encode(types.JSONRPCResponse(
            jsonrpc="2.0", id=1, result=_wire(app.call("explain", calls[0][1]))))
    finally:
        app.close()


def test_other_messages_and_unwritable_values_go_through_the_sdk():
    for msg in (types.JSONRPCNotification(jsonrpc="2.0", method="notifications/tools/list_changed"),
                types.JSONRPCError(jsonrpc="2.0", id=3, error=types.ErrorData(code=-32602,
                                                                              message="bad")),
                types.JSONRPCResponse(jsonrpc="2.0", id=4, result={"big": 2 ** 70}),
                types.JSONRPCResponse(jsonrpc="2.0", id=5, result={"text": "é ✓ \u2028 \x00"})):
        assert stdio.encode(msg) == _sdk(msg)
