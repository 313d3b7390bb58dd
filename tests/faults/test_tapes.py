"""Fault injection on tapes: a corrupt, missing, bomb or misnamed tape costs only its own session,
and a writer killed with SIGKILL leaves nothing behind for good.

Real Claude Code logs (``tests/data/harness/claude_code``) and the real CLI, as processes
(``python -m engram.cli``): no cache of an earlier command in the same process hides a fault.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engram_process import DEADLINE_S, engram, engram_json, make_repo
from engram_process import assert_one_line_error as one_line_error

from engram.paths import index_dir
from engram.tape.reader import read_tape


@pytest.fixture
def repo(tmp_path) -> Path:
    """Sealed tapes of the 8 fixture sessions, and ``mixed.txt``: code written by two of them."""
    root = make_repo(tmp_path)
    engram("ingest", "--seal", cwd=root, check=True)
    parts = []
    for t in engram_json("tapes", cwd=root):
        edits = [e for e in read_tape(t["path"]) if e["k"] == "code.edit"
                 and len((e.get("after_text") or "").splitlines()) >= 3]
        if edits:
            parts.append(edits[0]["after_text"][:1500])
    (root / "mixed.txt").write_text("\n".join(parts))
    return root


def sessions(res: dict) -> dict[str, dict]:
    return {s["tape_id"]: s for s in res["sessions"]}


def tape_path(root: Path, tape_id: str) -> Path:
    return Path(next(t["path"] for t in engram_json("tapes", cwd=root) if t["tape_id"] == tape_id))


def assert_one_line_error(run: subprocess.CompletedProcess, *needles: str) -> None:
    assert run.stdout == ""
    one_line_error(run, *needles)


def flip(path: Path, where: str) -> None:
    data = bytearray(path.read_bytes())
    i = {"header": 4, "middle": len(data) // 2, "end": len(data) - 1}[where]
    data[i] ^= 0x40
    path.write_bytes(bytes(data))


def check_only_victim_marked(before: dict, after: dict, victim: str, reason: str) -> None:
    """The victim session is still listed, marked ``unreadable`` with no events in its windows;
    every other session is exactly as it was."""
    assert after.keys() == before.keys()
    bad = after[victim]
    assert bad["unreadable"].startswith("corrupt-tape: ") and reason in bad["unreadable"]
    assert bad["windows"] and all(w["events"] == [] and "request" not in w for w in bad["windows"])
    assert [w["anchor"] for w in bad["windows"]] == [w["anchor"] for w in before[victim]["windows"]]
    assert {k: v for k, v in bad.items() if k not in ("unreadable", "windows")} == \
        {k: v for k, v in before[victim].items() if k != "windows"}
    for tid, s in after.items():
        if tid != victim:
            assert "unreadable" not in s and s == before[tid]


# -- corrupt, missing, bomb, misnamed: explain and search still answer --------------------------

@pytest.mark.parametrize("where", ["header", "middle", "end"])
def test_a_flipped_byte_costs_only_its_own_session(repo, where):
    before = sessions(engram_json("explain", "mixed.txt", cwd=repo))
    assert len(before) >= 2 and all(s["windows"][0]["events"] for s in before.values())
    victim = list(before)[-1]
    flip(tape_path(repo, victim), where)
    after = sessions(engram_json("explain", "mixed.txt", cwd=repo))
    check_only_victim_marked(before, after, victim, victim)


def test_search_marks_the_unreadable_session_and_keeps_the_others(repo):
    before = {r["tape_id"]: r for r in engram_json("search", "hello world", cwd=repo)["results"]}
    assert len(before) >= 2
    victim = list(before)[0]
    flip(tape_path(repo, victim), "middle")
    res = engram_json("search", "hello world", cwd=repo)
    after = {r["tape_id"]: r for r in res["results"]}
    assert list(after) == list(before)  # same ranking: it comes from the index
    assert after[victim]["unreadable"].startswith("corrupt-tape: ")
    assert after[victim]["windows"][0]["events"] == []
    for tid in list(before)[1:]:
        assert after[tid]["windows"] == before[tid]["windows"] and "unreadable" not in after[tid]


def test_a_deleted_tape_costs_only_its_own_session(repo):
    before = sessions(engram_json("explain", "mixed.txt", cwd=repo))
    victim = list(before)[0]
    path = tape_path(repo, victim)
    path.unlink()
    after = sessions(engram_json("explain", "mixed.txt", cwd=repo))
    check_only_victim_marked(before, after, victim, "vanished or does not exist")
    for cmd in (["view", victim[:12]], ["show", victim], ["show", victim, "--raw"]):
        assert_one_line_error(engram(*cmd, cwd=repo), path.name, "vanished")


@pytest.mark.parametrize("fault", ["flipped", "truncated", "other-tape", "unreadable-dir"])
def test_view_and_show_of_a_bad_tape_say_so_in_one_line(repo, fault):
    victim = engram_json("tapes", cwd=repo)[0]["tape_id"]
    path = tape_path(repo, victim)
    if fault == "flipped":
        flip(path, "middle")
    elif fault == "truncated":
        path.write_bytes(path.read_bytes()[:-7])
    elif fault == "other-tape":  # another (valid) tape's bytes under this name
        other = next(t["path"] for t in engram_json("tapes", cwd=repo) if t["tape_id"] != victim)
        shutil.copy(other, path)
    else:
        path.unlink()
        path.mkdir()  # reading it fails with EISDIR
    for cmd in (["view", victim[:12], "--at", "2"], ["show", victim]):
        assert_one_line_error(engram(*cmd, cwd=repo), path.name)


def test_a_zstd_bomb_in_place_of_an_indexed_tape_costs_only_its_session(repo):
    before = sessions(engram_json("explain", "mixed.txt", cwd=repo))
    victim = list(before)[0]
    tape_path(repo, victim).write_bytes(rle_bomb(4 << 30, declare=False))
    t0 = time.perf_counter()
    after = sessions(engram_json("explain", "mixed.txt", cwd=repo))
    assert time.perf_counter() - t0 < 10
    check_only_victim_marked(before, after, victim, "zstd bomb")


def test_bombs_and_misnamed_tapes_in_a_tape_directory_are_refused_by_ingest(repo):
    """A teammate's tapes land in the tape directory: a zstd bomb and a tape under a name that is
    not the hash of its content are reported, not indexed; the run and the rest go on."""
    tapes = engram_json("tapes", cwd=repo)
    tape_dir = Path(tapes[0]["path"]).parent
    bomb = tape_dir / ("0" * 32 + ".jsonl.zst")
    bomb.write_bytes(rle_bomb(4 << 30, declare=True))
    misnamed = tape_dir / ("1" * 32 + ".jsonl.zst")
    shutil.copy(tapes[0]["path"], misnamed)
    res = engram_json("ingest", cwd=repo)
    errors = {Path(e["error"]["path"]).name: e["error"] for e in res["errors"]}
    assert errors[bomb.name]["code"] == "corrupt-tape" and "zstd bomb" in errors[bomb.name]["message"]
    assert errors[misnamed.name]["code"] == "corrupt-tape"
    assert "does not match the tape's name" in errors[misnamed.name]["message"]
    assert {t["tape_id"] for t in engram_json("tapes", cwd=repo)} == {t["tape_id"] for t in tapes}
    assert engram_json("explain", "mixed.txt", cwd=repo)["sessions"]


def rle_bomb(total: int, declare: bool) -> bytes:
    """A zstd frame of ``total`` zero bytes in RLE blocks (4 bytes per 128 KiB of output)."""
    out = bytearray(b"\x28\xb5\x2f\xfd")
    out += bytes([0xE0]) + total.to_bytes(8, "little") if declare else bytes([0x00, 0x38])
    block = 1 << 17
    n = total // block
    for i in range(n):
        out += ((block << 3) | (1 << 1) | (i == n - 1)).to_bytes(3, "little") + b"\x00"
    return bytes(out)


# -- kill -9 in the middle of an ingest ----------------------------------------------------------

KILLS = 3
COPIES = 30  # 30 copies of 7 fixture logs: 210 sessions, ~11 MB


def temp_files(d: Path) -> list[str]:
    try:
        return [n for n in os.listdir(d) if n.endswith(".tmp")]
    except FileNotFoundError:
        return []


def kill_mid_ingest(root: Path, tape_dir: Path, at_least: int = 20) -> int:
    """Start ``engram ingest --seal`` and SIGKILL it once ``at_least`` tape temp files exist
    (staged, not yet renamed): the kill lands mid-ingest. The temp files it left."""
    proc = subprocess.Popen([sys.executable, "-m", "engram.cli", "ingest", "--seal"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "ENGRAM_NO_PROGRESS": "1"})
    deadline = time.monotonic() + DEADLINE_S
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if len(temp_files(tape_dir)) >= at_least:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.001)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the ingest finished before the kill"
    left = temp_files(tape_dir)
    assert len(left) >= at_least  # killed between writing its temp files and renaming them
    return len(left)


def test_kill_9_mid_ingest_leaves_temp_files_that_the_next_ingest_and_gc_remove(tmp_path):
    root = make_repo(tmp_path, copies=COPIES)
    tape_dir = Path(os.environ["ENGRAM_HOME"]) / "tapes"
    left = [kill_mid_ingest(root, tape_dir) for _ in range(KILLS - 1)]
    # a kill landed: temp files in the directory, no index rows for their sessions yet
    res = engram_json("ingest", "--seal", cwd=root)
    assert temp_files(tape_dir) == []
    assert res["error_count"] == 0 and res["sealed"] == COPIES * 7
    tapes = engram_json("tapes", cwd=root)
    assert len(tapes) == COPIES * 7 and all(Path(t["path"]).exists() for t in tapes)
    # gc removes them too, and keeps the temp file of a writer that is still running
    shutil.rmtree(index_dir())
    for p in tape_dir.iterdir():
        p.unlink()
    left.append(kill_mid_ingest(root, tape_dir))
    from engram.tape import writer

    alive = tape_dir / f".{'e' * 32}.{os.getpid()}-{writer._host_tag()}.inflight.tmp"
    alive.write_bytes(b"being written")
    gc = engram_json("gc", cwd=root)
    assert gc["temp_files_removed"] == left[-1]
    assert temp_files(tape_dir) == [alive.name]
    assert all(n >= 20 for n in left)


def test_pretty_explain_says_which_transcript_is_unreadable(repo):
    """``--pretty`` names the unreadable session's reason and how to repair it."""
    victim = list(sessions(engram_json("explain", "mixed.txt", cwd=repo)))[-1]
    flip(tape_path(repo, victim), "middle")
    out = engram("explain", "mixed.txt", "--pretty", cwd=repo, check=True).stdout
    assert "transcript unreadable: corrupt-tape: " in out and "ingest --rebuild" in out
    assert out.count("transcript unreadable") == 1
