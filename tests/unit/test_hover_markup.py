"""A log's text cannot put links, images or HTML into the hover card: the VS Code client trusts
the hover's markdown (its Explain link is a ``command:`` link), so a transcript carrying
``[..](command:..)`` would otherwise offer to run a command, and ``![..](https://..)`` would load a
remote image the moment the hover shows."""

from __future__ import annotations

import re

from engram_lsp.render import hover_markdown

HOSTILE = ("see [Fix it](command:workbench.action.terminal.sendSequence?%7B%22text%22%3A%22rm%22%7D)"
           " ![pixel](https://tracker.example/p.png) <img src=https://tracker.example/q.png>"
           " <https://phish.example>")


def _block(request: str, reply: str) -> dict:
    events = [{"offset": 0, "k": "msg.in", "text": request},
              {"offset": 1, "k": "code.edit", "text": "x = 1"},
              {"offset": 2, "k": "msg.out", "text": reply}]
    return {"sessions": 1, "best": 0.9, "latest": "2026-01-05T09:00:00Z",
            "top": {"session": "s1", "tape_id": "t" * 32, "harness": "claude_code",
                    "windows": [{"anchor": 1, "kind": "code.edit", "events": events}]}}


def test_links_images_and_html_from_a_log_are_shown_as_typed():
    md = hover_markdown(_block(HOSTILE, HOSTILE), "file:///repo/x.py", 1, 3)
    links = re.findall(r"(?<!\\)\[[^\]]*\]\(([^)]*)\)", md)
    assert len(links) == 1 and links[0].startswith("command:engram.explain?")  # ours alone
    assert not re.search(r"(?<!\\)<(img|https)", md)
    assert "\\[Fix it\\](command:workbench" in md  # the text is still there, escaped
