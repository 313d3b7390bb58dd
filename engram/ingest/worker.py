"""Parsing harness logs in a worker process, for big ingests (``engram/ingest/ingestor.py``).

Adapters are pure Python; in a thread beside the indexing they hold the GIL, and every call of the
indexing thread that releases it (SQLite, the file system, numpy) then waits to get it back. A
second process parses instead, on the other core. Adapters are pure and deterministic, so what
comes back is what parsing in-process gives.

The worker runs ``engram.ingest.worker.main``, talking length-prefixed pickles over its stdin
and stdout (not ``multiprocessing``, which would import the caller's ``__main__`` again in the
child). It imports only the adapters, so it starts fast. Requests are answered in order; a
reader thread in the parent collects the answers so the worker never blocks on a full pipe.
"""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import threading
import traceback
from concurrent.futures import Future
from pathlib import Path

from engram.errors import WorkerGone

_HEADER = 8


def parse(harness: str, path: str, mode: str) -> tuple:
    """``("ok", ParseOutput)``, ``("error", EngramError.to_dict())`` or ``("crash", message,
    traceback)`` — exceptions are returned as data, since not every one survives pickling. A log
    that cannot be read is an ``error`` (``E_UNREADABLE``, as the ingest reports it in-process)."""
    from engram import adapters
    from engram.errors import EngramError

    try:
        return ("ok", adapters.get(harness).parse_source(Path(path), mode=mode))
    except EngramError as e:
        return ("error", e.to_dict())
    except OSError as e:
        return ("error", {"error": {"code": "E_UNREADABLE", "path": path, "line": None,
                                    "message": f"cannot read: {e.strerror or e}"}})
    except Exception as e:  # noqa: BLE001 — an adapter bug: reported for this source
        return ("crash", f"{type(e).__name__}: {e}", traceback.format_exc())


def parse_many(items: list[tuple[str, str]], mode: str) -> list[tuple]:
    """``parse`` for each ``(harness, path)``; an ``ok`` result also carries the block work of
    the indexing for its sessions (``store.prepare``, one batch for the group; None if that
    failed — the indexing then does it itself)."""
    res = [parse(h, p, mode) for h, p in items]
    oks = [r[1] for r in res if r[0] == "ok"]
    preps = _prepare([s.events for out in oks for s in out.sessions])
    out, i = [], 0
    for r in res:
        if r[0] != "ok":
            out.append(r)
            continue
        n = len(r[1].sessions)
        out.append(("ok", r[1], preps[i:i + n] if preps is not None else None))
        i += n
    return out


def _prepare(sessions: list[list[dict]]) -> list | None:
    from engram.index import store
    from engram.lineage.cache import wanted

    try:
        return store.prepare(sessions, wanted)
    except Exception:  # noqa: BLE001 — only an optimisation: the indexing does it then
        return None


PIPE_BYTES = 1 << 20


def _widen_pipe(pipe) -> None:
    """Let a pipe to or from the worker hold ``PIPE_BYTES`` (Linux; 64 KiB by default). The
    reader thread needs the GIL after every read, and gets it only at switch intervals while the
    indexing runs Python code: with a small pipe, a worker writing megabytes of results mostly
    waits. Requests are small, but many at once would block the indexing until the worker
    reads them."""
    try:
        import fcntl
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or above the system's limit
        pass


class ParseProcess:
    """One worker process; ``submit()`` returns a ``Future`` of ``parse()``'s tuple."""

    def __init__(self) -> None:
        # the worker imports this engram: its root goes first on the path (``python -m`` would
        # put the working directory first, and with it any other engram checkout there)
        root = str(Path(__file__).resolve().parents[2])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ("import sys; sys.path.insert(0, sys.argv[1]); "
                                    "from engram.ingest.worker import main; main()"), root],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _widen_pipe(self.proc.stdin)
        _widen_pipe(self.proc.stdout)
        self.pending: collections.deque[Future] = collections.deque()
        self._lock = threading.Lock()        # pending, _gone
        self._write_lock = threading.Lock()  # one request written at a time, in pending's order
        self._gone = False
        self.reader = threading.Thread(target=self._read, name="engram-parse-reader", daemon=True)
        self.reader.start()

    def submit(self, items: list[tuple[str, str]], mode: str) -> Future:
        """``parse_many(items, mode)`` in the worker; ``result()`` gives its list."""
        return self._send(("parse", items, mode))

    def submit_continuations(self, db_path: str, tape_rows: list[int], kept=None) -> Future:
        """``continuations.compute_remote(db_path, tape_rows, kept)`` in the worker."""
        return self._send(("continuations", db_path, tape_rows, kept))

    def _send(self, request: tuple) -> Future:
        fut: Future = Future()
        data = pickle.dumps(request)
        with self._write_lock:
            with self._lock:
                if self._gone:
                    fut.set_exception(WorkerGone("parse worker exited"))
                    return fut
                self.pending.append(fut)
            # written without ``_lock``: a full pipe waits for the worker, which may first have to
            # write an answer, which the reader thread takes only once it has that lock
            try:
                self.proc.stdin.write(len(data).to_bytes(_HEADER, "little") + data)
                self.proc.stdin.flush()
            except OSError:
                with self._lock:
                    self._fail()
        return fut

    def _read(self) -> None:
        out = self.proc.stdout
        try:
            while True:
                head = out.read(_HEADER)
                if len(head) < _HEADER:
                    break
                n = int.from_bytes(head, "little")
                data = out.read(n)
                if len(data) < n:
                    break
                with self._lock:
                    fut = self.pending.popleft()
                fut.set_result([data])  # a list: ``result`` takes the bytes out once unpickled
        except (OSError, ValueError):
            pass
        with self._lock:
            self._fail()

    def _fail(self) -> None:
        """(lock held) every unanswered request fails."""
        self._gone = True
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():
                fut.set_exception(WorkerGone("parse worker exited"))

    @staticmethod
    def answered(items: list[tuple[str, str]], mode: str) -> Future:
        """``parse_many(items, mode)`` run here, as a request already answered (``result``
        gives it like the worker's)."""
        fut: Future = Future()
        fut.engram_value = parse_many(items, mode)
        fut.set_result(None)
        return fut

    @staticmethod
    def result(fut: Future) -> list:
        """The answer to a request (unpickled once, however often asked; the pickled bytes are
        dropped then: a big session is not held twice)."""
        val = getattr(fut, "engram_value", None)
        if val is None:
            box = fut.result()
            val = fut.engram_value = pickle.loads(box[0])
            box.clear()
        return val

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=10)


def main() -> None:
    """The worker: answer requests from stdin on a private copy of stdout (anything printed
    goes to stderr) until stdin closes."""
    reply = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    while True:
        head = requests.read(_HEADER)
        if len(head) < _HEADER:
            return
        request = pickle.loads(requests.read(int.from_bytes(head, "little")))
        if request[0] == "continuations":
            try:
                from engram.lineage import continuations
                res = continuations.compute_remote(request[1], request[2], request[3])
            except Exception as e:  # noqa: BLE001 — the ingest computes them itself then
                res = ("crash", f"{type(e).__name__}: {e}", traceback.format_exc())
            data = pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL)
        else:
            _kind, items, mode = request
            res = parse_many(items, mode)
            try:
                data = pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as e:  # noqa: BLE001 — an unpicklable result: reported as crashes
                crash = ("crash", f"{type(e).__name__}: {e}", traceback.format_exc())
                data = pickle.dumps([crash] * len(items))
        reply.write(len(data).to_bytes(_HEADER, "little") + data)
        reply.flush()


if __name__ == "__main__":
    main()
