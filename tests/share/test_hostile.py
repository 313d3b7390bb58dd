"""Hostile tapes are contained: a ref holding a 2 GiB zstd bomb (with and without a declared
size), a mis-named tape, a truncated tape, garbage and tree entries that are not tapes at their
place. ``engram pull`` rejects each with an error naming it, unpacks and indexes the good one,
writes nothing else anywhere, and stays under 500 MB of RSS. The same files in a configured tape
source (``sources``) are rejected by ingest the same way."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash
import zstandard
from gitworld import Clone, bare_remote, git

from engram.tape.writer import write_tape

BOMB_BYTES = 2 << 30
RSS_LIMIT_MB = 500
META = {"k": "meta", "t": "2026-01-05T09:00:00.000Z", "harness": "claude_code",
        "session": "mallory", "cwd": "/home/mallory/repo", "label": "bomb"}


MISNAMED = "0123456789abcdef0123456789abcdef"
BOMB = xxhash.xxh3_128_hexdigest(b"bomb")
DBOMB = xxhash.xxh3_128_hexdigest(b"declared bomb")
PBOMB = xxhash.xxh3_128_hexdigest(b"padded bomb")


def at(tid: str) -> str:
    """Where a tape sits in the ref's tree."""
    return f"{tid[:2]}/{tid}.jsonl.zst"


def _events(label: str) -> list[dict]:
    return [{**META, "session": label, "label": label},
            {"k": "msg.in", "t": "2026-01-05T09:00:01.000Z", "text": f"hello from {label}"},
            {"k": "code.edit", "t": "2026-01-05T09:00:02.000Z", "file": "/home/x/repo/ok.py",
             "after": "def shared_helper(value):\n    return value * 42 + len(str(value))\n"}]


def _padded_bomb() -> bytes:
    """A meta line and 480 MiB of zero bytes, size declared, followed by a ~5 MiB skippable frame
    so that its file passes the reader's ratio rule (at most 100 bytes of content per byte of
    file): only the hash check can refuse it."""
    head = json.dumps(META).encode() + b"\n"
    n = 480 << 20
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(level=1).stream_writer(buf, size=len(head) + n,
                                                         closefd=False) as w:
        w.write(head)
        zero = bytes(1 << 20)
        for _ in range(n >> 20):
            w.write(zero)
    pad = n // 100 + 4096
    return buf.getvalue() + struct.pack("<II", 0x184D2A50, pad) + bytes(pad)


