"""Ask a warm ``engram serve`` for the answer of an ``engram explain`` or ``engram log`` run from a shell.

An agent calls ``engram explain`` in a loop; each call as a fresh process pays for Python, numpy,
SQLite and the engine's imports before its first query. When ``engram serve`` runs for this
``ENGRAM_HOME``, the CLI sends it the command line instead (``ask``) and prints what it answers:
the same bytes and exit status the command would have given in-process, because the server runs
the very same ``engram.cli.run`` on them (in the client's working directory).

This module is what the client imports: the standard library's ``os``, ``sys`` and ``_socket``
(``socket`` and ``json`` cost more than the rest of the client under load). Any doubt gives
``None`` and the CLI answers in-process, silently: no server, a socket left by a server that
died, one owned by another user or reachable by others, a server that is busy past
``ENGRAM_SERVE_WAIT`` seconds (default 2), another Engram (version, install, Python), another
environment (``ENGRAM_*``, ``GIT_*``, ``HOME``, ``XDG_*``, ``*_HOME``, ``TZ``, the ``git`` found on
``PATH``), a command it does not serve
(``--stdin``, ``-v``, ``--help``), or an answer cut short. ``ENGRAM_NO_SERVE=1`` never asks.
A server that is starting (its start lock held, its socket not bound yet) is waited for, as long.

When no server listens for this ``ENGRAM_HOME`` (no socket, or one nobody listens on), the CLI
answers in-process and then starts one itself (``start``), as ``dmypy`` or ``eslint_d`` do, so the
next call of an agent's loop is served: ``engram serve --idle-exit N`` in its own session
(``setsid``), stdin and stdout on ``/dev/null``, stderr on ``$ENGRAM_HOME/run/serve.log`` (0600,
ids and timings only). ``$ENGRAM_HOME/run/serve.lock`` (0600) makes it one: the starter takes
its ``flock`` and hands the locked descriptor to the server, which holds it as long as it lives;
a CLI that cannot take the lock starts nothing. ``ENGRAM_NO_SERVE=1`` or the config key
``serve.auto: false`` start none; ``serve.idleExit`` (seconds, default 600) is how long it waits
for the next request before it exits.

The wire: the client sends one dict (``request``) as a Python literal (``repr``; the server reads
it with ``ast.literal_eval``, which evaluates literals only) and shuts its side; the server answers
``ENGRAM-ANSWER <protocol> <exit status> <stdout bytes> <stderr bytes>\\n`` then the two texts
(UTF-8), or ``ENGRAM-DECLINE <protocol> <reason>\\n``, and closes. The socket is
``$ENGRAM_HOME/run/serve.sock``: its directory 0700, the socket 0600, both the user's; the server
also checks the peer's user id (``SO_PEERCRED``).
"""

from __future__ import annotations

import _socket
import os
import sys

PROTOCOL = 1
SOCKET_NAME = "serve.sock"
ENV_WAIT = "ENGRAM_SERVE_WAIT"
ENV_OFF = "ENGRAM_NO_SERVE"  # set (to anything): never ask a server, never start one
LOCK_NAME = "serve.lock"
LOG_NAME = "serve.log"
#: the option a started server gets: the descriptor of the lock its starter took for it
LOCK_FD_OPTION = "--lock-fd"
#: the commands a server answers (the rest always run in-process)
SERVED = ("explain", "log")
#: options after which the command runs in-process: it reads stdin, logs, or prints help
_LOCAL_OPTIONS = ("--stdin", "-v", "--verbose", "-h", "--help")
_MAX_ANSWER = 1 << 30


def user_dir() -> str:
    """``$ENGRAM_HOME``, else ``~/.engram`` (as ``engram.paths.user_dir``, without importing it)."""
    home = os.environ.get("ENGRAM_HOME")
    return os.path.abspath(os.path.expanduser(home)) if home else os.path.expanduser("~/.engram")


def run_dir() -> str:
    return os.path.join(user_dir(), "run")


def socket_path() -> str:
    return os.path.join(run_dir(), SOCKET_NAME)


def lock_path() -> str:
    return os.path.join(run_dir(), LOCK_NAME)


#: set by ``ask``: no server listens for this ``ENGRAM_HOME`` (no socket, or a socket nobody
#: listens on), so the CLI may start one (``start``) once it has answered in-process
absent = False


