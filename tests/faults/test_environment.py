"""Fault injection from the environment: a full disk, ``ulimit -f``, paths of 4,000 characters,
files the user cannot read, a bad ``ENGRAM_TAPE_CACHE_MB``. Each failure is one line on stderr,
``Error: <file>: <what to do>``, exit 1, and costs nothing already recorded: the next run, once the
cause is gone, succeeds.

Real Claude Code logs and the real CLI as processes. The full disk is a small tmpfs (``mount``,
which needs root: skipped, with the reason, where it is not permitted); an unreadable file is
unreadable to a process whose capabilities to override permissions were dropped (tests run as
root here, and root reads a mode-000 file).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from engram_process import DEADLINE_S, assert_one_line_error, engram, engram_json, make_repo

from engram.paths import index_dir


@pytest.fixture
def repo(tmp_path) -> Path:
    root = make_repo(tmp_path)
    (root / "hello.py").write_text('def main():\n    print("Hello, World!")\n')
    return root


def explained(root: Path, **kw) -> list[dict]:
    return engram_json("explain", "hello.py:1-2", cwd=root, **kw)["sessions"]


# -- disk full ----------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs; ``grow()`` makes it 16 MiB (space freed)."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {e}")

    def grow():
        subprocess.run(["mount", "-o", "remount,size=16m", str(mnt)], check=True, timeout=30)

    try:
        yield SimpleNamespace(path=mnt, grow=grow)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=30)


def test_disk_full_while_writing_tapes(repo, small_disk):
    home = small_disk.path / "home"
    env = {"ENGRAM_HOME": str(home)}
    cfg = repo / ".engram" / "config.yml"  # the index off the small disk: the tapes fill it
    cfg.parent.mkdir(exist_ok=True)
    with open(cfg, "a", encoding="utf-8") as f:
        f.write(f"\nindex:\n  path: {repo.parent / 'index' / 'index.sqlite'}\n")
    msg = assert_one_line_error(engram("ingest", "--seal", cwd=repo, env=env), "disk full while "
                                "writing it: free space and run `engram ingest` again; nothing "
                                "was lost")
    assert f"Error: {home / 'tapes'}" in msg
    assert [p.name for p in (home / "tapes").iterdir()] == []  # no temp file left behind
    assert engram_json("status", cwd=repo, env=env)["counts"]["tapes"] == 0
    small_disk.grow()
    res = engram_json("ingest", "--seal", cwd=repo, env=env)
    assert res["sealed"] == 8 and res["error_count"] == 0
    assert explained(repo, env=env)[0]["windows"][0]["events"]


def test_disk_full_while_writing_the_index(repo, small_disk):
    index = small_disk.path / "index.sqlite"
    assert_one_line_error(engram("ingest", "--seal", "--index", str(index), cwd=repo),
                          f"Error: {index}: disk full while writing it", "nothing was lost")
    small_disk.grow()
    res = engram_json("ingest", "--seal", "--index", str(index), cwd=repo)
    assert res["sealed"] == 8 and res["error_count"] == 0
    assert engram_json("explain", "hello.py:1-2", "--index", str(index), cwd=repo)["sessions"]


def test_disk_full_while_writing_the_answer(repo, small_disk):
    engram("ingest", "--seal", cwd=repo, check=True)
    with open(small_disk.path / "fill", "wb") as f:  # nothing left for the answer
        try:
            f.write(bytes(64 << 10))
        except OSError:
            pass
    with open(small_disk.path / "answer.json", "w") as out:
        run = subprocess.run([sys.executable, "-m", "engram.cli", "tapes"], cwd=repo, text=True,
                             stdout=out, stderr=subprocess.PIPE, timeout=DEADLINE_S)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr == ("Error: disk full: free space and run `engram tapes` again; nothing "
                          "was lost\n")


# -- ulimit -f ----------------------------------------------------------------------------------

@pytest.mark.parametrize("sigxfsz", ["ignored", "default"])
def test_file_size_limit(repo, sigxfsz):
    """With SIGXFSZ ignored by the caller, or left at its default (which kills the process
    without a word: ``engram`` ignores it itself, so the write fails with EFBIG instead)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN if sigxfsz == "ignored" else signal.SIG_DFL)

    run = engram("ingest", "--seal", cwd=repo, preexec=limit)
    assert_one_line_error(run, "the file-size limit (ulimit -f: 65536 bytes)", "nothing was lost")
    res = engram_json("ingest", "--seal", cwd=repo)
    assert res["sealed"] == 8 and res["error_count"] == 0
    assert explained(repo)[0]["windows"][0]["events"]


# -- long paths -----------------------------------------------------------------------------------

def long_dir(base: Path, chars: int) -> Path:
    """A path of exactly ``chars`` characters under ``base``, in components of 99 or fewer."""
    path = str(base)
    while len(path) < chars:
        path += "/" + "d" * min(99, chars - len(path) - 1)
    return Path(path)


@pytest.mark.parametrize("case", ["file", "home", "index", "home-over-path-max", "long-name"])
def test_long_paths_are_one_line_errors(repo, tmp_path, case):
    deep = long_dir(tmp_path, 4000)
    env = None
    if case == "file":
        argv = ["explain", f"{deep}/x.py:1-2"]
        needles = ["no such file"]
    elif case == "home":  # the machine's index under it: too long for SQLite
        env = {"ENGRAM_HOME": str(long_dir(tmp_path, 1000))}
        argv = ["explain", "hello.py:1-2"]
        needles = ["path too long for SQLite", "at most 512"]
    elif case == "index":
        argv = ["explain", "hello.py:1-2", "--index", str(deep / "index.sqlite")]
        needles = ["path too long for SQLite"]
    elif case == "home-over-path-max":
        env = {"ENGRAM_HOME": str(long_dir(tmp_path, 5000))}
        argv = ["ingest"]
        needles = ["path too long: the system allows 4096 characters, 255 per file name"]
    else:
        env = {"ENGRAM_HOME": str(tmp_path / ("n" * 300))}
        argv = ["ingest"]
        needles = ["path too long"]
    msg = assert_one_line_error(engram(*argv, cwd=repo, env=env), *needles)
    assert len(msg) < 600  # the path is shortened to its two ends
    assert "characters)" in msg


