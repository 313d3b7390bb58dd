"""The CLI starts its own warm ``engram serve`` (``engram.warm.start``): the first ``engram
explain`` with no server answers in-process and leaves exactly one server, detached and private;
the next call is served with the same bytes; concurrent first calls start one; the opt-outs
(``ENGRAM_NO_SERVE``, ``serve.auto: false`` in either config file) start none; the server stops
after ``serve.idleExit`` seconds and is reaped. Real processes, a real socket, the real fixtures'
index; every server is stopped at the end (``no_server_left``)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli import repo  # noqa: F401  (the fixture: a repository over the real fixtures)
from test_serve import (  # noqa: F401  (indexed, history: fixtures)
    _env,
    engram,
    history,
    indexed,
    local,
    servers,
    stop_servers,
    untimed,
)

from engram import warm

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, SO_PEERCRED")

SPAN = ("explain", "hello.py:4-5")


@pytest.fixture(autouse=True)
def no_server_left():
    """Every server a test started is stopped at its end: nothing is left running."""
    yield
    stop_servers()
    assert servers() == []


def home() -> Path:
    return Path(os.environ["ENGRAM_HOME"])


def wait_for(what, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return got


def started() -> int:
    """The process id of the one server a CLI started, once it answers."""
    log = home() / "run" / warm.LOG_NAME
    wait_for(lambda: log.exists() and "engram serve: answering" in log.read_text())
    (pid,) = servers()
    return pid


def answered() -> int:
    return (home() / "run" / warm.LOG_NAME).read_text().count("serve: answered")


def proc_stat(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name: [state, ppid, pgrp, session, ...]."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()


@pytest.mark.usefixtures("indexed")
def test_the_first_call_starts_one_server_and_the_next_is_served():
    assert servers() == [] and not os.path.exists(warm.socket_path())
    first = engram(*SPAN)  # in-process (no server yet); starts one
    assert first[0] == 0 and first[2] == "", first
    # at once: the server may still be starting; the call waits for it (ENGRAM_SERVE_WAIT)
    second = engram(*SPAN, ENGRAM_SERVE_WAIT="60")
    pid = started()
    wait_for(lambda: answered() == 1, timeout=10)  # served
    assert second[0] == 0 and untimed(second[1]) == untimed(first[1]) and second[2] == ""
    state, ppid, pgrp, session = proc_stat(pid)[:4]
    # detached: another session and process group than its caller's (a signal to the agent's
    # shell or process group does not reach it), nobody's child here, not a zombie
    assert int(session) != os.getsid(0) and int(pgrp) != os.getpgrp()
    assert int(ppid) != os.getpid() and state != "Z"
    run = home() / "run"
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o700
    for name in (warm.SOCKET_NAME, warm.LOCK_NAME, warm.LOG_NAME):
        assert stat.S_IMODE(os.stat(run / name).st_mode) == 0o600, name
    assert (run / warm.LOCK_NAME).read_text() == f"{pid}\n"
    # its stdin and stdout are /dev/null: nothing of the CLI's pipes is held open
    assert os.readlink(f"/proc/{pid}/fd/0") == os.readlink(f"/proc/{pid}/fd/1") == os.devnull
    assert os.readlink(f"/proc/{pid}/cwd") == str(run)

    # byte for byte where the output holds no timing: --pretty, an error, a usage error
    for argv in ((*SPAN, "--pretty", "--brief"), ("explain", "nope.py:1-2"),
                 ("explain", "hello.py:4-5", "--before", "x")):
        assert engram(*argv) == local(*argv), argv
    assert answered() == 4
    assert servers() == [pid]  # still the one: a served call starts nothing

    # a server killed outright (its socket left behind): answered in-process, a new one started
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: servers() == [])
    assert os.path.exists(warm.socket_path())
    third = engram(*SPAN)
    assert third[0] == 0 and untimed(third[1]) == untimed(first[1])
    pid2 = started()
    assert pid2 != pid and engram(*SPAN)[0] == 0 and answered() == 1


@pytest.mark.usefixtures("indexed")
def test_concurrent_first_calls_start_one_server():
    procs = [subprocess.Popen([sys.executable, "-m", "engram.cli", *SPAN], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert len({untimed(o) for o, _ in outs}) == 1
    pid = started()
    time.sleep(1.0)  # (a second server, had one been started, would be up by now)
    assert servers() == [pid]


@pytest.mark.parametrize("how", ["env", "user-config", "repo-config"])
def test_the_opt_outs_start_none(indexed, how):  # noqa: F811
    env = {}
    if how == "env":
        env[warm.ENV_OFF] = "1"
    elif how == "user-config":
        (home() / "config.yml").write_text("serve:\n  auto: false\n")
    else:
        with open(indexed / ".engram" / "config.yml", "a") as f:
            f.write("serve:\n  auto: false\n")
    for _ in range(2):
        code, out, err = engram(*SPAN, **env)
        assert code == 0 and err == "" and out
    time.sleep(1.0)
    assert servers() == [] and not os.path.exists(warm.lock_path())


def test_a_relative_engram_home_starts_none(indexed):  # noqa: F811
    """``ENGRAM_HOME`` relative to the working directory: a server, in its own directory, would
    read another home; none is started (the command answers in-process)."""
    rel = os.path.relpath(home(), indexed)  # (the tests run in the repository)
    assert os.getcwd() == str(indexed)
    for _ in range(2):
        assert engram(*SPAN, ENGRAM_HOME=rel)[0] == 0
    time.sleep(1.0)
    assert servers() == [] and not os.path.exists(warm.lock_path())


@pytest.mark.usefixtures("indexed")
def test_the_started_server_exits_after_its_idle_time():
    (home() / "config.yml").write_text("serve:\n  idleExit: 1.5\n")
    assert engram(*SPAN)[0] == 0
    pid = started()
    assert "--idle-exit" in (argv := open(f"/proc/{pid}/cmdline").read().split("\0"))
    assert argv[argv.index("--idle-exit") + 1] == "1.5"
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30)  # gone, reaped: no zombie
    assert not os.path.exists(warm.socket_path())
    assert engram(*SPAN)[0] == 0  # and the next call starts the next one
    started()


@pytest.mark.usefixtures("indexed")
def test_a_server_started_by_hand_meanwhile_is_refused_then_allowed():
    """The start lock is the server's: a hand-started ``engram serve`` is refused while the
    CLI's runs (even before it binds its socket), and the CLI starts none while one runs."""
    assert engram(*SPAN)[0] == 0
    pid = started()
    code, _, err = engram("serve")
    assert code == 1 and "another engram serve answers there already" in err
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: servers() == [])
    assert not os.path.exists(warm.socket_path())