def package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def relevant_env(environ=None) -> dict[str, str]:
    """The environment an answer can depend on: where Engram, the harnesses and the user's files
    live, the time zone, and git's own variables (``GIT_DIR``, ``GIT_WORK_TREE``, ... change
    which repository and commits ``engram log`` sees). A server answers only a client whose
    values are its own."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items())
            if (k.startswith(("ENGRAM_", "XDG_", "GIT_")) or k.endswith("_HOME") or
                k in ("HOME", "TZ", "OPENCLAW_STATE_DIR", "PYTHONHASHSEED"))
            and k not in (ENV_WAIT, ENV_OFF)}  # (the client's own: no answer depends on them)


def which_git(environ=None) -> str | None:
    """The ``git`` this environment's ``PATH`` runs (as ``shutil.which``, with ``os`` alone):
    ``engram log`` runs it, so a server answers only a client that would run the same one."""
    environ = os.environ if environ is None else environ
    for d in environ.get("PATH", os.defpath).split(os.pathsep):
        p = os.path.join(d or os.curdir, "git")
        if os.access(p, os.F_OK | os.X_OK) and not os.path.isdir(p):
            return os.path.abspath(p)
    return None


def identity() -> dict:
    """What must be equal on both ends for the server's answer to be this process's answer."""
    from engram import __version__

    return {"protocol": PROTOCOL, "version": __version__, "package": package_dir(),
            "python": sys.version, "prefix": sys.prefix}


def served(argv: list[str]) -> bool:
    """Whether a server may answer ``engram <argv>``: none of ``_LOCAL_OPTIONS`` is given, in
    any spelling ``argparse`` accepts (``--std`` is ``--stdin``; ``-vh`` is ``-v -h``)."""
    if not argv or argv[0] not in SERVED:
        return False
    for a in argv[1:]:
        if a == "--":
            break
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if any(o.startswith(name) for o in _LOCAL_OPTIONS if o.startswith("--")):
                return False
        elif a.startswith("-") and len(a) > 1 and not a[1].isdigit():
            if "v" in a[1:] or "h" in a[1:]:
                return False
    return True


def request(argv: list[str]) -> dict:
    return {**identity(), "argv": list(argv), "cwd": os.getcwd(), "env": relevant_env(),
            "git": which_git()}


def _safe_socket(path: str) -> bool:
    """The socket and its directory are this user's and no one else's."""
    uid = os.getuid()
    try:
        d = os.stat(os.path.dirname(path))
        s = os.lstat(path)
    except OSError:
        return False
    import stat

    return (d.st_uid == uid and stat.S_ISDIR(d.st_mode) and not d.st_mode & 0o077
            and s.st_uid == uid and stat.S_ISSOCK(s.st_mode))


def _started(path: str) -> bool:
    """Whether the server a CLI just started (it holds the start lock; its socket is not bound
    yet) bound ``path`` within ``ENGRAM_SERVE_WAIT`` seconds: the call after the one that
    started it is then served instead of answering in-process beside the server's warm-up."""
    try:
        fd = os.open(os.path.join(os.path.dirname(path), LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # none was ever started here
        return False
    import fcntl
    import time

    try:
        deadline = time.monotonic() + _wait_s()
        while time.monotonic() < deadline:
            if _safe_socket(path):
                return True
            try:  # (shared and at once let go: a starter's exclusive try fails only meanwhile)
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return False  # free: no server lives or starts
            except OSError:
                time.sleep(0.01)
        return False
    finally:
        os.close(fd)


def _wait_s() -> float:
    try:
        return max(0.05, float(os.environ.get(ENV_WAIT, "2")))
    except ValueError:
        return 2.0


def ask(argv: list[str]) -> int | None:
    """Print a warm server's answer to ``engram <argv>`` and return its exit status, or ``None``
    (nothing printed) when it cannot answer it (``absent`` then says whether none listens)."""
    global absent
    absent = False
    if not served(argv) or os.environ.get(ENV_OFF):
        return None
    try:
        path = socket_path()
        if not _safe_socket(path) and (os.path.lexists(path) or not _started(path)):
            absent = not os.path.lexists(path)
            return None
        req = request(argv)
    except (OSError, ValueError, RuntimeError):  # no working directory, no home, ...: in-process
        return None
    answer = _exchange(path, req)
    if answer is None:
        return None
    code, out, err = answer
    try:
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
    except BrokenPipeError:  # as the in-process CLI: a closed pipe is not an error
        return 0
    return code


def encode_request(req: dict) -> bytes:
    return repr(req).encode("utf-8", "surrogatepass")


def _exchange(path: str, req: dict) -> tuple[int, str, str] | None:
    global absent
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(_wait_s())
        try:
            s.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):  # a server that died left it
            absent = True
            raise
        s.sendall(encode_request(req))
        s.shutdown(_socket.SHUT_WR)
        data = bytearray()
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
            if len(data) > _MAX_ANSWER:
                return None
    except (OSError, ValueError):  # refused (a stale socket), timed out (busy), reset, ...
        return None
    finally:
        s.close()
    return parse_answer(bytes(data))


def parse_answer(data: bytes) -> tuple[int, str, str] | None:
    """``(exit status, stdout, stderr)`` of a whole answer; ``None`` for a decline or anything
    malformed or cut short."""
    head, sep, body = data.partition(b"\n")
    parts = head.split()
    if not sep or len(parts) != 5 or parts[0] != b"ENGRAM-ANSWER" or parts[1] != b"%d" % PROTOCOL:
        return None
    try:
        code, n_out, n_err = (int(p) for p in parts[2:])
    except ValueError:
        return None
    if n_out < 0 or n_err < 0 or len(body) != n_out + n_err:
        return None
    try:
        return (code, body[:n_out].decode("utf-8", "surrogatepass"),
                body[n_out:].decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        return None


def format_answer(code: int, out: str, err: str) -> bytes:
    o, e = out.encode("utf-8", "surrogatepass"), err.encode("utf-8", "surrogatepass")
    return b"ENGRAM-ANSWER %d %d %d %d\n" % (PROTOCOL, code, len(o), len(e)) + o + e


def format_decline(reason: str) -> bytes:
    return b"ENGRAM-DECLINE %d %s\n" % (PROTOCOL, reason.encode("ascii", "replace"))


#: what a started server runs: ``python -P -c START <dir holding the engram package> serve ...``
#: (``-P`` and the explicit directory: the package the client runs, never a module that happens
#: to lie in the client's working directory)
START = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from engram.cli import main; "
         "sys.exit(main(sys.argv[1:]))")


SHELL = "/bin/sh"


def start(idle_exit: float) -> int | None:
    """Start ``engram serve --idle-exit <idle_exit>`` for this ``ENGRAM_HOME``, detached (its own
    session; stdin and stdout ``/dev/null``, stderr the private ``run/serve.log``), unless a
    server lives or is starting (it holds ``run/serve.lock``). Returns the process id of the
    shell that started it (gone by then; the server writes its own in the lock), or None when
    none was started. Never raises for the environment (a read-only home, no ``fcntl``):
    the answer was given in-process already; starting is a bonus."""
    import fcntl

    from engram import paths

    home = os.environ.get("ENGRAM_HOME")
    if home and not os.path.isabs(os.path.expanduser(home)):
        return None  # relative to this working directory: a server elsewhere would see another
    try:
        d = paths.private_dir(run_dir())
        st = os.stat(d)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a server holds it (or its starter does): never two
            return None
        log = os.open(os.path.join(d, LOG_NAME),
                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            os.fchmod(log, 0o600)
            os.set_inheritable(fd, True)  # the server keeps the lock: the same open file
            argv = [sys.executable, "-P", "-c", START, os.path.dirname(package_dir()), "serve",
                    "-v", "--idle-exit", repr(float(idle_exit)), LOCK_FD_OPTION, str(fd)]
            # through a shell that starts it in the background and exits at once: the server is
            # never this process's child (a long-lived caller of ``main`` would keep it a zombie
            # once it exits); init, or the nearest subreaper, reaps it
            pid = os.posix_spawn(SHELL, [SHELL, "-c", '"$@" &', "sh", *argv], os.environ,
                                 setsid=True, file_actions=[
                                     (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1),
                                     (os.POSIX_SPAWN_DUP2, log, 2)])
            os.waitpid(pid, 0)
            return pid
        finally:
            os.close(log)
            os.close(null)
    except OSError:
        return None
    finally:
        os.close(fd)
