"""``engram.mcp.stdio``: what ``engram mcp`` writes on the wire is byte for byte what the SDK's own
``stdio_server`` would write (``model_dump_json``), for real answers shaped by the SDK's own
result pipeline; what ``orjson`` cannot write goes through the SDK's serialiser."""

from __future__ import annotations

import json

import mcp_types as types
import orjson
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


def test_results_pass_the_sdks_result_check_unchanged(world):
    """What lets explain's fast path (``server._inline_calls``) skip the SDK's check: at every
    protocol version the path serves, the check gives our results back as they are."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS

    app = EngramMCP(world.root)
    try:
        results = [app.call("explain", {"file": "net.py", "start": 4, "end": 12}),
                   app.call("explain", {"file": "net.py", "start": 1, "end": 20, "all": True}),
                   app.call("explain", {"file": "gone.py", "start": 1, "end": 2}),
                   app.call("explain", {"file": "net.py", "start": "4", "end": 5})]
        assert [r["isError"] for r in results] == [False, False, True, True]
        assert results[0]["structuredContent"]["sessions"]
        for version in SUPPORTED_PROTOCOL_VERSIONS:
            if version not in MODERN_PROTOCOL_VERSIONS:
                for r in results:
                    assert methods.serialize_server_result("tools/call", version, dict(r)) == r
    finally:
        app.close()


def _untimed(obj: dict) -> dict:
    obj["stats"].pop("elapsed_ms")
    return obj


def test_a_spliced_answer_is_the_same_json_once(world):
    """The fast path's answer: the text and the structured content are the same bytes (written
    once), and the line parses to what the SDK's own pipeline writes for the same call."""
    app = EngramMCP(world.root)
    try:
        args = {"file": "net.py", "start": 4, "end": 12}
        spliced = app.call("explain", args, spliced=True)
        assert isinstance(spliced["structuredContent"], orjson.Fragment)
        text = spliced["content"][0]["text"]
        plain = app.call("explain", args)
        for ident in (7, "req-7", 2 ** 70):
            line = stdio.encode(types.JSONRPCResponse(jsonrpc="2.0", id=ident, result=spliced))
            assert line.endswith(b"}\n") and b"\n" not in line[:-1]
            assert line.count(text.encode()) == 1  # the structured content, as it is
            ours = json.loads(line)
            assert ours["id"] == ident and ours["result"]["content"][0]["text"] == text
            assert ours["result"]["structuredContent"] == json.loads(text)
            sdk = json.loads(_sdk(types.JSONRPCResponse(jsonrpc="2.0", id=ident,
                                                        result=_wire(plain))))
            for answer in (ours, sdk):  # the timing is all two answers may differ in
                _untimed(answer["result"]["structuredContent"])
                answer["result"]["content"][0]["text"] = _untimed(
                    json.loads(answer["result"]["content"][0]["text"]))
            assert ours == sdk
    finally:
        app.close()


def test_collect_due_runs_the_collection_the_thresholds_call_for():
    """``engram mcp`` collects between messages (automatic collection off while it serves): the
    collection due then runs, and none before it is due."""
    import gc
    import weakref

    class Node:
        pass

    def cycle() -> list[bool]:
        a, b = Node(), Node()
        a.other, b.other = b, a
        freed: list[bool] = []
        weakref.finalize(a, freed.append, True)
        return freed

    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        freed = cycle()
        stdio.collect_due()  # nothing allocated since the collection: none due
        assert freed == []
        keep = [[] for _ in range(gc.get_threshold()[0] + 50)]  # tracked objects: a collection due
        assert gc.get_count()[0] > gc.get_threshold()[0]
        stdio.collect_due()
        assert freed == [True]
        assert gc.get_count()[0] < gc.get_threshold()[0]
        del keep
    finally:
        if was:
            gc.enable()
