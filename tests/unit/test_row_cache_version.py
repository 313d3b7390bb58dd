"""A read connection's row cache and memos (``engram.index.queries``) after another connection
commits: ``Connection.data_version()`` keeps the version the connection last read until it reads
a table again, so a request's first lookups after an ingest would be served from before it. Each
request starts with one ``PRAGMA data_version`` (``Engine.refresh``) on the thread that answers
it: the language server's query threads, the MCP server's calls and ``engram serve``'s kept
engines."""

from __future__ import annotations

import argparse

from engram import commands
from engram.engine import Engine
from engram.index import db, queries
from engram.mcp.server import EngramMCP
from engram_lsp.backend import Backend
from engram_lsp.settings import Settings


def _index(tmp_path):
    path = tmp_path / "index.sqlite"
    db.connect(path, create=True).close()
    return path


def _add_ref(path, block: int, event: int) -> None:
    """Another connection's commit, as an ingest's: a new reference to a block."""
    w = db.connect(path, create=False)
    with w:
        w.execute("INSERT INTO refs(block, event, role, line0) VALUES (?, ?, 0, 0)", (block, event))
    w.close()


def _events(conn, block: int = 7) -> list[int]:
    """The block's referring events, as explain reads them (memoised per ``data_version``)."""
    return [r[1] for r in queries.refs_for_blocks(conn, [block])]


def test_without_a_refresh_the_first_lookup_after_a_commit_is_stale(tmp_path):
    """The defect itself (SQLite's file control), and the fix on a bare connection."""
    path = _index(tmp_path)
    _add_ref(path, 7, 1)
    r = db.connect(path, create=False)
    assert _events(r) == [1]
    _add_ref(path, 7, 2)
    assert _events(r) == [1]  # stale: no table read since the other connection's commit
    queries.refresh(r)
    assert _events(r) == [1, 2]
    _add_ref(path, 7, 3)
    queries.refresh(r)
    assert _events(r) == [1, 2, 3]
    r.close()


def test_the_language_servers_next_request_sees_the_commit(tmp_path):
    path = _index(tmp_path)
    _add_ref(path, 7, 1)
    backend = Backend(tmp_path, Settings(index_path=str(path)))
    try:
        assert backend.query(lambda engine: _events(engine.conn())).result(10) == [1]
        _add_ref(path, 7, 2)  # an ingest by another process
        assert backend.query(lambda engine: _events(engine.conn())).result(10) == [1, 2]
        _add_ref(path, 7, 3)
        assert backend.query(lambda engine: _events(engine.conn())).result(10) == [1, 2, 3]
    finally:
        backend.close()


def test_the_mcp_servers_next_call_sees_the_commit(tmp_path, monkeypatch):
    from engram.mcp import tools

    path = _index(tmp_path)
    _add_ref(path, 7, 1)
    app = EngramMCP(tmp_path, index=path)
    # the explain tool, answering with the memoised lookup it makes deep inside explain
    desc, schema, _call = tools.TOOLS["explain"]
    monkeypatch.setitem(tools.TOOLS, "explain", (desc, schema, lambda eng, a: {"e": _events(eng.conn())}))
    args = {"file": "a.py", "start": 1, "end": 2}
    try:
        call = lambda: app.pool.submit(app.call, "explain", args).result(10)["structuredContent"]  # noqa: E731
        assert call() == {"e": [1]}
        _add_ref(path, 7, 2)
        assert call() == {"e": [1, 2]}
    finally:
        app.close()


def test_engram_serves_kept_engine_sees_the_commit(tmp_path, monkeypatch):
    path = _index(tmp_path)
    _add_ref(path, 7, 1)
    monkeypatch.setattr(commands, "kept_engines", {})
    args = argparse.Namespace(root=str(tmp_path), index=str(path))
    try:
        assert _events(commands._engine(args).conn()) == [1]
        _add_ref(path, 7, 2)
        assert _events(commands._engine(args).conn()) == [1, 2]
    finally:
        for eng, *_ in commands.kept_engines.values():
            eng.close()


def test_refresh_before_any_connection_opens_nothing(tmp_path):
    eng = Engine(tmp_path, index_path=tmp_path / "none" / "index.sqlite")
    eng.refresh()
    assert not (tmp_path / "none").exists()
