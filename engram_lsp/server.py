"""The composition root: ``create_server()`` builds the server and registers every feature.

``EngramLanguageServer`` carries the per-session state the features share (settings, the
``Backend`` that owns the engine, the ``Indexer`` that keeps the index fresh) and a few helpers:

* ``run(fn, *args)`` awaits a query on a query thread (never blocks the event loop) and turns
  engine errors into JSON-RPC errors;
* ``on_loop(fn, *args)`` and the helpers built on it (``log_to_client``, ``notify_user``,
  ``refresh_code_lenses``) are safe to call from any thread: they hop onto the event loop, so two
  threads never interleave bytes on stdout;
* ``offer_rebuild_for(exc)``: one rebuild offer per broken index (``Indexer.offer_rebuild_for``).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import logging
import os
import re
import stat
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import cattrs
import orjson
from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage

from engram import pipes
from engram.collect import collect_due
from engram.errors import EngramError
from engram_lsp import __version__, framing, heap
from engram_lsp.backend import Backend
from engram_lsp.indexer import Indexer
from engram_lsp.params import engram_error
from engram_lsp.settings import Settings

log = logging.getLogger(__name__)


class _Invalid:
    """What ``structure_message`` returns for a request it could not structure (ignored)."""

    jsonrpc = "invalid"


_PENDING_WRITES: set[asyncio.Future] = set()  # websocket writes still in flight
ANSWERED = object()  # a handler's result when its response went out already (``answering``)
_CLOSED_IDS = 1024  # request ids answered by the loop, remembered for ``EngramProtocol.answer``
_HEADER = b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n"


class FrameWriter:
    """Writes each frame whole to a binary stream (stdout), or raises.

    pygls' ``StdoutWriter`` calls ``stream.write(data)`` once and ignores what it returns. With
    ``PYTHONUNBUFFERED`` set (editors set it for Python tools; ``python -u``) ``sys.stdout.buffer``
    is a raw ``FileIO``, whose ``write`` is one ``write(2)``: on a pipe it writes a part when a
    signal comes while the pipe is full (a blocking descriptor), or what fits (``None`` when
    nothing does) on a non-blocking one. The rest of the frame was dropped, its Content-Length
    still announcing the whole: the client read the next frames into it, never parsed the
    response, and every later one was lost to it too (the 60 s timeouts of the scale bench:
    explain answers of 130-150 KB cut at exactly two 64 KB pipe buffers). Here the rest is
    written until all of it went, waiting for the descriptor to be writable when it is full.
    One frame at a time (a lock), so frames never interleave.
    """

    WAIT_S = 1.0  # one wait for a full non-blocking descriptor (then written again)

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()
        # an explain answer (50-150 KB) written at once, not a 64 KB pipe buffer at a time with
        # the query thread waiting for the editor after each (0.8 ms at p50 in the scale bench);
        # editors built on libuv (VS Code, Neovim) connect by a socket pair, with ~200 KB of send
        # buffer already
        pipes.widen(stream)

    def close(self) -> None:
        self._stream.close()

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        with self._lock:
            while view:
                try:
                    n = self._stream.write(view)
                except BlockingIOError as exc:  # a buffered stream took part of it
                    n, full = exc.characters_written, True
                else:  # None: a raw non-blocking stream took nothing
                    n, full = n or 0, not n
                view = view[n:]
                if full and view:
                    self._wait_writable()
            flush = getattr(self._stream, "flush", None)
            while flush is not None:
                try:
                    flush()
                    break
                except BlockingIOError:
                    self._wait_writable()

    def _wait_writable(self) -> None:
        import select

        try:
            select.select([], [self._stream.fileno()], [], self.WAIT_S)
        except (AttributeError, OSError, ValueError):  # no descriptor: try again shortly
            time.sleep(0.01)


def _output_closed(error: Exception) -> bool:
    """A write to an output that is closed (``ValueError: I/O operation on closed file``) or
    whose reader is gone."""
    return isinstance(error, (BrokenPipeError, ConnectionResetError)) or (
        isinstance(error, ValueError) and "closed file" in str(error))


class EngramProtocol(LanguageServerProtocol):
    """pygls' protocol, except that

    * malformed params get a JSON-RPC error instead of silence: pygls answers a request whose
      params fail to structure with a ``window/showMessage`` and no response, which leaves the
      client waiting forever. Here the request gets an ``InvalidParams`` response
      naming the method;
    * messages are written with orjson, and a result that is plain JSON data (hover, code lens
      and explain answer with dicts) goes out as it is: pygls would first copy it through cattrs
      (``unstructure`` of a 90 KB explain result costs more than the explain's ranking) and then
      encode it with ``json``. Objects of ``lsprotocol`` types still go through the converter;
    * frames are read by ``engram_lsp.framing`` (a bad frame is skipped, not fatal) and each body
      comes to ``handle_body``: malformed JSON is answered with ``-32700 Parse error`` (id null),
      JSON that is not a JSON-RPC 2.0 message with ``-32600 Invalid Request``;
    * an error response carries a one-line message and its code, never a traceback: pygls puts
      the handler's traceback in ``error.data``; here ``data`` is kept only when it is Engram's
      own (``{code, path, line, message}``, see ``engram_lsp.params.engram_error``). The
      traceback goes to the log;
    * once the client's end of our output is closed (a broken pipe, or a closed stdout: the
      editor quit), nothing more is sent and nothing is reported about it: reporting a failed
      send is itself a send, and failing sends used to feed each other, burning a core and
      growing the log without end while the server never got back to reading its EOF.
    """

    last_message_at = 0.0  # monotonic time of the last message from the client
    client_gone = False  # the client's end of our output is closed: nothing more is sent

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._answered: set = set()  # ids whose response ``answer`` writes or wrote
        self._closed: OrderedDict = OrderedDict()  # recent ids the loop answered (``answer`` drops)
        self._answered_lock = threading.Lock()

    def answers_from_threads(self) -> bool:
        """Whether a response may be written from a query thread (``answer``): only to stdout
        (``FrameWriter`` writes each frame whole under its lock); an asyncio writer (TCP, a
        websocket) belongs to the event loop."""
        return isinstance(self.writer, FrameWriter) and not self.client_gone

    def answer(self, msg_id, result) -> bool:
        """Write the response to request ``msg_id`` now, from the calling thread; the handler then
        returns ``ANSWERED`` and nothing more is sent for it. Exactly one response either way: a
        request the loop answered already (cancelled meanwhile) gets nothing from here (False)."""
        with self._answered_lock:
            if msg_id in self._closed:
                del self._closed[msg_id]
                return False
            self._answered.add(msg_id)
        try:
            self._send_data({"jsonrpc": self.VERSION, "id": msg_id, "result": result})
        except BaseException:  # not sent: the handler's error goes out instead
            with self._answered_lock:
                self._answered.discard(msg_id)
            raise
        return True

    def _send_handler_result(self, future, *, msg_id):
        with self._answered_lock:
            if msg_id in self._answered:
                self._answered.discard(msg_id)
                self._request_futures.pop(msg_id, None)
                return
            self._closed[msg_id] = None
            while len(self._closed) > _CLOSED_IDS:
                self._closed.popitem(last=False)
        super()._send_handler_result(future, msg_id=msg_id)

    def handle_message(self, message):
        self.last_message_at = time.monotonic()
        return super().handle_message(message)

    def handle_body(self, body: bytes) -> None:
        """One frame's body (from ``engram_lsp.framing.serve``): parse, structure, dispatch."""
        try:
            message = json.loads(body, object_hook=self.structure_message)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
            log.warning("LSP input: malformed JSON (%s): %s", _short(exc), _preview(body))
            self.send_error(None, types.ErrorCodes.ParseError, f"Parse error: {_short(exc)}")
            return
        if isinstance(message, _Invalid):  # answered by structure_message
            return
        if getattr(message, "jsonrpc", None) != self.VERSION:
            msg_id = message.get("id") if isinstance(message, dict) else None
            log.warning("LSP input: not a JSON-RPC 2.0 message: %s", _preview(body))
            self.send_error(
                msg_id if _valid_id(msg_id) else None,
                types.ErrorCodes.InvalidRequest,
                "Invalid Request: not a JSON-RPC 2.0 message object",
            )
            return
        self.handle_message(message)

    def send_error(self, msg_id, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": int(code), "message": message}
        if data is not None:
            error["data"] = data
        self._send_data({"jsonrpc": self.VERSION, "id": msg_id, "error": error})

    def _send_response(self, msg_id, result=None, error=None):
        self._result_types.pop(msg_id, None)
        if result is ANSWERED and error is None:
            return None
        if error is not None:
            code, message, data = _error_parts(error)
            return self.send_error(msg_id, code, message, data)
        self._send_data({"jsonrpc": self.VERSION, "id": msg_id, "result": result})

    def _serialize_default(self, obj):
        if hasattr(obj, "__attrs_attrs__"):
            return self._converter.unstructure(obj)
        raise TypeError(f"not JSON serializable: {type(obj).__name__}")

    def _send_data(self, data: Any):
        if self.client_gone:
            return None
        if not data or self.writer is None:
            return super()._send_data(data)
        try:
            body = orjson.dumps(
                data, default=self._serialize_default, option=orjson.OPT_NON_STR_KEYS
            )
        except TypeError:  # what orjson does not write (lone surrogates, ...): pygls' own way
            return super()._send_data(data)
        try:
            res = self.writer.write(_HEADER % len(body) + body)  # FrameWriter: all of it, flushed
            if inspect.isawaitable(res):  # a websocket: keep the write alive until it is done
                task = asyncio.ensure_future(res)
                _PENDING_WRITES.add(task)
                task.add_done_callback(_PENDING_WRITES.discard)
        except BrokenPipeError:
            log.error("sending a message failed: the client closed the pipe")
            self.client_gone = True
            raise
        except Exception as error:
            if _output_closed(error):
                log.error("sending a message failed: the client's end is closed; sending no more")
                self.client_gone = True
                return None
            log.exception("sending a message failed")
            self._server._report_server_error(error, JsonRpcInternalError)

    def structure_message(self, data: dict[str, Any]):
        if "jsonrpc" in data and "method" in data:
            problem = _request_problem(data, self.VERSION)
            if problem:
                msg_id = data.get("id")
                log.warning("LSP input: invalid request (%s)", problem)
                self.send_error(
                    msg_id if _valid_id(msg_id) else None,
                    types.ErrorCodes.InvalidRequest,
                    f"Invalid Request: {problem}",
                )
                return _Invalid()
            if self.get_message_type(data["method"]) is None and "error" not in data:
                # Engram's own methods: the params stay the plain JSON they are (pygls copies
                # them through ``json`` again, making a namedtuple class per object: 0.5 ms of
                # the event loop's CPU per ``engram/explain``, undone by ``params.plain``)
                kind = JsonRPCRequestMessage if "id" in data else JsonRPCNotification
                fields = {"method": data["method"], "jsonrpc": data["jsonrpc"],
                          "params": data.get("params")}  # (optional in JSON-RPC)
                return kind(id=data["id"], **fields) if "id" in data else kind(**fields)
        try:
            return super().structure_message(data)
        except Exception as exc:
            if isinstance(data, dict) and "id" in data and "method" in data:
                cause = exc.__cause__ or exc
                self._send_response(
                    data["id"],
                    error=types.ResponseError(
                        code=types.ErrorCodes.InvalidParams,
                        message=f"invalid params for {data['method']}: {_params_problem(cause)}",
                    ),
                )
                log.warning("invalid params for %s: %s", data["method"], cause)
                return _Invalid()
            if isinstance(data, dict) and "method" in data and "jsonrpc" in data:
                # a notification: nobody waits for an answer (pygls logged the traceback)
                log.warning("invalid params for notification %s: %s", data["method"], _short(exc))
                return _Invalid()
            raise


_REBUILD_WAIT_S = 30.0


async def _wait(done, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _is_sqlite_error(exc: BaseException) -> bool:
    return type(exc).__module__ == "apsw" or type(exc).__name__ in ("IOError", "BusyError")


def _valid_id(msg_id: Any) -> bool:
    return isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)


def _request_problem(data: dict, version: str) -> str | None:
    """Why a message with a ``method`` is not a valid JSON-RPC request/notification, if it is not."""
    if data["jsonrpc"] != version:
        return f"jsonrpc must be {version!r}"
    if not isinstance(data["method"], str):
        return "method must be a string"
    if "id" in data and not _valid_id(data["id"]):
        return "id must be an integer or a string"
    return None


def _params_problem(exc: BaseException) -> str:
    """What is wrong with params cattrs could not structure, by field: ``params.position.line:
    invalid value for type, expected int`` (field names as the client spells them)."""
    try:
        problems = cattrs.transform_error(exc, path="$")
    except Exception:
        return _short(exc)
    out = []
    for problem in problems[:3]:
        what, _, where = problem.rpartition(" @ ")
        where = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), where.lstrip("$."))
        out.append(f"{where or 'params'}: {what or problem}"[:200])
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(out) + more if out else _short(exc)


