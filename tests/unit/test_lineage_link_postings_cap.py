"""A pass of the lineage linker is bounded by the postings it holds, not only by its query hashes:
a pass whose postings pass ``LINK_PASS_POSTINGS`` is split in two (an edit's queries never), and
its edits are matched ``LINK_MATCH_ROWS`` gathered postings at a time. Neither may change a row:
the edges and tombstones written, in the same order, are those of one pass."""

from __future__ import annotations

from claude_log import run_json
from test_lineage import PARSE_V3, explain
from test_lineage_bounded import _indexed, _tables, _untimed

from engram.lineage import edges


def test_postings_caps_change_no_row(world, capsys, monkeypatch):
    w = world
    whole, answer = _indexed(w, capsys)

    passes, matched, held = [], [], []
    link_pass, link_matched = edges.Linker._link_pass, edges.Linker._link_matched
    init = edges.Postings.__init__

    def counted_pass(self, nodes, touched_to):
        passes.append(len(nodes))
        return link_pass(self, nodes, touched_to)

    def counted_matched(self, post, nodes, touched_to):
        matched.append(len(nodes))
        return link_matched(self, post, nodes, touched_to)

    def counted_init(self, *a, **k):
        init(self, *a, **k)
        held.append((self.complete, len(self.H)))

    monkeypatch.setattr(edges.Linker, "_link_pass", counted_pass)
    monkeypatch.setattr(edges.Linker, "_link_matched", counted_matched)
    monkeypatch.setattr(edges.Postings, "__init__", counted_init)
    monkeypatch.setattr(edges, "LINK_PASS_POSTINGS", 1)
    monkeypatch.setattr(edges, "LINK_MATCH_ROWS", 1)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    # the first pass held too many postings and was split down to single edits
    assert passes[0] > 1 and 1 in passes
    assert (False, 0) in held and any(ok and n > 1 for ok, n in held)
    assert set(matched) == {1} and len(matched) > 1
    assert _tables(w) == whole
    assert _untimed(explain(capsys, w, "parsers.py", PARSE_V3)) == answer
