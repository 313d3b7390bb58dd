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
