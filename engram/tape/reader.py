"""Read tapes, verifying the name against the content.

``read_tape`` decompresses the whole tape (tapes are small next to zstd's ~1.5 GB/s), checks that
xxh3_128 of the bytes equals the tape id in the file name, and parses each line. Any mismatch,
truncation or bad line raises ``CorruptTape`` naming the file (and line). Unknown keys are kept.
A small LRU keeps recently read tapes so a window read on hover does not decompress twice.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

import orjson
import xxhash
import zstandard

from engram.errors import CorruptTape
from engram.tape.writer import SUFFIX

MAX_TAPE_BYTES = 4 << 30


def tape_id_of(path: Path) -> str:
    name = Path(path).name
    if not name.endswith(SUFFIX):
        raise CorruptTape(f"not a tape file name (expected <id>{SUFFIX})", path=str(path))
    return name[: -len(SUFFIX)]


_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor: making one costs about as much as decompressing a small tape,
    and one may not be used by two threads at once."""
    d = getattr(_local, "zstd", None)
    if d is None:
        d = _local.zstd = zstandard.ZstdDecompressor()
    return d


def read_raw(path: Path, verify: bool = True) -> bytes:
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
        dobj = _decompressor().decompressobj()
        raw = dobj.decompress(data)
        if not dobj.eof:
            raise CorruptTape("truncated zstd data (the frame does not end)", path=str(path))
    except FileNotFoundError:
        raise CorruptTape("tape file vanished or does not exist", path=str(path)) from None
    except OSError as e:
        raise CorruptTape(f"cannot read tape: {e.strerror or e}", path=str(path)) from None
    except zstandard.ZstdError as e:
        raise CorruptTape(f"corrupt or truncated zstd data: {e}", path=str(path)) from None
    if verify:
        want = tape_id_of(path)
        got = xxhash.xxh3_128_hexdigest(raw)
        if got != want:
            raise CorruptTape(f"content hash {got} does not match the tape's name", path=str(path))
    return raw


def parse_lines(raw: bytes, path: Path | str = "<tape>") -> list[dict]:
    out = []
    for i, line in enumerate(raw.split(b"\n")):
        if not line:
            continue
        try:
            ev = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise CorruptTape(f"bad JSON in tape: {e}", path=str(path), line=i + 1) from None
        if not isinstance(ev, dict):
            raise CorruptTape("tape line is not an object", path=str(path), line=i + 1)
        out.append(ev)
    if not out or out[0].get("k") != "meta":
        raise CorruptTape("tape does not start with a meta event", path=str(path), line=1)
    return out


def read_tape(path: Path, verify: bool = True) -> list[dict]:
    """All events of a tape; event offset n is list index n."""
    return parse_lines(read_raw(path, verify), path)


def iter_tape(path: Path, verify: bool = True):
    yield from read_tape(path, verify)


CACHE_BYTES = int(os.environ.get("ENGRAM_TAPE_CACHE_MB") or 128) << 20
"""Budget of the LRU of decompressed tapes (bytes of tape text); ``ENGRAM_TAPE_CACHE_MB``."""

_lru: OrderedDict[tuple[str, int, int], tuple[bytes, ...]] = OrderedDict()
_lru_bytes = 0
_lru_lock = threading.Lock()


def _cached(path: str, mtime_ns: int, size: int) -> tuple[bytes, ...]:
    """The verified lines of a tape, from an LRU bounded by the bytes it holds (a tape's name is
    its content hash, and (mtime, size) in the key notices a file replaced under the same name)."""
    global _lru_bytes
    key = (path, mtime_ns, size)
    with _lru_lock:
        hit = _lru.get(key)
        if hit is not None:
            _lru.move_to_end(key)
            return hit
    raw = read_raw(Path(path), verify=True)
    lines = tuple(raw.split(b"\n"))
    with _lru_lock:
        if key not in _lru:
            _lru[key] = lines
            _lru_bytes += len(raw)
            while _lru_bytes > CACHE_BYTES and len(_lru) > 1:
                _k, old = _lru.popitem(last=False)
                _lru_bytes -= sum(len(x) + 1 for x in old) - 1
    return lines


def events_at(lines: tuple[bytes, ...], offsets: range | list[int], path: Path | str
              ) -> list[tuple[int, dict]]:
    """``(offset, event)`` for the given offsets of a tape's lines (``raw_lines_cached``)."""
    out = []
    for n in offsets:
        if 0 <= n < len(lines) and lines[n]:
            try:
                out.append((n, orjson.loads(lines[n])))
            except orjson.JSONDecodeError:
                raise CorruptTape("bad JSON in tape", path=str(path), line=n + 1) from None
    return out


def raw_lines_cached(path: Path) -> tuple[bytes, ...]:
    """The tape's JSONL lines (unparsed), from the same verified LRU."""
    st = os.stat(path)
    return _cached(str(path), st.st_mtime_ns, st.st_size)


def tape_length(path: Path) -> int:
    st = os.stat(path)
    lines = _cached(str(path), st.st_mtime_ns, st.st_size)
    return sum(1 for ln in lines if ln)
