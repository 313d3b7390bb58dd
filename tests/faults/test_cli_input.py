"""Fault injection on the CLI: files that are not files, and logs that carry terminal escapes.

The commands run as real processes (``python -m engram.cli``) with a deadline: a command that
hangs on a FIFO or grows on ``/dev/zero`` fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram.files import MAX_FILE_BYTES

DEADLINE_S = 20.0  # generous for a loaded machine; the commands answer in well under a second


def engram(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``engram ARGV`` as a process; fail (and kill it) when it outlives the deadline."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.cli", *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "ENGRAM_NO_PROGRESS": "1", **(env or {})},
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"engram {' '.join(argv)} did not return within {DEADLINE_S} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    os.mkfifo(root / "pipe.py")
    (root / "adir").mkdir()
    (root / "ok.py").write_text("def f():\n    return 1\n")
    with open(root / "huge.py", "wb") as f:  # sparse: 20 MiB + 1 without using the disk
        f.truncate(20 * 1024 * 1024 + 1)
    return root


@pytest.mark.parametrize("command", ["explain", "blame", "trace"])
@pytest.mark.parametrize(
    "target, needle",
    [
        ("pipe.py", "FIFO"),
        ("/dev/zero", "character device"),
        ("adir", "directory"),
        ("huge.py", "too large"),
    ],
)
def test_not_a_regular_file_is_a_one_line_error(repo, command, target, needle):
    argv = [command, f"{target}:1-3" if command == "explain" else target]
    res = engram(*argv, cwd=repo)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {target}: "), res.stderr
    assert needle in lines[0]
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("target", ["pipe.py", "/dev/zero", "adir"])
def test_explain_whole_file_form_refuses_too(repo, target):
    """``engram explain FILE`` (no range) counts the file's lines: the same reader, no hang."""
    res = engram("explain", target, cwd=repo)
    assert res.returncode == 1 and res.stderr.startswith(f"Error: {target}: "), res.stderr
    assert "Traceback" not in res.stderr



@pytest.mark.parametrize("where", ["/", "..", "adir", "--index"])
@pytest.mark.parametrize("command", [["status"], ["ingest"], ["explain", "ok.py:1-2"]])
def test_an_index_path_that_is_a_directory_is_a_one_line_error(repo, tmp_path, where, command):
    """``index.path`` (a committed config's, or ``--index``) naming a directory: one line, exit 1,
    and nothing made beside it (an ingest made its lock at ``<dir>.lock`` before, e.g. ``/tmp.lock``)."""
    home = tmp_path / "home"
    argv = list(command)
    if where == "--index":
        argv += ["--index", str(repo / "adir")]
    else:
        (repo / ".engram").mkdir()
        (repo / ".engram" / "config.yml").write_text(f"index:\n  path: {where!r}\n")
    before = sorted(p.name for p in repo.parent.iterdir())
    r = engram(*argv, cwd=repo, env={"ENGRAM_HOME": str(home)})
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.startswith("Error: ") and "a directory, not an index file" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert sorted(p.name for p in repo.parent.iterdir() if p.name != "home") == \
        [n for n in before if n != "home"]
    assert not (repo / "adir.lock").exists()


