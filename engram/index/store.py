"""Writing sessions into the index: tapes → events → content-addressed blocks → fingerprints.

A ``Batch`` accumulates sessions and writes them in one transaction: every distinct block text is
fingerprinted once (one vectorised ``fingerprint_batch`` call per batch) and fingerprint rows are
inserted sorted by hash, which is what SQLite's B-tree inserts fastest.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import re

import apsw
import numpy as np
import orjson
import xxhash

from engram import fingerprint
from engram.digest import text_key
from engram.fingerprint.tokenize import PAD, encode, hash_spans
from engram.index import packed as packed_rows
from engram.index import queries as Q
from engram.index import schema as S
from engram.sortedset import IntSet, KeyMap, distinct, uniq
from engram.spill import PickledParts

log = logging.getLogger(__name__)
_EMPTY = np.zeros(0, np.int64)

MAX_BLOCK_CHARS = 4_000_000     # text beyond this is not fingerprinted (the tape keeps it all)
INSERT_CHUNK_ROWS = 1 << 21     # fingerprint rows inserted at a time (``Batch._insert_blocks``)
BOILERPLATE_DEFER = 1 << 20     # a streamed session's hashes whose boilerplate counts wait
# (int32 keys: 4 MB; made distinct at once when they are counted, ~3x that for a moment — at 4 M the
# moment took ~50 MB, the peak of a big session's index transaction once its log held 4 M of them)
MAX_FTS_CHARS = 65_536
BLOCK_RULES = 2                 # which texts of an event are blocks, and how (``event_blocks``,
# ``_Derived``); the index keeps it with the fingerprint parameters (another value: rebuild).
# 2: tool outputs that list a file with line-number gutters are that file's text, and output
# derived from a code event of the same call is not indexed again
MIN_ARG_CHARS = 40              # tool-call string arguments shorter than this are not blocks
BOILERPLATE_MIN = 400           # a hash in at least this many blocks is ignored at query time


def _strings(value, out: list[str]) -> None:
    if isinstance(value, str):
        if len(value) >= MIN_ARG_CHARS:
            out.append(value)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)
    elif isinstance(value, dict):
        for k in sorted(value):
            _strings(value[k], out)


_GUTTER = r" *\d+[→\t]"                             # a numbered line's start: "   12→", "12\t"
_GUTTERED = re.compile(_GUTTER)
_LISTING_END = re.compile(rf"\n(?!{_GUTTER})")         # the first line break not before a number


def _output_blocks(text) -> list[tuple[str, int, int]]:
    """A tool output's blocks ``(text, role, first line)``: a file listed with line-number gutters
    (Claude Code's Read, ``cat -n``, ``nl -ba``) is the file's text, without them, and any text
    after the listing (not a harness ``<system-reminder>``) a block of its own.

    The listing is the text the ``code.read`` of the same call holds: stripped, both are one
    block, fingerprinted once. With the gutters every line had tokens of its own, so the same lines
    were a second block with k-grams of their own (half of all fingerprint rows on a corpus of
    Claude Code sessions), and code quoted in the output is matched as the code it is."""
    m = _GUTTERED.match(text) if isinstance(text, str) else None
    if m is not None:
        from engram.adapters.base import strip_gutter  # (ingest only: explain never imports it)

        body, first = strip_gutter(text)
        if first is not None:
            if m.group()[-1] == "→":
                # Claude Code numbers the lines of ``content.split("\n")``: the file's text is
                # the numbered lines joined (a final newline is the empty last line)
                body = body[:-1] if text.endswith("\n") else body
            elif body.endswith("\n\n"):  # ``cat -n`` numbers lines; a final empty one is ours
                body = body[:-1]
            out = [(body, S.ROLE_TOOL_OUTPUT, first)]
            end = _LISTING_END.search(text)
            rest = text[end.end():] if end is not None else ""
            if rest.strip() and not rest.lstrip().startswith("<system-reminder>"):
                out.append((rest, S.ROLE_TOOL_OUTPUT, 1))
            return out
    return [(text, S.ROLE_TOOL_OUTPUT, 1)]


def event_blocks(ev: dict) -> list[tuple[str, int, int]]:
    """The text blocks of one event: ``(text, role, first_line)`` (first_line 1-based)."""
    k = ev.get("k")
    out: list[tuple[str, int, int]] = []

    def add(text, role, line0=1):
        if isinstance(text, str) and text.strip():
            out.append((text, role, int(line0) if isinstance(line0, int) else 1))

    if ev.get("source") == "enrichment":
        add(ev.get("text") or ev.get("note"), S.ROLE_SIDECAR)
        return out
    if k == "code.edit":
        ar, br = ev.get("after_range") or [1, 0], ev.get("before_range") or [1, 0]
        add(ev.get("after_text"), S.ROLE_EDIT_AFTER, ar[0] if ar else 1)
        add(ev.get("before_text"), S.ROLE_EDIT_BEFORE, br[0] if br else 1)
    elif k == "code.read":
        r = ev.get("range") or [1, 0]
        add(ev.get("text"), S.ROLE_READ, r[0] if r else 1)
    elif k == "msg.in":
        add(ev.get("text"), S.ROLE_MSG_IN)
    elif k == "msg.out":
        add(ev.get("text"), S.ROLE_MSG_OUT)
    elif k == "tool.call":
        strs: list[str] = []
        _strings(ev.get("args"), strs)
        for s in strs:
            add(s, S.ROLE_TOOL_CALL)
    elif k == "tool.result":
        for block in _output_blocks(ev.get("stdout")):
            add(*block)
        add(ev.get("stderr"), S.ROLE_TOOL_OUTPUT)
    elif k == "span.link":
        add(ev.get("note"), S.ROLE_MSG_OUT)
    return out


# ASCII letters and digits: a line with fewer than 3 of them is trivial (``line_hashes``)
_ALNUM = np.zeros(256, dtype=np.int64)
_ALNUM[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", np.uint8)] = 1


def exact_hashes(text: str) -> np.ndarray:
    """One int32 per line: xxh3_64 (top 32 bits) of the line without trailing whitespace — every
    line, blank ones and indentation included (an edit's own before → after line diff)."""
    out = np.zeros(text.count("\n") + 1, dtype=np.int32)
    for i, ln in enumerate(text.split("\n")):
        h = xxhash.xxh3_64_intdigest(ln.rstrip().encode("utf-8", "surrogatepass")) >> 32
        out[i] = (h - (1 << 32)) if h >= (1 << 31) else h
    return out


def line_hashes(text: str) -> np.ndarray:
    """One int32 per line: xxh3_64 (top 32 bits) of the whitespace-stripped line; 0 for trivial
    lines (fewer than 3 ASCII letters or digits: blank, ``)``, ``else:``) which identify nothing.
    The letters are counted on the UTF-8 bytes at once (other characters' bytes are never ASCII);
    only the other lines are hashed one by one, or, from ``AT_ONCE_LINES`` lines, all at once."""
    if text.count("\n") >= AT_ONCE_LINES:
        return _line_hashes_at_once(text)
    lines = text.split("\n")
    raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    nl = np.flatnonzero(raw == 10)
    cum = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(_ALNUM[raw], out=cum[1:])
    counts = cum[np.r_[nl, len(raw)]] - cum[np.r_[0, nl + 1]]
    out = np.zeros(len(lines), dtype=np.int32)
    for i in np.flatnonzero(counts >= 3).tolist():
        h = xxhash.xxh3_64_intdigest(lines[i].strip().encode("utf-8", "surrogatepass")) >> 32
        h = (h - (1 << 32)) if h >= (1 << 31) else h
        out[i] = h or 1
    return out


AT_ONCE_LINES = 2000      # texts of this many lines are hashed by ``_line_hashes_at_once``


def _line_hashes_at_once(text: str) -> np.ndarray:
    """``line_hashes(text)``, the same values, with the lines' xxh3 hashes computed for
    the whole text at once (``hash_spans``: xxh3_64 over byte ranges, vectorised) instead
    of one Python call per line (a 5,000-line file: 3 ms one by one).
    A line is hashed stripped: its bytes from the first to the last that ``str.strip`` keeps. Where
    either end is a non-ASCII byte (which may belong to a Unicode space that ``strip`` drops),
    that line is hashed as ``line_hashes`` hashes a short text."""
    buf, _ = encode([text])
    n = len(buf) - PAD - 1  # (encode adds a "\n" after the text)
    raw = np.frombuffer(buf, dtype=np.uint8, count=n)
    nl = np.flatnonzero(raw == 10)
    starts = np.r_[0, nl + 1]
    ends = np.r_[nl, n]
    # ASCII letters and digits per line (fewer than 3: a trivial line)
    alnum = (raw | np.uint8(0x20)) - np.uint8(97) < 26
    alnum |= raw - np.uint8(48) < 10
    cum = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(alnum, out=cum[1:])
    want = np.flatnonzero(cum[ends] - cum[starts] >= 3)  # the lines that are not trivial
    out = np.zeros(len(starts), dtype=np.int32)
    if not len(want):
        return out
    # the ASCII bytes ``str.strip`` drops (``str.isspace``): \t \n \v \f \r, \x1c-\x1f, space
    space = raw == 32
    space |= raw - np.uint8(9) < 5
    space |= raw - np.uint8(28) < 4
    keep = np.flatnonzero(~space)
    lo = keep[np.searchsorted(keep, starts[want])]             # first kept byte of each line
    hi = keep[np.searchsorted(keep, ends[want]) - 1] + 1       # past its last kept byte
    odd = (raw[lo] >= 0x80) | (raw[hi - 1] >= 0x80)
    h = hash_spans(buf, lo, hi) >> np.uint64(32)
    h = h.astype(np.uint32).view(np.int32)
    h[h == 0] = 1
    out[want] = h
    if odd.any():
        lines = text.split("\n")
        for i in want[odd].tolist():
            out[i] = line_hashes(lines[i])[0]
    return out


def edit_lines_row(text: str) -> tuple:
    """The ``block_lines`` values after ``block`` for an edit's text (see ``BLOCK_LINES_SQL``)."""
    return (line_hashes(text).tobytes(), exact_hashes(text).tobytes())


EDIT_LINES_CHUNK_CHARS = 1 << 20   # edit texts whose line hashes are computed in one call


def edit_lines_rows(texts: list[str]) -> list[tuple]:
    """``[edit_lines_row(t) for t in texts]``, the line hashes of about
    ``EDIT_LINES_CHUNK_CHARS`` of texts computed at once (``_line_hashes_at_once`` of the texts
    joined by line breaks: a line's hash is its own, whatever the lines around it). One text at
    a time, the fixed cost of the numpy calls was most of it (edits are a few lines each)."""
    out: list[tuple] = []
    for chunk in _chunks(texts, EDIT_LINES_CHUNK_CHARS):
        hashes = _line_hashes_at_once("\n".join(chunk))
        at = 0
        for t in chunk:
            n = t.count("\n") + 1
            out.append((hashes[at:at + n].tobytes(), exact_hashes(t).tobytes()))
            at += n
    return out


def _chunks(texts: list[str], chars: int):
    """``texts`` in consecutive runs of at most ``chars`` characters (a longer text alone)."""
    i = 0
    while i < len(texts):
        j, size = i, 0
        while j < len(texts) and (j == i or size + len(texts[j]) <= chars):
            size += len(texts[j])
            j += 1
        yield texts[i:j]
        i = j


def _edit_lines_of(infos: list[list]) -> list[tuple | None]:
    """``edit_lines_row`` of each ``[text, k-grams wanted, an edit's text]`` that is an edit's
    text, None for the others (``prepare``'s and ``Preparer``'s ``PreparedTexts``)."""
    rows = iter(edit_lines_rows([info[0] for info in infos if info[2]]))
    return [next(rows) if info[2] else None for info in infos]


BLOCK_LINES_SQL = "INSERT OR IGNORE INTO block_lines(block, hashes, exact) VALUES (?,?,?)"


def _fts_text(ev: dict) -> str | None:
    k = ev.get("k")
    if k in ("msg.in", "msg.out"):
        t = ev.get("text")
    elif k == "tool.call":
        args = ev.get("args")
        t = args.get("description") if isinstance(args, dict) else None
        t = t if isinstance(t, str) else None
    elif ev.get("source") == "enrichment":
        t = ev.get("text") or ev.get("note")
    else:
        t = None
    if not isinstance(t, str) or not t.strip():
        return None
    return t[:MAX_FTS_CHARS]


_LIGHT_KEYS = ("t", "k", "file", "rel", "range", "before_range", "after_range", "source",
               "call_id", "note")


def light_event(ev: dict) -> dict:
    """What ``Batch.commit`` (and the lineage cache's ``wanted``) read of an event whose blocks
    were prepared ahead (``prepare``): its kind, time, file and ranges and its full-text-search
    text — not its code or output texts. A big session prepared in the parse worker travels to
    the indexing as these (its tape as the events' canonical JSON: ``ingest/worker.py``)."""
    out = {k: ev[k] for k in _LIGHT_KEYS if k in ev}
    k = ev.get("k")
    if k in ("msg.in", "msg.out") or ev.get("source") == "enrichment":
        if "text" in ev:
            out["text"] = ev["text"]
    elif k == "tool.call":
        args = ev.get("args")
        if isinstance(args, dict) and "description" in args:
            out["args"] = {"description": args["description"]}
    return out


class BlockIds:
    """Content-addressed block ids for one transaction: a text's existing block, else the next
    free id (the text is then queued in ``new`` to be fingerprinted and inserted).

    ``ids`` maps every queued block's hash to its id (``_insert_blocks`` reads it) and those of
    the ``RECENT`` blocks asked for last; past that, the others move to ``_seen`` (``_HashIds``:
    sorted arrays, 24 bytes a block), which remembers at most about ``MEMO`` of them: past that,
    those are forgotten and looked up again (they are in the ``blocks`` table: there before, or
    inserted since they were queued). The ids are the same either way; what one huge streamed
    session holds here no longer grows with it (153 k blocks at 1.5 GB of log), and is not a
    dict of 65 k hashes' objects (~90 bytes a block) strewn among a part's objects."""

    MEMO = 1 << 16
    RECENT = 1 << 12

    def __init__(self, conn: apsw.Connection):
        self.conn = conn
        self.ids: dict[bytes, int] = {}
        self.new: list[tuple[bytes, str]] = []
        self._seen = _HashIds()
        self.next_id = conn.execute("SELECT coalesce(max(id), 0) FROM blocks").fetchone()[0] + 1

    def id_of_hash(self, h: bytes, keep: set[bytes] | None = None, text: str | None = None) -> int:
        """``id_of`` for a block whose hash was computed ahead (``_text_key`` of ``text``, as
        stored). Without ``text`` (``prepare`` fingerprinted it) a new block is queued without it:
        its fingerprints come prepared."""
        return self._id(h, text, keep)

    def id_of(self, text: str, keep: set[bytes] | None = None) -> tuple[str, int]:
        """``(text as indexed — capped at MAX_BLOCK_CHARS, block id)``; the block's hash is added to
        ``keep`` when given (if it is new, its k-grams are kept for the lineage pass)."""
        text = text[:MAX_BLOCK_CHARS]
        return text, self._id(_text_key(text), text, keep)

    def _id(self, h: bytes, text: str | None, keep: set[bytes] | None) -> int:
        bid = self.ids.get(h)
        if bid is None:
            bid = self._seen.get(h)
        if bid is None:
            if len(self.ids) >= self.RECENT + len(self.new):
                queued = {q for q, _ in self.new}
                self._seen.add([(q, b) for q, b in self.ids.items() if q not in queued], self.MEMO)
                self.ids = {q: self.ids[q] for q in queued}   # (the queued ones only)
            row = self.conn.execute("SELECT id FROM blocks WHERE hash=?", (h,)).fetchone()
            if row:
                bid = row[0]
            else:
                bid = self.next_id
                self.next_id += 1
                self.new.append((h, text))
            self.ids[h] = bid
        if keep is not None:
            keep.add(h)
        return bid


class _HashIds:
    """Block ids by 16-byte hash (``BlockIds``' older ones) in three arrays sorted by the hash:
    its first and last 8 bytes (big-endian: the order of the bytes) and the id."""

    def __init__(self) -> None:
        self.hi = self.lo = np.zeros(0, np.uint64)
        self.ids = np.zeros(0, np.int64)

    def get(self, h: bytes) -> int | None:
        if not len(self.ids) or len(h) != 16:
            return None
        hi = np.uint64(int.from_bytes(h[:8], "big"))
        lo = np.uint64(int.from_bytes(h[8:], "big"))
        i = int(self.hi.searchsorted(hi))
        while i < len(self.hi) and self.hi[i] == hi:
            if self.lo[i] == lo:
                return int(self.ids[i])
            i += 1
        return None

    def add(self, items: list[tuple[bytes, int]], cap: int) -> None:
        """Remember ``items`` (hashes not held yet), forgetting the others first when all would
        pass ``cap``; hashes not of 16 bytes are not kept (looked up again)."""
        items = [(h, b) for h, b in items if len(h) == 16][-cap:] if cap > 0 else []
        if not items:
            return
        if len(self.ids) + len(items) > cap:
            self.__init__()
        both = np.frombuffer(b"".join(h for h, _ in items), ">u8").reshape(-1, 2).astype(np.uint64)
        hi = np.concatenate([self.hi, both[:, 0]])
        lo = np.concatenate([self.lo, both[:, 1]])
        ids = np.concatenate([self.ids, np.fromiter((b for _, b in items), np.int64, len(items))])
        order = np.lexsort((lo, hi))
        self.hi, self.lo, self.ids = hi[order], lo[order], ids[order]


@dataclasses.dataclass
class Prepared:
    """The block work of one session done ahead, in the parse worker (``prepare``): for each event
    its blocks as ``(hash, role, line0)`` (``None``: worked out at commit), and ``texts[hash]``:
    ``(n_lines, fingerprint hashes, their lines, all k-grams or None, edit_lines_row or None)`` —
    what ``Batch.commit`` would compute from the texts, the same values."""

    blocks: list[list[tuple[bytes, int, int]] | None]
    texts: PreparedTexts


class PreparedTexts:
    """The prepared values of many block texts in a few flat arrays (quick to pickle)."""

    def __init__(self, keys: list[bytes], n_lines: list[int], fps: list, edit_lines: list):
        self.keys, self.n_lines, self.edit_lines = keys, n_lines, edit_lines
        counts = np.fromiter((len(f.hashes) for f in fps), np.int64, len(fps))
        self.off = np.zeros(len(fps) + 1, np.int64)
        np.cumsum(counts, out=self.off[1:])
        self.H = np.concatenate([f.hashes for f in fps]) if fps else np.zeros(0, np.int64)
        self.L = np.concatenate([f.lines for f in fps]) if fps else np.zeros(0, np.int32)
        kg = [f.kgrams if f.kgrams is not None else np.zeros(0, np.int64) for f in fps]
        self.has_k = [f.kgrams is not None for f in fps]
        kc = np.fromiter((len(k) for k in kg), np.int64, len(kg))
        self.koff = np.zeros(len(kg) + 1, np.int64)
        np.cumsum(kc, out=self.koff[1:])
        self.K = np.concatenate(kg) if kg else np.zeros(0, np.int64)
        self._index: dict[bytes, int] | None = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_index"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._index = None

    def __contains__(self, h: bytes) -> bool:
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self.keys)}
        return h in self._index

    def __getitem__(self, h: bytes) -> tuple:
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self.keys)}
        i = self._index[h]
        a, z = self.off[i], self.off[i + 1]
        kg = self.K[self.koff[i]:self.koff[i + 1]] if self.has_k[i] else None
        return self.n_lines[i], self.H[a:z], self.L[a:z], kg, self.edit_lines[i]


