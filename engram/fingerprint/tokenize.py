"""Language-agnostic tokens, each hashed with xxh3_64 — vectorised, no Python loop per token.

A token is a maximal run of identifier bytes (``A-Z a-z 0-9 _`` and every byte ≥ 0x80, so
non-ASCII letters stay inside words and numbers are words too), or a single punctuation byte
(every other printable ASCII byte). Whitespace and ASCII control bytes separate tokens and are
dropped, so indentation and line-wrapping never change a token. String literals need no special
case: the quotes are punctuation and the contents are ordinary tokens.

Work happens on the UTF-8 bytes of the text (lone surrogates are encoded with
``surrogatepass``, never an error); token offsets are byte offsets into that encoding and lines
are counted by ``\\n`` (``\\r\\n`` therefore counts once; a lone ``\\r`` is whitespace, not a line
break — the same convention as the index's ``text.count("\\n")``).

Each token's hash is exactly ``xxhash.xxh3_64_intdigest(token_bytes, seed=0)``
(``docs/architecture.md``, "Fingerprints"), but computed for the whole array at once: XXH3's
short-input paths (0–128 bytes, which cover virtually every token) are re-implemented over
numpy ``uint64`` arrays from unaligned 8-byte loads at each token start; the rare longer tokens
go through ``xxhash`` once per *distinct* long token. The unit tests check the vectorised path
against ``xxhash`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xxhash

__all__ = ["Tokens", "tokenize"]

PAD = 16  # zero bytes after the text so 8-byte loads near the end stay in bounds

# XXH3 constants (xxhash.h v0.8), seed 0
_P64_1 = np.uint64(0x9E3779B185EBCA87)
_P64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P64_3 = np.uint64(0x165667B19E3779F9)
_MX1 = np.uint64(0x165667919E3779F9)
_MX2 = np.uint64(0x9FB21C651E98DF25)
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)


def _s64(off: int) -> np.uint64:
    return np.uint64(int.from_bytes(_SECRET[off:off + 8], "little"))


def _s32(off: int) -> int:
    return int.from_bytes(_SECRET[off:off + 4], "little")


_BITFLIP_1TO3 = np.uint64(_s32(0) ^ _s32(4))
_BITFLIP_4TO8 = _s64(8) ^ _s64(16)
_BITFLIP_9TO16 = (_s64(24) ^ _s64(32), _s64(40) ^ _s64(48))
_ONE_BYTE = np.array([xxhash.xxh3_64_intdigest(bytes([c])) for c in range(256)], dtype=np.uint64)
_LONG = 128  # tokens longer than this are hashed by the xxhash library, once per distinct token


@dataclass(frozen=True, eq=False)
class Tokens:
    """The tokens of one text, in order (arrays are read-only)."""

    hashes: np.ndarray
    """uint64[n]: xxh3_64 (seed 0) of each token's UTF-8 bytes."""
    lines: np.ndarray
    """int32[n]: 0-based line of each token."""
    starts: np.ndarray
    """int64[n]: byte offset of each token in the text's UTF-8 encoding."""
    ends: np.ndarray
    """int64[n]: byte offset just past each token."""


def tokenize(text: str) -> Tokens:
    """Tokens of ``text`` with their xxh3_64 hashes, lines and byte spans."""
    buf, _ = encode([text])
    n = len(buf) - PAD
    starts, ends = spans(buf, n)
    hashes = hash_spans(buf, starts, ends)
    lines = line_of(buf, n, starts)
    for a in (hashes, lines, starts, ends):
        a.flags.writeable = False
    return Tokens(hashes=hashes, lines=lines, starts=starts, ends=ends)


# -- building blocks shared with winnow.py ------------------------------------------------------


def encode(texts: list[str]) -> tuple[bytes, np.ndarray]:
    """UTF-8 of each text followed by ``\\n`` (so no token spans two texts), then PAD zero bytes;
    and each text's length in bytes (int64)."""
    parts = [t.encode("utf-8", "surrogatepass") for t in texts]
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    parts.append(bytes(PAD))
    return b"\n".join(parts), lengths


