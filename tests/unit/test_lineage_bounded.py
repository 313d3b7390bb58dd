"""The lineage pass holds a bounded amount whatever the run indexed: edits are matched a pass of
``LINK_PASS_HASHES`` query hashes at a time, and the ingest cache keeps texts, lines and postings
only up to its byte caps (past them, what is not kept is read or computed again). Neither may
change an answer: the edges and tombstones written, row for row and in the same order, are those
of one pass with everything cached."""

from __future__ import annotations

from claude_log import run_json
from test_lineage import PARSE, PARSE_V2, PARSE_V3, RETRY, UNRELATED, explain

from engram.engine import Engine
from engram.lineage import cache, edges


def _tables(w) -> dict[str, list[tuple]]:
    eng = Engine(w.root)
    try:
        c = eng.conn()
        return {
            "edges": list(c.execute(
                "SELECT ta.session, fa.ofs, tb.session, fb.ofs, e.confidence, e.location_delta,"
                " e.cardinality, e.agent_link, e.location_only, e.kind, e.to_start, e.to_end,"
                " e.from_side, e.to_role, e.span_sim FROM edges e"
                " JOIN events fa ON fa.id=e.from_event JOIN tapes ta ON ta.id=fa.tape"
                " JOIN events fb ON fb.id=e.to_event JOIN tapes tb ON tb.id=fb.tape"
                " ORDER BY e.rowid")),
            "tombstones": list(c.execute(
                "SELECT t.session, e.ofs, s.file, s.rel, s.start, s.end, s.t FROM tombstones s"
                " JOIN events e ON e.id=s.event JOIN tapes t ON t.id=e.tape ORDER BY s.rowid")),
            "continuations": sorted(c.execute("SELECT * FROM continuations")),
        }
    finally:
        eng.close()


def _history(w) -> None:
    w.session(session_id="aaaa0101-0000-0000-0000-000000000001").user("header parser") \
        .write("util.py", "import os\n\n" + PARSE + "\n\n" + RETRY).save()
    w.session(session_id="bbbb0101-0000-0000-0000-000000000002").user("lenient parser") \
        .edit("util.py", PARSE, PARSE_V2).save()
    w.session(session_id="cccc0101-0000-0000-0000-000000000003").user("move it") \
        .write("parsers.py", "from errors import HeaderError\n\n" + PARSE_V2) \
        .edit("util.py", PARSE_V2, "").save()
    w.session(session_id="dddd0101-0000-0000-0000-000000000004").user("rewrite it") \
        .edit("parsers.py", PARSE_V2, PARSE_V3).save()
    w.session(session_id="eeee0101-0000-0000-0000-000000000005").user("replace retry") \
        .edit("util.py", RETRY, UNRELATED).save()
    w.checkout()


def _indexed(w, capsys) -> tuple[dict, dict]:
    """The history indexed in one pass: its lineage tables (edges and tombstones among them)
    and the explain of the rewritten parser, to compare a partitioned run's with."""
    _history(w)
    run_json(capsys, "ingest", "--seal")
    whole = _tables(w)
    assert whole["edges"] and whole["tombstones"]
    return whole, _untimed(explain(capsys, w, "parsers.py", PARSE_V3))


def test_passes_and_caps_change_no_row(world, capsys, monkeypatch):
    w = world
    whole, answer = _indexed(w, capsys)

    passes = []
    link_pass = edges.Linker._link_pass

    def counted(self, nodes, touched_to):
        passes.append(len(nodes))
        return link_pass(self, nodes, touched_to)

    monkeypatch.setattr(edges.Linker, "_link_pass", counted)
    monkeypatch.setattr(edges, "LINK_PASS_HASHES", 1)      # one edit per pass
    monkeypatch.setattr(cache, "MAX_LINES_BYTES", 0)        # nothing kept: tapes read back
    monkeypatch.setattr(cache, "MAX_PRINTS_BYTES", 0)       # texts fingerprinted again
    monkeypatch.setattr(cache, "MAX_POSTINGS", 0)           # postings read from the index
    run_json(capsys, "ingest", "--rebuild", "--seal")
    assert len(passes) > 1 and set(passes) == {1}
    assert _tables(w) == whole
    assert _untimed(explain(capsys, w, "parsers.py", PARSE_V3)) == answer


def _untimed(res: dict) -> dict:
    res["stats"].pop("elapsed_ms", None)
    return res


def test_kept_fingerprints_do_not_hold_their_batch():
    """Fingerprints of a batch of texts are views of the batch's arrays: kept as they are, one
    small text would keep every text's fingerprints alive, unseen by the cap."""
    from engram import fingerprint
    from engram.digest import text_key

    texts = [f"value_{i} = compute(item, {i})\n" * 300 for i in range(40)]
    fps = fingerprint.fingerprint_batch(texts, keep_kgrams=[True] * len(texts))
    assert fps[0].hashes.base is not None  # (what makes this test matter)
    kept = cache.IngestCache()
    kept.keep_prints(text_key(texts[0]), fps[0].hashes, fps[0].kgrams)
    hashes, kgrams, _ = kept.prints[text_key(texts[0])]
    assert hashes.base is None and kgrams.base is None
    assert (hashes == fps[0].hashes).all() and kept.prints_bytes == hashes.nbytes + kgrams.nbytes
    kept.prefetch(texts[1:3])
    assert all(v[0].base is None for v in kept.prints.values())
