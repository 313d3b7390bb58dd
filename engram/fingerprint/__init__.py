"""Fingerprints: language-agnostic tokens → xxh3_64 → k-gram hashes → winnowing.

``tokenize.py`` turns text into hashed tokens, ``winnow.py`` turns those into k-gram hashes and
keeps a winnowed, line-tagged subset. Everything is vectorised with numpy (this is the ingest hot
path). Changing any output means bumping ``FP_VERSION``; the index stores it with ``k`` and ``w``
and refuses to mix.
"""

from engram.fingerprint import winnow
from engram.fingerprint.tokenize import Tokens, tokenize
from engram.fingerprint.winnow import (
    FP_VERSION,
    Fingerprints,
    all_kgrams,
    default_params,
    fingerprint,
    fingerprint_batch,
    line_span_prints,
    span_prints,
    text_tokens,
)

__all__ = ["FP_VERSION", "DEFAULT_K", "DEFAULT_W", "Fingerprints", "Tokens", "all_kgrams",
           "default_params", "fingerprint", "fingerprint_batch", "line_span_prints", "span_prints",
           "text_tokens", "tokenize"]


def __getattr__(name: str) -> int:
    # DEFAULT_K / DEFAULT_W come from the environment on first use: winnow answers for both
    if name in ("DEFAULT_K", "DEFAULT_W"):
        return getattr(winnow, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
