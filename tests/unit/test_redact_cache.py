"""The memo of long redacted texts is bounded by the bytes it holds (a text of wide characters
counted at its size, with the UTF-8 copy CPython caches in it), not by a count or characters."""

from __future__ import annotations

import sys
import threading

from engram.adapters import redact


def _held(cache) -> int:
    return sum(redact._held_bytes(k) + (redact._held_bytes(v[0][0]) if v[0][0] is not k else 0)
               for k, v in cache.items.items())


def test_bounded_by_bytes_and_same_answers():
    cache = redact._TextCache(1_000_000)
    texts = [f"file {i}\n" + ("x = compute(value)\n" * 2000) for i in range(300)]  # ~36 KB each
    for t in texts:
        assert cache(t) == redact._redact(t)
        assert cache.held <= cache.max_bytes
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
    assert cache.held == 0 and not cache.items


def test_wide_characters_count_for_their_bytes():
    cache = redact._TextCache(1_000_000)
    latin = [f"{i} " + "x = compute(value)\n" * 1000 for i in range(200)]
    wide = [f"{i} " + "значение = вычислить(x)\n" * 800 for i in range(200)]
    emoji = [f"{i} " + "done 🎉 next 🚀\n" * 1300 for i in range(200)]
    for texts in (latin, wide, emoji):
        cache.cache_clear()
        for t in texts:
            assert cache(t) == redact._redact(t)
            assert cache.held == _held(cache) <= cache.max_bytes
        kept = list(cache.items)
        # what is held, as CPython holds it once each text's UTF-8 copy is made (as writing the
        # event's line does), stays near the bound whatever the characters
        for t in kept:
            t.encode()
        real = sum(sys.getsizeof(t) for t in kept)
        assert real <= cache.max_bytes * 1.1, (texts is wide, real)
    assert len(cache.items) < len(latin)


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
    assert cache.held == _held(cache) <= cache.max_bytes


def test_redact_text_uses_the_bounded_memo():
    assert isinstance(redact._redact_cached, redact._TextCache)
    assert redact._redact_cached.max_bytes == 32 << 20