class _Derived:
    """Tool output that a harness derived from a code event of the same call, left out of that
    output's blocks:

    * the listing of a ``code.read`` (``_output_blocks`` makes it the read's text): a session that
      read the span once touched it once, with the read as its anchor;
    * the snippet Claude Code echoes after an edit ("The file ... has been updated. Here's the
      result of running `cat -n` on a snippet of the edited file:" and numbered lines): lines of
      the edited file around the change, which the ``code.edit`` of the same call holds (10% of
      the fingerprint rows of the real Claude Code logs of ``tests/data``)."""

    def __init__(self, events: list[dict]):
        self.reads: dict[str, str] = {}   # call id → the text of the code.read made of its output
        self.edits: set[str] = set()      # call ids that made a code.edit
        for ev in events:
            cid = ev.get("call_id")
            if cid is None:
                continue
            if ev.get("k") == "code.read" and isinstance(ev.get("text"), str):
                self.reads[cid] = ev["text"][:MAX_BLOCK_CHARS]
            elif ev.get("k") == "code.edit":
                self.edits.add(cid)

    def skip(self, ev: dict, role: int, text: str) -> bool:
        """Whether ``text`` (capped), a block of ``ev`` in ``role``, is derived output."""
        if role != S.ROLE_TOOL_OUTPUT:
            return False
        cid = ev.get("call_id")
        return self.reads.get(cid) == text or (cid in self.edits and _is_echo(text))