def bytes_view(buf: bytes, n: int) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8, count=n)


def spans(buf: bytes, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Byte ``[start, end)`` of every token in ``buf[:n]`` (int64 arrays, in order)."""
    b = bytes_view(buf, n)
    # byte classes by comparisons (cheaper than a 256-entry table lookup per byte)
    word = b >= 0x80
    word |= (b | 0x20) - np.uint8(ord("a")) < 26       # A-Z a-z
    word |= b - np.uint8(ord("0")) < 10                 # 0-9
    word |= b == ord("_")
    punct = b > 0x20
    punct &= b != 0x7F
    punct &= ~word
    # a token starts at every punctuation byte and at every word byte not preceded by one, and
    # ends after every punctuation byte and every word byte not followed by one
    is_start = punct.copy()
    is_start[1:] |= word[1:] > word[:-1]
    is_start[:1] |= word[:1]
    is_end = punct
    is_end[:-1] |= word[:-1] > word[1:]
    is_end[-1:] |= word[-1:]
    return np.flatnonzero(is_start), np.flatnonzero(is_end) + 1


def line_of(buf: bytes, n: int, offsets: np.ndarray) -> np.ndarray:
    """0-based line (``\\n``-counted) of each byte offset into ``buf[:n]``, as int32."""
    is_nl = bytes_view(buf, n) == 0x0A
    if len(offsets) * 8 > n:  # dense: one running count beats a binary search per offset
        count = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(is_nl, out=count[1:])
        return count[offsets]
    return np.searchsorted(np.flatnonzero(is_nl), offsets, side="left").astype(np.int32)


def _load64(buf: bytes) -> np.ndarray:
    """Unaligned little-endian uint64 loads: ``view[i]`` is bytes ``buf[i:i+8]``."""
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))


_FEW = 256  # spans hashed one by one by the library: below this, cheaper than ~40 numpy calls


def hash_spans(buf: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``xxh3_64(buf[s:e], seed=0)`` for every non-empty span, vectorised (uint64 array); a few
    spans (a hover's block: ~90 tokens, 0.07 ms instead of 0.3) by the library itself."""
    if len(starts) <= _FEW:
        h = xxhash.xxh3_64_intdigest
        return np.array([h(buf[s:e]) for s, e in zip(starts.tolist(), ends.tolist())],
                        dtype=np.uint64)
    b = np.frombuffer(buf, dtype=np.uint8)
    out = _ONE_BYTE[b[starts]]  # right for 1-byte tokens (most of them: punctuation)
    length = ends - starts
    multi = np.flatnonzero(length > 1)
    if not len(multi):
        return out
    s, n = starts[multi], length[multi].astype(np.uint64)
    u64 = _load64(buf)
    w0 = u64[s]  # first 8 bytes of each token (followed by whatever comes next: mask)
    groups = ((2, 3, _len2to3), (4, 8, _len4to8), (9, 16, _len9to16), (17, _LONG, _len17to128))
    for lo, hi, fn in groups:
        sel = np.flatnonzero((n >= np.uint64(lo)) & (n <= np.uint64(hi)))
        if len(sel):
            out[multi[sel]] = fn(u64, w0[sel], s[sel], n[sel])
    sel = np.flatnonzero(n > np.uint64(_LONG))
    if len(sel):
        out[multi[sel]] = _long(buf, s[sel], s[sel] + n[sel].astype(np.int64))
    return out


def _xxh64_avalanche(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint64(33)
    h *= _P64_2
    h ^= h >> np.uint64(29)
    h *= _P64_3
    h ^= h >> np.uint64(32)
    return h


def avalanche(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint64(37)
    h *= _MX1
    h ^= h >> np.uint64(32)
    return h


_LO32 = np.uint64(0xFFFFFFFF)
_LO8 = np.uint64(0xFF)
_S32 = np.uint64(32)


def _mul128_fold64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a * b) as 128 bits, low half XOR high half — XXH_mult64to128's portable path."""
    a_lo, a_hi = a & _LO32, a >> _S32
    b_lo, b_hi = b & _LO32, b >> _S32
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    cross = (lo_lo >> _S32) + (hi_lo & _LO32) + a_lo * b_hi
    upper = (hi_lo >> _S32) + (cross >> _S32) + a_hi * b_hi
    lower = (cross << _S32) | (lo_lo & _LO32)
    return lower ^ upper


def _len2to3(u64: np.ndarray, w0: np.ndarray, s: np.ndarray, n: np.ndarray) -> np.ndarray:
    c1 = w0 & _LO8
    c2 = (w0 >> ((n >> np.uint64(1)) << np.uint64(3))) & _LO8
    c3 = (w0 >> ((n - np.uint64(1)) << np.uint64(3))) & _LO8
    combined = (c1 << np.uint64(16)) | (c2 << np.uint64(24)) | c3 | (n << np.uint64(8))
    return _xxh64_avalanche(combined ^ _BITFLIP_1TO3)


def _rrmxmx(h: np.ndarray, n: np.ndarray) -> np.ndarray:
    rot49 = (h << np.uint64(49)) | (h >> np.uint64(15))
    h ^= rot49 ^ ((h << np.uint64(24)) | (h >> np.uint64(40)))
    h *= _MX2
    h ^= (h >> np.uint64(35)) + n
    h *= _MX2
    h ^= h >> np.uint64(28)
    return h


def _len4to8(u64: np.ndarray, w0: np.ndarray, s: np.ndarray, n: np.ndarray) -> np.ndarray:
    in1 = w0 & _LO32
    in2 = (w0 >> ((n - np.uint64(4)) << np.uint64(3))) & _LO32
    keyed = (in2 + (in1 << _S32)) ^ _BITFLIP_4TO8
    return _rrmxmx(keyed, n)


def _len9to16(u64: np.ndarray, w0: np.ndarray, s: np.ndarray, n: np.ndarray) -> np.ndarray:
    lo = w0 ^ _BITFLIP_9TO16[0]
    hi = u64[s + n.astype(np.int64) - 8] ^ _BITFLIP_9TO16[1]
    acc = n + lo.byteswap() + hi + _mul128_fold64(lo, hi)
    return avalanche(acc)


def _mix16(u64: np.ndarray, at: np.ndarray, secret_off: int) -> np.ndarray:
    return _mul128_fold64(u64[at] ^ _s64(secret_off), u64[at + 8] ^ _s64(secret_off + 8))


def _len17to128(u64: np.ndarray, w0: np.ndarray, s: np.ndarray, n: np.ndarray) -> np.ndarray:
    acc = n * _P64_1
    end = s + n.astype(np.int64)
    acc += _mix16(u64, s, 0) + _mix16(u64, end - 16, 16)
    # longer inputs mix more 16-byte lanes, from both ends (XXH3_len_17to128_64b)
    for min_len, i, sec in ((33, 16, 32), (65, 32, 64), (97, 48, 96)):
        sel = np.flatnonzero(n >= np.uint64(min_len))
        if not len(sel):
            break
        acc[sel] += _mix16(u64, s[sel] + i, sec) + _mix16(u64, end[sel] - (i + 16), sec + 16)
    return avalanche(acc)


def _long(buf: bytes, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """xxhash itself, once per distinct long token (they are rare: long strings, blobs)."""
    mv = memoryview(buf)
    cache: dict[bytes, int] = {}
    out = np.empty(len(s), dtype=np.uint64)
    for i, (a, z) in enumerate(zip(s.tolist(), e.tolist())):
        tok = bytes(mv[a:z])
        h = cache.get(tok)
        if h is None:
            h = cache[tok] = xxhash.xxh3_64_intdigest(tok)
        out[i] = h
    return out
