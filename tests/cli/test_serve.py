"""``engram serve`` answers ``engram explain`` from a warm process (``engram.warm``): real
processes on a real unix socket, over an index of the real Claude Code fixtures. The answer must
be the in-process one byte for byte (stdout, stderr, exit status; only ``stats.elapsed_ms``, a
timing, differs), and every doubt (stale socket, busy or stopped server, another environment,
unsafe permissions, changed code) must give the in-process answer, never a wrong one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli import repo  # noqa: F401  (the fixture: a repository over the real fixtures)

from engram import warm
from engram.cli import main

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="unix sockets")

def _interruptible() -> None:
    """The child takes ^C (SIGINT) as a terminal's user would send it, even when this test run
    was started in the background by a shell, whose children inherit SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)



def servers() -> list[int]:
    """The process ids of every ``engram serve`` of this test's ``ENGRAM_HOME`` (started by hand
    or by a CLI), from ``/proc``: their command line and environment."""
    want = b"ENGRAM_HOME=" + os.fsencode(os.environ["ENGRAM_HOME"])
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:  # gone, or not ours
            continue
        if b"serve" in argv and any(b"engram" in a for a in argv) and want in env:
            out.append(int(d))
    return sorted(out)


def stop_servers() -> list[int]:
    """Stop (SIGTERM, then SIGKILL) every server of this ``ENGRAM_HOME``; returns their ids."""
    found = servers()
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while servers() and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in servers():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found


@pytest.fixture(autouse=True)
def no_server_left():
    """No test here leaves a server running, nor starts one it did not mean to (the ``engram``
    helper runs the CLI with ``ENGRAM_NO_SERVE`` unset: a first call would start one)."""
    yield
    assert stop_servers() == []


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != warm.ENV_OFF}
    env.update(extra)
    return env


def engram(*argv, **env) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "engram.cli", *argv], capture_output=True,
                       text=True, env=_env(**env), timeout=120)
    return p.returncode, p.stdout, p.stderr


def local(*argv, **env) -> tuple[int, str, str]:
    return engram(*argv, **{warm.ENV_OFF: "1", **env})


def untimed(text: str) -> str:
    """The answer without its one timing (``stats.elapsed_ms``): nothing else may differ."""
    obj = json.loads(text)
    obj["stats"].pop("elapsed_ms", None)
    return json.dumps(obj, sort_keys=True)


class Serve:
    """``engram serve -v`` as a process; ``answered()`` counts the requests it answered."""

    def __init__(self, tmp: Path, **env):
        self.log = tmp / "serve.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "engram.cli", "serve", "-v"],
                                     stdout=subprocess.DEVNULL, stderr=self.log.open("w"),
                                     env=_env(**env), preexec_fn=_interruptible)
        deadline = time.monotonic() + 60
        while "engram serve: answering" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "engram serve did not start"
            time.sleep(0.05)

    def answered(self, expect: int | None = None) -> int:
        """How many requests it answered (it logs one just after its answer is sent: given
        ``expect``, wait a little for that count)."""
        deadline = time.monotonic() + 10
        while True:
            n = self.log.read_text().count("serve: answered")
            if expect is None or n >= expect or time.monotonic() > deadline:
                return n
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def indexed(repo, capsys):  # noqa: F811
    assert main(["ingest"]) == 0
    capsys.readouterr()
    return repo


@pytest.fixture
def server(indexed, tmp_path):
    s = Serve(tmp_path)
    yield s
    s.stop()


def test_the_server_answers_byte_for_byte(server, indexed):
    mode = os.stat(os.path.dirname(warm.socket_path())).st_mode & 0o777
    assert mode == 0o700 and os.stat(warm.socket_path()).st_mode & 0o777 == 0o600
    for argv in (["explain", "hello.py:4-5"], ["explain", "hello.py:1-8", "--brief"],
                 ["explain", "hello.py:3-8", "--before", "1", "--after", "0", "--all"]):
        code, out, err = engram(*argv)
        code_l, out_l, err_l = local(*argv)
        assert (code, err) == (code_l, err_l) == (0, "")
        assert json.loads(out)["sessions"], out
        assert untimed(out) == untimed(out_l)
    n = server.answered(3)
    assert n == 3, server.log.read_text()
    # --pretty, a bad span, a usage error: the same text, the same exit status
    for argv in (["explain", "hello.py:4-5", "--pretty", "--brief"], ["explain", "nope.py:1-2"],
                 ["explain", "hello.py:4-5", "--before", "x"], ["explain"]):
        got, want = engram(*argv), local(*argv)
        assert got == want, argv
    assert server.answered(n + 4) == n + 4
    assert engram("explain", "nope.py:1-2")[0] == 1  # (an error, answered by the server too)


def test_a_killed_server_removes_its_socket(server):
    server.proc.terminate()
    assert server.proc.wait(timeout=30) == 0
    assert not os.path.exists(warm.socket_path())


