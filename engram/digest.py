"""The one content hash of a text: xxh3_128 of its UTF-8 bytes (lone surrogates kept as they are,
``surrogatepass``), as hex (``text_hash``: event fields, chunk addresses, ids) or as 16 raw bytes
(``text_key``: dictionary and index keys). Callers that hash only part of a text cut it themselves,
where the reader can see it."""

from __future__ import annotations

import xxhash


def text_hash(text: str) -> str:
    """Content hash of a text: hex xxh3_128 of its UTF-8 bytes."""
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogatepass"))


def text_key(text: str) -> bytes:
    """The same hash as ``text_hash``, as 16 raw bytes (a compact key)."""
    return xxhash.xxh3_128_digest(text.encode("utf-8", "surrogatepass"))