def _preview(body: bytes, n: int = 80) -> str:
    return repr(body[:n]) + ("…" if len(body) > n else "")


def _error_parts(error: Any) -> tuple[int, str, Any]:
    """(code, one-line message, data or None) of a ``ResponseError``/``JsonRpcException``: no
    traceback (pygls' ``JsonRpcInternalError.of`` puts one in ``data``), no multi-line text."""
    code = getattr(error, "code", None)
    try:
        code = int(code)
    except (TypeError, ValueError):
        code = int(types.ErrorCodes.InternalError)
    text = str(getattr(error, "message", None) or "") or "Internal error"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    text = (lines[0] if lines else "Internal error").strip()
    if len(text) > 500:
        text = text[:499] + "…"
    data = getattr(error, "data", None)
    if not (isinstance(data, dict) and "traceback" not in data and "code" in data):
        data = None  # only Engram's own error data goes out
    return code, text, data


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    subs = getattr(exc, "exceptions", None)
    if subs:
        text += ": " + "; ".join(_short(e) for e in subs[:3])
    return text[:300]


class EngramLanguageServer(LanguageServer):
    """pygls server plus Engram session state (see the module docstring)."""

    def __init__(self, converter_factory=None) -> None:
        # (``engram_lsp.early`` gives one already taken through the first messages)
        extra = {"converter_factory": converter_factory} if converter_factory else {}
        super().__init__("engram-lsp", __version__, protocol_cls=EngramProtocol, max_workers=4,
                         **extra)
        self.settings = Settings()
        self.init_options: Any = None
        self.backend: Backend | None = None
        self.indexer = Indexer(self)
        self.loop: asyncio.AbstractEventLoop | None = None

    # --- state ---------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        ws = self.protocol._workspace
        root = ws.root_path if ws is not None else None
        if not root and ws is not None and ws.folders:
            from pygls.uris import to_fs_path

            root = to_fs_path(next(iter(ws.folders.values())).uri)
        return Path(root) if root else Path.cwd()

    def start_io(self, stdin=None, stdout=None) -> None:
        """Serve over stdio, frames read by ``engram_lsp.framing`` (pygls' reader goes deaf after
        one bad frame). pygls reads stdin on a worker thread, one executor round trip per header
        line and per body, each waiting for the GIL while a query thread computes; when stdin is
        a pipe or a socket (an editor's), the event loop reads it itself."""
        stdin = stdin or sys.stdin.buffer
        try:
            mode = os.fstat(stdin.fileno()).st_mode
        except (AttributeError, OSError, ValueError):
            mode = 0
        pipe = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        self._stop_event = threading.Event()
        self.protocol.set_writer(FrameWriter(stdout or sys.stdout.buffer))

        async def serve() -> None:
            if pipe:
                loop = asyncio.get_running_loop()
                reader = asyncio.StreamReader(limit=1 << 20)  # the limit is for header lines
                await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
            else:  # a file or a terminal
                reader = framing.BlockingReader(stdin, self.thread_pool)
            await framing.serve(reader, self.protocol, self._stop_event, log)

        try:
            asyncio.run(serve())
        except BrokenPipeError:
            log.error("Connection to the client is lost! Shutting down the server.")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            if pipe:
                try:
                    os.set_blocking(stdin.fileno(), True)
                except (OSError, ValueError):
                    pass
            self.shutdown()

    def start_tcp(self, host: str, port: int) -> None:
        """Serve one TCP client at a time (pygls' ``start_tcp``, frames read by ``framing``)."""
        log.info("Starting TCP server on %s:%s", host, port)
        self._stop_event = stop_event = threading.Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.protocol.set_writer(writer)
            await framing.serve(reader, self.protocol, stop_event, log)
            self.shutdown()

        async def tcp_server() -> None:
            self._server = await asyncio.start_server(connection, host, port, limit=1 << 20)
            addrs = ", ".join(str(sock.getsockname()) for sock in self._server.sockets)
            log.info("Serving on %s", addrs)
            async with self._server:
                await self._server.serve_forever()

        try:
            asyncio.run(tcp_server())
        except asyncio.CancelledError:
            log.debug("Server was cancelled")

    def get_backend(self) -> Backend:
        if self.backend is None:
            self.backend = Backend(self.root, self.settings)
        return self.backend

    async def run(self, fn, *args, quiet=None, passive=False, **kwargs):
        """Await ``fn(engine, *args)`` on the query thread; engine errors become JSON-RPC errors.
        ``passive``: a request that is not the user at work (``Backend.query_passive``).

        ``quiet``: what to answer instead of an error when the index is missing or broken (hover
        and code lens answer "nothing" while the user is offered a rebuild). A SQLite error (the
        index file replaced under an open connection, e.g. by a rebuild) is retried once on fresh
        connections.
        """
        backend = self.get_backend()
        for attempt in (1, 2):
            try:
                future = (backend.query_passive(fn, *args) if passive
                          else backend.query(fn, *args, **kwargs))
                return await asyncio.wrap_future(future)
            except EngramError as exc:
                self.offer_rebuild_for(exc)
                if quiet is not None and self.looks_corrupt(exc):
                    return quiet()
                raise engram_error(exc) from exc
            except Exception as exc:
                if _is_sqlite_error(exc) and attempt == 1:
                    log.info("index read failed (%s); retrying on fresh connections", exc)
                    if backend.rebuilding:
                        # the rebuild closed this connection; new ones opened while it replaces
                        # the file would break its transaction: wait for it (it reopens after)
                        await _wait(lambda: not backend.rebuilding, _REBUILD_WAIT_S)
                    else:
                        backend.reopen()
                    continue
                if self.looks_corrupt(exc):
                    self.offer_rebuild_for(exc)
                if quiet is not None and (_is_sqlite_error(exc) or self.looks_corrupt(exc)):
                    log.warning("index unavailable: %s", exc)
                    return quiet()
                raise
        raise AssertionError("unreachable")

    def answering(self, fn, finish=None):
        """``fn`` (a query for ``run``) made to answer the request being handled itself: on the
        query thread, its result (``finish(result)`` when given: what the response carries) is
        written as the response at once, and the handler's ``run`` returns ``ANSWERED`` — no hop
        back to the event loop before the write (on a busy machine, waiting for the loop's thread
        to get a core again). Where that cannot be done (no request id, not stdio) the result
        comes back to the handler as ``run`` gives it, finished. An exception is not answered
        here: ``run`` handles it as before (retry, ``quiet``, an error response)."""
        protocol = self.protocol
        msg_id = protocol.msg_id
        direct = msg_id is not None and protocol.answers_from_threads()

        def job(engine, *args, **kwargs):
            result = fn(engine, *args, **kwargs)
            if finish is not None:
                result = finish(result)
            if direct and not protocol._shutdown:
                # before the write: the client may read the answer and send its next request
                # while this thread waits to get the interpreter back after it; that request
                # waits for this thread (``QueryThreads.answered``)
                if self.backend is not None:
                    self.backend.answered()
                protocol.answer(msg_id, result)
                return ANSWERED
            return result

        return job

    # --- thread-safe sending ------------------------------------------------------------------

    def on_loop(self, fn, *args) -> None:
        """Call ``fn(*args)`` on the event loop (from any thread)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            if threading.current_thread() is threading.main_thread() and loop.is_running():
                try:
                    if asyncio.get_running_loop() is loop:
                        fn(*args)
                        return
                except RuntimeError:
                    pass
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed while shutting down
            pass

    def log_to_client(self, level: int, message: str) -> None:
        kind = (
            types.MessageType.Error
            if level >= logging.ERROR
            else types.MessageType.Warning
            if level >= logging.WARNING
            else types.MessageType.Info
            if level >= logging.INFO
            else types.MessageType.Log
        )
        self.on_loop(self._send_log, kind, message)

    def _send_log(self, kind, message) -> None:
        if self.protocol.writer is not None:
            self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def notify_user(self, message: str, *, error: bool = False) -> None:
        """``window/showMessage``, as the ``showNotifications`` setting allows."""
        level = self.settings.show_notifications
        if level == "off" or (level == "onError" and not error):
            log.info("%s", message)
            return
        kind = types.MessageType.Error if error else types.MessageType.Info
        self.on_loop(self.window_show_message, types.ShowMessageParams(type=kind, message=message))

    def refresh_code_lenses(self) -> None:
        """Ask the client to re-request lenses (if it supports ``workspace/codeLens/refresh``)."""
        caps = self.client_capabilities
        ws = caps.workspace if caps else None
        lens = ws.code_lens if ws else None
        if lens is not None and lens.refresh_support:
            self.on_loop(self._send_refresh)

    def _send_refresh(self) -> None:
        if self.protocol.writer is not None and not self.protocol._shutdown:
            self.workspace_code_lens_refresh(None)

    # --- broken index --------------------------------------------------------------------------

    @staticmethod
    def looks_corrupt(exc: BaseException) -> bool:
        code = getattr(exc, "code", None)
        if code in ("schema-too-new", "index-mismatch", "corrupt-index", "not-indexed"):
            return True
        name = type(exc).__name__
        return name in ("NotADBError", "CorruptError") or "malformed" in str(exc).lower()

    def offer_rebuild_for(self, exc: BaseException) -> None:
        self.indexer.offer_rebuild_for(exc)


# Python's cyclic garbage collector, left alone, runs a full collection now and then in the middle
# of a request: 30-60 ms with the server's caches in memory, a request's worst case many times
# over. After startup the objects alive then (modules, classes, the engine) are frozen out of its
# scans, automatic full collections are off, and a full collection runs once the client has been
# quiet for ``_GC_IDLE_S`` after anything was allocated (at the latest ``_GC_MAX_S`` after the
# last one, quiet or not). The young generations are collected by the collector's own rule, but
# between requests: automatic collection is off while a request is being answered, and the
# collection due runs once its answer is out (``QueryThreads.collector``, ``engram.collect``).
_GC_IDLE_S = 1.0
_GC_MAX_S = 60.0
_GC_POLL_S = 0.25


def _young_collections() -> int:
    return gc.get_stats()[0]["collections"]


async def collect_when_idle(ls: EngramLanguageServer) -> None:
    """Run for the server's lifetime on its event loop (see above)."""
    gc.unfreeze()  # (a first code lens froze the startup's objects: collected once here too)
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1_000_000_000)
    last, ticks = time.monotonic(), _young_collections()
    while True:
        await asyncio.sleep(_GC_POLL_S)
        if not gc.isenabled():  # a request under way for this long (``QueryThreads.collector``):
            collect_due()  # what is due is collected anyway, four times a second at most
        now = time.monotonic()
        if _young_collections() == ticks:
            continue  # nothing to collect
        if now - ls.protocol.last_message_at >= _GC_IDLE_S or now - last >= _GC_MAX_S:
            gc.collect()
            heap.trim()  # more than a few requests' worth of free heap goes back to the kernel
            last, ticks = time.monotonic(), _young_collections()


# The features, in registration order. Each module has ``register(server)``.
FEATURES = (
    "lifecycle",
    "config",
    "warm",
    "hover",
    "code_lens",
    "explain",
    "view",
    "search",
    "status",
    "commands",
    "annotate",
    "workflow",
)


def create_server(converter_factory=None) -> EngramLanguageServer:
    """Build a server with every feature module in ``FEATURES`` registered (``converter_factory``:
    pygls' converter, by default its ``default_converter``)."""
    import importlib

    server = EngramLanguageServer(converter_factory)
    for name in FEATURES:
        module = importlib.import_module(f"engram_lsp.features.{name}")
        module.register(server)
    return server
