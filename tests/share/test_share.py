"""``engram push`` / ``engram pull`` / ``engram share`` with real git: a bare remote and clones
with separate HOMEs and ENGRAM_HOMEs, real Claude Code logs, ``engram`` as a real process."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest
from gitworld import Clone, bare_remote, git, remote_tapes

ALPHA = ("def parse_pairs(text):\n"
         "    items = [line.split('=', 1) for line in text.splitlines() if '=' in line]\n"
         "    return {key.strip(): value.strip() for key, value in items}\n")
ALPHA2 = ALPHA + ("\n\ndef dump_pairs(pairs):\n"
                  "    return '\\n'.join(f'{key} = {value}' for key, value in sorted(pairs.items()))\n")
BETA = ("class RetryBudget:\n"
        "    def __init__(self, attempts, backoff_seconds):\n"
        "        self.attempts = attempts\n"
        "        self.backoff_seconds = backoff_seconds\n\n"
        "    def delays(self):\n"
        "        return [self.backoff_seconds * 2 ** n for n in range(self.attempts)]\n")
SECRET_OUTSIDE = ("def unrelated_side_project(widget_count):\n"
                  "    return sum(widget * 3 for widget in range(widget_count)) + 17\n")


def _in_repo_tapes(clone: Clone) -> set[str]:
    return {t["tape_id"] for t in clone.json("tapes")
            if t["cwd"] and t["cwd"].startswith(str(clone.root))}


def _sessions(result: dict) -> list[str]:
    return [s["session"] for s in result["sessions"]]


@pytest.fixture
def team(tmp_path):
    remote = bare_remote(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    alice = Clone(tmp_path, "alice", remote, extra_logs=[outside / "logs"])
    bob = Clone(tmp_path, "bob", remote)
    return remote, alice, bob, outside


def _alice_work(alice: Clone) -> None:
    alice.world.session(session_id="aaaaaaaa-0000-0000-0000-000000000001") \
        .user("write a parser for key=value lines").write("src/alpha.py", ALPHA).save()
    alice.world.session(session_id="aaaaaaaa-0000-0000-0000-000000000002") \
        .user("add dump_pairs").write("src/alpha.py", ALPHA2).save()
    alice.commit_code("alpha")


def _bob_work(bob: Clone) -> None:
    bob.world.session(session_id="bbbbbbbb-0000-0000-0000-000000000001") \
        .user("a retry budget with exponential backoff").write("src/beta.py", BETA).save()
    bob.commit_code("beta")


def _outside_session(alice: Clone, outside: Path) -> None:
    """A session of alice's in another project (its cwd is not inside the repository)."""
    from claude_log import World

    class Elsewhere(World):
        def write_config(self) -> None:
            pass

    w = Elsewhere(outside)
    w.session(session_id="cccccccc-0000-0000-0000-00000000000c") \
        .user("my side project").write("side.py", SECRET_OUTSIDE).save()


