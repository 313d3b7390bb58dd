"""The MCP stdio transport without a thread hop per message.

The SDK's ``stdio_server`` reads each line and writes each message through a worker thread
(``anyio.wrap_file``) and serialises a response with pydantic's ``model_dump_json``, which infers
the type of every value of an explain's ~100 KB answer (~2 ms of CPU a call, measured); each hand
over between threads also waits for a CPU when the machine is busy. Here stdin and stdout are
asyncio pipes on the event loop, and a response whose result is a plain ``dict`` (every result:
the SDK has already shaped it for the wire) is written with ``orjson`` — the same JSON (tested
byte for byte against ``model_dump_json``); any other message, or a result ``orjson`` cannot
write, goes through the SDK's own serialiser.

As the SDK does, the process's fd 0 and fd 1 point at the null device and at stderr while it
serves (stray output from code or a child process never reaches the wire), and are restored on
exit. When stdin or stdout is not a pipe, socket or terminal (a file), ``transport`` is the SDK's
``stdio_server``.

While it serves, the garbage collector runs between messages, not inside a request: automatic
collection is off, and after each message is written the collection the collector's own thresholds
call for by then runs (``collect_due``), while the client reads the answer. Inside an explain, the
young-generation collections its allocations set off (a gen-1 pass took ~2.5 ms, up to 6 ms, once
in ~25 calls) were part of the answer's latency: the in-process p95 of a fresh server's 400
explains was 0.5-1.3 ms of CPU lower without the collections inside the calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import stat
from collections.abc import AsyncIterator

import anyio
import mcp_types as types
import orjson
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from engram import pipes
from engram.collect import collect_due

MAX_LINE = 64 << 20  # a request line (a note's text is at most 1 MB)


def _streamable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


def encode(message) -> bytes:
    """One JSON-RPC message as a line: ``orjson`` for a response with a plain result, else the
    SDK's ``model_dump_json`` (what ``stdio_server`` writes). A result may hold an
    ``orjson.Fragment`` (JSON already written: ``EngramMCP.call``'s ``spliced``), written as it is;
    so may only such a result's ``id`` be an integer past 64 bits (``json`` writes that one)."""
    if type(message) is types.JSONRPCResponse and type(message.result) is dict:
        try:
            result = orjson.dumps(message.result)
        except TypeError:  # a value orjson does not write: the SDK's way
            pass
        else:
            try:
                ident = orjson.dumps(message.id)
            except TypeError:
                ident = json.dumps(message.id).encode()
            return b'{"jsonrpc":' + orjson.dumps(message.jsonrpc) + b',"id":' + ident + \
                b',"result":' + result + b"}\n"
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


@contextlib.asynccontextmanager
async def transport() -> AsyncIterator[tuple]:
    """``(read_stream, write_stream)`` for ``Server.run`` over this process's stdin and stdout."""
    if not (_streamable(0) and _streamable(1)):
        async with stdio_server() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=MAX_LINE)
    r_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0))
    w_transport, w_protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", buffering=0))
    w_transport.set_write_buffer_limits(0)  # drain() returns once a message is all written
    pipes.widen(wire_out)  # an answer (~200 KB) in one write, not four and waits
    writer = asyncio.StreamWriter(w_transport, w_protocol, None, loop)
    read_send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    written = anyio.Event()

    async def read_lines() -> None:
        async with read_send:
            while True:
                try:
                    line = await reader.readline()
                except ValueError as e:  # a line past MAX_LINE: reported, the rest is read on
                    await read_send.send(e)
                    continue
                if not line:
                    return
                if not line.strip():
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as e:  # as the SDK's transport: the server answers the error
                    await read_send.send(e)
                    continue
                await read_send.send(SessionMessage(message))

    async def write_messages() -> None:
        try:
            async with write_receive:
                async for session_message in write_receive:
                    writer.write(encode(session_message.message))
                    await writer.drain()
                    collect_due()  # while the client reads it, not inside the next request
        finally:
            written.set()

    collecting = gc.isenabled()
    gc.disable()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines)
            tg.start_soon(write_messages)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await write_stream.aclose()  # what the server sent is written out first
                    await written.wait()
                tg.cancel_scope.cancel()
    finally:
        if collecting:
            gc.enable()
        for fd, wire in ((0, wire_in), (1, wire_out)):  # the wire back where it was
            with contextlib.suppress(OSError):
                os.dup2(wire, fd)
        r_transport.close()
        w_transport.close()