def test_a_4000_character_engram_home_works(repo, tmp_path):
    """Under PATH_MAX (4096) a long path is a path: tapes are written and read there (the
    index, which SQLite cannot open past 512 characters, is kept elsewhere by ``index.path``)."""
    home = long_dir(tmp_path, 4000)
    assert len(str(home)) == 4000
    env = {"ENGRAM_HOME": str(home)}
    cfg = repo / ".engram" / "config.yml"
    cfg.parent.mkdir(exist_ok=True)
    with open(cfg, "a", encoding="utf-8") as f:
        f.write(f"\nindex:\n  path: {tmp_path / 'index.sqlite'}\n")
    assert engram_json("ingest", "--seal", cwd=repo, env=env)["tapes_written"] == 8
    assert len(list((home / "tapes").glob("*.jsonl.zst"))) == 8
    assert explained(repo, env=env)[0]["windows"][0]["events"]


# -- files the user cannot read -------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def as_plain_user():
    """(preexec) Drop the capabilities that let root ignore file permissions."""
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def unreadable_ok(tmp_path):
    """Skip unless a mode-000 file is unreadable to a process started with ``as_plain_user``."""
    probe = tmp_path / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        run = subprocess.run(["cat", str(probe)], preexec_fn=as_plain_user, capture_output=True)
    except subprocess.SubprocessError as e:
        pytest.skip(f"cannot drop capabilities here: {e}")
    if run.returncode == 0:
        pytest.skip("cannot make a file unreadable here (permission checks are not applied)")
    probe.unlink()


@pytest.fixture
def sealed(repo, unreadable_ok):
    engram("ingest", "--seal", cwd=repo, check=True)
    return repo


def test_unreadable_index(sealed):
    index = index_dir() / "index.sqlite"
    index.chmod(0)
    assert_one_line_error(engram("explain", "hello.py:1-2", cwd=sealed, preexec=as_plain_user),
                          f"Error: {index}: cannot open the index")
    index.parent.chmod(0)
    assert_one_line_error(engram("explain", "hello.py:1-2", cwd=sealed, preexec=as_plain_user),
                          f"{index.parent}", "permission denied")
    index.parent.chmod(0o700)
    index.chmod(0o600)
    assert explained(sealed, preexec=as_plain_user)


def test_unreadable_file_to_explain(sealed):
    (sealed / "hello.py").chmod(0)
    assert_one_line_error(engram("explain", "hello.py:1-2", cwd=sealed, preexec=as_plain_user),
                          "Error: hello.py: ", "Permission denied")


def test_unreadable_tape_costs_only_its_session(sealed):
    before = explained(sealed)
    victim = Path(next(t["path"] for t in engram_json("tapes", cwd=sealed)
                       if t["tape_id"] == before[0]["tape_id"]))
    victim.chmod(0)
    after = explained(sealed, preexec=as_plain_user)
    assert after[0]["unreadable"] == f"corrupt-tape: {victim}: cannot read tape: Permission denied"
    assert all(w["events"] == [] for w in after[0]["windows"])
    assert after[1:] == before[1:]
    assert_one_line_error(engram("show", victim.name[:32], cwd=sealed, preexec=as_plain_user),
                          str(victim), "Permission denied")


def test_unreadable_tape_directory(sealed):
    tapes = Path(os.environ["ENGRAM_HOME"]) / "tapes"
    shutil.rmtree(index_dir())
    for p in tapes.iterdir():
        p.unlink()
    tapes.chmod(0o500)  # readable, not writable: the first tape written fails
    assert_one_line_error(engram("ingest", "--seal", cwd=sealed, preexec=as_plain_user),
                          f"Error: {tapes}/.", "permission denied")
    assert list(tapes.iterdir()) == []
    tapes.chmod(0o700)
    assert engram_json("ingest", "--seal", cwd=sealed, preexec=as_plain_user)["sealed"] == 8


def test_an_unreadable_log_is_recorded_and_the_others_ingested(repo, unreadable_ok):
    log = next((repo.parent / "logs").glob("gitai__example*"))
    log.chmod(0)
    run = engram("ingest", "--seal", cwd=repo, preexec=as_plain_user, check=True)
    assert "Traceback" not in run.stderr
    res = json.loads(run.stdout)
    assert res["sealed"] == 7 and res["error_count"] == 1
    assert res["errors"][0]["error"]["path"] == str(log)
    assert "Permission denied" in res["errors"][0]["error"]["message"]


# -- configuration from the environment -------------------------------------------------------------

def test_a_bad_tape_cache_size_warns_and_answers(repo):
    engram("ingest", "--seal", cwd=repo, check=True)
    run = engram("explain", "hello.py:1-2", cwd=repo, env={"ENGRAM_TAPE_CACHE_MB": "128MB"},
                 check=True)
    assert json.loads(run.stdout)["sessions"][0]["windows"][0]["events"]
    warning = ("WARNING engram.tape.reader: ENGRAM_TAPE_CACHE_MB='128MB' is not a whole number "
               "of MiB; using 128\n")
    assert warning in run.stderr and run.stderr.count("ENGRAM_TAPE_CACHE_MB") == 1
    assert "Traceback" not in run.stderr
