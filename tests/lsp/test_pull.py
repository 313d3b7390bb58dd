"""``sharing.autoPull``: the language server pulls the team's tapes in the background (real git: a
bare remote, a teammate's clone that pushes, the editor's clone that has none of their logs)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from lsp_helpers import hover, open_doc, plain, request, wait_indexed
from waiting import async_wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "share"))
from gitworld import Clone, bare_remote  # noqa: E402

pytestmark = pytest.mark.e2e

BETA = ("class RetryBudget:\n"
        "    def __init__(self, attempts, backoff_seconds):\n"
        "        self.attempts = attempts\n"
        "        self.backoff_seconds = backoff_seconds\n\n"
        "    def delays(self):\n"
        "        return [self.backoff_seconds * 2 ** n for n in range(self.attempts)]\n")


class _Editor:
    """The workspace the server runs in: a clone with its own HOME/ENGRAM_HOME (the lsp fixture
    takes ``root``, ``base``, ``env()`` and ``uri()``)."""

    def __init__(self, clone: Clone):
        self.clone, self.root, self.base = clone, clone.root, clone.base

    def env(self) -> dict:
        return self.clone.env()

    def uri(self, rel: str) -> str:
        return (self.root / rel).as_uri()


@pytest.fixture
def team(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    remote = bare_remote(tmp_path)
    bob = Clone(tmp_path, "bob", remote)
    bob.world.session(session_id="bbbbbbbb-0000-0000-0000-000000000001") \
        .user("a retry budget with exponential backoff").write("src/beta.py", BETA).save()
    bob.commit_code("beta")
    bob.engram("ingest", "--seal")  # only sealed tapes are pushed
    bob.engram("push")
    alice = Clone(tmp_path, "alice", remote)
    alice.git("pull", "--quiet", "origin", "main")
    return _Editor(alice)


async def _status(client) -> dict:
    return plain(await request(client, "engram/status", {}))


async def test_auto_pull_brings_a_teammates_session_to_the_hover(lsp, team):
    client = await lsp(team, configuration={"sharing": {"autoPull": True, "pullInterval": 60}})
    await wait_indexed(client)
    uri = open_doc(client, team, "src/beta.py")

    async def pulled():
        state = (await _status(client))["server"]["pull"]
        return state if state and state["pulls"] >= 1 else None

    state = await async_wait_until(pulled, 60, interval=0.2, message="a background pull")
    assert state["enabled"] is True and state["interval"] == 60
    assert state["last"]["new"] == 1 and state["last"]["remote"] == "origin"
    assert state["last_error"] is None

    async def shows_bob():
        result = await hover(client, uri, 2)
        return result.contents.value if result else None

    md = await async_wait_until(shows_bob, 60, interval=0.3, message="bob's session in the hover")
    assert "a retry budget with exponential backoff" in md
    # the server never pushes: the remote still holds bob's one tape
    ls_remote = team.clone.git("ls-remote", "origin", "refs/engram/tapes").stdout.split()
    assert ls_remote and ls_remote[0] == state["last"]["commit"]


async def test_no_pull_unless_asked(lsp, team):
    client = await lsp(team)
    await wait_indexed(client)

    async def pull_state():  # the pull loop starts once the startup ingest's watcher is set up
        return (await _status(client))["server"]["pull"]

    state = await async_wait_until(pull_state, 60, interval=0.1, message="the pull loop")
    assert state["enabled"] is False and state["pulls"] == 0
    uri = open_doc(client, team, "src/beta.py")
    assert await hover(client, uri, 2) is None  # bob's session never came
