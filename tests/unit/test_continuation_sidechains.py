"""The continuation pass's sidechain test read once for a pass that loads the tape table
(``_all_sidechains``) gives the tapes that ``_sidechains`` gives, whatever the meta's spacing and
case (``instr`` is case-sensitive, as Python's ``in`` is; ``LIKE`` would not be)."""

from __future__ import annotations

import apsw

from engram.lineage import continuations

METAS = [
    None, "", "{}", '{"sidechain":true}', '{"sidechain": true}', '{ "sidechain" :  true }',
    '{"sidechain":false}', '{"Sidechain":true}', '{"sidechain":TRUE}', '{"sidechain":"true"}',
    '{"x":1,"sidechain":true,"y":2}', '{"note":"sidechain true"}', '{"sidechain":\ttrue}',
    '{"a":{"sidechain":true}}', '{"sidechain":truer}', '{"side chain":true}',
]


def test_all_sidechains_equal_the_per_tape_test():
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE tapes(id INTEGER PRIMARY KEY, meta_json TEXT)")
    for i, m in enumerate(METAS, 1):
        conn.execute("INSERT INTO tapes VALUES (?, ?)", (i, m))
    ids = set(range(1, len(METAS) + 1))
    want = continuations._sidechains(conn, ids)
    got = continuations._all_sidechains(conn)
    assert got == want
    assert len(want) >= 4 and len(want) < len(METAS)   # some are, some are not