def test_two_push_third_pulls_and_explains(team, tmp_path):
    remote, alice, bob, outside = team
    _alice_work(alice)
    _outside_session(alice, outside)
    alice.json("ingest", "--seal")
    mine = _in_repo_tapes(alice)
    everything = {t["tape_id"] for t in alice.json("tapes")}
    outside_ids = everything - mine
    assert len(mine) == 2 and len(outside_ids) == 1
    head, status = alice.git("rev-parse", "HEAD").stdout, alice.git("status", "--porcelain").stdout

    dry = alice.json("push", "--dry-run")
    assert dry["dry_run"] and dry["pushed"] == 0
    assert {t["tape_id"] for t in dry["tapes"]} == mine
    assert {t["reason"] for t in dry["tapes"]} == {"cwd"}
    assert remote_tapes(remote) == []  # a dry run sends nothing

    first = alice.json("push")
    assert first["pushed"] == 2 and sorted(remote_tapes(remote)) == sorted(mine)
    # nothing on any branch, no change to alice's HEAD, index or working tree
    refs = git("for-each-ref", "--format=%(refname)", cwd=remote).stdout.split()
    assert refs == ["refs/engram/tapes", "refs/heads/main"]
    assert alice.git("rev-parse", "HEAD").stdout == head
    assert alice.git("status", "--porcelain").stdout == status
    tip = git("rev-parse", "refs/engram/tapes", cwd=remote).stdout

    again = alice.json("push")  # nothing new: nothing pushed, the ref unchanged
    assert again["pushed"] == 0 and again["tapes"] == []
    assert git("rev-parse", "refs/engram/tapes", cwd=remote).stdout == tip

    _bob_work(bob)
    bob.json("ingest", "--seal")
    theirs = _in_repo_tapes(bob)
    assert bob.json("push")["pushed"] == 1
    on_remote = set(remote_tapes(remote))
    assert on_remote == mine | theirs
    assert not on_remote & outside_ids  # a session outside the repository never leaves

    carol = Clone(tmp_path, "carol", remote)  # no logs of her own
    pulled = carol.json("pull")
    assert (pulled["new"], pulled["rejected"], pulled["ingest"]["tapes_indexed"]) == (3, [], 3)
    assert {t["tape_id"] for t in carol.json("tapes")} == on_remote
    alpha = carol.json("explain", "src/alpha.py:1-3")
    assert set(_sessions(alpha)) >= {"aaaaaaaa-0000-0000-0000-000000000001"}
    dump = carol.json("explain", "src/alpha.py:6-7")
    assert _sessions(dump)[0] == "aaaaaaaa-0000-0000-0000-000000000002"
    beta = carol.json("explain", "src/beta.py:1-7")
    assert _sessions(beta) == ["bbbbbbbb-0000-0000-0000-000000000001"]
    # the same answer as in the clone that wrote the code
    for span in ("src/alpha.py:1-3", "src/alpha.py:6-7"):
        mine_ans, theirs_ans = alice.json("explain", span), carol.json("explain", span)
        for ans in (mine_ans, theirs_ans):
            ans.get("stats", {}).pop("elapsed_ms", None)
        assert mine_ans == theirs_ans, span
    # pulled tapes are private to carol, named by their ids only
    pulled_dir = Path(pulled["dir"])
    assert stat.S_IMODE(pulled_dir.stat().st_mode) == 0o700
    assert sorted(p.name for p in pulled_dir.iterdir()) == sorted(
        f"{t}.jsonl.zst" for t in on_remote)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in pulled_dir.iterdir())
    # a second pull: nothing new
    assert carol.json("pull")["new"] == 0


def test_concurrent_pushes_union(tmp_path):
    remote = bare_remote(tmp_path)
    # a slow pre-receive makes the two pushes overlap on the server: one must lose the race
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\ncat >/dev/null\nsleep 2\nexit 0\n")
    hook.chmod(0o755)
    dave, erin = Clone(tmp_path, "dave", remote), Clone(tmp_path, "erin", remote)
    for i, c in enumerate((dave, erin)):
        for j in range(3):
            c.world.session(session_id=f"{i + 1:08d}-0000-0000-0000-{j:012d}") \
                .user(f"module {i} part {j}") \
                .write(f"src/m{i}_{j}.py", f"def part_{i}_{j}(x):\n    return x * {i * 10 + j} + 1\n") \
                .save()
        c.json("ingest", "--seal")
    ids = _in_repo_tapes(dave) | _in_repo_tapes(erin)
    assert len(ids) == 6
    procs = [c.popen("push") for c in (dave, erin)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    results = [json.loads(o[0]) for o in outs]
    assert set(remote_tapes(remote)) == ids  # no tape lost
    assert sum(r["pushed"] for r in results) == 6
    assert sum(r["retries"] for r in results) >= 1  # the loser fetched, unioned and retried
    # one line of history per successful push, the second on top of the first
    log = git("log", "--format=%s", "refs/engram/tapes", cwd=remote).stdout.split("\n")
    assert log[:2] == ["engram: 3 tapes", "engram: 3 tapes"]
    # a third clone, with no logs, explains what both wrote
    frank = Clone(tmp_path, "frank", remote)
    assert frank.json("pull")["new"] == 6
    for i in (0, 1):
        ans = frank.json("explain", "--stdin", input=f"def part_{i}_2(x):\n    return x * {i * 10 + 2} + 1\n")
        assert ans["sessions"][0]["session"] == f"{i + 1:08d}-0000-0000-0000-000000000002"


def test_pre_receive_rejection_quotes_the_hook(team):
    remote, alice, _bob, _outside = team
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\ncat >/dev/null\n"
                    "echo 'transcripts may not be pushed here (policy SEC-7)' >&2\nexit 1\n")
    hook.chmod(0o755)
    _alice_work_no_push_main(alice)
    alice.json("ingest", "--seal")
    run = alice.engram("push", check=False)
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("Error: ") and "Traceback" not in run.stderr
    assert "policy SEC-7" in run.stderr and "refused" in run.stderr
    assert remote_tapes(remote) == []


