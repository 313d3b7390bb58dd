"""A hover of a block whose file's code lens came first shows the card a hover alone shows.

The code lens computes every block's sessions without transcript windows and the hover reuses
those results (``Backend.block_results``); the hover then reads the window of the block's best
session for its anchor event alone (``Engine.block_window``), the window its own
``explain_blocks`` would have given, instead of a whole explain. Real server, real log.
"""

from __future__ import annotations

from lsp_helpers import hover, lenses, open_doc, wait_indexed

from engram.engine import Engine

MINE = "\n\ndef mine(a, b):\n    return a * b + 42\n"  # a second block, no session's


def _mixed(ws) -> str:
    """hello.py and a block of our own: a lens of two blocks (computed without windows)."""
    (ws.root / "mixed.py").write_text(ws.files["hello.py"] + MINE)
    return "mixed.py"


async def test_a_hover_after_the_lens_shows_the_card_of_a_hover_alone(lsp, ws):
    client = await lsp(ws)
    await wait_indexed(client)
    uri = open_doc(client, ws, _mixed(ws))
    assert [lens.command.title for lens in await lenses(client, uri)] == ["1 session"]
    after_lens = await hover(client, uri, 4)  # inside def main(), the lens's block
    assert after_lens is not None

    alone_client = await lsp(ws)  # another server: no lens before its hover
    await wait_indexed(alone_client)
    alone = await hover(alone_client, open_doc(alone_client, ws, "mixed.py"), 4)
    assert alone is not None
    assert after_lens.contents.value == alone.contents.value
    assert after_lens.range == alone.range
    assert "**Request:**" in alone.contents.value and "**Assistant:**" in alone.contents.value


async def test_the_window_read_for_a_lens_entry_is_the_hovers_own(lsp, ws, monkeypatch):
    client = await lsp(ws)
    await wait_indexed(client)  # the server's startup ingest built the index
    monkeypatch.setenv("HOME", str(ws.home))
    monkeypatch.setenv("ENGRAM_HOME", str(ws.engram_home))
    path = ws.root / _mixed(ws)
    text = path.read_text()
    lines = text.split("\n")
    eng = Engine(ws.root)
    try:
        blocks = [(s, e) for s, e, _name in eng.top_level_blocks(text, path)]
        # several blocks: no windows; ``events`` as the server asks (each top names its anchor)
        lens = eng.explain_blocks(str(path), text, blocks, events=True)
        assert [r["top"] and {k: v for k, v in r["top"].items() if k != "event"} for r in lens] \
            == [r["top"] for r in eng.explain_blocks(str(path), text, blocks)]
        assert len(blocks) > 1 and any(r["top"] for r in lens)
        for (s, e), entry in zip(blocks, lens):
            if entry["top"] is None:
                continue
            assert "windows" not in entry["top"]
            alone = eng.explain_blocks(str(path), "\n".join(lines[s - 1:e]) + "\n",
                                       [(1, e - s + 1)])[0]  # a hover's: with its window
            window = eng.block_window(entry["top"])
            assert window == alone["top"]["windows"][0]
            assert window["events"]
        # an entry naming no event, or one the index does not hold: no window, no error
        top = next(r["top"] for r in lens if r["top"])
        assert eng.block_window({k: v for k, v in top.items() if k != "event"}) is None
        assert eng.block_window({**top, "event": 10**12}) is None
        assert eng.block_window({**top, "tape_id": "another tape"}) is None
    finally:
        eng.close()