def _is_echo(text: str) -> bool:
    """A line of words, then numbered lines (an edit's snippet as Claude Code returns it)."""
    nl = text.find("\n")
    return nl > 0 and _GUTTERED.match(text) is None and _GUTTERED.match(text, nl + 1) is not None


def _text_key(text: str) -> bytes:
    """A block's key: the text's ``text_key`` as stored (capped at ``MAX_BLOCK_CHARS``)."""
    return text_key(text[:MAX_BLOCK_CHARS])


def _indexed_blocks(ev: dict, derived: _Derived):
    """``(text as stored, key, role, first line)`` of the blocks of ``ev`` that are indexed:
    ``event_blocks`` capped at ``MAX_BLOCK_CHARS``, derived output left out. Both indexing paths
    (``prepare`` and ``Batch.commit``) take an event's blocks from here."""
    for text, role, line0 in event_blocks(ev):
        text = text[:MAX_BLOCK_CHARS]
        if not derived.skip(ev, role, text):
            yield text, _text_key(text), role, line0


def prepare(sessions: list[list[dict]], wanted=None) -> list[Prepared]:
    """``Prepared`` for each session's events (block texts capped, hashed and fingerprinted as
    the commit does; one batch for all); ``wanted(ofs, event)`` marks the events whose block
    k-grams the lineage pass reads (``engram/lineage/cache.py``)."""
    texts: dict[bytes, list] = {}   # hash → [capped text, k-grams wanted, an edit's text]
    out = []
    for events in sessions:
        per = []
        derived = _Derived(events)
        for ofs, ev in enumerate(events):
            want = wanted is not None and wanted(ofs, ev)
            bl = []
            for text, h, role, line0 in _indexed_blocks(ev, derived):
                info = texts.get(h)
                if info is None:
                    info = texts[h] = [text, False, False]
                info[1] |= want
                info[2] |= role in (S.ROLE_EDIT_AFTER, S.ROLE_EDIT_BEFORE)
                bl.append((h, role, line0))
            per.append(bl)
        out.append(per)
    keys = list(texts)
    fps = _fingerprint_chunked([texts[h][0] for h in keys], [texts[h][1] for h in keys])
    done = PreparedTexts(keys, [texts[h][0].count("\n") + 1 for h in keys], fps,
                         _edit_lines_of([texts[h] for h in keys]))
    return [Prepared(per, done) for per in out]