def _alice_work_no_push_main(alice: Clone) -> None:
    alice.world.session().user("write a parser").write("src/alpha.py", ALPHA).save()


def test_share_adds_an_outside_session(team):
    _remote, alice, _bob, outside = team
    _outside_session(alice, outside)
    alice.world.session().user("in repo").write("src/alpha.py", ALPHA).save()
    alice.json("ingest", "--seal")
    outside_id = next(iter({t["tape_id"] for t in alice.json("tapes")} - _in_repo_tapes(alice)))
    assert outside_id not in {t["tape_id"] for t in alice.json("push", "--dry-run")["tapes"]}
    shared = alice.json("share", outside_id[:10])
    assert shared["added"] == [outside_id] and shared["shared"] == [outside_id]
    listing = Path(shared["list"])
    assert stat.S_IMODE(listing.stat().st_mode) == 0o600
    assert str(listing).startswith(str(alice.root / ".git"))  # per clone, never committed
    dry = {t["tape_id"]: t["reason"] for t in alice.json("push", "--dry-run")["tapes"]}
    assert dry[outside_id] == "shared" and len(dry) == 2
    assert alice.json("share")["shared"] == [outside_id]  # no TAPE: the list


def test_bad_input_is_one_line(team, tmp_path):
    _remote, alice, _bob, _outside = team
    for argv, needle in ((("push", "nosuchremote"), "nosuchremote"),
                         (("pull", "--", "--upload-pack=touch /tmp/x"), "not a git remote"),
                         (("share", "ffffffffffff"), "ffffffffffff")):
        run = alice.engram(*argv, check=False)
        assert run.returncode == 1 and run.stderr.startswith("Error: "), (argv, run.stderr)
        assert run.stderr.count("\n") == 1 and needle in run.stderr, (argv, run.stderr)
    plain = tmp_path / "plain"
    plain.mkdir()
    run = alice.engram("push", "--root", str(plain), check=False)
    assert run.returncode == 1 and "not inside a git repository" in run.stderr, run.stderr


def test_corrupt_local_tape_is_not_pushed(team):
    remote, alice, _bob, _outside = team
    alice.world.session().user("write").write("src/alpha.py", ALPHA).save()
    alice.json("ingest", "--seal")
    good = _in_repo_tapes(alice)
    bad = alice.root / ".engram" / "tapes" / ("0" * 32 + ".jsonl.zst")
    bad.write_bytes(b"not zstd at all")
    res = alice.json("push")
    assert res["pushed"] == 1 and set(remote_tapes(remote)) == good
    assert [e["tape_id"] for e in res["errors"]] == ["0" * 32]


def test_push_after_rejection_is_fast_forward_only(team):
    """The ref's history only grows: every push is a child of the remote's tip (never forced)."""
    remote, alice, bob, _outside = team
    _alice_work(alice)
    alice.json("ingest", "--seal")
    alice.json("push")
    first = git("rev-parse", "refs/engram/tapes", cwd=remote).stdout.strip()
    _bob_work(bob)
    bob.json("ingest", "--seal")
    time.sleep(0.01)
    bob.json("push")
    parent = git("rev-parse", "refs/engram/tapes^", cwd=remote).stdout.strip()
    assert parent == first


