"""The memo of long redacted texts is bounded by the characters it holds, not by a count."""

from __future__ import annotations

import threading

from engram.adapters import redact


def test_bounded_by_characters_and_same_answers():
    cache = redact._TextCache(1_000_000)
    texts = [f"file {i}\n" + ("x = compute(value)\n" * 2000) for i in range(300)]  # ~36 KB each
    for t in texts:
        assert cache(t) == redact._redact(t)
        assert cache.chars <= cache.max_chars
    assert 0 < len(cache.items) < 40          # the oldest went out
    assert cache(texts[-1]) == redact._redact(texts[-1])
    secret = "token = 'sk-ant-api03-" + "Zx9kQ2vLm8pR4tW7" * 6 + "'\n" + "pass\n" * 100
    red = cache(secret)
    assert red[1] == 1 and "sk-ant-api03" not in red[0]
    assert cache(secret) is red               # kept with its redacted copy, counted both
    big = "y = 1\n" * 100_000                 # more than an eighth of the bound: not kept
    cache(big)
    assert big not in cache.items
    cache.cache_clear()
    assert cache.chars == 0 and not cache.items


def test_threads_share_it_safely():
    cache = redact._TextCache(200_000)
    texts = [f"{i} " + "word " * 2000 for i in range(50)]
    errors = []

    def run():
        try:
            for _ in range(5):
                for t in texts:
                    assert cache(t) == (t, 0)
        except AssertionError as e:  # pragma: no cover - a failure is reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.chars == sum(len(k) for k in cache.items) <= cache.max_chars


def test_redact_text_uses_the_bounded_memo():
    assert isinstance(redact._redact_cached, redact._TextCache)
    assert redact._redact_cached.max_chars == 32 << 20