class _Seen(_Derived):
    """``_Derived`` of a session seen a part at a time (``Preparer``): what the parts so far
    say, a read's text kept as its key (not the text: the session is never held whole)."""

    def __init__(self) -> None:
        # one entry per call of the session: in sorted arrays (``KeyMap``), by the call id's hash
        self.reads = KeyMap(2)    # call → its read's text key (as two int64s)
        self.edits = KeyMap()     # calls that made edits

    def update(self, events: list[dict]) -> None:
        for ev in events:
            cid = ev.get("call_id")
            if cid is None:
                continue
            if ev.get("k") == "code.read" and isinstance(ev.get("text"), str):
                self.reads[_call_key(cid)] = _as_ints(_text_key(ev["text"]))
            elif ev.get("k") == "code.edit":
                self.edits.add(_call_key(cid))

    def skip(self, ev: dict, role: int, text: str) -> bool:
        if role != S.ROLE_TOOL_OUTPUT:
            return False
        cid = _call_key(ev.get("call_id"))
        key = self.reads.get(cid)
        return (key is not None and key == _as_ints(_text_key(text))) or (cid in self.edits
                                                                          and _is_echo(text))


def _call_key(cid) -> bytes:
    """A call id as a ``KeyMap`` key (its 128-bit hash; a value that is not a string: its type
    and repr)."""
    b = (cid.encode("utf-8", "surrogatepass") if isinstance(cid, str)
         else f"\0{type(cid).__name__}\0{cid!r}".encode("utf-8", "surrogatepass"))
    return KeyMap.key(xxhash.xxh3_128_digest(b))