def test_a_separate_private_remote_and_the_tape_cap(tmp_path):
    """``sharing.remote`` names another repository (transcripts kept off the code remote);
    ``sharing.maxTapeBytes`` caps what a pull accepts."""
    code = bare_remote(tmp_path)
    private = tmp_path / "transcripts.git"
    git("init", "--quiet", "--bare", str(private), cwd=tmp_path)
    alice, carol = Clone(tmp_path, "alice", code), Clone(tmp_path, "carol", code)
    for c in (alice, carol):
        cfg = c.engram_home / "config.yml"
        cfg.write_text(cfg.read_text() + f"sharing:\n  remote: {private}\n")
    big = "".join(f"def generated_function_{i}(value):\n    return value * {i} + {i * 7}\n\n"
                  for i in range(30_000))  # ~1.5 MB of code in one session
    alice.world.session().user("small").write("src/alpha.py", ALPHA).save()
    alice.world.session().user("big").write("src/big.py", big).save()
    alice.json("ingest", "--seal")
    res = alice.json("push")
    assert res["remote"] == str(private) and res["pushed"] == 2
    assert len(remote_tapes(private)) == 2 and remote_tapes(code) == []
    cfg = carol.engram_home / "config.yml"
    cfg.write_text(cfg.read_text() + "  maxTapeBytes: 1048576\n")
    pulled = carol.json("pull")
    assert pulled["remote"] == str(private) and pulled["new"] == 1
    assert len(pulled["rejected"]) == 1
    assert "more than the 1048576" in pulled["rejected"][0]["error"]


def test_a_note_made_in_the_repository_is_shared(team, tmp_path):
    remote, alice, _bob, _outside = team
    _alice_work(alice)
    alice.json("ingest", "--seal")
    alice.json("note", "src/alpha.py:1-3", "keys are stripped; values may hold '='",
               "--kind", "warning")
    dry = alice.json("push", "--dry-run")["tapes"]
    notes = [t for t in dry if t["harness"] == "engram"]
    assert len(notes) == 1 and len(dry) == 3
    alice.json("push")
    carol = Clone(tmp_path, "carol", remote)
    carol.json("pull")
    ans = carol.json("explain", "src/alpha.py:1-3")
    assert any(s.get("note", {}).get("kind") == "warning" for s in ans["sessions"])


def test_pulled_tapes_are_not_pushed_again_elsewhere(tmp_path):
    """A teammate's clone at the same path as yours: their pulled sessions' cwd is inside your
    repository, yet they are theirs; pushing to another remote (a fork) does not publish them."""
    import shutil

    remote, fork = bare_remote(tmp_path), tmp_path / "fork.git"
    git("init", "--quiet", "--bare", str(fork), cwd=tmp_path)
    alice = Clone(tmp_path, "dev", remote)
    _alice_work(alice)
    alice.json("ingest", "--seal")
    assert alice.json("push")["pushed"] == 2
    shutil.rmtree(alice.base)  # another machine, same path: /.../dev/repo
    carol = Clone(tmp_path, "dev", remote)
    assert carol.json("pull")["new"] == 2
    assert all(t["cwd"].startswith(str(carol.root)) for t in carol.json("tapes"))
    carol.git("remote", "add", "fork", str(fork))
    res = carol.json("push", "fork")
    assert (res["pushed"], res["tapes"]) == (0, [])
    assert remote_tapes(fork) == []


