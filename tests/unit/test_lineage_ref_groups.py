"""The refs of the blocks a pass's edits may link to are read ``LINK_REF_BLOCKS`` blocks at a time
(a group of edits in order), and ``_cardinality`` reads ``CARDINALITY_EVENTS`` touched events' edges
at a time: neither may change a row — the edges, tombstones and cardinalities written, in the same
order, are those of all at once."""

from __future__ import annotations

from claude_log import run_json
from test_lineage import PARSE_V3, explain
from test_lineage_bounded import _indexed, _tables, _untimed

from engram.lineage import edges


def test_ref_groups_and_cardinality_chunks_change_no_row(world, capsys, monkeypatch):
    w = world
    whole, answer = _indexed(w, capsys)

    groups, reads = [], []
    link_group, ref_rows = edges.Linker._link_group, edges._ref_rows

    def counted_group(self, nodes, per_node, group, blocks, *a):
        groups.append((len(group), len(blocks)))
        return link_group(self, nodes, per_node, group, blocks, *a)

    def counted_rows(conn, blocks):
        reads.append(len(blocks))
        return ref_rows(conn, blocks)

    cards = []
    card_of = edges.Linker._cardinality_of

    def counted_card(self, rows):
        cards.append(len(rows))
        return card_of(self, rows)

    monkeypatch.setattr(edges.Linker, "_link_group", counted_group)
    monkeypatch.setattr(edges, "_ref_rows", counted_rows)
    monkeypatch.setattr(edges.Linker, "_cardinality_of", counted_card)
    monkeypatch.setattr(edges, "LINK_REF_BLOCKS", 1)
    monkeypatch.setattr(edges, "CARDINALITY_EVENTS", 1)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    # one edit a group where edits have blocks; a group holds more than one block only for one edit
    assert any(n > 1 for n in reads) and all(g == 1 for g, b in groups if b > 1)
    assert len(groups) > 1 and len(cards) > 1
    assert _tables(w) == whole
    assert _untimed(explain(capsys, w, "parsers.py", PARSE_V3)) == answer