def _as_ints(key: bytes) -> tuple[int, int]:
    return (int.from_bytes(key[:8], "little", signed=True),
            int.from_bytes(key[8:], "little", signed=True))


class PreparedParts:
    """The ``PreparedTexts`` of a session prepared a part at a time, looked up by hash."""

    def __init__(self) -> None:
        self.parts: list[PreparedTexts] = []
        self.where: dict[bytes, int] = {}

    def __getitem__(self, h: bytes) -> tuple:
        return self.parts[self.where[h]][h]


class Preparer:
    """``prepare`` of one session given a part of its events at a time (``add``, in order;
    ``result()``: its ``Prepared``) after its ``meta`` (which has no blocks), for a session
    streamed from its log: each part's new texts
    are fingerprinted as they come, a text seen in an earlier part is not again (unless now it
    needs what it was not prepared with: its k-grams, its edit lines). The values are those
    ``prepare`` gives of the whole session, provided no part separates a call's output from the
    code events made of it (``add`` parts that end between calls)."""

    def __init__(self, wanted=None, sink=None):
        self.wanted = wanted
        self.sink = sink   # ``sink(part)`` takes each part (``PreparedSpill``) instead
        self.n = 1         # events so far (the meta: no blocks)
        self.blocks: list[list[tuple[bytes, int, int]]] = [[]]
        self.texts = PreparedParts()
        # hash → what was made of it: 1 its k-grams, 2 its edit lines (one per text of the
        # session: in sorted arrays, ``KeyMap``)
        self.flags = KeyMap(1)
        self.seen = _Seen()

    def add(self, events: list[dict]) -> None:
        self.seen.update(events)
        todo: dict[bytes, list] = {}   # as ``prepare``'s ``texts``
        blocks = [] if self.sink is not None else self.blocks
        for ev in events:
            ofs = self.n
            self.n += 1
            want = self.wanted is not None and self.wanted(ofs, ev)
            bl = []
            for text, h, role, line0 in _indexed_blocks(ev, self.seen):
                edit = role in (S.ROLE_EDIT_AFTER, S.ROLE_EDIT_BEFORE)
                info = todo.get(h)
                have = self.flags.get(KeyMap.key(h)) if info is None else None
                have = have[0] if have is not None else None
                if info is not None:
                    info[1] |= want
                    info[2] |= edit
                elif have is None or (want and not have & 1) or (edit and not have & 2):
                    todo[h] = [text, want or (have is not None and bool(have & 1)),
                               edit or (have is not None and bool(have & 2))]
                bl.append((h, role, line0))
            blocks.append(bl)
        part = None
        if todo:
            part = self._prepare(todo)
        if self.sink is not None:
            self.sink((blocks, part))

    def _prepare(self, todo: dict[bytes, list]) -> PreparedTexts:
        keys = list(todo)
        fps = _fingerprint_chunked([todo[h][0] for h in keys], [todo[h][1] for h in keys])
        part = PreparedTexts(keys, [todo[h][0].count("\n") + 1 for h in keys], fps,
                             _edit_lines_of([todo[h] for h in keys]))
        n = len(self.texts.parts)
        if self.sink is None:   # (with a sink the parts are not kept, nor where each text is)
            self.texts.parts.append(part)
            for h in keys:
                self.texts.where[h] = n
        for h in keys:
            self.flags[KeyMap.key(h)] = (int(bool(todo[h][1])) | (2 if todo[h][2] else 0),)
        return part

    def result(self) -> Prepared:
        return Prepared(self.blocks, self.texts)


class PreparedSpill(PickledParts):
    """A streamed session's prepared parts (``Preparer`` with a ``sink``), in a temp file of a
    tape directory — named as a tape's temp file of its writer (``writer.sweep_temp`` removes
    it once that process is gone) — rather than held: ``write(part)`` each ``(blocks of the
    part's events, PreparedTexts of its new texts or None)``, in order; ``parts()`` reads them
    back one at a time (``Batch.commit`` indexes such a session a part at a time);
    ``discard()`` removes the file."""

    rows = 0   # fingerprint rows of its texts: at least as many as its commit inserts

    def write(self, part) -> None:
        super().write(part)
        if part[1] is not None:
            self.rows += len(part[1].H)

    def __getstate__(self) -> dict:
        return {"path": self.path, "_f": None, "rows": self.rows}


PREPARE_CHUNK_CHARS = 8_000_000   # texts fingerprinted in one vectorised call by ``prepare``


def _fingerprint_chunked(texts: list[str], keep: list[bool]) -> list:
    """``fingerprint_batch`` a chunk of about ``PREPARE_CHUNK_CHARS`` at a time (each text's
    fingerprints do not depend on the others of its call): its arrays, a few times the size of
    the text, stay bounded however big the session."""
    out: list = []
    for chunk in _chunks(texts, PREPARE_CHUNK_CHARS):
        i = len(out)
        out.extend(fingerprint.fingerprint_batch(chunk, keep_kgrams=keep[i:i + len(chunk)]))
    return out


_JSON = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS   # as the tape writer's


@dataclasses.dataclass
class SessionRecord:
    """One session to index: a sealed tape (``path`` set) or a live one (``live=True``);
    ``prepared``: its block work done ahead (aligned with ``events``), if any; ``replaces``: the
    live tape id whose rows it replaces (deleted in the same transaction)."""

    tape_id: str
    events: list[dict]
    path: str | None = None
    live: bool = False
    source_path: str | None = None
    source_key: str | None = None
    prepared: Prepared | None = None
    replaces: str | None = None
    meta_json: str = dataclasses.field(default="", repr=False)
    live_json: list[bytes] | None = dataclasses.field(default=None, repr=False)

    def encode(self) -> None:
        """The JSON the commit stores (the meta; every event of a live session, unless given),
        made now: a value that cannot be written fails here, for this session, not at the commit
        of a batch of many sources."""
        meta = self.events[0]
        self.meta_json = orjson.dumps({k: v for k, v in meta.items() if k != "coverage"},
                                      option=_JSON).decode()
        if self.live and self.live_json is None:
            # (a copy of its own size: orjson's result keeps the buffer it wrote into, ~4-10x)
            self.live_json = [bytes(memoryview(orjson.dumps(ev, option=_JSON))) for ev in self.events]