def test_a_stale_push_is_rejected_then_fetches_unions_and_retries(tmp_path):
    """Dave builds his commit on the ref as he fetched it; before it goes out, his own pre-push
    hook lets Erin push first (real hooks, real processes). The remote refuses Dave's push (not a
    fast-forward); Dave fetches, adds his tapes to Erin's and pushes again."""
    remote = bare_remote(tmp_path)
    dave, erin = Clone(tmp_path, "dave", remote), Clone(tmp_path, "erin", remote)
    for i, c in enumerate((dave, erin)):
        for j in range(3):
            c.world.session(session_id=f"{i + 5:08d}-0000-0000-0000-{j:012d}") \
                .user(f"part {j}").write(f"src/p{i}_{j}.py", f"def p_{i}_{j}():\n    return {j}\n") \
                .save()
        c.json("ingest", "--seal")
    mark = tmp_path / "erin-pushed"
    env = " ".join(f"{k}={v}" for k, v in (("HOME", erin.home), ("ENGRAM_HOME", erin.engram_home)))
    hook = dave.root / ".git" / "hooks" / "pre-push"
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\nif [ ! -e {mark} ]; then touch {mark}; "
                    f"cd {erin.root} && env -u GIT_DIR {env} {sys.executable} -m engram.cli push "
                    f">{tmp_path / 'erin.json'} 2>&1; fi\nexit 0\n")
    hook.chmod(0o755)
    res = dave.json("push")
    erin_res = json.loads((tmp_path / "erin.json").read_text())
    assert erin_res["pushed"] == 3 and erin_res["retries"] == 0
    assert res["pushed"] == 3 and res["retries"] == 1 and res["on_remote"] == 6
    assert set(remote_tapes(remote)) == _in_repo_tapes(dave) | _in_repo_tapes(erin)
    subjects = git("log", "--format=%an %s", "refs/engram/tapes", cwd=remote).stdout.split("\n")
    assert subjects[:2] == ["dave engram: 3 tapes", "erin engram: 3 tapes"]


def test_a_committed_sharing_remote_must_be_a_remote_of_the_clone(team, tmp_path):
    """A commit that sets sharing.remote in .engram/config.yml to a repository of its author's
    choosing does not make anyone's push go there."""
    remote, alice, _bob, _outside = team
    elsewhere = tmp_path / "attacker.git"
    git("init", "--quiet", "--bare", str(elsewhere), cwd=tmp_path)
    (alice.root / ".engram").mkdir(exist_ok=True)
    (alice.root / ".engram" / "config.yml").write_text(f"sharing:\n  remote: {elsewhere}\n")
    alice.world.session().user("write").write("src/alpha.py", ALPHA).save()
    alice.json("ingest", "--seal")
    for cmd in ("push", "pull"):
        run = alice.engram(cmd, check=False)
        assert run.returncode == 1 and "not a remote of this clone" in run.stderr, run.stderr
        assert run.stderr.count("\n") == 1
    assert remote_tapes(elsewhere) == [] and remote_tapes(remote) == []
    alice.git("remote", "add", "transcripts", str(elsewhere))  # the user's own decision
    assert alice.json("push")["pushed"] == 1  # its URL is now a remote of the clone
    (alice.root / ".engram" / "config.yml").write_text("sharing:\n  remote: transcripts\n")
    assert alice.json("push", "--dry-run")["remote"] == "transcripts"
    assert len(remote_tapes(elsewhere)) == 1 and remote_tapes(remote) == []


def test_a_tape_with_a_secret_todays_rules_find_is_not_pushed(team):
    """A tape written by an older Engram (weaker redaction) still holding a token: push scans
    every tape that would leave with today's rules, reports it and sends the others."""
    from engram.tape.writer import write_tape

    remote, alice, _bob, _outside = team
    alice.world.session().user("write").write("src/alpha.py", ALPHA).save()
    alice.json("ingest", "--seal")
    good = _in_repo_tapes(alice)
    old = write_tape(alice.root / ".engram" / "tapes", [
        {"k": "meta", "t": "2025-01-01T00:00:00Z", "harness": "claude_code", "session": "old",
         "cwd": str(alice.root), "label": "deploy"},
        {"k": "msg.in", "t": "2025-01-01T00:00:01Z",
         "text": "export GITHUB_TOKEN=ghp_x7Kq9Lm2Pw4Rt8Yz1Bc5Df3Gh6Jk0Nv2Qs4Wu"}])
    res = alice.json("push")
    assert res["pushed"] == 1 and set(remote_tapes(remote)) == good
    assert [e["tape_id"] for e in res["errors"]] == [old.tape_id]
    assert "redaction rules find 1 secret" in res["errors"][0]["error"]
    assert "ghp_" not in json.dumps(res)  # the report names the tape, never the secret
