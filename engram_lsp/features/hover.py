"""LSP method ``textDocument/hover``: the sessions behind the block under the cursor.

The block is the innermost function/class around the hovered line (``Engine.enclosing_block``),
else the surrounding chunk. One ``explain_blocks`` call answers from the index (plus one transcript window);
the result is cached per buffer version and index generation, and computed ahead for every block
of an opened file while the client is quiet (``ahead_steps``). No sessions → ``null``, never an
error. The card's format is in ``engram_lsp.render``.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from lsprotocol import types

from engram_lsp import documents, render
from engram_lsp.commits import SpanCommits
from engram_lsp.params import lsp_range

log = logging.getLogger(__name__)

HOVER_BEFORE, HOVER_AFTER = 8, 6  # events read around the anchor to find the assistant's words
NOTE_HARNESS = "engram"  # the harness of note tapes (``engram note``)
AHEAD_BLOCKS = 32  # blocks per ``explain_blocks`` call when a document's hovers are computed ahead
_TABLES = 64  # open buffers whose kept block table is remembered (``_enclosing_block``)
_SPLIT = 8  # open buffers whose lines are remembered (``_lines``)


class _PerBuffer:
    """What was derived from an open buffer's text, for the last ``size`` buffers: valid while
    the buffer holds the same ``str`` (a change gives it a new one)."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[str, tuple] = OrderedDict()  # uri → (text, key, value)
        self._lock = threading.Lock()

    def get(self, doc: documents.Doc, text: str, key=None):
        with self._lock:
            hit = self._items.get(doc.uri)
        return hit[2] if hit is not None and hit[0] is text and hit[1] == key else None

    def __getitem__(self, uri: str) -> tuple:
        """``(text, value)`` remembered for ``uri``."""
        with self._lock:
            text, _key, value = self._items[uri]
        return text, value

    def put(self, doc: documents.Doc, text: str, value, key=None) -> None:
        if doc.text is None:  # not an open buffer: its text is read again each time
            return
        with self._lock:
            self._items[doc.uri] = (text, key, value)
            self._items.move_to_end(doc.uri)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


_tables = _PerBuffer(_TABLES)  # the kept block table, for the buffer's text and path
_split = _PerBuffer(_SPLIT)  # its lines

def hover_block(engine, backend, doc: documents.Doc, line: int):
    """(start, end, explain_blocks entry or None) for 1-based ``line``; runs on the query thread."""
    text = doc.source()
    start, end = _enclosing_block(engine, backend, doc, text, line)

    def compute():
        # only the block's own text is fingerprinted (not the whole file), shared with code lens
        lines = _lines(doc, text)[start - 1 : end]
        result = backend.block_results(engine, doc.file, "\n".join(lines) + "\n", [(1, len(lines))])
        block = {**result[0], "range": [start, end]} if result else None
        top = (block or {}).get("top")
        if block and block.get("sessions") and isinstance(top, dict):
            block = {**block, "top": _with_window(engine, doc, text, start, end, top)}
            # a note among several sessions (or the best one): its kind and text, warnings first
            # (the extra explain only where the index holds notes at all)
            if top.get("harness") == NOTE_HARNESS or (
                    block["sessions"] > 1 and backend.cached(("has_notes",), lambda: _has_notes(engine))):
                block["notes"] = _notes(engine, doc, text, start, end)
        return block

    key = ("hover", doc.uri, doc.version if doc.text is not None else hash(text), start, end)
    return start, end, backend.cached(key, compute)


def _enclosing_block(engine, backend, doc: documents.Doc, text: str, line: int) -> tuple[int, int]:
    """``Backend.enclosing_block``, with the kept block table of an open buffer remembered for
    its text (the same ``str`` until the buffer changes): its hovers do not find the kept file
    again each time (0.1 ms of path building and ``stat``)."""
    table = _tables.get(doc, text, doc.path)
    if table is None:
        table = backend.kept_block_table(doc.path, text)
        if table is None:
            return engine.enclosing_block(text, doc.path, line)
        _tables.put(doc, text, table, doc.path)
    return engine.table_block(table, line)


def _lines(doc: documents.Doc, text: str) -> list[str]:
    """``text.split("\\n")``, remembered for an open buffer's text (the same ``str`` until it
    changes): a hover computed on demand, and each block's hover computed ahead, cut their block
    from it instead of splitting the whole file again (0.2-0.5 ms for a 3,000-line file)."""
    lines = _split.get(doc, text)
    if lines is None:
        lines = text.split("\n")
        _split.put(doc, text, lines)
    return lines