class Batch:
    """Collects sessions, then ``commit()`` writes them all in one transaction."""

    def __init__(self, conn: apsw.Connection, cache=None):
        self.conn = conn
        self.cache = cache   # engram.lineage.cache.IngestCache, or None
        self.sessions: list[SessionRecord] = []
        self.n_events = 0

    def add(self, rec: SessionRecord) -> None:
        """Queue a session; its JSON is made now (``SessionRecord.encode``: an error is this
        session's, raised to the caller)."""
        if not rec.meta_json:
            rec.encode()
        self.sessions.append(rec)
        self.n_events += len(rec.events)

    def __len__(self) -> int:
        return len(self.sessions)

    def commit(self, also: list[tuple[str, tuple]] = ()) -> dict:
        """Write the sessions in one transaction, with the statements ``also`` (``(sql, args)``:
        the ingest's cursors and errors of the same sources), so that a kill leaves either all
        of it or none."""
        conn = self.conn
        stats = {"tapes": 0, "events": 0, "blocks": 0, "fingerprints": 0}
        if not self.sessions:
            if also:
                with conn:
                    for sql, args in also:
                        conn.execute(sql, args)
            return stats
        with conn:
            blocks = BlockIds(conn)
            next_event = (conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0]) + 1
            ref_rows: list[tuple[int, int, int, int]] = []
            line_rows: list[tuple] = []
            lined: set[int] = set()
            event_rows = []
            fts_rows = []
            live_rows = []
            cache = self.cache
            keep: set[bytes] | None = set() if cache is not None else None
            ready: dict[bytes, tuple] = {}   # prepared block hash → its values (``PreparedTexts``)
            for rec in self.sessions:
                if rec.replaces is not None:
                    delete_tape(conn, rec.replaces)
                if conn.execute("SELECT 1 FROM tapes WHERE tape_id=?", (rec.tape_id,)).fetchone():
                    if rec.live:
                        delete_tape(conn, rec.tape_id)
                    else:
                        continue  # a sealed tape is immutable: indexing it twice is a no-op
                tape_row = _tape_row(conn, rec)
                stats["tapes"] += 1
                prep = rec.prepared
                if isinstance(prep, PreparedSpill):
                    next_event = self._commit_parts(rec, tape_row, next_event, blocks, keep, stats)
                    continue
                derived = None  # (``_Derived``, for events not prepared ahead)
                for ofs, ev in enumerate(rec.events):
                    eid = next_event
                    next_event += 1
                    k = ev.get("k") or ""
                    a = ev.get("after_range") if k == "code.edit" else ev.get("range")
                    b = ev.get("before_range") if k == "code.edit" else None
                    file = ev.get("file") if isinstance(ev.get("file"), str) else None
                    rel = ev.get("rel") if isinstance(ev.get("rel"), str) else None
                    event_rows.append((eid, tape_row, ofs, S.kind_code(k), ev.get("t"), file, rel,
                                       _r(a, 0), _r(a, 1), _r(b, 0), _r(b, 1)))
                    if rec.live:
                        live_rows.append((eid, rec.live_json[ofs]))
                    ft = _fts_text(ev)
                    if ft:
                        fts_rows.append((eid, ft))
                    kept = keep if keep is not None and cache.wanted(ofs, ev) else None
                    pb = prep.blocks[ofs] if prep is not None else None
                    if pb is not None:
                        for h, role, line0 in pb:
                            bid = blocks.id_of_hash(h, kept)
                            ready[h] = prep.texts[h]
                            ref_rows.append((bid, eid, role, line0))
                            if role in (S.ROLE_EDIT_AFTER, S.ROLE_EDIT_BEFORE) and bid not in lined:
                                lined.add(bid)
                                line_rows.append((bid, *ready[h][4]))
                        continue
                    if derived is None:
                        derived = _Derived(rec.events)
                    for text, h, role, line0 in _indexed_blocks(ev, derived):
                        bid = blocks.id_of_hash(h, kept, text)
                        ref_rows.append((bid, eid, role, line0))
                        if role in (S.ROLE_EDIT_AFTER, S.ROLE_EDIT_BEFORE) and bid not in lined:
                            lined.add(bid)
                            line_rows.append((bid, *edit_lines_row(text)))
                stats["events"] += len(rec.events)
            conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?)", event_rows)
            conn.executemany("INSERT OR IGNORE INTO refs VALUES (?,?,?,?)", ref_rows)
            conn.executemany(BLOCK_LINES_SQL, line_rows)
            if live_rows:
                conn.executemany("INSERT INTO live_events VALUES (?,?)", live_rows)
            if fts_rows:
                conn.executemany("INSERT INTO fts(rowid, text) VALUES (?,?)", fts_rows)
            if blocks.new:
                stats["fingerprints"] = self._insert_blocks(blocks.new, blocks.ids, keep, ready)
                stats["blocks"] = len(blocks.new)
            for sql, args in also:
                conn.execute(sql, args)
        return stats

    def _commit_parts(self, rec: SessionRecord, tape_row: int, next_event: int,
                      blocks: BlockIds, keep: set[bytes] | None, stats: dict) -> int:
        """(in ``commit``'s transaction) the rows of a session whose blocks were prepared a part
        at a time (``PreparedSpill``: a streamed session), a part at a time: its events' rows,
        then its new blocks and their fingerprints, so that what is held is one part's, not the
        session's. The rows are those of the whole-session path; the next event id."""
        conn, cache = self.conn, self.cache
        if cache is not None:
            cache.expect_postings(rec.prepared.rows)
        lined = IntSet()   # (the blocks given their ``block_lines`` row: tens of thousands at 1.5 GB)
        ofs = 0
        # the boilerplate counts of the parts' hashes, updated once ``BOILERPLATE_DEFER`` of them
        # wait (and at the end): a count updated later includes later parts' rows, as the
        # whole-session path's does, and a hash of many parts is counted once, not in each
        waiting: list[np.ndarray] = []
        parts = rec.prepared.parts()
        for pblocks, texts in itertools.chain([([[]], None)], parts):  # the meta's first
            event_rows, ref_rows, line_rows, fts_rows = [], [], [], []
            ready: dict[bytes, tuple] = {}
            first_new = len(blocks.new)
            for pb in pblocks:
                ev = rec.events[ofs]
                k = ev.get("k") or ""
                a = ev.get("after_range") if k == "code.edit" else ev.get("range")
                b = ev.get("before_range") if k == "code.edit" else None
                file = ev.get("file") if isinstance(ev.get("file"), str) else None
                rel = ev.get("rel") if isinstance(ev.get("rel"), str) else None
                event_rows.append((next_event, tape_row, ofs, S.kind_code(k), ev.get("t"), file,
                                   rel, _r(a, 0), _r(a, 1), _r(b, 0), _r(b, 1)))
                ft = _fts_text(ev)
                if ft:
                    fts_rows.append((next_event, ft))
                kept = keep if keep is not None and cache.wanted(ofs, ev) else None
                for h, role, line0 in pb:
                    bid = blocks.id_of_hash(h, kept)
                    if texts is not None and h in texts and h not in ready:
                        ready[h] = texts[h]
                    ref_rows.append((bid, next_event, role, line0))
                    if role in (S.ROLE_EDIT_AFTER, S.ROLE_EDIT_BEFORE) and bid not in lined:
                        lined.add(bid)
                        line_rows.append((bid, *ready[h][4]))
                next_event += 1
                ofs += 1
            conn.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?)", event_rows)
            conn.executemany("INSERT OR IGNORE INTO refs VALUES (?,?,?,?)", ref_rows)
            conn.executemany(BLOCK_LINES_SQL, line_rows)
            if fts_rows:
                conn.executemany("INSERT INTO fts(rowid, text) VALUES (?,?)", fts_rows)
            new = blocks.new[first_new:]
            if new:
                stats["fingerprints"] += self._insert_blocks(new, blocks.ids, keep, ready, waiting)
                stats["blocks"] += len(new)
                del blocks.new[first_new:]   # inserted
                if sum(len(w) for w in waiting) >= BOILERPLATE_DEFER:
                    self._update_boilerplate(_drained(waiting))
            if keep:
                _pending_only(keep, blocks.new)
            del event_rows, ref_rows, line_rows, fts_rows, ready, new, pblocks, texts
        if waiting:
            self._update_boilerplate(_drained(waiting))
        if ofs != len(rec.events):
            raise ValueError(f"prepared parts of {ofs} events for a session of {len(rec.events)}")
        stats["events"] += len(rec.events)
        return next_event

    def _insert_blocks(self, new_blocks: list[tuple[bytes, str | None]],
                       block_ids: dict[bytes, int], keep: set[bytes] | None = None,
                       ready: dict[bytes, tuple] | None = None,
                       defer: list[np.ndarray] | None = None) -> int:
        """``new_blocks``: (hash, capped text), or (hash, None) for a block prepared ahead
        (its values in ``ready``). Inserted a chunk of about ``INSERT_CHUNK_ROWS`` fingerprint
        rows at a time (blocks in id order), so the row arrays stay small however big the batch
        (one huge session); the rows, the boilerplate counts and what the ingest cache keeps are
        those of one pass."""
        n = 0
        chunk: list[tuple[bytes, str | None]] = []
        rows = 0
        hashes: list[np.ndarray] = []   # the distinct hashes of each chunk's rows
        for item in new_blocks:
            chunk.append(item)
            h, text = item
            rows += len(text) // 8 if text is not None else len(ready[h][1])
            if rows >= INSERT_CHUNK_ROWS:
                n += self._insert_chunk(chunk, block_ids, keep, ready, hashes)
                chunk, rows = [], 0
        if chunk:
            n += self._insert_chunk(chunk, block_ids, keep, ready, hashes)
        if hashes:  # once all rows are in: the counts are the batch's
            distinct = hashes[0] if len(hashes) == 1 else uniq(np.concatenate(hashes))
            if defer is not None:  # (the caller updates them later, with later rows in)
                defer.append(distinct.astype(np.int32))   # (32-bit index keys: half the bytes)
            else:
                self._update_boilerplate(distinct)
        return n

    def _insert_chunk(self, new_blocks: list[tuple[bytes, str | None]],
                      block_ids: dict[bytes, int], keep: set[bytes] | None,
                      ready: dict[bytes, tuple] | None, hashes: list[np.ndarray]) -> int:
        """``_insert_blocks`` for blocks of consecutive ids; the distinct hashes of the rows
        inserted go to ``hashes``."""
        conn = self.conn
        todo = [(h, t) for h, t in new_blocks if t is not None]
        texts = [t for _, t in todo]
        if keep:
            fps = fingerprint.fingerprint_batch(texts, keep_kgrams=[h in keep for h, _ in todo])
        else:
            fps = fingerprint.fingerprint_batch(texts)
        done = {h: (t.count("\n") + 1, fp.hashes, fp.lines, fp.kgrams)
                for (h, t), fp in zip(todo, fps)}
        brows = []
        hs, ls, bids, counts = [], [], [], []
        for h, _text in new_blocks:
            bid = block_ids[h]
            n_lines, fh, fl, kgrams = done[h] if h in done else ready[h][:4]
            if kgrams is not None and self.cache is not None:
                if h not in done:  # views of the prepared arrays: copies, not all of them kept
                    fh, kgrams = fh.copy(), kgrams.copy()
                self.cache.keep_prints(h, fh, kgrams)
            brows.append((bid, h, len(fh), n_lines))
            if len(fh):
                hs.append(fh)
                ls.append(fl)
                bids.append(bid)
                counts.append(len(fh))
        conn.executemany("INSERT INTO blocks VALUES (?,?,?,?)", brows)
        if not hs:
            if self.cache is not None:  # (an empty part keeps the kept block range whole)
                bids = [block_ids[h] for h, _ in new_blocks]
                self.cache.keep_postings(_EMPTY, _EMPTY, _EMPTY, min(bids), max(bids))
            return 0
        H = Q.index_keys(np.concatenate(hs))
        B = np.repeat(np.asarray(bids, dtype=np.int64), counts)
        L = np.concatenate(ls).astype(np.int64)
        del hs, ls
        n = len(H)
        packing = _packing(B, L)
        if packing is not None:
            # sorted as the packed rows (their order is the rows'), and distinct: a k-gram twice
            # on a line gives a row twice, which INSERT OR IGNORE would drop anyway. The columns
            # are let go once packed and the packed rows sorted in place: a part's rows (which
            # grow with the session's files) were held as columns, packed, a sorted copy and the
            # distinct ones at once (~60 bytes a row at the peak of a big session's commit)
            packed = _pack(H, B, L, packing)
            del H, B, L
            packed.sort(kind="stable")
            packed = distinct(packed)
            H, B, L = _unpack(packed, packing)
            del packed
        else:
            order = np.lexsort((L, B, H))
            H, B, L = H[order], B[order], L[order]
            # repeated (hash, block, line) rows (a k-gram twice on a line) are what INSERT OR
            # IGNORE would drop anyway
            dup = np.zeros(n, dtype=bool)
            dup[1:] = (H[1:] == H[:-1]) & (B[1:] == B[:-1]) & (L[1:] == L[:-1])
            if dup.any():
                H, B, L = H[~dup], B[~dup], L[~dup]
        packed_rows.add(conn, H, B, L)   # one row per key (``engram/index/packed.py``)
        if self.cache is not None:
            bids = [block_ids[h] for h, _ in new_blocks]
            self.cache.keep_postings(H, B, L, min(bids), max(bids))
        first = np.ones(len(H), dtype=bool)
        first[1:] = H[1:] != H[:-1]
        hashes.append(H[first])
        return n

    def _update_boilerplate(self, hashes: np.ndarray) -> None:
        conn = self.conn
        for i in range(0, len(hashes), 5000):
            counts = packed_rows.key_counts(conn, hashes[i:i + 5000])
            rows = sorted((k, n) for k, n in counts.items() if n >= BOILERPLATE_MIN)
            if rows:
                conn.executemany("INSERT OR REPLACE INTO boilerplate VALUES (?,?)", rows)


