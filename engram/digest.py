"""The one content hash of a text (hex xxh3_128 of its UTF-8 bytes)."""

from __future__ import annotations

import xxhash


def text_hash(text: str) -> str:
    """Content hash of a text: hex xxh3_128 of its UTF-8 bytes."""
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogatepass"))
