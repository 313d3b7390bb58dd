"""``store.prepare`` fingerprints a session's texts a bounded chunk at a time: the same values
as one vectorised call over all of them."""

from __future__ import annotations

import random

from engram.index import store

WORDS = "parse header value name item text line data node tree index key path file".split()


def _session(seed: int) -> list[dict]:
    rng = random.Random(seed)
    events = [{"k": "meta", "t": None}]
    for i in range(120):
        text = "\n".join(f"{rng.choice(WORDS)}_{rng.randint(0, 50)} = {rng.choice(WORDS)}({i})"
                         for _ in range(rng.randint(0, 80)))
        kind = rng.choice(["msg.out", "code.read", "code.edit"])
        if kind == "code.edit":
            events.append({"k": kind, "t": None, "before_text": text[: len(text) // 2],
                           "after_text": text, "after_range": [3, 9], "before_range": [3, 5]})
        elif kind == "code.read":
            events.append({"k": kind, "t": None, "text": text, "range": [1, 80]})
        else:
            events.append({"k": kind, "t": None, "text": text})
    return events


def _flat(preps: list[store.Prepared]) -> list:
    out = []
    for p in preps:
        out.append(p.blocks)
        for h in p.texts.keys:
            n, H, L, K, el = p.texts[h]
            out.append((h, n, H.tolist(), L.tolist(), None if K is None else K.tolist(), el))
    return out


def test_chunks_give_the_values_of_one_call(monkeypatch):
    sessions = [_session(1), _session(2)]
    from engram.lineage.cache import wanted

    whole = _flat(store.prepare(sessions, wanted))
    calls = []
    batch = store.fingerprint.fingerprint_batch

    def counted(texts, **kw):
        calls.append(len(texts))
        return batch(texts, **kw)

    monkeypatch.setattr(store.fingerprint, "fingerprint_batch", counted)
    monkeypatch.setattr(store, "PREPARE_CHUNK_CHARS", 2000)
    chunked = _flat(store.prepare(sessions, wanted))
    assert len(calls) > 10 and chunked == whole
    assert any(isinstance(x, tuple) and x[4] is not None for x in whole)  # k-grams kept too


def test_edit_lines_of_many_texts_at_once_equal_one_at_a_time(monkeypatch):
    """``edit_lines_rows`` (the texts joined, hashed at once, a chunk at a time) gives each
    text's ``edit_lines_row``: blank, trivial and Unicode-edged lines, lone surrogates, texts
    ending in a line break, empty texts, one text bigger than a chunk."""
    rng = random.Random(11)
    alpha = "ab c\t\n\xa0é\u3000\x1c_1()\r\x0b\udc80\x00@[`{Z9\x7f\x1f\x1b\x85\u2028"
    texts = ["", "\n", "abc", "  abc  \n", "\xa0abc\xa0", "abc\u3000\n\n x y z", "\udc80abc\nab"]
    texts += ["".join(rng.choice(alpha) for _ in range(rng.randint(0, 120))) for _ in range(2000)]
    texts += ["\n".join(f"    value_{i} = f({i})" for i in range(3000))]
    want = [store.edit_lines_row(t) for t in texts]
    assert store.edit_lines_rows(texts) == want
    monkeypatch.setattr(store, "EDIT_LINES_CHUNK_CHARS", 500)  # many chunks, one text alone
    assert store.edit_lines_rows(texts) == want
    assert store.edit_lines_rows([]) == []
