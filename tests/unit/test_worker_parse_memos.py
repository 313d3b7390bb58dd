"""The parse worker lets go of the parse's redaction memos before the continuation pass
(``worker.drop_parse_memos``): the pass redacts nothing, and the memo of long texts, bounded in
characters, held ~100 MB of an Aider history's texts through it. The answers stay the same: a
later parse fills the memos again."""

from __future__ import annotations

from engram.adapters import redact
from engram.ingest import worker


def test_memos_emptied_and_answers_unchanged():
    secret = "token = 'sk-ant-api03-" + "Zx9kQ2vLm8pR4tW7" * 6 + "'\n"
    longs = [f"édition {i} — " + "x = compute(valeur)\n" * 50 + secret for i in range(20)]
    shorts = [f"ok {i} → done" for i in range(20)]
    before = [redact.redact_text(t) for t in longs + shorts]
    assert all(r[1] == 1 and "sk-ant-api03" not in r[0] for r in before[:20])
    assert any(t in redact._redact_cached.items for t in longs)
    assert redact._redact_short.cache_info().currsize > 0

    worker.drop_parse_memos()

    assert redact._redact_cached.held == 0 and not redact._redact_cached.items
    assert redact._redact_short.cache_info().currsize == 0
    assert [redact.redact_text(t) for t in longs + shorts] == before
    assert any(t in redact._redact_cached.items for t in longs)   # filled again
