"""What the lineage pass needs of the sessions one ingest run just indexed, kept from the run.

The lineage pass (``lineage.after_ingest``) reads each new tape's edits, span links and head back,
fingerprints their texts again and looks their hashes up in the index. During the same run ingest
already holds all of that. ``IngestCache`` keeps

* ``lines``: tape id → {offset: JSONL line} for the events the pass reads (``wanted``) — the very
  bytes the tape holds, so parsing them gives the dicts a tape read gives (``CachedAccess``);
* ``heads``: tape id → what the tape was given at its start (``rules.head_input`` of its first
  events, parsed from those same bytes): a few hundred bytes a tape, kept for every tape up to
  ``MAX_HEADS_BYTES`` whatever the lines' cap (a head is most of a short tape's bytes: at 16k
  sessions the lines' cap held 2.4k of them, and the continuations read the rest back whole);
* ``prints``: xxh3_128 of a text → its winnowed hashes and all its k-gram hashes (made distinct
  on first use), for the texts of those events, from the fingerprinting ``store.Batch`` (or the
  parse worker) does anyway;
* the ``fingerprints`` rows the run inserted (``keep_postings``), so ``postings`` reads only the
  rows of other blocks from the index (none at all after a rebuild);
* ``worker``: the run's parse worker, which computes the continuations meanwhile.

Nothing here is stored, and every answer equals what reading the tape, fingerprinting the text or
querying the index gives (a run without a cache, or a tape of an earlier run, does just that).
So the cache is capped by bytes, not by what the run indexes (``MAX_LINES_BYTES``,
``MAX_PRINTS_BYTES``, ``MAX_POSTINGS``): past a cap, what is not kept is read or computed again.
Of the lines and prints, only ``LINES_IN_MEMORY`` / ``PRINTS_IN_MEMORY`` bytes are held in memory;
the rest is kept in a private temp file (``spill.SpillFile``) and read back when asked for, so
that what one huge session's ingest holds does not grow with its log up to those caps.
Also here: ``uniq``/``member``, faster equivalents of ``np.unique``/``np.isin`` on hashes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import apsw
import numpy as np
import orjson

from engram import fingerprint, paths
from engram.digest import text_key
from engram.errors import CorruptTape
from engram.index import packed as packed_rows
from engram.index import queries
from engram.index.access import TapeAccess
from engram.lineage.rules import HEAD_EVENTS, head_input
from engram.sortedset import KeyMap, member, uniq
from engram.spill import SpillFile
from engram.tape import reader
from engram.tape.writer import encode_event

_WANTED_KINDS = ("code.edit", "span.link")
MAX_POSTINGS = 4_000_000    # fingerprint rows kept in memory (16 bytes each) before giving up
MAX_PRINTS_BYTES = 96 << 20  # fingerprint arrays of texts kept
MAX_LINES_BYTES = 64 << 20   # JSONL lines of wanted events kept
LINES_IN_MEMORY = 4 << 20    # ... of which held in memory (the rest in the spill file)
PRINTS_IN_MEMORY = 6 << 20   # fingerprint arrays held in memory (the rest in the spill file;
#                              at 8 MB a 400 MB steady session's lineage pass held 6.7 and a 1.5 GB
#                              one's the 8: what is held grew with the log up to the cap)
PRINT_OBJECT_BYTES = 400     # ... counted with each text's objects: two arrays' headers (112 bytes
#                              each), the tuple, its key and dict slot — most edits' arrays are a
#                              few hundred bytes, so the arrays' bytes alone let the held prints
#                              take ~2x the cap (5.3 MB of objects for 3.3 MB of arrays, 400 MB log)
SPILLED_MERGE_AT = 1 << 11   # spilled prints' keys added before they join the sorted arrays (the
#                              keys waiting in a dict take ~150 bytes each, merged 48)
MAX_HEADS_BYTES = 32 << 20   # head input texts kept (``heads``; 2.5 MB at 16k sessions)
HEAD_TEXT_BYTES = 256 << 10  # ... of one tape at most (a longer head is read back from its tape)
_EMPTY = np.zeros(0, np.int64)


def postings(conn: apsw.Connection, hashes: np.ndarray, cache: IngestCache | None = None,
             fetched: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """``queries.postings`` as an ``(n, 3)`` int64 array (the same rows; those of one hash and block
    in line order): ``hashes`` sorted and distinct; each 32-bit index key found maps back to the
    largest of ``hashes`` with that key. Rows this run inserted come from ``cache`` when it kept
    them, the others from the index — or from ``fetched``: ``index_postings`` of keys that include
    every key of ``hashes`` (read once for many calls; the same rows, in the same order)."""
    if not len(hashes):
        return np.zeros((0, 3), np.int64)
    ukeys, ufull = _keyed(hashes)
    kept = cache.kept_postings() if cache is not None else None
    if kept is None or cache.others_in_index:
        if fetched is not None:
            rows = _take(fetched, ukeys)
        else:
            K, B, L = packed_rows.rows(conn, ukeys, outside=cache.post_range if kept is not None else None)
            rows = np.empty((len(K), 3), np.int64)
            rows[:, 0], rows[:, 1], rows[:, 2] = K, B, L
    else:
        rows = np.zeros((0, 3), np.int64)
    if kept is not None:
        # index keys are 32-bit: exact, and no copy of K per call
        mem = _take(kept, ukeys.astype(np.int32))
        if len(mem):
            rows = np.concatenate([rows, mem]) if len(rows) else mem
    rows[:, 0] = ufull[np.searchsorted(ukeys, rows[:, 0])]
    return rows


def index_postings(conn: apsw.Connection, hashes: np.ndarray, cache: IngestCache | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The index's rows of the keys of ``hashes`` (sorted, distinct) as ``postings`` reads them for
    any of those hashes, ``(K, B, L)`` in (key, block, line) order, for ``postings(fetched=)``; None
    when ``postings`` reads nothing from the index (every row kept by the run)."""
    kept = cache.kept_postings() if cache is not None else None
    if kept is not None and not cache.others_in_index:
        return None
    ukeys = _keyed(hashes)[0] if len(hashes) else hashes
    return packed_rows.rows(conn, ukeys, outside=cache.post_range if kept is not None else None)