def _pending_only(keep: set[bytes], queued: list[tuple[bytes, str | None]]) -> None:
    """(``Batch._commit_parts``, after a part) ``keep`` is read when a block is inserted: of what
    it holds, later parts need only the blocks still ``queued`` (the batch's sessions before this
    one, inserted at the commit's end) — the others are inserted or were there before. Held, it
    would grow with the session (a hash and its slot for every edit's texts)."""
    keep.intersection_update({h for h, _ in queued})


def _drained(parts: list[np.ndarray]) -> np.ndarray:
    """The distinct values of ``parts`` (``uniq`` of their concatenation), sorted; the list is
    emptied first, so the parts and their concatenation are not held together while it is sorted
    (in place)."""
    out = np.concatenate(parts) if len(parts) > 1 else parts[0]
    parts.clear()   # (one part: sorted in place, the caller's own array)
    out.sort()
    return distinct(out)


# Fingerprint rows packed one to an int64 (``_packing``) to be sorted and made distinct at once

@dataclasses.dataclass(frozen=True)
class _Packing:
    """How fingerprint rows pack into one int64: the 32-bit key in the high half, then the block
    less ``block0`` in ``block_bits`` bits, then the line in ``line_bits`` bits. Packed values sort
    as the rows do (key, block, line). Binding each row from Python costs SQLite about as much as
    its own B-tree work; one ``carray`` of packed rows does not."""

    block0: int
    block_bits: int
    line_bits: int

    def sql_args(self) -> tuple[int, int, int, int]:
        return (self.line_bits, (1 << self.block_bits) - 1, self.block0, (1 << self.line_bits) - 1)


