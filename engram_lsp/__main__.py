"""``engram-lsp``: start the Engram language server (stdio by default).

stdout is the protocol channel: nothing else is ever written there. Log records go to the client
(``window/logMessage``), to stderr at WARNING and above, and to ``--log-file`` when given. When the
client disconnects (stdin closes) or sends ``exit``, running work is stopped and the process ends.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from engram_lsp import __version__


class ClientLogHandler(logging.Handler):
    """Forward log records to the client as ``window/logMessage``."""

    def __init__(self, server, level=logging.INFO):
        super().__init__(level)
        self.server = server

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.server.log_to_client(record.levelno, self.format(record))
        except Exception:  # logging must never break the server
            pass


def _configure_logging(server, level: str, log_file: str | None) -> None:
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    err.setFormatter(fmt)
    root.addHandler(err)
    client = ClientLogHandler(server, getattr(logging, level.upper(), logging.INFO))
    client.setFormatter(logging.Formatter("%(message)s"))
    client.addFilter(
        lambda r: r.name.startswith(("engram", "__main__")) or r.levelno >= logging.WARNING
    )
    root.addHandler(client)
    if log_file:
        # the log holds file names and messages: owner-only, whatever the umask (created 0600
        # here; an existing file loses group and other bits)
        os.close(os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        os.chmod(log_file, os.stat(log_file).st_mode & 0o700)
        fh = logging.FileHandler(log_file, encoding="utf-8")
        fh.setLevel(logging.DEBUG)
        fh.setFormatter(fmt)
        root.addHandler(fh)
    # pygls logs every message body at INFO: keep that out of the client's log
    logging.getLogger("pygls").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="engram-lsp", description="The Engram language server (stdio by default)."
    )
    parser.add_argument("--stdio", action="store_true", help="speak LSP on stdin/stdout (default)")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead")
    parser.add_argument("--log-file", help="also write a debug log to this file")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="what reaches the client's log (default: info)",
    )
    parser.add_argument("--version", action="version", version=f"engram-lsp {__version__}")
    args = parser.parse_args(argv)

    from engram_lsp import heap

    heap.keep_heap()  # before any thread starts (see engram_lsp.heap)

    from engram_lsp import early

    early.start()  # pygls' converter and the first lens's modules, while the rest imports

    from engram_lsp.features import lifecycle
    from engram_lsp.server import create_server

    # a thread that wants the GIL (the event loop reading the next request) waits this long at
    # most for one that holds it (an ingest, a query computing); the default is 5 ms
    sys.setswitchinterval(0.001)

    server = create_server(converter_factory=early.converter)
    _configure_logging(server, args.log_level, args.log_file)
    try:
        if args.tcp:
            host, _, port = args.tcp.rpartition(":")
            server.start_tcp(host or "127.0.0.1", int(port))
        else:
            server.start_io()
    finally:
        lifecycle.stop(server)
        logging.shutdown()
    if server.backend is not None and server.backend.ingesting:
        os._exit(0)  # an ingest would not stop in time: the index survives a kill (WAL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