def ahead_steps(engine, backend, doc: documents.Doc):
    """The hover of every block of an opened document computed ahead, as its hovers compute it
    (``hover_block``: the same entries, cached per index generation and buffer version), in steps
    (a generator: ``Backend.warm`` runs them between requests, while the client is quiet). First
    the blocks' sessions, ``AHEAD_BLOCKS`` blocks per ``explain_blocks`` call, then each block's
    card data (its best session's window), one block per step."""
    text = doc.source()
    if not text:
        return
    table = backend.kept_block_table(doc.path, text)
    if table is None:  # not kept: from the parse (the open's, cached by text)
        table = engine.block_table(text, doc.path)
        yield
    if not table:
        return
    first_line: dict[tuple[int, int], int] = {}
    for first, _last, start, end in table:
        first_line.setdefault((start, end), first)
    blocks = sorted(first_line)
    for i in range(0, len(blocks), AHEAD_BLOCKS):
        backend.block_results(engine, doc.file, text, blocks[i : i + AHEAD_BLOCKS])
        yield
    for block in blocks:
        hover_block(engine, backend, doc, first_line[block])
        yield


def _has_notes(engine) -> bool:
    """Whether the index holds any note (``engram note``); asked once per index generation."""
    try:
        return engine.has_tapes_of(NOTE_HARNESS)
    except Exception:
        log.debug("listing the tapes failed", exc_info=True)
        return True


def _notes(engine, doc, text, start, end) -> list[dict]:
    """The notes on the block (``engram note``), warnings first, from a brief explain."""
    try:
        result = engine.explain(doc.file, start, end, text=text, before=0, after=0, brief=True,
                                window_sessions=0)
    except Exception:  # the card still shows the sessions without the notes
        log.debug("explain for the hover's notes failed", exc_info=True)
        return []
    return [s["note"] for s in result.get("sessions") or [] if isinstance(s.get("note"), dict)]


def _with_window(engine, doc, text, start, end, top: dict) -> dict:
    """The best session with a window holding the request and the assistant's nearest words.

    Uses the window ``explain_blocks`` gave; for an entry a code lens computed (no windows), the
    one the hover's own ``explain_blocks`` gives, read for its anchor event alone
    (``Engine.block_window``), else (an entry naming no event the index holds) a brief explain's;
    when that window holds no assistant message, reads a wider one around the same anchor.
    """
    windows = top.get("windows")
    if not windows:
        w = engine.block_window(top)
        if w is not None:
            top = {**top, "windows": [w]}
            windows = top["windows"]
    if not windows:
        try:
            result = engine.explain(doc.file, start, end, text=text, before=0, after=0, brief=True)
        except Exception:  # the card still shows counts without the quote
            log.debug("explain for the hover window failed", exc_info=True)
            return top
        sessions = result.get("sessions") or []
        match = next((x for x in sessions if x.get("tape_id") == top.get("tape_id")), None)
        match = match or (sessions[0] if sessions else None)
        if match is None or not match.get("windows"):
            return top
        top = {**top, **{k: v for k, v in match.items() if k not in top or k == "windows"}}
        windows = top["windows"]
    window = windows[0]
    events = window.get("events") or []
    anchor = window.get("anchor")
    if isinstance(anchor, int) and not any(e.get("k") == "msg.out" for e in events):
        try:
            wide = engine.view(top["tape_id"], anchor, before=HOVER_BEFORE, after=HOVER_AFTER)
            window = {**window, "events": wide.get("events") or events}
        except Exception:
            log.debug("view for the hover window failed", exc_info=True)
    return {**top, "windows": [window, *windows[1:]]}


def register(server) -> None:
    server.span_commits = SpanCommits()

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls, params: types.HoverParams) -> dict | None:
        if not ls.settings.hover_enabled or not params.text_document.uri.startswith("file:"):
            return None
        doc = documents.resolve(ls, params.text_document.uri)
        backend = ls.get_backend()

        def card(found) -> dict | None:
            start, end, block = found
            if not block or not block.get("sessions"):
                return None
            # the commits known for the block (never waited for: see ``engram_lsp.commits``)
            block = {**block, "commits": ls.span_commits.get(backend, doc, start, end)}
            # a ``Hover`` as JSON (written out as it is, see ``server.EngramProtocol``)
            return {
                "contents": {
                    "kind": types.MarkupKind.Markdown.value,
                    "value": render.hover_markdown(block, doc.uri, start, end),
                },
                "range": lsp_range(start, end),
            }

        # the card is made and written on the query thread (``EngramLanguageServer.answering``)
        return await ls.run(ls.answering(hover_block, card), backend, doc,
                            params.position.line + 1, quiet=lambda: None)