def test_a_long_lived_caller_is_never_left_a_zombie(indexed, capsys, monkeypatch):  # noqa: F811
    """``main`` called in a process that lives on (here: pytest itself): the server it starts is
    not its child, so when the server exits nothing is left for this process to reap."""
    from engram.cli import main

    monkeypatch.delenv(warm.ENV_OFF)
    (home() / "config.yml").write_text("serve:\n  idleExit: 1\n")
    assert main(list(SPAN)) == 0
    assert capsys.readouterr().out
    pid = started()
    assert int(proc_stat(pid)[1]) != os.getpid()  # its parent is not this process
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # no child of this process at all
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30)  # exited, and reaped


def test_engram_log_starts_one_too(history):  # noqa: F811
    first = engram("log")  # in-process; starts a server
    assert first[0] == 0 and json.loads(first[1])["commits"]
    started()
    assert engram("log") == first == local("log")
    assert answered() == 1


def test_a_server_whose_socket_is_gone_stops(indexed, tmp_path, monkeypatch):  # noqa: F811
    """``$ENGRAM_HOME`` deleted under it (``rm -rf .demo``): nobody can reach it any more, and a
    new one may start in the new directory; it stops at its next look (``CHECK_S``) instead of
    waiting out its idle time."""
    import threading

    from engram.cli import run
    from engram.commands import serve

    monkeypatch.setattr(serve, "CHECK_S", 0.1)
    server = serve.Server(run, path=str(tmp_path / "run" / "s.sock"))
    t = threading.Thread(target=server.run, kwargs={"idle_exit": 600.0}, daemon=True)
    t.start()
    try:
        time.sleep(0.3)
        assert t.is_alive()  # idle, its socket there: it waits
        os.unlink(tmp_path / "run" / "s.sock")
        t.join(timeout=10)
        assert not t.is_alive()
    finally:
        server.close()
