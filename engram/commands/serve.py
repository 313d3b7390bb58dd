"""``engram serve`` (the command: ``engram.cli.cmd_serve``): a warm process that answers the
``engram explain`` and ``engram log`` of any shell of this user (``engram.warm`` is the client side, and says when a
client answers in-process instead).

One request at a time, on a unix socket in ``$ENGRAM_HOME/run/`` (0700 directory, 0600 socket,
the peer's user id checked): the server moves to the client's working directory and runs the
CLI's own ``main`` on its command line with stdout and stderr captured, so the answer is the one
the client would have printed itself, byte for byte, exit status included. What stays warm is the
imported code and one engine per repository and index (``engram.commands.kept_engines``); an
engine is opened again when the repository's or the user's config file, or the index file itself
(``ingest --rebuild``), changed. A request from another Engram or another environment is
declined (the client then answers in-process); so is a request once a module of Engram that the
server has loaded changed on disk, and the server then stops.

One server per ``ENGRAM_HOME``: it holds the ``flock`` of ``run/serve.lock`` (0600, its process
id inside) from before it binds the socket until after it removed it. A server the CLI started
(``engram.warm.start``) got the lock from its starter (``--lock-fd``); one started by hand takes
it, and is refused while another holds it.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import socket
import struct
import sys
import time

from engram import warm

log = logging.getLogger(__name__)

MAX_REQUEST = 1 << 20
CHECK_S = 30.0  # how often an idle server looks that its socket is still there


class Server:
    def __init__(self, run, path: str | None = None, lock_fd: int | None = None):
        from engram import commands, paths
        from engram.errors import EngramError

        self.run_cli = run
        self.path = path or warm.socket_path()
        paths.private_dir(os.path.dirname(self.path))
        self.lock_fd = _lock(os.path.join(os.path.dirname(self.path), warm.LOCK_NAME), lock_fd)
        if self.lock_fd is None or _answering(self.path):
            if self.lock_fd is not None:
                os.close(self.lock_fd)
            raise EngramError(f"{self.path}: another engram serve answers there already")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a socket left by a server that died
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.sock.bind(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.ino = os.lstat(self.path).st_ino
        self.sock.listen(64)
        self.identity = warm.identity()
        self.env = warm.relevant_env()
        self.git = warm.which_git()
        self.seen: dict[str, tuple[int, int]] = {}  # source file -> (size, mtime) when loaded
        self.code_changed()
        self.home = os.getcwd()
        self.stale = False
        commands.kept_engines = {}  # engines stay open between requests

    def close(self) -> None:
        from engram import commands

        with contextlib.suppress(OSError):
            if os.lstat(self.path).st_ino == self.ino:  # still ours
                os.unlink(self.path)
        self.sock.close()
        for eng in (commands.kept_engines or {}).values():
            with contextlib.suppress(Exception):
                eng.close()
        commands.kept_engines = None
        if self.lock_fd is not None:  # (after the socket is gone: a CLI may start the next one)
            os.close(self.lock_fd)
            self.lock_fd = None

    def run(self, idle_exit: float | None = None) -> None:
        """Answer until ``idle_exit`` seconds pass without a request, or until the socket is no
        longer ours (removed, or replaced: ``$ENGRAM_HOME`` deleted; nobody can reach this
        process any more; looked at every ``CHECK_S`` seconds)."""
        last = time.monotonic()  # (the end of the last request)
        while not self.stale:
            left = None if idle_exit is None else last + idle_exit - time.monotonic()
            if left is not None and left <= 0:
                return
            self.sock.settimeout(CHECK_S if left is None else max(0.01, min(CHECK_S, left)))
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                if not self.reachable():
                    log.info("serve: its socket is gone; stopping")
                    return
                continue
            with conn:
                try:
                    self.handle(conn)
                except OSError as e:  # the client went away: nothing to answer
                    log.info("serve: client gone (%s)", e.__class__.__name__)
            last = time.monotonic()

    def reachable(self) -> bool:
        try:
            return os.lstat(self.path).st_ino == self.ino
        except OSError:
            return False

    def handle(self, conn: socket.socket) -> None:
        if _peer_uid(conn) != os.getuid():
            return
        conn.settimeout(5.0)
        data = bytearray()
        while len(data) <= MAX_REQUEST:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        t0 = time.perf_counter()
        answer = self.answer(bytes(data))
        conn.sendall(answer)
        if answer.startswith(b"ENGRAM-DECLINE"):
            log.info("serve: declined (%s)", answer.split()[2].decode())
        else:
            log.info("serve: answered in %.1f ms", (time.perf_counter() - t0) * 1000)

    def warm(self) -> None:
        """Load what ``explain`` and ``log`` run (the first request otherwise pays for it)."""
        import engram.commits.attribute  # noqa: F401
        import engram.commits.log  # noqa: F401
        import engram.commits.peers  # noqa: F401
        import engram.engine  # noqa: F401
        from engram.query import blocks, explain  # noqa: F401
        from engram.retrieval import log as _retrieval_log  # noqa: F401

        self.code_changed()
        gc.freeze()  # what is loaded is kept: the garbage collector's full passes skip it

    def code_changed(self) -> bool:
        """Whether a module of Engram this process has loaded changed on disk since (a fresh
        ``engram`` would run other code). Modules not loaded yet load from the disk as they are,
        as in a fresh process; this records them."""
        for f in self._module_files():
            try:
                st = os.stat(f)
            except OSError:
                return True
            if self.seen.setdefault(f, (st.st_size, st.st_mtime_ns)) != (st.st_size, st.st_mtime_ns):
                return True
        return False

    def _module_files(self) -> list[str]:
        """The source files of Engram's loaded modules (memoised while no module is added)."""
        if len(sys.modules) != getattr(self, "_n_modules", -1):
            pkg = warm.package_dir() + os.sep
            files = (getattr(m, "__file__", None) for m in list(sys.modules.values()))
            self._files = [f for f in files if f and f.startswith(pkg)]
            self._n_modules = len(sys.modules)
        return self._files

    def record_new(self) -> None:
        """Record the modules the last command loaded (as ``code_changed``, for those alone)."""
        for f in self._module_files():
            if f not in self.seen:
                with contextlib.suppress(OSError):
                    st = os.stat(f)
                    self.seen[f] = (st.st_size, st.st_mtime_ns)

    def answer(self, data: bytes) -> bytes:
        import ast

        try:  # literals only: nothing in a request is run
            req = ast.literal_eval(data.decode("utf-8", "surrogatepass"))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return warm.format_decline("bad-request")
        if not isinstance(req, dict) or not isinstance(req.get("argv"), list) or not all(
                isinstance(a, str) for a in req["argv"]) or not isinstance(req.get("cwd"), str):
            return warm.format_decline("bad-request")
        if any(req.get(k) != v for k, v in self.identity.items()):
            return warm.format_decline("other-engram")
        if req.get("env") != self.env or req.get("git") != self.git:
            return warm.format_decline("other-environment")
        if not warm.served(req["argv"]):
            return warm.format_decline("not-served")
        if self.code_changed():
            self.stale = True  # this process runs older code: stop after declining
            return warm.format_decline("code-changed")
        try:
            os.chdir(req["cwd"])
        except OSError:
            return warm.format_decline("cwd")
        try:
            return self._run(req["argv"])
        finally:
            os.chdir(self.home)
            self.record_new()  # (what the command loaded)

    def _run(self, argv: list[str]) -> bytes:
        out, err = io.StringIO(), io.StringIO()
        stdin, sys.stdin = sys.stdin, io.TextIOWrapper(io.BytesIO())  # (nothing served reads it)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _logs_to(err):
                try:
                    code = self.run_cli(argv)
                except SystemExit as e:  # argparse: a usage error, exit status 2
                    code = e.code
            if code is None:
                code = 0
            elif not isinstance(code, int):
                err.write(f"{code}\n")
                code = 1
        except Exception:  # a bug: in-process, the client shows its traceback
            log.exception("serve: the command failed; the client answers it in-process")
            return warm.format_decline("error")
        finally:
            sys.stdin = stdin
        return warm.format_answer(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _logs_to(stream):
    """Warnings logged while a command runs go where the client's own run would put them (its
    stderr, at the CLI's level without ``-v``); the server's own logs stay on its stderr."""
    root = logging.getLogger()
    handlers = [(h, h.stream) for h in root.handlers if isinstance(h, logging.StreamHandler)]
    level = root.level
    root.setLevel(logging.WARNING)
    for h, _ in handlers:
        h.setStream(stream)
    try:
        yield
    finally:
        for h, s in handlers:
            h.setStream(s)
        root.setLevel(level)


def _lock(path: str, fd: int | None) -> int | None:
    """The descriptor of ``path`` (the start lock) with its ``flock`` held by this process, its
    process id written in it; None when another process holds it. ``fd``: a descriptor the
    starter locked and handed over (locking it again is a no-op: the same open file)."""
    import fcntl

    if fd is None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    else:
        os.set_inheritable(fd, False)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    os.fchmod(fd, 0o600)
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"%d\n" % os.getpid(), 0)
    return fd


def _peer_uid(conn: socket.socket) -> int | None:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    return struct.unpack("3i", creds)[1]


def _answering(path: str) -> bool:
    """Whether a live server listens at ``path`` (a connection is accepted)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(1.0)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()
