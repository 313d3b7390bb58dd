"""``engram_lsp.early``: the converter a fresh server is built with, taken through the handshake's
and a first lens's messages while the server imports, structures and writes every message as a
new one of pygls does; the thread also leaves the lens count's modules imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lsprotocol import types
from pygls.protocol import default_converter

from engram_lsp import early

# messages as the bench's client and a sparser client send them (other capabilities than the ones
# the converter was taken through)
MESSAGES = [
    ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "processId": 7, "rootUri": "file:///tmp/repo", "initializationOptions": {"a": 1},
        "capabilities": {"workspace": {"configuration": True, "codeLens": {"refreshSupport": True}},
                         "window": {"workDoneProgress": True},
                         "textDocument": {"hover": {"contentFormat": ["markdown", "plaintext"]},
                                          "codeLens": {}}}}}, types.InitializeRequest),
    ({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "processId": None, "rootUri": None, "capabilities": {
            "general": {"positionEncodings": ["utf-8", "utf-16"]},
            "textDocument": {"synchronization": {"didSave": True}, "rename": {"prepareSupport": True}}},
        "workspaceFolders": [{"uri": "file:///tmp/a", "name": "a"}]}}, types.InitializeRequest),
    ({"jsonrpc": "2.0", "method": "initialized", "params": {}}, types.InitializedNotification),
    ({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": "file:///tmp/repo/x.py", "languageId": "python", "version": 3,
        "text": "def f():\n    return 1\n"}}}, types.DidOpenTextDocumentNotification),
    ({"jsonrpc": "2.0", "id": 3, "method": "textDocument/codeLens",
      "params": {"textDocument": {"uri": "file:///tmp/repo/x.py"}}}, types.CodeLensRequest),
]


def test_a_primed_converter_reads_and_writes_as_a_new_one():
    primed, fresh = default_converter(), default_converter()
    early.prime(primed)
    for msg, cls in MESSAGES:
        assert primed.structure(msg, cls) == fresh.structure(msg, cls)
    result = types.InitializeResult(
        capabilities=types.ServerCapabilities(
            hover_provider=True, code_lens_provider=types.CodeLensOptions(resolve_provider=False),
            text_document_sync=types.TextDocumentSyncOptions(
                open_close=True, change=types.TextDocumentSyncKind.Incremental)),
        server_info=types.ServerInfo(name="engram-lsp", version="1"))
    assert primed.unstructure(result) == fresh.unstructure(result)


def test_the_thread_gives_its_converter_and_imports_the_count():
    # a fresh interpreter: what the server's process does at its start (engram_lsp.__main__)
    code = (
        "import json, sys, threading\n"
        "from engram_lsp import early\n"
        "early.start()\n"
        "from engram_lsp.features import lifecycle\n"
        "from engram_lsp.server import create_server\n"
        "server = create_server(converter_factory=early.converter)\n"
        "conv = server.protocol._converter\n"
        "for t in threading.enumerate():\n"
        "    if t.name == 'engram-early':  # (gone once done)\n"
        "        t.join(30)\n"
        "print(json.dumps([conv is early._primed, early.converter() is conv,\n"
        "                  'engram.query.direct' in sys.modules, 'tree_sitter' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert json.loads(out.stdout) == [True, True, True, True]


def test_with_lens_counts_kept_the_count_is_not_imported(tmp_path):
    # kept counts answer the first lenses: the count's modules wait for the engine's import
    import os

    from engram.config import resolve_index_path
    from engram_lsp.lenses import SUFFIX

    store = Path(str(resolve_index_path(tmp_path, None)) + SUFFIX)
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(b"")
    code = (
        "import json, sys, threading\n"
        "from engram_lsp import early\n"
        "early.start()\n"
        "from engram_lsp.server import create_server\n"
        "server = create_server(converter_factory=early.converter)\n"
        "for t in threading.enumerate():\n"
        "    if t.name == 'engram-early':\n"
        "        t.join(30)\n"
        "print(json.dumps([server.protocol._converter is early._primed,\n"
        "                  'engram.query.direct' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, env=dict(os.environ))
    assert json.loads(out.stdout) == [True, False]


def test_without_the_thread_a_new_converter():
    conv = early.converter() if not early._started else None
    if conv is not None:  # (this process did not start it: the factory makes one)
        assert conv is not early._primed
        assert conv.structure(*MESSAGES[-1]) == default_converter().structure(*MESSAGES[-1])


def test_the_thread_reads_the_machines_index_ahead_first(tmp_path):
    # before anything else the thread asks the kernel for the machine's index (paths.readahead):
    # a first answer from a cold page cache read its pages one disk read at a time
    import os

    index = tmp_path / "home" / "index" / "index.sqlite"
    index.parent.mkdir(parents=True)
    index.write_bytes(b"\0" * 10_000)
    code = (
        "import json, threading\n"
        "from engram import paths\n"
        "calls = []\n"
        "real = paths.readahead\n"
        "paths.readahead = lambda p, *a: calls.append((str(p), real(p, *a))) or calls[-1][1]\n"
        "from engram_lsp import early\n"
        "early.start()\n"
        "for t in threading.enumerate():\n"
        "    if t.name == 'engram-early':\n"
        "        t.join(30)\n"
        "print(json.dumps(calls))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True, env=dict(os.environ, ENGRAM_HOME=str(tmp_path / "home")),
                         cwd=tmp_path)
    assert json.loads(out.stdout) == [[str(index), 10_000]]
