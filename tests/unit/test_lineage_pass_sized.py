"""The lineage linker sizes a pass by the postings its query hashes met in the pass before
(``Linker._pass_hashes``: ``LINK_PASS_FILL`` of ``LINK_PASS_POSTINGS`` at the last pass's
postings per query hash), so the passes of a long session stay under the postings cap without
being fetched past it and split. Pass sizes never change a row: the edges, tombstones and
explain answers are those of one pass."""

from __future__ import annotations

from claude_log import run_json
from test_lineage import PARSE_V3, explain
from test_lineage_bounded import _indexed, _tables, _untimed

from engram.lineage import edges


def test_pass_hashes_from_the_last_pass():
    link = edges.Linker.__new__(edges.Linker)
    link._density = 0.0
    assert link._pass_hashes() == edges.LINK_PASS_HASHES   # no pass yet
    link._density = 4.0
    assert link._pass_hashes() == edges.LINK_PASS_FILL * edges.LINK_PASS_POSTINGS / 4.0
    link._density = 1e-6
    assert link._pass_hashes() == edges.LINK_PASS_HASHES   # never more than the hashes' cap
    link._density = 1e12
    assert link._pass_hashes() == 1.0                      # at least one edit a pass


def _passes(capsys, monkeypatch) -> tuple[list[int], list[tuple[bool, int]]]:
    """The edits of each pass and each pass's (postings complete, postings held) of a rebuild."""
    passes, held = [], []
    link_pass, init = edges.Linker._link_pass, edges.Postings.__init__

    def counted_pass(self, nodes, touched_to):
        passes.append(len(nodes))
        return link_pass(self, nodes, touched_to)

    def counted_init(self, *a, **k):
        init(self, *a, **k)
        held.append((self.complete, len(self.H)))

    with monkeypatch.context() as m:
        m.setattr(edges.Linker, "_link_pass", counted_pass)
        m.setattr(edges.Postings, "__init__", counted_init)
        run_json(capsys, "ingest", "--rebuild", "--seal")
    return passes, held


def test_sized_passes_change_no_row(world, capsys, monkeypatch):
    w = world
    whole, answer = _indexed(w, capsys)
    # the fixture's six edits have 45-221 query hashes each: passes cut by query hashes alone
    # hold two or three edits, each fetched past a cap of one posting and split down to single
    # edits; sized, only the first is (it comes before any pass was measured), and every later
    # pass is cut to a single edit, which is never split
    monkeypatch.setattr(edges, "LINK_PASS_HASHES", 250)
    monkeypatch.setattr(edges, "LINK_PASS_POSTINGS", 1)
    passes, held = _passes(capsys, monkeypatch)
    assert _tables(w) == whole
    assert _untimed(explain(capsys, w, "parsers.py", PARSE_V3)) == answer
    with monkeypatch.context() as m:
        m.setattr(edges.Linker, "_pass_hashes", lambda self: edges.LINK_PASS_HASHES)
        passes_unsized, held_unsized = _passes(capsys, monkeypatch)
    assert _tables(w) == whole
    sized = sum(not ok for ok, _n in held)
    assert 0 < sized < sum(not ok for ok, _n in held_unsized)
    first = passes[0]   # (split down to single edits: 2 * first - 1 passes)
    assert first > 1 and passes[2 * first - 1:] == [1] * (6 - first)
