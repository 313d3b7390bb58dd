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
import logging
import os
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from engram.errors import EngramError
from engram_lsp import __version__
from engram_lsp.backend import Backend
from engram_lsp.indexer import Indexer
from engram_lsp.params import engram_error
from engram_lsp.settings import Settings

log = logging.getLogger(__name__)


class _Invalid:
    """What ``structure_message`` returns for a request it could not structure (ignored)."""

    jsonrpc = "invalid"


_HEADER = b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n"


class EngramProtocol(LanguageServerProtocol):
    """pygls' protocol, except that

    * malformed params get a JSON-RPC error instead of silence: pygls answers a request whose
      params fail to structure with a ``window/showMessage`` and no response, which leaves the
      client waiting forever. Here the request gets an ``InvalidParams`` response
      naming the method;
    * messages are written with orjson, and a result that is plain JSON data (hover, code lens
      and explain answer with dicts) goes out as it is: pygls would first copy it through cattrs
      (``unstructure`` of a 90 KB explain result costs more than the explain's ranking) and then
      encode it with ``json``. Objects of ``lsprotocol`` types still go through the converter.
    """

    last_message_at = 0.0  # monotonic time of the last message from the client

    def handle_message(self, message):
        self.last_message_at = time.monotonic()
        return super().handle_message(message)

    def _send_response(self, msg_id, result=None, error=None):
        if error is not None:
            return super()._send_response(msg_id, result, error)
        self._result_types.pop(msg_id, None)
        self._send_data({"jsonrpc": self.VERSION, "id": msg_id, "result": result})

    def _serialize_default(self, obj):
        if hasattr(obj, "__attrs_attrs__"):
            return self._converter.unstructure(obj)
        raise TypeError(f"not JSON serializable: {type(obj).__name__}")

    def _send_data(self, data: Any):
        if not data or self.writer is None:
            return super()._send_data(data)
        try:
            body = orjson.dumps(
                data, default=self._serialize_default, option=orjson.OPT_NON_STR_KEYS
            )
        except TypeError:  # what orjson does not write (lone surrogates, ...): pygls' own way
            return super()._send_data(data)
        try:
            res = self.writer.write(_HEADER % len(body) + body)  # StdoutWriter: write and flush
            if inspect.isawaitable(res):  # a websocket
                asyncio.ensure_future(res)
        except BrokenPipeError:
            log.error("sending a message failed: the client closed the pipe")
            raise
        except Exception as error:
            log.exception("sending a message failed")
            self._server._report_server_error(error, JsonRpcInternalError)

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except Exception as exc:
            if isinstance(data, dict) and "id" in data and "method" in data:
                cause = exc.__cause__ or exc
                self._send_response(
                    data["id"],
                    error=types.ResponseError(
                        code=types.ErrorCodes.InvalidParams,
                        message=f"invalid params for {data['method']}: {_short(cause)}",
                    ),
                )
                log.warning("invalid params for %s: %s", data["method"], cause)
                return _Invalid()
            raise


_REBUILD_WAIT_S = 30.0


async def _wait(done, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _is_sqlite_error(exc: BaseException) -> bool:
    return type(exc).__module__ == "apsw" or type(exc).__name__ in ("IOError", "BusyError")


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    subs = getattr(exc, "exceptions", None)
    if subs:
        text += ": " + "; ".join(_short(e) for e in subs[:3])
    return text[:300]


class EngramLanguageServer(LanguageServer):
    """pygls server plus Engram session state (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__("engram-lsp", __version__, protocol_cls=EngramProtocol, max_workers=4)
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
        """Serve over stdio. pygls reads stdin on a worker thread, one executor round trip per
        header line and per body, each waiting for the GIL while a query thread computes; when
        stdin is a pipe or a socket (an editor's), the event loop reads it itself."""
        stdin = stdin or sys.stdin.buffer
        try:
            mode = os.fstat(stdin.fileno()).st_mode
        except (AttributeError, OSError, ValueError):
            mode = 0
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return super().start_io(stdin, stdout)
        from pygls.io_ import StdoutWriter, run_async

        self._stop_event = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))

        async def serve() -> None:
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=1 << 20)  # the limit is for header lines
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
            try:
                await run_async(
                    stop_event=self._stop_event,
                    reader=reader,
                    protocol=self.protocol,
                    logger=log,
                    error_handler=self.report_server_error,
                )
            except asyncio.IncompleteReadError:  # the client closed stdin mid-message
                pass

        try:
            asyncio.run(serve())
        except BrokenPipeError:
            log.error("Connection to the client is lost! Shutting down the server.")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            try:
                os.set_blocking(stdin.fileno(), True)
            except (OSError, ValueError):
                pass
            self.shutdown()

    def get_backend(self) -> Backend:
        if self.backend is None:
            self.backend = Backend(self.root, self.settings)
        return self.backend

    async def run(self, fn, *args, quiet=None, **kwargs):
        """Await ``fn(engine, *args)`` on the query thread; engine errors become JSON-RPC errors.

        ``quiet``: what to answer instead of an error when the index is missing or broken (hover
        and code lens answer "nothing" while the user is offered a rebuild). A SQLite error (the
        index file replaced under an open connection, e.g. by a rebuild) is retried once on fresh
        connections.
        """
        backend = self.get_backend()
        for attempt in (1, 2):
            try:
                return await asyncio.wrap_future(backend.query(fn, *args, **kwargs))
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
# last one, quiet or not); the young generations are still collected as usual.
_GC_IDLE_S = 1.0
_GC_MAX_S = 60.0
_GC_POLL_S = 0.25


def _young_collections() -> int:
    return gc.get_stats()[0]["collections"]


async def collect_when_idle(ls: EngramLanguageServer) -> None:
    """Run for the server's lifetime on its event loop (see above)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1_000_000_000)
    last, ticks = time.monotonic(), _young_collections()
    while True:
        await asyncio.sleep(_GC_POLL_S)
        now = time.monotonic()
        if _young_collections() == ticks:
            continue  # nothing to collect
        if now - ls.protocol.last_message_at >= _GC_IDLE_S or now - last >= _GC_MAX_S:
            gc.collect()
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
)


def create_server() -> EngramLanguageServer:
    """Build a server with every feature module in ``FEATURES`` registered."""
    import importlib

    server = EngramLanguageServer()
    for name in FEATURES:
        module = importlib.import_module(f"engram_lsp.features.{name}")
        module.register(server)
    return server
