"""The lineage pass's nodes held as rows (``edges._Nodes``: a few numbers an edit, its texts and
other fields in the run's spill file): a node made back from its row is the ``Node`` the event
gave, field for field, whatever the event held; a node that cannot be spilled is held as it is;
and the tables a run writes are those of nodes held whole."""

from __future__ import annotations

from claude_log import run_json
from test_lineage_bounded import _indexed, _tables

from engram.index.queries import TapeRow
from engram.lineage import edges

FIELDS = ("eid", "tape", "tape_id", "ofs", "session", "t", "file", "rel", "has_before", "b_range",
          "a_range", "qa", "qb", "tomb", "cont", "before", "after", "key")


def _tape(row: int, tape_id: str, session: str) -> TapeRow:
    return TapeRow(*([row, tape_id] + [None] * (len(TapeRow._fields) - 2)))._replace(session=session)


EVENTS = [
    {"k": "code.edit", "t": "2026-11-27T07:00:00Z", "file": "/r/a.py", "rel": "a.py",
     "before_text": "x = 1\n", "after_text": "x = 2\n", "before_range": [3, 3], "after_range": [3, 3]},
    {"k": "code.edit", "t": None, "file": "/r/b.py", "after_text": "déjà 😀 \ud800\n" * 40},
    {"k": "code.edit", "t": 17, "file": ["odd"], "rel": None, "before_text": 5, "after_text": "",
     "before_range": [None, 2.5], "after_range": {"a": 1}},
    {"k": "code.edit"},
    {"k": "code.edit", "t": "2026-11-27T07:00:01Z", "rel": "c.py", "before_text": "\udfff" * 3,
     "after_text": "y" * 70_000, "before_range": [1 << 70, -1], "after_range": []},
]


def _fields(n) -> tuple:
    return tuple(getattr(n, f) for f in FIELDS)


def test_rows_give_back_the_nodes():
    texts = edges._Texts()
    try:
        nodes = edges._Nodes(texts)
        tapes = [_tape(7, "tape-a", "s-a"), _tape(9, "tape-b", "s-b")]
        want = []
        for i, ev in enumerate(EVENTS * 3):
            tape = tapes[i % 2]
            nodes.add(1000 + i, tape, 10 * i, ev)
            want.append(_fields(edges.Node(1000 + i, tape, 10 * i, ev)))
        # (every node with a text spilled; one without is held, and makes no spill file)
        assert sorted(nodes._held) == [i for i, ev in enumerate(EVENTS * 3)
                                       if not (isinstance(ev.get("before_text"), str) and ev["before_text"]
                                               or isinstance(ev.get("after_text"), str) and ev["after_text"])]
        assert len(nodes) == len(want)
        assert [_fields(n) for n in nodes] == want
        assert [_fields(n) for n in nodes[3:8]] == want[3:8]
        assert _fields(nodes[-1]) == want[-1] and _fields(nodes[4]) == want[4]
        assert nodes.eid.tolist() == [1000 + i for i in range(len(want))]
        assert nodes[2].file is None and nodes[0].file is edges.Node(1, tapes[0], 0, EVENTS[0]).file
    finally:
        texts.close()


def test_no_spill_file_for_nodes_without_texts():
    texts = edges._Texts()
    nodes = edges._Nodes(texts)
    tape = _tape(1, "tape-a", "s")
    for i, ev in enumerate(EVENTS[2:4]):   # (neither has a text)
        nodes.add(i + 1, tape, i, ev)
    assert texts._spill is None and len(nodes._held) == 2
    assert [_fields(n) for n in nodes] == [_fields(edges.Node(i + 1, tape, i, ev)) for i, ev in enumerate(EVENTS[2:4])]


def test_nodes_held_without_a_spill_file(monkeypatch):
    monkeypatch.setattr(edges._Texts, "put", lambda self, before, after: None)
    nodes = edges._Nodes(edges._Texts())
    tape = _tape(1, "tape-a", "s")
    for i, ev in enumerate(EVENTS):
        nodes.add(i + 1, tape, i, ev)
    assert len(nodes._held) == len(EVENTS)
    assert [_fields(n) for n in nodes] == [_fields(edges.Node(i + 1, tape, i, ev)) for i, ev in enumerate(EVENTS)]


def test_tables_as_with_nodes_held(world, capsys, monkeypatch):
    whole, _answer = _indexed(world, capsys)      # (nodes as rows: the default)
    made = []
    node = edges._Nodes._node

    def counted(self, i):
        made.append(i)
        return node(self, i)

    monkeypatch.setattr(edges._Nodes, "_node", counted)
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert made and _tables(world) == whole
    monkeypatch.setattr(edges._Texts, "put", lambda self, before, after: None)   # every node held
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert _tables(world) == whole