def _take(krows: tuple[np.ndarray, np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """The rows of ``krows`` ``(K, B, L)`` (sorted by K) whose key is one of ``keys`` (sorted,
    distinct), key by key in their order, as an ``(n, 3)`` int64 array."""
    K, B, L = krows
    lo = np.searchsorted(K, keys, "left")
    lens = np.searchsorted(K, keys, "right") - lo
    tot = int(lens.sum())
    out = np.empty((tot, 3), np.int64)
    if tot:
        idx = np.repeat(lo - (np.cumsum(lens) - lens), lens) + np.arange(tot)
        out[:, 0], out[:, 1], out[:, 2] = K[idx], B[idx], L[idx]
    return out


def _rows(conn: apsw.Connection, sql: str, args: tuple) -> np.ndarray:
    """The ``(hash, block, line)`` rows of ``sql`` as an ``(n, 3)`` array, in the order SQLite
    returns them: formatted by SQLite as two comma-separated lists (``hash << 32 | block``, and
    the lines, of the same rows in the same order) that numpy parses — no Python object per row."""
    agg = sql.replace("SELECT hash, block, line FROM",
                      "SELECT group_concat((hash << 32) | block), group_concat(line) FROM", 1)
    codes, lines = conn.execute(agg, args).fetchone()
    if not codes:
        return np.zeros((0, 3), np.int64)
    hb = np.fromstring(codes, dtype=np.int64, sep=",")
    out = np.empty((len(hb), 3), np.int64)
    out[:, 0] = hb >> 32
    out[:, 1] = hb & 0xFFFFFFFF
    out[:, 2] = np.fromstring(lines, dtype=np.int64, sep=",")
    return out


def _keyed(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct 32-bit index keys of ``hashes``, for each the largest of ``hashes`` with that key)
    — ``queries._keyed``'s mapping back, for sorted distinct ``hashes``."""
    keys = queries.index_keys(hashes)
    last = np.empty(len(keys), dtype=bool)
    last[-1:] = True
    np.not_equal(keys[1:], keys[:-1], out=last[:-1])
    return keys[last], hashes[last]


def boilerplate(conn: apsw.Connection, hashes: np.ndarray, table: np.ndarray | None = None
                ) -> set[int]:
    """``queries.boilerplate`` (the same set), vectorised. ``table``: the boilerplate table's keys
    (``boilerplate_keys``) read once by a caller that asks many times while the table stays as it
    is (a pass of the lineage); else the keys asked for are looked up in it."""
    if not len(hashes):
        return set()
    ukeys, ufull = _keyed(uniq(np.asarray(hashes, dtype=np.int64)))
    if table is not None:
        return set(ufull[member(ukeys, table)].tolist())
    found = np.fromiter(itertools.chain.from_iterable(conn.execute(
        "SELECT hash FROM boilerplate WHERE hash IN carray(?)", (apsw.carray(queries._i64(ukeys)),))),
        np.int64)
    return set(ufull[np.searchsorted(ukeys, found)].tolist())


def boilerplate_keys(conn: apsw.Connection) -> np.ndarray:
    """The boilerplate table's keys, sorted (a few hundred rows), for ``boilerplate(table=)``."""
    return uniq(np.fromiter(itertools.chain.from_iterable(
        conn.execute("SELECT hash FROM boilerplate")), np.int64))


def wanted(ofs: int, ev: dict) -> bool:
    """Events the lineage pass reads back: edits and span links anywhere, and a tape's head."""
    return ofs <= HEAD_EVENTS or ev.get("k") in _WANTED_KINDS


def _own(a: np.ndarray | None) -> np.ndarray | None:
    """``a`` itself, or a copy of it when it is a view (of another array or a buffer)."""
    return a.copy() if a is not None and a.base is not None else a


class IngestCache:
    wanted = staticmethod(wanted)

    def __init__(self) -> None:
        self.lines: dict[str, Mapping[int, bytes]] = {}   # (a dict, or ``SpilledLines``)
        # tape id → (head input texts, markers, first request) (``keep_head``)
        self.heads: dict[str, tuple[list[str], set[str], str | None]] = {}
        self.heads_bytes = 0
        self.lines_bytes = 0          # lines kept, in memory and spilled
        self._lines_in_memory = 0
        self.prints: dict[bytes, tuple[np.ndarray, np.ndarray, bool]] = {}   # held in memory
        self.prints_bytes = 0         # arrays kept, in memory and spilled
        self._prints_in_memory = 0
        # prints past ``PRINTS_IN_MEMORY``: ``KeyMap.key(text key)`` → (offset in the spill file,
        # hashes, k-grams, distinct or not; -1 hashes: none kept)
        self._spilled_prints = KeyMap(4, SPILLED_MERGE_AT)
        self._spill: SpillFile | None = None
        self._spill_failed = False
        # fingerprint rows this run inserted, for blocks lo..hi (None: not usable)
        self._post: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = []
        self._post_rows = 0
        self.post_range: tuple[int, int] | None = None
        self._merged: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.others_in_index = True   # the index may hold fingerprints of other blocks
        self.worker = None            # the run's parse worker (``parse_worker.ParseProcess``)

    # -- filled by ingest -------------------------------------------------------------------------
    def keep_tape(self, tape_id: str, events: list[dict], tape_events: list | None = None) -> None:
        """Keep the lines of the wanted events: ``tape_events[n]`` (default ``events[n]``) is
        what the tape writer encoded as line ``n`` (an event, or its canonical JSON as an
        ``orjson.Fragment``), so its encoding is that line, byte for byte; or ``tape_events`` is
        the wanted events' lines themselves (``PackedLines``, the parse worker's), kept as they
        are."""
        src = events if tape_events is None else tape_events
        self.keep_head(tape_id, events, src)
        if tape_id in self.lines or self.lines_bytes >= MAX_LINES_BYTES:
            return  # (a tape not kept is read back by the lineage pass)
        if isinstance(src, PackedLines):   # the wanted events' lines, as the tape holds them
            kept, size = src, src.nbytes
        else:
            kept = {o: encode_event(src[o]) for o, ev in enumerate(events) if wanted(o, ev)}
            size = sum(len(b) for b in kept.values())
        self.lines_bytes += size
        if self._lines_in_memory + size > LINES_IN_MEMORY:
            spill = self._spill_file()
            if spill is not None:
                self.lines[tape_id] = SpilledLines(spill, kept)
                return
        self._lines_in_memory += size
        self.lines[tape_id] = kept

    def keep_head(self, tape_id: str, events: list[dict], src) -> None:
        """Keep ``rules.head_input`` of the tape's first events (``src[o]``: line ``o`` of the
        tape, as for ``keep_tape``), each parsed from its line as a tape read parses it; only
        the ``msg.in`` lines are encoded and parsed unless the head has no such input."""
        if tape_id in self.heads or self.heads_bytes >= MAX_HEADS_BYTES:
            return
        n = min(len(events), HEAD_EVENTS + 1)

        def parsed(offsets) -> list[tuple[int, dict]] | None:
            # ``src`` may hold only some lines (the parse worker's kept lines, a dict): a head
            # with a line not there is not kept, and the lineage pass reads it from its tape
            if isinstance(src, Mapping) and any(o not in src for o in offsets):
                return None
            if isinstance(src, PackedLines):   # (lines already)
                return [(o, orjson.loads(src[o])) for o in offsets]
            return [(o, orjson.loads(encode_event(src[o]))) for o in offsets]

        inputs = parsed([o for o in range(n) if events[o].get("k") == "msg.in"])
        if inputs is None:
            return
        texts, markers, task, complete = head_input(inputs)
        if not complete:
            every = parsed(range(n))
            if every is None:
                return
            texts, markers, task, _ = head_input(every)
        size = sum(len(t) for t in texts) + len(task or "") + 64
        if size <= HEAD_TEXT_BYTES:
            self.heads[tape_id] = (texts, markers, task)
            self.heads_bytes += size

    def keep_prints(self, key: bytes, hashes: np.ndarray, kgrams: np.ndarray) -> None:
        """The winnowed hashes and all k-grams of the text whose ``text_key`` is ``key`` (made
        distinct when first asked for: not every kept text is)."""
        if not self._has_print(key):
            # a view would keep its whole batch's array alive (the fingerprints of every text
            # fingerprinted with it), however little of it the cap counts
            self._put_print(key, (_own(hashes), _own(kgrams), False))

    def _put_print(self, key: bytes, value: tuple[np.ndarray, np.ndarray, bool]) -> None:
        """Keep a text's arrays while ``MAX_PRINTS_BYTES`` allows (replacing its entry): in memory
        while ``PRINTS_IN_MEMORY`` allows, else in the spill file."""
        old_mem = self.prints.pop(key, None)
        if old_mem is not None:
            old = old_mem[0].nbytes + old_mem[1].nbytes
            self._prints_in_memory -= old + PRINT_OBJECT_BYTES
        else:
            row = self._spilled_prints.get(KeyMap.key(key)) if self._spill is not None else None
            old = 8 * (row[1] + row[2]) if row is not None and row[1] >= 0 else 0
            if old:
                self._spilled_prints[KeyMap.key(key)] = (0, -1, 0, 0)
        self.prints_bytes -= old   # (the new value replaces the old one or nothing does)
        size = value[0].nbytes + value[1].nbytes
        if self.prints_bytes + size > MAX_PRINTS_BYTES:
            return
        if self._prints_in_memory + size + PRINT_OBJECT_BYTES > PRINTS_IN_MEMORY:
            spill = self._spill_file()
            if spill is None:
                return
            h, k = np.ascontiguousarray(value[0], np.int64), np.ascontiguousarray(value[1], np.int64)
            self._spilled_prints[KeyMap.key(key)] = (spill.append(h, k), len(h), len(k), int(value[2]))
        else:
            self.prints[key] = value
            self._prints_in_memory += size + PRINT_OBJECT_BYTES
        self.prints_bytes += size

    def _has_print(self, key: bytes) -> bool:
        if key in self.prints:
            return True
        if self._spill is None:
            return False
        row = self._spilled_prints.get(KeyMap.key(key))
        return row is not None and row[1] >= 0

    def _get_print(self, key: bytes) -> tuple[np.ndarray, np.ndarray, bool] | None:
        """A text's kept arrays, from memory or read back from the spill file; None if none."""
        hit = self.prints.get(key)
        if hit is not None or self._spill is None:
            return hit
        row = self._spilled_prints.get(KeyMap.key(key))
        if row is None or row[1] < 0:
            return None
        pos, nh, nk, distinct = row
        both = np.empty(nh + nk, np.int64)
        self._spill.read_into(pos, both)
        return both[:nh], both[nh:], bool(distinct)

    def _spill_file(self) -> SpillFile | None:
        """The run's spill file (made on first use, in the user's tape directory: what it holds
        is what tapes hold); None when it cannot be made (then nothing more is kept)."""
        if self._spill is None and not self._spill_failed:
            try:
                self._spill = SpillFile(paths.private_dir(paths.user_tapes_dir()))
            except OSError:
                self._spill_failed = True
        return self._spill

    def close(self) -> None:
        """Drop what is kept (the spill file too); the cache then keeps nothing more."""
        self.lines, self.prints = {}, {}
        self._spilled_prints = KeyMap(4, SPILLED_MERGE_AT)
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._spill_failed = True

    def keep_postings(self, keys: np.ndarray, blocks: np.ndarray, lines: np.ndarray,
                      lo: int, hi: int) -> None:
        """The ``fingerprints`` rows just inserted (distinct, sorted) for the new blocks ``lo..hi``
        (every block in that range). Kept while the ranges of successive calls are contiguous
        and the rows fit in ``MAX_POSTINGS``."""
        if self._post is None:
            return
        if (self.post_range is not None and lo != self.post_range[1] + 1) or (
                self._post_rows + len(keys) > MAX_POSTINGS):
            self._post, self.post_range, self._merged = None, None, None
            return
        self._post.append((keys.astype(np.int32), blocks.copy(), lines.astype(np.int32)))
        self._post_rows += len(keys)
        self.post_range = (lo if self.post_range is None else self.post_range[0], hi)
        self._merged = None

    def expect_postings(self, rows: int) -> None:
        """A streamed session is about to be indexed whose new blocks hold at most ``rows``
        fingerprint rows (``store.PreparedSpill.rows``): if they would not all fit in
        ``MAX_POSTINGS`` with those kept, nothing is kept from now on (``keep_postings`` would
        give up part of the way through, after holding up to ``MAX_POSTINGS`` rows for nothing).
        The lineage pass then reads every posting from the index: the same rows."""
        if self._post is not None and self._post_rows + rows > MAX_POSTINGS:
            self._post, self.post_range, self._merged = None, None, None

    def bind(self, conn: apsw.Connection) -> None:
        """Before the lineage pass (no blocks are added during it): note whether the index holds
        blocks besides the kept ones, whose postings must still be read from it."""
        if self.post_range is not None:
            self.others_in_index = conn.execute(
                "SELECT 1 FROM blocks WHERE id < ? OR id > ? LIMIT 1", self.post_range
            ).fetchone() is not None

    def kept_postings(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(keys, blocks, lines) of the kept rows, sorted as the primary key; None if none."""
        if not self._post:
            return None
        if self._merged is None:
            parts = self._post
            if len(parts) == 1:
                self._merged = parts[0]
                return self._merged
            # the parts are dropped as they are joined, and the columns sorted one at a time:
            # the rows are held once (plus one column and the order) at any moment, not 3-4 times
            K = np.concatenate([p[0] for p in parts])
            B = np.concatenate([p[1] for p in parts])
            L = np.concatenate([p[2] for p in parts])
            parts.clear()
            # each part is sorted and holds higher blocks than the parts before it: a stable
            # sort on the key alone orders by (key, block, line) (merging the sorted runs)
            o = np.argsort(K, kind="stable")
            K = K[o]
            B = B[o]
            L = L[o]
            del o
            self._merged = (K, B, L)
            parts.append(self._merged)   # (``_post``: one part, the merged rows)
        return self._merged

    # -- handed to the parse worker --------------------------------------------------------------
    def for_worker(self) -> dict:
        """What the continuations (``continuations.compute_remote``, in the parse worker) read
        of this run, picklable: the kept head input of each tape (``heads``; not the lines: a tape
        whose head was not kept is read back) and the kept postings (after ``bind``)."""
        return {"head_input": self.heads, "postings": self.kept_postings(),
                "post_range": self.post_range, "others_in_index": self.others_in_index}

    @classmethod
    def from_worker_part(cls, kept: dict) -> IngestCache:
        """A cache answering from ``for_worker``'s dict (fingerprints are made afresh)."""
        cache = cls()
        cache.heads = kept["head_input"]
        if kept["postings"] is not None:
            cache._post, cache._merged = [kept["postings"]], kept["postings"]
            cache.post_range = kept["post_range"]
        else:
            cache._post, cache.post_range = None, None
        cache.others_in_index = kept["others_in_index"]
        return cache

    # -- used by the lineage pass -----------------------------------------------------------------
    def text_prints(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(distinct winnowed hashes, distinct k-gram hashes) of ``text``: ``np.unique`` of
        ``fingerprint(text).hashes`` and of ``all_kgrams(text)[0]`` (both int64)."""
        key = text_key(text)
        hit = self._get_print(key)
        if hit is None:
            fp = fingerprint.fingerprint_batch([text], keep_kgrams=[True])[0]
            hit = (fp.hashes, fp.kgrams, False)
        if not hit[2]:
            hit = ((uniq(hit[0]), uniq(hit[1]), True) if len(hit[1])
                   else (_EMPTY, _EMPTY, True))
            self._put_print(key, hit)
        return hit[0], hit[1]

    def texts_prints(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``[text_prints(t) for t in texts]``, the texts not kept fingerprinted in one batch
        (one text at a time, the numpy calls of a fingerprint cost more than its arithmetic)."""
        keys = [text_key(t) for t in texts]
        made = self._fingerprint_missing(keys, texts, final=True)
        return [made[key] if key in made else self.text_prints(t) for key, t in zip(keys, texts)]

    def prefetch(self, texts: list[str]) -> None:
        """Fingerprint the texts not kept yet, in one batch (``text_prints`` then finds them)."""
        self._fingerprint_missing([text_key(t) for t in texts], texts, final=False)

    def _fingerprint_missing(self, keys: list[bytes], texts: list[str], final: bool) -> dict:
        """``{key: (hashes, k-grams)}`` of the texts (``keys``: their ``text_key``) not kept yet,
        fingerprinted in one batch and kept: as ``text_prints`` gives them (``final``), else as
        the fingerprint made them (``text_prints`` makes them distinct when first asked)."""
        todo: dict[bytes, str] = {}
        for key, t in zip(keys, texts):
            if key not in todo and not self._has_print(key):
                todo[key] = t
        made: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        if todo:
            fps = fingerprint.fingerprint_batch(list(todo.values()), keep_kgrams=[True] * len(todo))
            for key, fp in zip(todo, fps):
                if not final:
                    hit = (_own(fp.hashes), _own(fp.kgrams), False)
                elif len(fp.kgrams):
                    hit = (uniq(fp.hashes), uniq(fp.kgrams), True)
                else:
                    hit = (_EMPTY, _EMPTY, True)
                self._put_print(key, hit)
                made[key] = hit[:2]
        return made

    def many_prints(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``text_prints`` of the union of ``texts``."""
        return union_prints([self.text_prints(t) for t in texts])


def union_prints(prints: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The union of some texts' ``text_prints``."""
    ws, ks = [], []
    for w, k in prints:
        if len(w):
            ws.append(w)
        if len(k):
            ks.append(k)
    return (uniq(np.concatenate(ws)) if ws else _EMPTY,
            uniq(np.concatenate(ks)) if ks else _EMPTY)


class _OffsetLines(Mapping):
    """Lines by offset where the offsets are a sorted int64 array (``offs``): the lookups, the
    iteration (in offset order) and the length; a subclass reads line ``i`` (``__getitem__``)."""

    __slots__ = ()

    def _find(self, ofs) -> int:
        if not isinstance(ofs, int | np.integer):
            return -1
        i = int(np.searchsorted(self.offs, ofs))
        return i if i < len(self.offs) and self.offs[i] == ofs else -1

    def __contains__(self, ofs) -> bool:
        return self._find(ofs) >= 0

    def __iter__(self):
        return iter(self.offs.tolist())

    def __len__(self) -> int:
        return len(self.offs)


class PackedLines(_OffsetLines):
    """A tape's kept lines (offset → line) as one buffer and three int64 arrays (offset, start and
    end of its line in the buffer, in offset order): a few objects however many lines, where a
    dict holds a bytes object a line — the parse worker gathers a streamed session's lines so
    (``add``, then ``packed``), hands them to the ingest pickled as those four buffers, and the
    ingest cache keeps them so (or spills the buffer at once: ``SpilledLines``). A line given
    twice for one offset: the last one, as a dict keeps."""

    __slots__ = ("buf", "offs", "start", "end")

    def __init__(self, buf, offs: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.buf = buf   # (bytes or bytearray)
        offs = np.asarray(offs, np.int64)
        order = np.argsort(offs, kind="stable")
        offs = offs[order]
        last = np.ones(len(offs), bool)   # (of equal offsets, the one given last)
        np.not_equal(offs[1:], offs[:-1], out=last[:-1])
        order = order[last]
        self.offs = offs[last]
        self.start = np.asarray(start, np.int64)[order]
        self.end = np.asarray(end, np.int64)[order]

    @classmethod
    def gather(cls, directory=None) -> _LineGatherer:
        """An empty gatherer: ``add(offset, line)`` one line after another, ``packed()`` the
        ``PackedLines`` of them; with a ``directory``, held in a temp file there until then."""
        return _LineGatherer(directory)

    def take(self) -> PackedLines:
        """A ``PackedLines`` of these lines that owns them; this one is emptied. Whoever still
        refers to this one (the parse answer, held until the session's commit ends) then holds
        nothing of them, once the taker lets go (the ingest cache spills them at once past its
        ``LINES_IN_MEMORY``)."""
        made = _packed_of(self.buf, self.offs, self.start, self.end)
        self.buf, self.offs = b"", np.zeros(0, np.int64)
        self.start = self.end = self.offs
        return made

    @property
    def nbytes(self) -> int:
        """The lines' bytes (as a dict's values' lengths sum)."""
        return int((self.end - self.start).sum())

    def __getitem__(self, ofs) -> bytes:
        i = self._find(ofs)
        if i < 0:
            raise KeyError(ofs)
        return bytes(memoryview(self.buf)[int(self.start[i]):int(self.end[i])])

    def __reduce__(self):
        return (_packed_of, (self.buf, self.offs, self.start, self.end))


def _packed_of(buf, offs, start, end) -> PackedLines:
    """A ``PackedLines`` of buffers already in offset order, as they are (unpickling, ``take``)."""
    made = PackedLines.__new__(PackedLines)
    made.buf, made.offs, made.start, made.end = buf, offs, start, end
    return made


class _LineGatherer:
    """(``PackedLines.gather``) lines appended to one buffer, where each lies in an array: a
    few thousand long-lived buffers amid a parse's short-lived ones would strew the heap. With a
    ``directory``, the buffer goes to an unnamed temp file there (``SpillFile``) each
    ``SPILL_BYTES`` of lines, and ``packed`` reads them back in one buffer: what the gathering
    holds in memory while a session is parsed is then the lines' places (three int64 a line),
    not their bytes, however long the session."""

    SPILL_BYTES = 1 << 20

    def __init__(self, directory=None) -> None:
        import array

        self.buf = bytearray()
        self.at = array.array("q")   # offset, start in ``buf``, end: three a line
        self.directory = directory
        self.spill: SpillFile | None = None   # the lines before ``buf``'s (``spill.size`` bytes)

    def add(self, ofs: int, line: bytes) -> None:
        base = 0 if self.spill is None else self.spill.size
        self.at.extend((ofs, base + len(self.buf), base + len(self.buf) + len(line)))
        self.buf += line
        if self.directory is not None and len(self.buf) >= self.SPILL_BYTES:
            if self.spill is None:
                self.spill = SpillFile(self.directory)
            self.spill.append(self.buf)
            self.buf = bytearray()

    def packed(self) -> PackedLines:
        """The lines added, as ``PackedLines`` (which takes the buffer over: this gatherer is
        emptied)."""
        at = np.frombuffer(self.at, np.int64).reshape(-1, 3) if len(self.at) else np.zeros((0, 3), np.int64)
        buf = self.buf
        if self.spill is not None:   # one buffer made of the file's bytes and ``buf``'s
            done = self.spill.size
            whole = bytearray(done + len(buf))
            self.spill.read_into(0, memoryview(whole)[:done])
            whole[done:] = buf
            self.spill.close()
            self.spill, buf = None, whole
        made = PackedLines(buf, at[:, 0], at[:, 1], at[:, 2])
        self.buf = bytearray()
        self.at = type(self.at)("q")
        return made


class SpilledLines(_OffsetLines):
    """A tape's kept lines (offset → line) in a ``SpillFile``: only where each lies is held (three
    int64 a line, in offset order), a line read back when asked for."""

    def __init__(self, spill: SpillFile, lines: Mapping[int, bytes]) -> None:
        self.spill = spill
        if isinstance(lines, PackedLines):   # its buffer written at once: no object a line
            base = spill.append(lines.buf)
            self.offs = lines.offs.copy()
            self.pos = lines.start + base
            self.lens = lines.end - lines.start
            return
        offs = sorted(lines)
        self.offs = np.array(offs, np.int64)
        self.pos = np.empty(len(offs), np.int64)
        self.lens = np.empty(len(offs), np.int64)
        for i, o in enumerate(offs):
            line = lines[o]
            self.pos[i], self.lens[i] = spill.append(line), len(line)

    def __getitem__(self, ofs) -> bytes:
        i = self._find(ofs)
        if i < 0:
            raise KeyError(ofs)
        return self.spill.read(int(self.pos[i]), int(self.lens[i]))


class CachedAccess(TapeAccess):
    """``TapeAccess`` answering from the run's kept lines when it holds every offset asked for."""

    def __init__(self, conn, cache: IngestCache):
        super().__init__(conn)
        self.cache = cache
        self._stream: TapeStream | None = None   # the large tape read last (``read``)

    def read(self, tape, offsets):
        kept = None if tape.live else self.cache.lines.get(tape.tape_id)
        if kept is not None:
            offs = list(offsets)
            if all(o in kept for o in offs):
                return [(o, orjson.loads(kept[o])) for o in offs]
        if tape.live or not tape.path:
            return super().read(tape, offsets)
        if self._stream is None or self._stream.path != tape.path:
            if not reader.large(tape.path):
                return super().read(tape, offsets)
            # (not kept: the run's kept lines had reached ``MAX_LINES_BYTES`` before it) read as
            # a stream, not held whole as a read of the tape would (a 400 MB session's tape held
            # for the lineage pass: 620 MB, the peak of the ingest)
            self._stream = None
            self._stream = TapeStream(tape.path)
        return self._stream.take(sorted(offsets))


class TapeStream:
    """A large sealed tape's events read in offset order as a stream (``reader.stream_lines``),
    none of it held: each ``take`` of sorted offsets goes on from where the last one stopped
    when it can (the lineage pass asks for a tape's edits a part at a time, in offset order),
    else reads from the start again. The tape is checked whole first (``reader.check_raw``):
    no event of a tape that is not what its name says is used. ``CorruptTape`` as a read of the
    tape raises it."""

    def __init__(self, path: str):
        reader.check_raw(path)
        self.path = path
        self._lines = None
        self._last = 0        # the line number (1-based) last taken from the stream
        self._head: tuple[int, bytes] | None = None   # that line, if not passed yet

    def take(self, offsets: list[int]) -> list[tuple[int, dict]]:
        out = []
        for o in offsets:
            line = self._line(o + 1) if o >= 0 else None
            if line:
                try:
                    out.append((o, orjson.loads(line)))
                except orjson.JSONDecodeError:
                    raise CorruptTape("bad JSON in tape", path=self.path, line=o + 1) from None
        return out

    def _line(self, no: int) -> bytes | None:
        if self._head is not None and self._head[0] == no:
            return self._head[1]
        if self._lines is None or no <= self._last:   # (passed: from the start again)
            self._lines, self._last, self._head = reader.stream_lines(self.path), 0, None
        for n, line in self._lines:
            self._last = n
            if n >= no:
                self._head = (n, line)
                return line if n == no else None
        self._head = None
        return None
