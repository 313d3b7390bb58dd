"""pytest-lsp end-to-end fixtures: the real ``engram-lsp`` process on a temp workspace.

``lsp(...)`` starts the server with ``HOME``/``ENGRAM_HOME`` pointing into the workspace (so the
Claude Code adapter finds the copied log at its default location), initializes a session rooted at
the workspace's repo and shuts it down after the test. Server→client requests the tests look at
(``workspace/codeLens/refresh``, ``window/showMessageRequest``) are recorded on the client.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import client_capabilities
from pytest_lsp.client import make_test_lsp_client

sys.path.insert(0, str(Path(__file__).parent))
import workspaces  # noqa: E402
from lsp_helpers import call  # noqa: E402


@pytest.fixture
def ws(tmp_path) -> workspaces.Workspace:
    return workspaces.make_workspace(tmp_path)


@pytest_asyncio.fixture
async def lsp():
    """Factory: ``await lsp(ws, init_options=..., capabilities=..., configuration=...)``."""
    started = []

    async def start(
        ws,
        *,
        init_options=None,
        capabilities="visual-studio-code",
        configuration=None,
        initialize=True,
        rebuild_answer=None,
    ):
        client = make_test_lsp_client()
        client.refresh_requests = 0
        client.message_requests = []

        @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
        def _refresh(params):
            client.refresh_requests += 1

        @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
        def _ask(params: types.ShowMessageRequestParams):
            client.message_requests.append(params)
            if rebuild_answer and params.actions:
                for action in params.actions:
                    if action.title == rebuild_answer:
                        return action
            return None

        if configuration is not None:
            client.set_configuration(configuration, section="engram")
        await client.start_io(
            sys.executable,
            "-m",
            "engram_lsp",
            "--log-file",
            str(ws.base / "server.log"),
            env=ws.env(),
        )
        started.append(client)
        if initialize:
            caps = (
                client_capabilities(capabilities) if isinstance(capabilities, str) else capabilities
            )
            client.init_result = await call(
                client.initialize_session(
                    types.InitializeParams(
                        capabilities=caps,
                        root_uri=ws.root.as_uri(),
                        workspace_folders=[
                            types.WorkspaceFolder(uri=ws.root.as_uri(), name="repo")
                        ],
                        initialization_options=init_options,
                    )
                )
            )
        return client

    yield start
    for client in started:
        try:
            if not client.stopped:
                await asyncio.wait_for(client.shutdown_session(), 10)
        except Exception:
            pass
        try:
            await asyncio.wait_for(client.stop(), 10)
        except Exception:
            pass
