"""``engram mcp``: an MCP server over stdio on the official ``mcp`` SDK (low-level ``Server``).

One warm ``Engine`` for the life of the process. ``explain`` (``INLINE``: what agents call in
loops, milliseconds) runs on the protocol's event loop: the hand-over to a thread and back cost
1–3 ms of CPU a call and most of the p95 on a busy machine (``docs/benchmarks.md``). Every other
tool, and the resources, run on one worker thread, so a slow call (a brief of a big repository,
a note being indexed) never blocks the protocol loop. Each thread has its own read connection of
the index (``Engine.conn``). Tools are
``engram.mcp.tools``; a tool's result is the CLI's JSON object as ``structuredContent`` and as
text (``brief``: its Markdown as text). A bad call — unknown tool, missing or wrong-typed
argument, a span that does not exist — is a tool result with ``isError: true`` and one line
``Error: ...``; the server keeps serving. Tapes are resources ``engram://tape/<tape id>`` (the
``engram show`` object, JSON). Nothing is written to stdout but the protocol; logs go to stderr.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
from pathlib import Path

import anyio
import mcp_types as types
import orjson
from mcp.server.lowlevel import Server

from engram import __version__
from engram.errors import EngramError
from engram.mcp import stdio, tools

log = logging.getLogger(__name__)

URI_PREFIX = "engram://tape/"
#: what a client that went away looks like from here
_GONE = (BrokenPipeError, ConnectionResetError, anyio.BrokenResourceError,
         anyio.ClosedResourceError)
MAX_LISTED_TAPES = 500
#: tools run on the event loop itself (see the module's docstring)
INLINE = frozenset({"explain"})

INSTRUCTIONS = (
    "Engram knows which agent sessions wrote the code in this repository and why. Before "
    "changing code you did not write, call `brief` with the paths (warnings first) or `explain` "
    "with the lines. When you learn something the next agent must know (\"don't change X, "
    "because Y\"), call `note` with kind warning or decision.")


def _dumps(obj) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()


class EngramMCP:
    """The tools and resources over one engine (``call`` is what the protocol handlers run)."""

    def __init__(self, root: Path | None = None, index: Path | None = None):
        from engram.engine import Engine

        self.engine = Engine(root, index_path=index, semantic=False)
        self.engine.client = "mcp"
        self.names = tools.available(type(self.engine))
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="engram-mcp")
        self.pool.submit(self.warm)  # while the client starts and says hello

    def warm(self) -> None:
        """Before the first call: open the index, load explain's code and the tools' validators
        (a first ``explain`` otherwise pays for them); then what is loaded leaves the garbage
        collector's view (``gc.freeze``): its full collections, every ~200 explains, scanned
        these ~110k objects for 80–110 ms of pause each (measured); now ~26k remain."""
        try:
            import numpy.ma  # noqa: F401  (np.unique imports it on its first call: ~60 ms)

            from engram.query import blocks  # noqa: F401  (explain's, imported on first use)
            from engram.retrieval import log as _retrieval_log  # noqa: F401

            for name in self.names:
                tools.validator(name)
            if self.engine.index_path.exists():
                self.engine.conn().execute("SELECT count(*) FROM tapes").fetchone()
        except Exception as e:  # a broken index is reported by the call that needs it
            log.info("warm-up: %s", e)
        gc.freeze()

    def close(self) -> None:
        self.pool.submit(self.engine.close).result()
        self.pool.shutdown(wait=True)

    async def run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def call(self, name: str, arguments: dict | None, *, spliced: bool = False) -> dict:
        """Validate and run one tool call (on the worker thread): the ``CallToolResult`` as the
        plain dict the wire carries (the SDK checks it against the protocol's schema; a model
        here would only be dumped back into this dict: ~0.5 ms of an explain's ~100 KB).

        ``spliced`` (the fast path, ``_inline_calls``, which the SDK's check does not see): the
        answer is serialised once, and the same bytes are both the text and, as an
        ``orjson.Fragment``, the ``structuredContent`` (``stdio.encode`` writes them as they are)."""
        if name not in self.names:
            return _error(f"unknown tool {name!r}; tools: {', '.join(self.names)}", "unknown-tool")
        try:
            args = tools.check(name, arguments)
            self.engine.refresh()  # this thread's row cache as of now (an ingest may have committed)
            result = tools.TOOLS[name][2](self.engine, args)
        except ValueError as e:
            return _error(str(e), "bad-arguments")
        except EngramError as e:
            return _error(f"{name}: {e}", e.code)
        except OSError as e:
            return _error(f"{name}: {e.filename + ': ' if e.filename else ''}{e.strerror or e}",
                          "os-error")
        if not isinstance(result, dict):
            text, result = _dumps(result), {"result": result}
        elif name == "brief":
            text = result["markdown"]
        else:
            raw = orjson.dumps(result, option=orjson.OPT_SORT_KEYS)
            text = raw.decode()
            if spliced:
                result = orjson.Fragment(raw)
        return {"content": [{"type": "text", "text": text}], "structuredContent": result,
                "isError": False}

    def list_tools(self) -> list[types.Tool]:
        out = []
        for name in self.names:
            desc, schema, _fn = tools.TOOLS[name]
            ro = name not in ("note", "feedback")
            out.append(types.Tool(name=name, description=desc, input_schema=schema,
                                  annotations=types.ToolAnnotations(read_only_hint=ro,
                                                                    open_world_hint=False)))
        return out

    def list_tapes(self) -> list[types.Resource]:
        rows = self.engine.tapes() if self.engine.index_path.exists() else []
        rows = sorted(rows, key=lambda r: (r["last_t"] or "", r["tape_id"]), reverse=True)
        return [types.Resource(name=r["tape_id"], uri=URI_PREFIX + r["tape_id"],
                               title=f"{r['harness']}: {r['label'] or ''}"[:120],
                               mime_type="application/json")
                for r in rows[:MAX_LISTED_TAPES]]

    def read_tape(self, uri: str) -> str:
        if not uri.startswith(URI_PREFIX):
            raise EngramError(f"unknown resource {uri!r}; tapes are {URI_PREFIX}<tape id>")
        self.engine.refresh()  # as ``call``: the index as of now
        return _dumps(self.engine.show(uri[len(URI_PREFIX):]))


def _error(message: str, code: str) -> dict:
    return {"content": [{"type": "text", "text": f"Error: {message}"}],
            "structuredContent": {"error": {"code": code, "message": message}}, "isError": True}


def build(app: EngramMCP) -> Server:
    """The SDK server whose handlers call ``app``."""

    async def on_list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=app.list_tools())

    async def on_call_tool(ctx, params: types.CallToolRequestParams) -> dict:
        if params.name in INLINE:
            return app.call(params.name, params.arguments)
        return await app.run(app.call, params.name, params.arguments)

    async def on_list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await app.run(app.list_tapes))

    async def on_list_resource_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            name="tape", uri_template=URI_PREFIX + "{tape_id}", mime_type="application/json",
            description="a session's tape: every event (engram show)")])

    async def on_read_resource(ctx, params: types.ReadResourceRequestParams
                               ) -> types.ReadResourceResult:
        uri = str(params.uri)
        text = await app.run(app.read_tape, uri)
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type="application/json", text=text)])

    server = Server("engram", version=__version__, instructions=INSTRUCTIONS,
                    on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                    on_list_resources=on_list_resources,
                    on_list_resource_templates=on_list_resource_templates,
                    on_read_resource=on_read_resource)
    # no OpenTelemetry span per message (nothing here exports them); explain's fast path
    server.middleware[:] = [_inline_calls(app)]
    return server


#: a probe of our results' shape (text content, structured content with nested values and nulls)
_PROBE = {"content": [{"type": "text", "text": "{}"}],
          "structuredContent": {"a": [1, None, {"b": "c", "d": 0.5, "e": True}], "f": None},
          "isError": False}


def _inline_calls(app: EngramMCP):
    """A ``Server.middleware`` (the SDK's hook in front of validation and the handler) that
    answers the ``INLINE`` tools itself, for a request the SDK would take as it is: once the
    client is initialised, params that are only ``name`` and an ``arguments`` object, at a
    protocol version whose result check gives a result of our shape back unchanged (probed once
    per version; the 2026 versions add fields, so they take the SDK's way). Skipped on this path:
    the SDK's params model and its result check (``serialize_server_result``: a pydantic
    validation and dump of the whole ~100 KB answer, ~1.7 ms of CPU a call on a loaded machine);
    the answer is serialised once (``spliced``). Our arguments are checked as always
    (``tools.check``); that our results pass the SDK's check unchanged is tested on real answers
    (``tests/agents/test_mcp_transport.py``). Anything else goes on to the SDK (``call_next``)."""
    from mcp_types import methods
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    as_is: dict[str, bool] = {}

    def plain(version: str) -> bool:
        if version not in as_is:
            try:
                as_is[version] = version not in MODERN_PROTOCOL_VERSIONS and methods.\
                    serialize_server_result("tools/call", version, dict(_PROBE)) == _PROBE
            except Exception:  # an unknown version, a surface without tools/call
                as_is[version] = False
        return as_is[version]

    async def middleware(ctx, call_next):
        params = ctx.params
        if (ctx.method == "tools/call" and ctx.request_id is not None
                and type(params) is dict and params.keys() <= {"name", "arguments"}
                and params.get("name") in INLINE and type(params.get("arguments")) is dict
                and ctx.session.client_params is not None and plain(ctx.protocol_version)):
            return app.call(params["name"], params["arguments"], spliced=True)
        return await call_next(ctx)

    return middleware


async def _serve(app: EngramMCP) -> None:
    server = build(app)
    ahead = None
    if app.engine.index_path.exists():  # the event loop's own connection, for INLINE tools
        with contextlib.suppress(Exception):
            app.engine.conn()
            ahead = asyncio.get_running_loop().create_task(_walk_ahead(app))
    try:
        async with stdio.transport() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        if ahead is not None:
            ahead.cancel()


async def _walk_ahead(app: EngramMCP) -> None:
    """The lineage walk's plans prepared on the event loop's connection (what ``explain``
    walks), by the editors' read-ahead steps (``prefetch.walk_steps``, a few ms each) with the
    loop's other work (the calls) in between: an explain's first walk then follows prepared
    steps. Once, at start (the index's next version, after an ingest, is walked as before)."""
    from engram.query import prefetch

    try:
        for _step in prefetch.walk_steps(app.engine):
            await asyncio.sleep(0)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # explain walks without it; a broken index is reported by the call
        log.info("walk read-ahead: %s", e)


def serve(root: Path | None = None, index: Path | None = None) -> None:
    """Serve until the client closes stdin (a client that goes away mid-call ends the process
    quietly once the call is done)."""
    app = EngramMCP(root, index)
    try:
        asyncio.run(_serve(app))
    except (KeyboardInterrupt, *_GONE):
        _quiet_stdout()
    except BaseExceptionGroup as group:  # the SDK's task groups: a client gone is not an error
        _rest = group.split(_GONE)[1]
        if _rest is not None:
            raise
        _quiet_stdout()
    finally:
        app.close()


def _quiet_stdout() -> None:
    """The client closed its end: nothing more can be written there (not even at exit)."""
    import os

    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    except OSError:
        pass
