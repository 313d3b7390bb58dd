"""The lineage pass parses a new sealed tape's edits ``READ_EVENTS`` at a time (their dicts all at
once would be as big again as the nodes' texts for a moment); read one at a time, the lineage
tables and an explain are those of the default run."""

from __future__ import annotations

from claude_log import run_json
from test_lineage import PARSE_V3, explain
from test_lineage_bounded import _indexed, _tables, _untimed

from engram.lineage import edges


def test_edits_read_one_at_a_time_change_no_row(world, capsys, monkeypatch):
    whole, answer = _indexed(world, capsys)
    reads: list[int] = []
    real = edges.Linker._events_of

    def counted(self, tape, offsets):
        reads.append(len(offsets))
        return real(self, tape, offsets)

    monkeypatch.setattr(edges.Linker, "_events_of", counted)
    monkeypatch.setattr(edges, "READ_EVENTS", 1)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert reads and set(reads) == {1} and len(reads) > 5
    assert _tables(world) == whole
    assert _untimed(explain(capsys, world, "parsers.py", PARSE_V3)) == answer