def test_idle_exit_and_a_deleted_working_directory(indexed, tmp_path):
    s = Serve(tmp_path)
    gone = tmp_path / "gone"
    gone.mkdir()
    p = subprocess.run([sys.executable, "-c", "import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
                        "from engram.cli import main; sys.exit(main(['explain', 'hello.py:4-5']))", str(gone)],
                       capture_output=True, text=True, env=_env())
    assert "Traceback" not in p.stderr and s.answered() == 0
    s.stop()
    p = subprocess.run([sys.executable, "-m", "engram.cli", "serve", "--idle-exit", "0.5"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 0 and not os.path.exists(warm.socket_path())


def test_a_second_server_is_refused(server):
    code, _out, err = engram("serve")
    assert code == 1 and "another engram serve answers there already" in err


def test_what_it_does_not_serve_runs_in_process(server, indexed):
    p = subprocess.run([sys.executable, "-m", "engram.cli", "explain", "--stdin"],
                       input=(indexed / "hello.py").read_text(), capture_output=True, text=True,
                       env=_env())
    assert p.returncode == 0 and json.loads(p.stdout)["sessions"]
    assert engram("tapes")[0] == 0
    assert server.answered() == 0


def test_what_is_served():
    yes = (["explain", "a.py:1-2"], ["explain", "a.py:1-2", "--pretty", "--before", "3"],
           ["explain", "--root", "r", "a.py"], ["explain", "--", "-v"])
    no = (["tapes"], [], ["explain", "--stdin"], ["explain", "--std"], ["explain", "--stdi=x"],
          ["explain", "a.py", "-v"], ["explain", "a.py", "--verb"], ["explain", "-h"],
          ["explain", "--he"], ["explain", "a.py", "-vh"], ["explain", "-hv"])
    assert all(warm.served(a) for a in yes)
    assert not any(warm.served(a) for a in no)


def test_another_environment_is_answered_in_process(server, indexed):
    code, out, _ = engram("explain", "hello.py:4-5", ENGRAM_MAX_FILE_BYTES="4")
    assert code == 1 and out == ""  # the client's limit applies: a 4-byte file limit refuses it
    assert server.answered() == 0
    assert "serve: declined (other-environment)" in server.log.read_text()


def test_a_stopped_server_is_not_waited_for(server, indexed):
    server.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        code, out, _ = engram("explain", "hello.py:4-5", ENGRAM_SERVE_WAIT="0.3")
        assert code == 0 and json.loads(out)["sessions"]
        assert time.monotonic() - t0 < 60
    finally:
        server.proc.send_signal(signal.SIGCONT)
    assert untimed(out) == untimed(local("explain", "hello.py:4-5")[1])


def test_a_stale_socket_is_ignored_and_replaced(indexed, tmp_path):
    # (the user's config: the CLI starts no server of its own, tests/cli/test_serve_auto.py)
    (Path(os.environ["ENGRAM_HOME"]) / "config.yml").write_text("serve:\n  auto: false\n")
    path = warm.socket_path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)  # a socket file nobody listens on: a server that died
    dead.close()
    code, out, _ = engram("explain", "hello.py:4-5")
    assert code == 0 and json.loads(out)["sessions"]
    s = Serve(tmp_path)  # starts over it
    try:
        assert engram("explain", "hello.py:4-5")[0] == 0
        assert s.answered(1) == 1
    finally:
        s.stop()
    assert not os.path.exists(path)  # removed on exit


def test_an_unsafe_socket_is_not_used(server, indexed):
    d = os.path.dirname(warm.socket_path())
    os.chmod(d, 0o755)
    try:
        assert engram("explain", "hello.py:4-5")[0] == 0
        assert server.answered() == 0
    finally:
        os.chmod(d, 0o700)
    assert engram("explain", "hello.py:4-5")[0] == 0
    assert server.answered(1) == 1


def test_declines(indexed, tmp_path):
    """The server's checks, on the wire: garbage, another Engram, changed source files."""
    from engram.cli import run
    from engram.commands.serve import Server

    server = Server(run, path=str(tmp_path / "s.sock"))
    try:
        req = warm.request(["explain", "hello.py:4-5"])
        assert warm.parse_answer(server.answer(b"not a literal")) is None
        assert server.answer(b"__import__('os').getcwd()").startswith(b"ENGRAM-DECLINE 1 bad-request")
        assert server.answer(b"[" * 100_000).startswith(b"ENGRAM-DECLINE 1 bad-request")
        assert server.answer(b"[]").startswith(b"ENGRAM-DECLINE 1 bad-request")
        assert server.answer(warm.encode_request({**req, "version": "0"})).startswith(
            b"ENGRAM-DECLINE 1 other-engram")
        assert server.answer(warm.encode_request({**req, "argv": ["tapes"]})).startswith(
            b"ENGRAM-DECLINE 1 not-served")
        code, out, err = warm.parse_answer(server.answer(warm.encode_request(req)))
        assert (code, err) == (0, "") and json.loads(out)["sessions"]
        import engram.query.explain as loaded

        server.seen[loaded.__file__] = (0, 0)  # as if the file had changed since it was loaded
        assert server.answer(warm.encode_request(req)).startswith(b"ENGRAM-DECLINE 1 code-changed")
        assert server.stale
    finally:
        server.close()
    assert not (tmp_path / "s.sock").exists()


def test_a_changed_config_opens_a_new_engine(indexed, tmp_path):
    from engram import commands
    from engram.cli import run
    from engram.commands.serve import Server

    server = Server(run, path=str(tmp_path / "s.sock"))
    try:
        req = warm.encode_request(warm.request(["explain", "hello.py:4-5"]))
        first = warm.parse_answer(server.answer(req))
        (engine,) = [e for e, *_ in commands.kept_engines.values()]
        assert warm.parse_answer(server.answer(req))[0] == 0
        assert [e for e, *_ in commands.kept_engines.values()] == [engine]  # kept
        cfg = indexed / ".engram" / "config.yml"
        cfg.write_text(cfg.read_text() + "min_confidence: 0.99\n")
        again = warm.parse_answer(server.answer(req))
        (engine2,) = [e for e, *_ in commands.kept_engines.values()]
        assert engine2 is not engine
        assert untimed(again[1]) == untimed(local("explain", "hello.py:4-5")[1])
        assert first[0] == again[0] == 0
    finally:
        server.close()


def _git(root, *args, **env):
    e = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
         "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com", **env}
    return subprocess.run(["git", *args], cwd=root, env=e, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def history(indexed):
    """The indexed repository as a real git repository: the sessions' file, then a hand-written
    one; and a second repository beside it (another working directory, other commits)."""
    import shutil

    shutil.rmtree(indexed / ".git")
    _git(indexed, "init", "-q", "-b", "main")
    _git(indexed, "add", "hello.py")
    _git(indexed, "commit", "-q", "-m", "hello")
    (indexed / "notes.py").write_text("def by_hand(x):\n    return x * 3 + 1\n")
    _git(indexed, "add", "notes.py")
    _git(indexed, "commit", "-q", "-m", "by hand")
    other = indexed.parent / "other"
    other.mkdir()
    _git(other, "init", "-q", "-b", "trunk")
    (other / "a.py").write_text("print('other')\n")
    _git(other, "add", "a.py")
    _git(other, "commit", "-q", "-m", "other repository")
    return indexed, other


def test_log_is_served_byte_for_byte(history, tmp_path):
    """``engram log`` through the server: the bytes and exit status of the in-process command
    (cache-only path and full path alike), in the client's own working directory and git
    environment; another git environment is answered in-process."""
    repo_, other = history
    first = local("log")  # computes and caches
    assert first[0] == 0 and first[2] == ""
    subjects = [c["subject"] for c in json.loads(first[1])["commits"]]
    assert subjects == ["by hand", "hello"]
    assert json.loads(first[1])["commits"][1]["sessions"]  # the sessions that wrote hello.py
    s = Serve(tmp_path)
    try:
        n = 0
        for argv in (["log"], ["log", "-n", "1"], ["log", "HEAD~1"], ["log", "--pretty"],
                     ["log", "--agent", "claude"], ["log", "nope"], ["log", "-n", "x"]):
            got = engram(*argv)
            assert got == local(*argv) == local(*argv, ENGRAM_NO_QUICK="1"), argv
            n += 1
            assert s.answered(n) == n, (argv, s.log.read_text())
        assert json.loads(engram("log")[1]) == json.loads(first[1])
        assert engram("log", "nope")[0] == 1
        # the client's working directory is the repository the server reads
        os.chdir(other)
        got = engram("log")
        assert got == local("log") and json.loads(got[1])["commits"][0]["subject"] == "other repository"
        assert s.answered(n + 3) == n + 3
        # another git environment: declined, answered in-process (here: another repository)
        got = engram("log", GIT_DIR=str(repo_ / ".git"))
        assert got == local("log", GIT_DIR=str(repo_ / ".git"))
        assert [c["subject"] for c in json.loads(got[1])["commits"]] == subjects
        assert s.answered() == n + 3
        assert "serve: declined (other-environment)" in s.log.read_text()
    finally:
        s.stop()


def test_which_git_is_part_of_the_request(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "git").write_text("#!/bin/sh\nexit 1\n")
    (fake / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    assert warm.which_git(env) == str(fake / "git")
    import shutil

    assert warm.which_git() == shutil.which("git")
    assert warm.which_git({"PATH": str(tmp_path / "none")}) is None
    assert warm.relevant_env({"GIT_DIR": "x", "PATH": "y", "HOME": "h"}) == {"GIT_DIR": "x", "HOME": "h"}
