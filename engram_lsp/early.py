"""What a fresh server prepares on a thread of its own while its modules import, before it reads
``initialize`` (started by ``engram_lsp.__main__``).

A first code lens on a fresh server is timed from the ``didOpen`` the client sends right after
the handshake; whatever the server does for the first time after that is on its path. Two kinds
of first-time work used to be there, each holding the GIL:

* **pygls' first structuring of each message type**: its converter (cattrs) writes and compiles a
  structuring function for every class it meets the first time (``didOpen`` and ``codeLens``
  ~1.5 ms each; ``initialize`` ~4 ms before the client's capabilities, whose classes depend on
  the client and are left to it, ~12-20 ms; its answer's server capabilities ~10 ms). Here a
  converter is made and taken through those messages first; the server is built with it
  (``converter``), so the handshake itself does less of that work;
* **what a lens counted without the engine needs** (``engram.query.direct``: ``apsw``,
  ``xxhash``, the symbols module, the Python grammar and its first parse): ~16 ms of CPU,
  formerly imported by the preload thread once ``initialize`` was answered, i.e. while the first
  ``didOpen`` was being handled; unless lens counts are kept for the machine's index (then the
  first lenses are read from them, and these imports come with the engine's, after them). The
  engine needs all of it too, so it is not wasted work; but it is CPU spent before the answer to
  an ``initialize`` that is already waiting (as an editor sends it), moved there from the lens.

Neither changes an answer: the same converter (pygls' ``default_converter``), the same modules.
The thread starts after ``heap.keep_heap`` (before any other thread, see ``engram_lsp.heap``)
and works while the main thread imports pygls and lsprotocol, which it needs itself (Python's
import locks make it wait for them, not redo them).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)

_ready = threading.Event()
_primed = None  # the converter taken through the first messages (None: not made)
_started = False

# How long ``converter`` waits for the thread's converter: the main thread only asks once its own
# imports are done (~0.5 s of CPU), by when the thread, sharing the interpreter with it, has
# finished it (~25 ms of work on an idle machine).
_WAIT_S = 3.0

def start() -> None:
    """Start the thread (once)."""
    global _started
    if not _started:
        _started = True
        threading.Thread(target=_run, name="engram-early", daemon=True).start()


def converter():
    """pygls' converter for the server (``converter_factory``): the one this thread primed, or a
    new one when it was not started or failed (the server answers the same either way)."""
    if _started:
        _ready.wait(_WAIT_S)
    if _primed is not None:
        return _primed
    from pygls.protocol import default_converter

    return default_converter()


def _run() -> None:
    global _primed
    try:  # the machine's index into the page cache, while the server starts (``paths.readahead``)
        from engram import paths

        paths.readahead(paths.default_index_path())
    except Exception:  # a hint: the first answers read what they need themselves
        log.debug("reading the index ahead failed", exc_info=True)
    try:
        from pygls.protocol import default_converter

        conv = default_converter()
        prime(conv)
        _primed = conv  # published once whole: only the server uses it from now on
    except Exception:  # a warm-up: the server makes its own converter
        log.debug("priming the converter failed", exc_info=True)
    finally:
        _ready.set()
    try:
        if not _lenses_kept():
            from engram.config import resolve_index_path
            from engram.query import direct

            # the connection the first count reads through, opened here (its schema read, its
            # statements compiled): the machine's index, as for ``_lenses_kept``
            direct.warm(resolve_index_path(Path.cwd(), None))
    except Exception:  # a warm-up: the first lens imports it and reports what fails
        log.debug("importing the lens count failed", exc_info=True)


def _lenses_kept() -> bool:
    """``lenses.kept_for`` the machine's index: a repository's own ``index.path`` is not known
    before ``initialize``, so the machine's index stands for it here (only the timing depends on
    it: with counts kept, the count's imports wait for the engine's, after the first lenses; a
    count of another index opens its own connection)."""
    from engram_lsp import lenses

    return lenses.kept_for(Path.cwd())


def prime(conv) -> None:
    """Take ``conv`` through the messages of a handshake and a first code lens, both ways."""
    from lsprotocol import types

    uri = "file:///early.py"
    doc = {"uri": uri}
    messages = [
        # (the classes of the client's capabilities are structured as they come, in ``initialize``:
        # priming those of one client would only add work for every other)
        ({"processId": None, "rootUri": None, "capabilities": {}, "initializationOptions": {},
          "workspaceFolders": [{"uri": "file:///", "name": "w"}]}, types.InitializeRequest, 0),
        ({}, types.InitializedNotification, None),
        ({"textDocument": {**doc, "languageId": "python", "version": 1, "text": ""}},
         types.DidOpenTextDocumentNotification, None),
        ({"textDocument": doc}, types.CodeLensRequest, 1),
    ]
    for params, cls, msg_id in messages:
        msg = {"jsonrpc": "2.0", "method": cls.__attrs_attrs__.method.default, "params": params}
        if msg_id is not None:
            msg["id"] = msg_id
        conv.structure(msg, cls)
    caps = types.ServerCapabilities(
        position_encoding=types.PositionEncodingKind.Utf16,
        text_document_sync=types.TextDocumentSyncOptions(
            open_close=True, change=types.TextDocumentSyncKind.Incremental,
            save=types.SaveOptions(include_text=False)),
        hover_provider=True, code_lens_provider=types.CodeLensOptions(resolve_provider=False),
        execute_command_provider=types.ExecuteCommandOptions(commands=["engram.explain"]),
        workspace=types.WorkspaceOptions(
            workspace_folders=types.WorkspaceFoldersServerCapabilities(supported=True,
                                                                       change_notifications=True)),
    )
    conv.unstructure(types.InitializeResult(
        capabilities=caps, server_info=types.ServerInfo(name="engram-lsp", version="0")))
