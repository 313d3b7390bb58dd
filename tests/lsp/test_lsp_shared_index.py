"""Two editor windows on two repositories share the machine's one index: the second window's
startup ingest reads nothing again, and its lenses and hovers answer at once from what the
first window indexed (the real ``engram-lsp`` processes, pytest-lsp)."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from lsp_helpers import hover, lenses, open_doc, request, wait_indexed

pytestmark = pytest.mark.asyncio


async def test_a_second_window_reads_nothing_again(lsp, ws):
    first = await lsp(ws)
    status = await wait_indexed(first)
    assert status.server.last_ingest.parsed >= 1
    assert status.index == str(ws.engram_home / "index" / "index.sqlite")

    other = ws.base / "other-repo"  # a second repository with the same code (a fork, a copy)
    shutil.copytree(ws.root, other)
    second_ws = dataclasses.replace(ws, root=other)
    second = await lsp(second_ws)
    status2 = await wait_indexed(second)
    assert status2.index == status.index
    assert status2.server.last_ingest.parsed == 0  # the machine already indexed every log
    rel = next(iter(ws.files))
    uri = open_doc(second, second_ws, rel)
    shown = await lenses(second, uri)
    assert shown and "session" in shown[0].command.title
    got = await hover(second, uri, shown[0].range.start.line)
    assert got is not None and ws.session[:8] in got.contents.value
    assert (await request(first, "engram/status", {})).index == status.index