def _packing(B: np.ndarray, L: np.ndarray) -> _Packing | None:
    """The packing of rows with blocks ``B`` and lines ``L``; None when they do not fit (very
    many blocks or very long blocks in one batch: the rows are then bound one by one)."""
    if not len(B) or int(L.min()) < 0:
        return None
    block0 = int(B.min())
    p = _Packing(block0, int(B.max() - block0).bit_length(), int(L.max()).bit_length())
    return p if p.block_bits + p.line_bits <= 32 else None


def _pack(H: np.ndarray, B: np.ndarray, L: np.ndarray, p: _Packing) -> np.ndarray:
    """``(H << 32) | ((B - block0) << line_bits) | L``, with one temporary column at a time."""
    out = np.left_shift(H, 32)
    t = np.subtract(B, p.block0)
    np.left_shift(t, p.line_bits, out=t)
    out |= t
    del t
    out |= L
    return out


def _unpack(packed: np.ndarray, p: _Packing) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (packed >> 32, ((packed >> p.line_bits) & ((1 << p.block_bits) - 1)) + p.block0,
            packed & ((1 << p.line_bits) - 1))


def _tape_row(conn: apsw.Connection, rec: SessionRecord) -> int:
    """Insert the ``tapes`` row of a session; its row id."""
    meta = rec.events[0]
    times = [e.get("t") for e in rec.events if e.get("t")]
    conn.execute(
        "INSERT INTO tapes(tape_id, path, live, harness, session, tier, model, cwd, label,"
        " first_t, last_t, n_events, source_path, source_key, continues, coverage, meta_json)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (rec.tape_id, rec.path, int(rec.live), meta.get("harness"), meta.get("session"),
         meta.get("tier") or "agent", meta.get("model"), meta.get("cwd"), meta.get("label"),
         min(times) if times else None, max(times) if times else None, len(rec.events),
         rec.source_path or meta.get("source_path"), rec.source_key, meta.get("continues"),
         json.dumps(meta.get("coverage"), sort_keys=True), rec.meta_json))
    return conn.last_insert_rowid()


def _r(rng, i):
    if isinstance(rng, (list, tuple)) and len(rng) == 2 and isinstance(rng[i], int):
        return rng[i]
    return None


def delete_tape(conn: apsw.Connection, tape_id: str) -> None:
    """Remove a tape's rows (used to replace provisional rows of a live session)."""
    row = conn.execute("SELECT id FROM tapes WHERE tape_id=?", (tape_id,)).fetchone()
    if not row:
        return
    tid = row[0]
    conn.execute("DELETE FROM fts WHERE rowid IN (SELECT id FROM events WHERE tape=?)", (tid,))
    conn.execute("DELETE FROM refs WHERE event IN (SELECT id FROM events WHERE tape=?)", (tid,))
    conn.execute("DELETE FROM live_events WHERE event IN (SELECT id FROM events WHERE tape=?)", (tid,))
    conn.execute("DELETE FROM edges WHERE from_event IN (SELECT id FROM events WHERE tape=?)"
                 " OR to_event IN (SELECT id FROM events WHERE tape=?)", (tid, tid))
    conn.execute("DELETE FROM tombstones WHERE event IN (SELECT id FROM events WHERE tape=?)", (tid,))
    conn.execute("DELETE FROM continuations WHERE from_tape=? OR to_tape=?", (tid, tid))
    conn.execute("DELETE FROM events WHERE tape=?", (tid,))
    conn.execute("DELETE FROM tapes WHERE id=?", (tid,))