OTHER_UID = 65534  # nobody


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user's needs root")
@pytest.mark.parametrize("planted", [None, "index.sqlite", "index.sqlite-wal", "index.lock"])
@pytest.mark.parametrize("command", [["ingest"], ["status"], ["explain", "ok.py:1-2"]])
def test_an_index_path_another_user_controls_is_refused(repo, tmp_path, planted, command):
    """A committed config's ``index.path`` in a directory of another user's, or where another
    user made the index's files first: refused in one line, nothing written there (they could
    read every event written to such an index, or plant its answers)."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.chmod(theirs, 0o777)
    if planted is None:
        os.chown(theirs, OTHER_UID, OTHER_UID)
    else:  # our directory, but a file of the index made first by someone else
        (theirs / planted).write_bytes(b"")
        os.chown(theirs / planted, OTHER_UID, OTHER_UID)
    (repo / ".engram").mkdir()
    (repo / ".engram" / "config.yml").write_text(f"index:\n  path: {str(theirs / 'index.sqlite')!r}\n")
    before = {p.name: p.stat().st_size for p in theirs.iterdir()}
    r = engram(*command, cwd=repo, env={"ENGRAM_HOME": str(tmp_path / "home")})
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "another user" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert {p.name: p.stat().st_size for p in theirs.iterdir()} == before  # nothing made or written


def test_an_index_path_in_a_directory_of_yours_is_used(repo, tmp_path):
    """The rule does not stop a private index the user keeps elsewhere (CI's ``index.path``)."""
    mine = tmp_path / "mine" / "index.sqlite"
    (repo / ".engram").mkdir()
    (repo / ".engram" / "config.yml").write_text(f"index:\n  path: {str(mine)!r}\n")
    r = engram("ingest", cwd=repo, env={"ENGRAM_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert mine.exists() and oct(mine.stat().st_mode & 0o777) == "0o600"

def test_size_limit_is_a_setting(repo):
    assert (repo / "huge.py").stat().st_size > MAX_FILE_BYTES
    res = engram("blame", "ok.py", cwd=repo, env={"ENGRAM_MAX_FILE_BYTES": "8"})
    assert res.returncode == 1 and "too large" in res.stderr and "ENGRAM_MAX_FILE_BYTES" in res.stderr
    # the default still reads an ordinary file (no index yet: that is the error, not the file)
    res = engram("explain", "ok.py:1-2", cwd=repo)
    assert "too large" not in res.stderr and "regular file" not in res.stderr, res.stderr


# --- terminal escapes from the logs -------------------------------------------------------------

# what a log may carry: OSC 52 (clipboard write), OSC 0 (title), CSI 2J (clear), C1 CSI, DEL,
# bidi overrides and isolates
NASTY_REQUEST = ("Please add \x1b]52;c;ZXZpbA==\x07 the helper\x1b]0;pwned\x07 and "
                 "\u202eevil\u202c text \x9b2J")
NASTY_REPLY = "Done:\x1b[2J\x1b[H wrote it \u2066isolated\u2069 \x7f and \x1b[31mred\x1b[0m"
NASTY_CODE = ("def helper_with_escapes():\n    # \x1b[31mred\x1b[0m \u202e comment \u202c\n"
              "    values = [1, 2, 3]\n    total = sum(values)\n    scaled = total * 42\n"
              "    return scaled - 1\n")
RAW_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _no_raw_controls(text: str, what: str) -> None:
    found = RAW_CONTROLS.findall(text)
    assert not found, f"{what} writes raw control characters {found!r}"


def test_pretty_output_escapes_terminal_controls_from_logs(world):
    s = world.session()
    s.user(NASTY_REQUEST).say(NASTY_REPLY).write("nasty.py", NASTY_CODE).say(NASTY_REPLY)
    s.save()
    world.checkout()
    root = world.root
    assert engram("ingest", cwd=root).returncode == 0
    tapes = json.loads(engram("tapes", cwd=root).stdout)
    assert tapes
    tape = tapes[0]["tape_id"]
    outputs = {}
    for argv in (["explain", "nasty.py:1-6"], ["blame", "nasty.py"], ["trace", "nasty.py"],
                 ["tapes"], ["search", "helper"], ["view", tape, "--at", "1"], ["show", tape]):
        res = engram(*argv, "--pretty", cwd=root)
        assert res.returncode == 0, (argv, res.stderr)
        _no_raw_controls(res.stdout, "engram " + " ".join(argv) + " --pretty")
        outputs[argv[0]] = res.stdout
        res = engram(*argv, cwd=root)  # JSON: escaped too, and the strings decode unchanged
        assert res.returncode == 0, (argv, res.stderr)
        _no_raw_controls(res.stdout, "engram " + " ".join(argv))
        json.loads(res.stdout)
    # the escapes are visible, not dropped
    assert "\\x1b]52;c;ZXZpbA==\\x07" in outputs["explain"]
    assert "\\u202eevil\\u202c" in outputs["explain"]
    assert "\\x1b[31mred\\x1b[0m" in outputs["blame"]  # the file's own text, in blame's column
    assert "\\x9b2J" in outputs["show"] and "\\u2066isolated\\u2069" in outputs["show"]
    explained = json.loads(engram("explain", "nasty.py:1-6", cwd=root).stdout)
    texts = json.dumps(explained, ensure_ascii=False)
    assert "\u202eevil\u202c" in texts  # JSON carries the original text (escaped on the wire)


def test_explain_stdin_is_read_up_to_the_file_limit(tmp_path):
    """``explain --stdin`` reads at most ENGRAM_MAX_FILE_BYTES: more is refused with one line."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, ENGRAM_MAX_FILE_BYTES="1000", ENGRAM_HOME=str(tmp_path / "home"))
    (tmp_path / ".git").mkdir()
    p = subprocess.run([sys.executable, "-m", "engram.cli", "explain", "--stdin"], input=b"x = 1\n" * 1000,
                       capture_output=True, cwd=tmp_path, env=env, timeout=60)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert err.startswith("Error:") and "more than 1000 bytes" in err and "Traceback" not in err