def _bomb(declared: bool) -> bytes:
    """A meta line, then 2 GiB of zero bytes, as one zstd frame (~70 KB)."""
    head = json.dumps(META).encode() + b"\n"
    buf = io.BytesIO()
    c = zstandard.ZstdCompressor(level=1, write_content_size=declared)
    with c.stream_writer(buf, size=len(head) + BOMB_BYTES if declared else -1,
                         closefd=False) as w:
        w.write(head)
        zero = bytes(1 << 20)
        for _ in range(BOMB_BYTES >> 20):
            w.write(zero)
    return buf.getvalue()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, bytes]:
    """``{path in the ref's tree: bytes}``: one good tape and everything that must be refused."""
    d = tmp_path_factory.mktemp("tapes")
    good = write_tape(d, _events("good"))
    other = write_tape(d, _events("other"))
    other_bytes = other.path.read_bytes()
    trunc = write_tape(d, _events("truncated" + "x" * 5000))
    tb = trunc.path.read_bytes()

    return {at(good.tape_id): good.path.read_bytes(),
            at(MISNAMED): other_bytes,
            at(trunc.tape_id): tb[:len(tb) // 2],
            at(BOMB): _bomb(declared=False),
            at(DBOMB): _bomb(declared=True),
            at(PBOMB): _padded_bomb(),
            at("f" * 32): b"\x00garbage, not zstd",
            "README.md": b"not a tape",
            f"{good.tape_id[2:4]}/{good.tape_id}.jsonl.zst": good.path.read_bytes(),  # wrong place
            "ab/cd/ef.jsonl.zst": other_bytes,
            "good": good.tape_id, "trunc": trunc.tape_id}


def _push_ref(clone: Clone, files: dict[str, bytes]) -> None:
    """What a hostile teammate can do: any tree on the ref, force-pushed with plain git."""
    index = clone.base / "mallory.index"
    env = {"GIT_INDEX_FILE": str(index)}
    git("read-tree", "--empty", cwd=clone.root, env=env)
    for path, data in files.items():
        sha = git("hash-object", "-w", "--stdin", cwd=clone.root, input=data).stdout.decode().strip()
        git("update-index", "--add", "--cacheinfo", f"100644,{sha},{path}", cwd=clone.root, env=env)
    tree = git("write-tree", cwd=clone.root, env=env).stdout.strip()
    commit = git("commit-tree", tree, "-m", "mallory", cwd=clone.root).stdout.strip()
    git("push", "--quiet", "--force", "origin", f"{commit}:refs/engram/tapes", cwd=clone.root)


def _run_measured(clone: Clone, *argv: str) -> tuple[subprocess.CompletedProcess, float]:
    """``engram ARGV`` in ``clone``, and the peak RSS (MB) of it and its children (git)."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "sys.stderr.write(p.stderr)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
             "print(p.returncode)\n"
             "sys.stdout.write(p.stdout)\n")
    p = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "engram.cli", *argv],
                       cwd=clone.root, capture_output=True, text=True, env=clone.env(),
                       timeout=300)
    rss, rc, out = p.stdout.split("\n", 2)
    return subprocess.CompletedProcess(argv, int(rc), out, p.stderr), float(rss)


def test_pull_contains_a_hostile_ref(tmp_path, hostile):
    remote = bare_remote(tmp_path)
    mallory = Clone(tmp_path, "mallory", remote)
    files = {k: v for k, v in hostile.items() if k not in ("good", "trunc")}
    _push_ref(mallory, files)
    carol = Clone(tmp_path, "carol", remote)
    before = {p for p in tmp_path.rglob("*") if "remote.git" not in p.parts}

    run, rss_mb = _run_measured(carol, "pull")
    assert run.returncode == 0, run.stderr
    res = json.loads(run.stdout)
    good, trunc, bomb, dbomb = hostile["good"], hostile["trunc"], BOMB, DBOMB
    assert res["new"] == 1 and res["ingest"]["tapes_indexed"] == 1
    rejected = {r["path"].rpartition(":")[2]: r["error"] for r in res["rejected"]}
    expected = {at(bomb): "decompresses to more", at(dbomb): "declares",
                at(PBOMB): "does not match the tape's name",
                at(MISNAMED): "does not match the tape's name", at(trunc): "truncated",
                at("f" * 32): "not zstd", "README.md": "not a tape at its place",
                f"{good[2:4]}/{good}.jsonl.zst": "not a tape at its place",
                "ab/cd/ef.jsonl.zst": "not a tape at its place"}
    assert sorted(rejected) == sorted(expected), rejected  # each named; the good one not
    for path, needle in expected.items():
        assert needle in rejected[path], (path, rejected[path])
    print(f"peak RSS {rss_mb:.0f} MB")
    assert rss_mb < RSS_LIMIT_MB, rss_mb
    # only the verified tape was written, named by its id, inside the pulled directory
    pulled = Path(res["dir"])
    assert sorted(p.name for p in pulled.iterdir()) == [f"{good}.jsonl.zst"]
    after = {p for p in tmp_path.rglob("*") if "remote.git" not in p.parts}
    # (Engram's own private tape directory may be made: the lineage pass spills the pulled edits'
    # texts to an unlinked temp file there; nothing is left in it)
    own = carol.engram_home / "tapes"
    assert not own.exists() or (own.is_dir() and not any(own.iterdir()) and own.stat().st_mode & 0o077 == 0)
    outside = {p for p in after - before
               if pulled not in p.parents and p != pulled and ".git" not in p.parts
               and carol.engram_home / "index" not in p.parents
               and p != carol.engram_home / "index" and p != own}
    assert outside == set(), outside
    tapes = carol.json("tapes")
    assert [t["tape_id"] for t in tapes] == [good]
    # the rejections are logged by name on stderr too
    assert at(bomb) in run.stderr and at(MISNAMED) in run.stderr


def test_a_tape_source_with_hostile_files(tmp_path, hostile, monkeypatch):
    """``sources`` (any tape directory): ingest verifies every tape, names each bad one in its
    errors, indexes the good one, stays under 500 MB."""
    remote = bare_remote(tmp_path)
    carol = Clone(tmp_path, "carol", remote)
    src = tmp_path / "teammate-tapes"
    src.mkdir()
    names = {}
    for path, data in hostile.items():
        if path in ("good", "trunc") or path.count("/") != 1:
            continue
        name = path.split("/")[1]
        if name in names:
            continue
        (src / name).write_bytes(data)
        names[name] = path
    cfg = carol.engram_home / "config.yml"
    cfg.write_text(cfg.read_text() + f"sources: [{src}]\n")
    run, rss_mb = _run_measured(carol, "ingest")
    assert run.returncode == 0, run.stderr
    res = json.loads(run.stdout)
    assert res["tapes_indexed"] == 1
    named = {Path(e["error"]["path"]).name for e in res["errors"] if "error" in e}
    assert named == set(names) - {f"{hostile['good']}.jsonl.zst"}, named
    print(f"peak RSS {rss_mb:.0f} MB")
    assert rss_mb < RSS_LIMIT_MB, rss_mb
    assert os.listdir(src) and sorted(os.listdir(src)) == sorted(names)  # nothing removed
