"""Explain: span text → the sessions that produced it, with the reasoning around each anchor.

Steps (``docs/architecture.md``): fingerprint the span → look every k-gram hash up (minus
boilerplate) → group matches by block and event → confidence per event = the share of the span's
fingerprints found in that event's text (containment) → lineage/continuation walk (when the
lineage module is present) → rank → windows read back from tapes.

Ranking puts the session whose edit *produced* the span first: sessions are ordered by the
containment of the span in their edit-after texts ("produced"), then by overall confidence
(reads and quotes), then most recent first, then tape id — a total, deterministic order.
"""

from __future__ import annotations

import functools
import heapq
import re
import threading
import time
from collections import OrderedDict, defaultdict
from typing import NamedTuple

import apsw
import numpy as np

from engram import fingerprint
from engram.index import packed, postings, queries, schema, store
from engram.index.access import TapeAccess
from engram.query import location, walk, window
from engram.query.direct import ALL_KGRAMS_MAX, DIRECT_FLOOR  # the rules, shared with blocks/lens
from engram.retrieval import feedback
from engram.sortedset import member, uniq

PRODUCED_FLOOR = 0.0      # a session that wrote any line of the span (line blame) produced it
MAX_WINDOWS = 3           # transcript windows per session (its strongest anchors)
WINDOW_SESSIONS = 3       # sessions with transcript windows; those ranked below list their anchor only
MAX_SESSIONS = 50         # readers/quoters returned (ranked); --all returns every one
MAX_WALK_SEEDS = 100      # events the lineage walk starts from (strongest first)
WROTE_MIN = 0.5           # an edit whose after-text holds this much of the span wrote it
HISTORY_EDGE_KINDS = {"edit", "move", "reinsert", "continuation", "dispatch"}
ROUND = 4


MAX_QUERY_FPS = 256       # spans with more winnowed fingerprints are looked up through a sample


_SPAN_PRINTS: OrderedDict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
_SPAN_PRINTS_MAX = 64
_span_prints_lock = threading.Lock()


def span_fingerprints(text: str, where: tuple[str, int, int] | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query hashes = every k-gram, their lines (0-based), the distinct winnowed hashes).

    Memoised per text (read-only arrays, the last ``_SPAN_PRINTS_MAX`` spans): the engine checks a
    span for k-grams before explaining it, and an editor asks about the same block again and
    again. ``where = (file text, first line, last line)`` (0-based) says that ``text`` is those
    lines of that file joined, each followed by ``\\n``: when the file's tokens are at hand
    (``_file_tokens``: the language server tokenises an opened file once, ahead), the span's
    k-grams are cut from them — the same values. Otherwise the span alone is tokenised: the first
    explain of a file nobody read ahead (a 3,000-line file takes ~4 ms to tokenise, a span of it
    a fraction of a millisecond) does not pay for the whole file."""
    with _span_prints_lock:
        hit = _SPAN_PRINTS.get(text)
        if hit is not None:
            _SPAN_PRINTS.move_to_end(text)
            return hit
    tokens = _TOKENS.peek(where[0]) if where is not None else None
    if tokens is not None:
        allk, lines, win = fingerprint.line_span_prints(tokens, where[1], where[2])
    else:
        allk, lines, win = fingerprint.span_prints(text)
    # (sort-based: numpy's hash-based ``unique`` costs more to set up than a span's few dozen)
    out = (np.asarray(allk, dtype=np.int64), np.asarray(lines), uniq(np.asarray(win, dtype=np.int64)))
    for a in out:
        a.flags.writeable = False
    with _span_prints_lock:
        _SPAN_PRINTS[text] = out
        while len(_SPAN_PRINTS) > _SPAN_PRINTS_MAX:
            _SPAN_PRINTS.popitem(last=False)
    return out


class _PerFile:
    """A memo keyed by a file's whole text (a string caches its own hash, so a lookup costs
    little), least recently used first out: at most ``size`` files and ``budget`` bytes of arrays
    (``nbytes`` of a value). ``peek`` looks without computing."""

    def __init__(self, size: int, budget: int):
        self.size, self.budget, self.held = size, budget, 0
        self.items: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self.lock = threading.Lock()

    def peek(self, text: str):
        with self.lock:
            hit = self.items.get(text)
            if hit is None:
                return None
            self.items.move_to_end(text)
            return hit[0]

    def put(self, text: str, value, nbytes: int):
        with self.lock:
            old = self.items.pop(text, None)
            self.held += nbytes - (old[1] if old is not None else 0)
            self.items[text] = (value, nbytes)
            while len(self.items) > 1 and (len(self.items) > self.size or self.held > self.budget):
                self.held -= self.items.popitem(last=False)[1][1]
        return value


# the tokens of the files asked about lately: an agent explains spans of a few dozen files in any
# order (the MCP bench: 36 files, in random order, re-tokenised whole on most spans when only 16
# were kept); 12 bytes a token, ~2.5 bytes of source text a token
_TOKENS = _PerFile(size=256, budget=32 << 20)


def _file_tokens(text: str) -> tuple[np.ndarray, np.ndarray]:
    """``fingerprint.text_tokens`` of a whole file, memoised (read-only arrays)."""
    hit = _TOKENS.peek(text)
    if hit is None:
        hit = fingerprint.text_tokens(text)
        for a in hit:
            a.flags.writeable = False
        _TOKENS.put(text, hit, hit[0].nbytes + hit[1].nbytes)
    return hit


def query_fingerprints(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """``(query hashes, their lines, winnowed hashes, sampled)`` for the span ``text``.

    A short span (up to ``ALL_KGRAMS_MAX`` winnowed fingerprints, about 15 lines of code) looks up
    every one of its k-grams: it matches wherever any run of k tokens of it was copied, even when
    the copy is too short to share a winnowed fingerprint. A longer span looks up its winnowed
    fingerprints: winnowing is local, so any copy of a stretch of ``k + w - 1`` tokens or more
    holds the same fingerprints there. Beyond ``MAX_QUERY_FPS`` the span is looked up through a
    bottom-k sample of them (the smallest hash values): the sample is defined by content, so every
    copy holds the same sampled hashes, and containment estimated from it has a standard error of
    at most ``0.5 / sqrt(MAX_QUERY_FPS)`` (≈ 0.03). The cost of a lookup stops growing with the
    span."""
    qh, qlines, wh = span_fingerprints(text)
    if len(wh) <= ALL_KGRAMS_MAX:
        return qh, qlines, wh, False
    sampled = len(wh) > MAX_QUERY_FPS
    if sampled:
        wh = wh[:MAX_QUERY_FPS]  # np.unique sorts: the smallest hash values
    m = member(qh, wh)  # ``wh`` is sorted: a binary search (np.isin's set-up costs more)
    return qh[m], qlines[m], wh, sampled


class Evidence:
    """Per-event evidence.

    ``produced``: share of the span's fingerprints this event *owns* — found in its edit-after text
    but not in its own edit-before text (carried-over context is not produced), and this event is
    the latest to have produced them (line-level blame: the last writer wins). ``quoted``: the best
    containment of the span in any of the event's texts (reads, messages, tool traffic, edits).
    """

    __slots__ = ("event", "produced", "quoted", "lines", "roles")

    def __init__(self, event: int):
        self.event = event
        self.produced = 0.0
        self.quoted = 0.0
        self.lines: list[int] = []
        self.roles: set[int] = set()

    @property
    def confidence(self) -> float:
        return max(self.produced, self.quoted)


def direct_evidence(conn: apsw.Connection, text: str, file: str | None = None,
                    floor: float = 0.0, lines: tuple[int, int] | None = None,
                    context: str | None = None) -> tuple[dict[int, Evidence], dict]:
    """Evidence per event for the span ``text``.

    Cost is kept in SQLite: one grouped query counts the span's fingerprints per block; only
    blocks above ``floor`` (or able to make their edit a producer) are mapped to events, and only
    edit after-texts fetch their individual postings (for alignment and line-level blame)."""
    qh, qlines, wh, sampled = query_fingerprints(text)
    n_win = len(wh)
    stats = {"fingerprints": len(span_fingerprints(text)[2]), "matched": 0}
    if sampled:
        stats["sampled"] = n_win
    if len(qh) == 0 or n_win == 0:
        return {}, stats
    uq = uniq(qh)
    keyed = queries._keyed(uq)  # the span's index keys: computed once for every lookup below
    bp = queries.boilerplate(conn, uq, keyed)
    if bp:
        bparr = np.sort(np.fromiter(bp, dtype=np.int64, count=len(bp)))
        uq = uq[~member(uq, bparr)]
        # boilerplate fingerprints are removed from the denominator too
        n_win = int(n_win - member(wh, bparr).sum())
        stats["boilerplate"] = len(bp)
        keyed = queries._keyed(uq)
    if n_win <= 0 or len(uq) == 0:
        return {}, stats
    need = min(OWNER_MIN_HITS, n_win)
    keep_min = min(max(need, OWNER_MIN_SHARE * n_win), max(1.0, floor * n_win))
    kept, matched, rows = _block_counts(conn, uq, keyed, keep_min)
    stats["matched"] = min(matched, n_win)
    if not kept:
        return {}, stats
    refs = queries.refs_for_blocks(conn, kept.keys())
    ev: dict[int, Evidence] = {}
    after_blocks: dict[int, tuple[int, int]] = {}        # block → (event, line0)
    # per block, once (a popular span has thousands of refs in hundreds of blocks): its
    # confidence, and whether an edit's after-text there can make that edit a producer
    conf_of = {b: min(1.0, c / n_win) for b, c in kept.items()}
    owner = {b for b, c in kept.items() if c >= need and c / n_win >= OWNER_MIN_SHARE}
    after_role = schema.ROLE_EDIT_AFTER
    for b, eid, role, line0 in refs:
        conf = conf_of[b]
        if role == after_role and b in owner:
            after_blocks[b] = (eid, line0)
        elif conf <= floor:
            continue
        e = ev.get(eid)
        if e is None:
            e = ev[eid] = Evidence(eid)
        e.roles.add(role)
        if conf > e.quoted:
            e.quoted = conf
    after: dict[int, tuple[set[int], int, int, int]] = {}
    if after_blocks:
        span_lines: dict[int, list[int]] = defaultdict(list)
        for h, ln in zip(qh.tolist(), np.asarray(qlines).tolist()):
            span_lines[h].append(ln)
        by_block: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        for h, b, ln in queries.postings_in_blocks(conn, uq, after_blocks.keys(), keyed, rows):
            by_block[b][h].append(ln)
        hits: dict[int, tuple[dict[int, list[int]], int]] = {}
        for b, (eid, line0) in after_blocks.items():
            aligned, lo, hi, off = _aligned(by_block.get(b, {}), span_lines)
            ev[eid].lines = [line0 + lo, line0 + hi]
            after[eid] = (aligned, off, lo, hi)
            hits[eid] = (by_block.get(b, {}), line0)
        _assign_ownership(conn, ev, after, text, n_win, file, lines, (hits, span_lines), context)
    return ev, stats


def _block_counts(conn: apsw.Connection, hashes: np.ndarray, keyed, least: float):
    """``({block: how many of the hashes it holds, for the blocks holding at least ``least``},
    how many occur at all, the hashes' postings read)``: from the postings a long-running process
    holds in memory (the language server; no postings read), else from SQLite, whose rows
    (``packed.rows``) then also give the after-texts' postings (one read of the span's keys, not
    two). ``keyed``: ``queries._keyed(hashes)``."""
    held = postings.held_block_counts(conn, np.frombuffer(keyed[0], dtype=np.int64), least)
    if held is not None:
        return held[0], held[1], None
    rows = packed.rows(conn, np.frombuffer(keyed[0], dtype=np.int64))
    return (*queries.block_counts(conn, hashes, keyed, rows, least), rows)


ALIGN_SLACK = 3           # lines of drift allowed inside one aligned copy of the span


def _aligned(block_hits: dict[int, list[int]], span_lines: dict[int, list[int]]):
    """The hits of one block that sit at a consistent offset from the span (one copy of it), with
    the block-line range they cover. Common fragments matched at random places fall away."""
    pairs = [(bl - sl, h, bl) for h, bls in block_hits.items() for bl in bls
             for sl in span_lines.get(h, ())]
    if not pairs:
        return set(), 0, 0, 0
    pairs.sort()
    offs = [p[0] for p in pairs]
    best_i, best_n, j = 0, 0, 0
    for i in range(len(offs)):
        while offs[i] - offs[j] > 2 * ALIGN_SLACK:
            j += 1
        if i - j + 1 > best_n:
            best_n, best_i = i - j + 1, j
    lo_off = offs[best_i]
    sel = [p for p in pairs if lo_off <= p[0] <= lo_off + 2 * ALIGN_SLACK]
    bls = [p[2] for p in sel]
    center = sorted(p[0] for p in sel)[len(sel) // 2]
    return {p[1] for p in sel}, min(bls), max(bls), center


OWNER_MIN_HITS = 3        # an edit must reproduce this many of the span's fingerprints (aligned)
OWNER_MIN_SHARE = 0.10    # ... and this share of them, to be a candidate producer


def _same_file(query: str | None, rel: str | None, file: str | None) -> bool:
    """Suffix match of paths (a session's repo-relative path against the queried path)."""
    if not query:
        return False
    q = query.replace("\\", "/").lstrip("./")
    for cand in (rel, file):
        if not cand:
            continue
        c = cand.replace("\\", "/").lstrip("./")
        if q == c or q.endswith("/" + c) or c.endswith("/" + q):
            return True
    return False


def _assign_ownership(conn, ev: dict[int, Evidence], after: dict[int, tuple[set[int], int, int, int]],
                      span_text: str, n_win: int, file: str | None,
                      span_lines: tuple[int, int] | None = None, hits=None,
                      context: str | None = None) -> None:
    """Line-level blame among the edits that wrote the span, as ``git blame`` does it.

    Candidates are edits whose after-text reproduces an aligned part of the span (at least
    ``OWNER_MIN_HITS`` fingerprints and ``OWNER_MIN_SHARE`` of them). When the queried file is
    known, edits to that file win over edits that wrote the same text elsewhere, and the span's
    location through time (``location.py``) — when the strongest candidates agree with it — drops
    the candidates that were elsewhere in the file at their time and adds the small edits that
    touched the span but reproduce too few fingerprints to be found. Each span line is matched to
    each candidate's after-text by a line diff; it belongs to the latest candidate that *wrote*
    that line (an inserted or replaced line of that edit's own before → after diff, not carried-over
    context). ``produced`` = the share of the span's attributed lines an event owns."""
    need = min(OWNER_MIN_HITS, n_win)
    cands = [eid for eid, (aligned, *_rest) in after.items()
             if len(aligned) >= need and len(aligned) / n_win >= OWNER_MIN_SHARE]
    if not cands:
        return
    rows = queries.events(conn, cands)
    span = _span_line_hashes(span_text, context, span_lines)
    span_l = span.tolist()
    # after-text lines to diff against the span: (first, last, margin); a copy found by content may
    # have grown or shrunk since (margin: the span's length), a place found by the track may not
    windows = {eid: (after[eid][2], after[eid][3], len(span_l)) for eid in cands}
    logged: dict[int, int] = {}
    if file:
        cands, logged = _local_candidates(conn, cands, rows, ev, after, file, span_lines, span,
                                          span_l, windows, hits, need, context)
    tapes = queries.tapes(conn, {rows[e].tape for e in set(cands) | set(logged.values())})
    lines = queries.edit_lines(conn, cands) if cands else {}
    producers = _line_producers(cands, lines, windows, span)
    owners = _line_owners(producers, logged, rows, tapes)
    owned = _owned_lines(span_text, span_l, owners, logged)
    _record_produced(ev, owned, logged, rows, windows, span_lines)


def _local_candidates(conn, cands: list[int], rows, ev: dict[int, Evidence], after, file: str,
                      span_lines: tuple[int, int] | None, span: np.ndarray, span_l: list[int],
                      windows, hits, need: int, context: str | None) -> tuple[list[int], dict[int, int]]:
    """``(candidates, {span line: edit} from the log)`` once the queried file is known: edits to
    that file win over edits of the same text elsewhere; with the span's lines, blame through the
    log (no content matching left when it attributes every line), else the candidates corrected
    by the span's track (``_with_track``). ``rows`` and ``windows`` gain the edits added."""
    logged: dict[int, int] = {}
    local = [eid for eid in cands if _same_file(file, rows[eid].rel, rows[eid].file)]
    if local:
        cands = local
        if span_lines is not None:
            logged = _log_blame(conn, local, rows, span_lines, span, context)
            if all(h == 0 or i in logged for i, h in enumerate(span_l)):
                cands = []  # the log attributed every line: no content matching needed
            else:
                cands = _with_track(conn, cands, rows, ev, after, span_lines, windows, hits, need)
            rows.update(queries.events(conn, [e for e in set(cands) | set(logged.values())
                                        if e not in rows]))
    return cands, logged


def _line_producers(cands: list[int], lines, windows, span: np.ndarray) -> list[list[int]]:
    """Per span line, the candidates that wrote it: the line diff of the span against each
    candidate's after-text (over its window), kept where that edit's own diff inserted or
    replaced the line."""
    producers: list[list[int]] = [[] for _ in range(len(span))]
    span_b = span.tobytes()
    for eid in cands:
        el = lines.get(eid)
        if el is None or not len(el.after):
            continue
        a = el.after
        new = location.diff_map(*el.diff_keys())[0]
        # line correspondence span ↔ after-text by a line diff over the candidate's region, with
        # room for lines inserted into the span since (one offset would lose everything below an
        # insertion)
        blo, bhi, margin = windows[eid]
        w0 = max(0, blo - margin)
        w1 = min(len(a), bhi + margin + 1)
        for i0, j0, n in _matches(span_b, a[w0:w1].tobytes()):
            for k in range(n):
                if new[w0 + j0 + k]:
                    producers[i0 + k].append(eid)
    return producers


def _line_owners(producers: list[list[int]], logged: dict[int, int], rows, tapes
                 ) -> list[int | None]:
    """Per span line, its owner: the edit the log gives it, else the latest edit that wrote it
    (None: no edit did)."""
    def when(eid: int):
        r = rows[eid]
        t = tapes[r.tape]
        return (r.t or t.first_t or "", t.tape_id, r.ofs)

    # each line goes to the latest edit that wrote it; a trivial line (blank, ``"""``, ``)``) no
    # matched edit wrote goes with the line above it (it came in the same hunk more often than not)
    owners: list[int | None] = []
    for i, eids in enumerate(producers):
        if i in logged:  # blame through the log's own ranges and diffs
            owners.append(logged[i])
        else:
            owners.append((max(eids, key=when) if len(eids) > 1 else eids[0]) if eids else None)
    return owners


def _owned_lines(span_text: str, span_l: list[int], owners: list[int | None],
                 logged: dict[int, int]) -> dict[int, int]:
    """``{edit: how many of the span's lines it owns}``, trivial lines going with the line above."""
    # an edit that wrote only blank lines, brackets and two-word lines (``return False``) of the
    # span wrote none of it: which of two identical such lines a diff calls "kept" is arbitrary.
    # Their lines go with the line above (they came in the same hunk more often than not); trivial
    # lines no edit wrote (a blank line the diffs kept) say nothing of who wrote the span and are
    # not counted, nor is the empty line after the span's last newline
    words = [len(_WORD.findall(ln)) for ln in span_text.split("\n")]
    real = {o for o, h, n in zip(owners, span_l, words) if h != 0 and n > WEAK_WORDS and o is not None}
    real |= {o for i, o in logged.items() if span_l[i] != 0}  # the log's own diff is not arbitrary
    owned: dict[int, int] = defaultdict(int)
    prev: int | None = None
    n_real = len(span_l) - 1 if span_text.endswith("\n") else len(span_l)  # (the empty line
    for h, owner in zip(span_l[:n_real], owners):                          # after the last \n)
        if owner is None and h == 0:
            continue
        if owner not in real:
            owner = prev
        elif h != 0:
            prev = owner
        if owner is not None:
            owned[owner] += 1
    return owned


def _record_produced(ev: dict[int, Evidence], owned: dict[int, int], logged: dict[int, int], rows,
                     windows, span_lines: tuple[int, int] | None) -> None:
    """``produced`` of each owning edit = its share of the attributed lines; an edit found by its
    place in the file alone gets its evidence here (its lines: the log's, else its window's)."""
    covered = sum(owned.values())
    logged_by: dict[int, list[int]] = defaultdict(list)  # edit → the span lines the log gave it
    for i, eid in logged.items():
        logged_by[eid].append(i)
    for eid, n in owned.items():
        e = ev.get(eid)
        if e is None:  # an edit found by its place in the file alone
            e = ev[eid] = Evidence(eid)
            e.roles.add(schema.ROLE_EDIT_AFTER)
            r = rows[eid]
            mine = logged_by.get(eid)
            if mine:
                e.lines = [span_lines[0] + min(mine), span_lines[0] + max(mine)]
            else:
                blo, bhi, _m = windows[eid]
                e.lines = [r.a_start + blo, r.a_start + bhi]
        e.produced = n / covered


WEAK_WORDS = 2            # a line of at most this many words identifies no author on its own
_WORD = re.compile(r"[A-Za-z0-9_]+")

LOG_BLAME_AGREE = 0.8     # share of the log's attributions whose text must match the span


def _log_blame(conn, local: list[int], rows, span_lines: tuple[int, int], span: np.ndarray,
               context: str | None = None) -> dict[int, int]:
    """``{span line: edit}`` from ``location.blame`` on the file the candidates edited (the one
    whose history attributes the most lines), kept only when the log agrees with today's text: at
    least ``LOG_BLAME_AGREE`` of the lines it attributes match their writer's text (an unlogged
    change shifts lines, and a shifted track lands on text that differs; with the file's whole text,
    ``context``, the span is then looked up where it sits in the file as the log leaves it)."""
    best: dict[int, int] = {}
    for f in sorted({rows[e].file for e in local if rows[e].file}, key=str):
        rel = next(rows[e].rel for e in local if rows[e].file == f)
        for got in _blames(conn, rel, f, span_lines, span, context):
            if not got:
                continue
            ok = {i: e for i, e in got.items() if e is not None}
            real = [i for i in got if span[i] != 0]
            if not real or sum(got[i] is not None for i in real) < LOG_BLAME_AGREE * len(real):
                continue
            if len(ok) > len(best):
                best = ok
            break
    return best


def _path_blame(conn, display: str, path: str | None, lines: tuple[int, int], text: str,
                context: str | None = None) -> dict[int, float]:
    """``{edit: share of the span's lines}`` from ``location.blame`` on the file found by its path
    alone: logged edits of ``path`` itself (absolute), else of files whose repo-relative path is a
    suffix of ``display`` with at least two components (``pkg/mod.py``, never a bare ``mod.py``).
    Every attribution is checked against today's text; the file whose history attributes the most
    lines wins, and two files attributing equally many (copies of one project) answer nothing.
    When the log's line numbers no longer hold (a change nobody logged shifted the span) and the
    file's whole text is known (``context``), the span is looked up where it sits in the file as
    the log leaves it (``location.reanchor``)."""
    span = _span_line_hashes(text, context, lines)
    best: list[tuple[int, dict]] = []
    words = [len(_WORD.findall(ln)) for ln in text.split("\n")]
    for rel, f in edited_paths(conn, display, path):
        for got in _blames(conn, rel, f, lines, span, context):
            ok = {i: e for i, e in (got or {}).items() if e is not None}
            real = [i for i in ok if span[i] != 0 and words[i] > WEAK_WORDS]
            if real and len(ok) >= LOG_BLAME_AGREE * len(got):
                best.append((len(ok), ok))
                break
    best.sort(key=lambda b: -b[0])
    if not best or (len(best) > 1 and best[0][0] == best[1][0]):
        return {}
    ok = best[0][1]
    n = sum(1 for _ in ok)
    shares: dict[int, float] = defaultdict(float)
    for e in ok.values():
        shares[e] += 1 / n
    return dict(shares)


MAX_PATH_FILES = 8        # files sharing a path suffix that path blame looks at


def edited_paths(conn, display: str, path: str | None = None, whole: bool = False
                 ) -> list[tuple[str | None, str]]:
    """``(rel, file)`` of the logged edits of the file shown as ``display`` (repo-relative), at
    most ``MAX_PATH_FILES``: those of its absolute ``path`` when given and logged, else those whose
    repo-relative path is a suffix of ``display`` with at least two components (sessions record
    their own absolute paths) — or ``display`` itself when it has one component and ``whole``."""
    found: list[tuple[str | None, str]] = []
    if path:
        found += conn.execute("SELECT DISTINCT rel, file FROM events WHERE file = ? AND kind = ?",
                              (path, schema.KIND_CODE["code.edit"])).fetchall()
    parts = display.replace("\\", "/").lstrip("./").split("/")
    suffixes = ["/".join(parts[i:]) for i in range(len(parts) - 1)] or (parts[:1] if whole else [])
    if not found and suffixes:
        marks = ",".join("?" * len(suffixes))
        found += sorted(conn.execute(
            f"SELECT DISTINCT rel, file FROM events WHERE rel IN ({marks}) AND kind = ?",
            (*suffixes, schema.KIND_CODE["code.edit"])), key=lambda rf: (rf[0] or "", rf[1] or ""))
    return found[:MAX_PATH_FILES]


def _blames(conn, rel: str | None, file: str, lines: tuple[int, int], span: np.ndarray,
            context: str | None):
    """``location.blame`` of the span at today's lines; then, for a caller that rejects it, at the
    lines the span matches in the file as the log leaves it (today's file is ``context``): when
    today's file shifted it there as a whole (every line matched, in one run, elsewhere than
    today); else line by line, when most of its lines are still there in the same order and the
    rest were changed since (by hand: those lines get no edit)."""
    yield location.blame(conn, rel, file, lines[0], lines[1], span)
    if context is None:
        return
    where = location.reanchor(conn, rel, file, _file_line_hashes(context))
    if where is None:
        return
    mapped = where[lines[0] - 1:lines[1]]
    if len(mapped) != lines[1] - lines[0] + 1:
        return
    if not ((mapped == 0).any() or mapped[0] == lines[0] or (np.diff(mapped) != 1).any()):
        yield location.blame(conn, rel, file, int(mapped[0]), int(mapped[-1]), span)
        return
    real = span[:len(mapped)] != 0
    kept = np.flatnonzero(mapped > 0)
    if (not real.any() or (mapped[real] > 0).sum() < PARTIAL_MAPPED * real.sum()
            or (np.diff(mapped[kept]) <= 0).any()):
        return
    if mapped[kept[-1]] - mapped[kept[0]] + 1 > 2 * len(mapped):
        return
    got = location.blame_mapped(conn, rel, file, mapped)
    if got is not None:
        yield got


PARTIAL_MAPPED = 0.5      # share of a span's non-trivial lines that must be where the log left them


def _span_line_hashes(text: str, context: str | None, lines: tuple[int, int] | None) -> np.ndarray:
    """``store.line_hashes(text)`` for the span ``text``; cut from the memoised line hashes of
    its whole file when those are at hand (``context``, whose lines ``lines`` the span is: a
    line's hash depends on that line alone). A file's hashes are not computed for this: hashing
    the span's own lines costs a fraction of hashing a whole file of thousands of lines, which
    only the re-anchoring of a span (``_blames``) and the editors' read-ahead need. The span's
    text ends with a newline: its last, empty line hashes to 0."""
    if context is not None and lines is not None and text.count("\n") == lines[1] - lines[0] + 1:
        whole = _LINE_HASHES.peek(context)
        if whole is not None and lines[0] >= 1 and lines[1] <= len(whole):
            out = np.zeros(lines[1] - lines[0] + 2, dtype=np.int32)
            out[:-1] = whole[lines[0] - 1:lines[1]]
            return out
    return store.line_hashes(text)


_LINE_HASHES = _PerFile(size=256, budget=8 << 20)  # 4 bytes a line


def _file_line_hashes(text: str) -> np.ndarray:
    """``store.line_hashes`` of a whole file, memoised (read-only): an editor asks about one
    file again and again (a string caches its own hash, so the lookup is cheap)."""
    hit = _LINE_HASHES.peek(text)
    if hit is None:
        hit = store.line_hashes(text)
        hit.flags.writeable = False
        _LINE_HASHES.put(text, hit, hit.nbytes)
    return hit


def _with_track(conn, cands: list[int], rows, ev: dict[int, Evidence], after, span_lines,
                windows: dict[int, tuple[int, int]], hits, need: int) -> list[int]:
    """Candidates corrected by the span's location through time, per file (see ``location.py``).

    Every edit whose after-range overlapped the span at its time is added (a one-line signature
    change is too small for containment to find it); its lines still have to match the span's in
    the line diff to count, so a track that drifted adds nothing wrong. Dropping needs more: an edit
    found by fingerprints that holds an aligned copy of the span where the track puts the span at
    its time *verifies* the track from that time on (a change nobody logged — by hand, a formatter,
    a checkout — between then and now would have moved the span and put that edit off the track).
    From the earliest verified time on, candidates with no copy on the track are dropped: they
    wrote the same lines elsewhere (a sibling function, a copy). Before that time none is dropped.
    A candidate whose text holds several copies (a whole-file write of sibling functions) is
    re-aligned on the copy the track points at."""
    key = lambda r: (r.t or "", r.tape, r.ofs)  # noqa: E731 - the track's own order
    block_hits, span_hits = hits if hits is not None else ({}, {})
    out: list[int] = []
    for f in sorted({rows[e].file for e in cands if rows[e].file}, key=str):
        mine = [e for e in cands if rows[e].file == f]
        track = location.span_track(conn, rows[mine[0]].rel, f, span_lines[0], span_lines[1])
        if track is None:
            out.extend(mine)
            continue
        on = []
        for e in mine:
            pos = track.at.get(e)
            if pos is None or e not in block_hits:
                continue
            if not track.off(e, ev[e].lines):
                on.append(e)
                continue
            # the copy of the span at the tracked place, if this edit's text has one there
            bh, line0 = block_hits[e]
            lo, hi = pos[0] - location.SLACK - line0, max(pos) + location.SLACK - line0
            near = {h: [bl for bl in bls if lo <= bl <= hi] for h, bls in bh.items()}
            aligned, a_lo, a_hi, _off = _aligned({h: v for h, v in near.items() if v}, span_hits)
            if len(aligned) >= need:
                ev[e].lines = [line0 + a_lo, line0 + a_hi]
                windows[e] = (a_lo, a_hi, windows[e][2])
                on.append(e)
        if not on:
            out.extend(mine)
            continue
        since = min(key(rows[e]) for e in on)
        out.extend(e for e in mine if e in on or key(rows[e]) < since)
        for eid in track.touched():
            r = track.rows[eid]
            if eid in out:
                continue
            s, e = track.at[eid]
            # the after-text lines that held the span (a candidate keeps its own window)
            windows.setdefault(eid, (max(0, s - r.a_start), max(0, min(max(e, s), r.a_end) - r.a_start),
                                     location.SLACK))
            rows.setdefault(eid, r)
            out.append(eid)
    for e in cands:
        if rows[e].file is None and e not in out:
            out.append(e)
    return out


@functools.lru_cache(maxsize=4096)
def _matches(span: bytes, after: bytes) -> list[tuple[int, int, int]]:
    """Matching runs ``(span line, after line, length)`` of a line diff of two line-hash arrays."""
    from engram.linediff import SequenceMatcher

    a = np.frombuffer(span, dtype=np.int32).tolist()
    b = np.frombuffer(after, dtype=np.int32).tolist()
    return [m for m in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks() if m[2]]


class Candidate(NamedTuple):
    """A session ranked by explain (a tape: a session, or one sealed part of one)."""

    tape: int                               # the tape's row id
    via: str                                # "direct", or how the lineage walk reached it
    produced: float                         # share of the span it produced (0: none)
    confidence: float
    items: list[tuple[int, float, float]]   # its events: (event, produced, confidence)


class _Walked(NamedTuple):
    """What the lineage walk adds to the direct evidence."""

    lineage: list[dict]
    tombstones: list[dict]
    truncated: dict
    via: dict[int, str]                     # event reached by the walk alone → how
    extra_conf: dict[int, float]            # ... → its confidence
    paths_by_event: dict[int, list[dict]]   # ... → the walk's path to it
    history_paths: dict[int, list[dict]]    # direct-evidence event → the walk's path to it


def explain_text(conn: apsw.Connection, text: str, *, span: dict, before: int = 3, after: int = 3,
                 min_confidence: float = 0.5, all: bool = False, expand_until: int | None = None,
                 brief: bool = False, max_sessions: int | None = None,
                 window_sessions: int | None = None,
                 semantic=None, path: str | None = None, context: str | None = None) -> dict:
    """The explain result object (``docs/architecture.md``, "The explain result").

    ``window_sessions``: how many of the ranked sessions get transcript windows (default
    ``WINDOW_SESSIONS``); each session below lists its best anchor without events (``engram view``
    and the editors' *Open tape* show it).

    ``semantic``: a callable ``(conn, text, sessions, before, after, brief) -> list[dict]`` that
    returns extra ``via: "semantic"`` sessions (appended after all fingerprint evidence), or None.
    ``context``: the whole text of the span's file today, when known (blame by path re-anchors on
    it after changes nobody logged).
    """
    t0 = time.perf_counter()
    floor = 0.0 if all else DIRECT_FLOOR
    lines = (span["start"], span["end"]) if span.get("file") and span.get("start") else None
    evidence, stats = direct_evidence(conn, text, span.get("file"), floor, lines, context)
    if lines is not None and not any(e.produced > 0 for e in evidence.values()):
        # too short or too common for fingerprints to tell who wrote it: blame by the file's path
        _add_path_blame(conn, evidence, span["file"], path, lines, text, context)
    evidence, conf_of = _kept_evidence(evidence, floor, all)
    erows = queries.events(conn, evidence.keys())
    walked = _walk(conn, evidence, conf_of, erows, min_confidence, all)
    trows = queries.tapes(conn, {r.tape for r in erows.values()})

    per_tape, lineage_tapes = _by_tape(evidence, conf_of, erows, walked.via)
    sessions = _direct_candidates(per_tape)
    producer_tapes = {trows[s.tape].tape_id for s in sessions if s.via == "direct" and s.produced > 0}
    history_tapes = _history_tapes(producer_tapes, walked.lineage)
    sessions += _lineage_candidates(lineage_tapes, walked, trows, history_tapes, min_confidence, all)
    sessions, groups = _rank(sessions, evidence, walked, trows, producer_tapes, history_tapes)
    stats["sessions_total"] = len(sessions)
    sessions = _cap_readers(sessions, groups, max_sessions, all,
                            {t for t, r in trows.items() if r.harness == "engram"})  # notes stay

    shown = WINDOW_SESSIONS if window_sessions is None else window_sessions
    out_sessions = _session_entries(conn, sessions, evidence, erows, trows, walked.paths_by_event,
                                    shown, before, after, expand_until, brief)
    if semantic is not None:
        _add_semantic(conn, semantic, text, out_sessions, shown, before, after, brief, stats)
    # feedback (engram/retrieval/feedback.py): a no-op when the index holds none
    out_sessions = feedback.rerank_explain(conn, span_fingerprints(text)[2], span, out_sessions,
                                           path=path)
    stats["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    return {"span": span, "sessions": out_sessions, "lineage": walked.lineage,
            "tombstones": walked.tombstones, "truncated": walked.truncated, "stats": stats}


def _add_path_blame(conn, evidence: dict[int, Evidence], display: str, path: str | None,
                    lines: tuple[int, int], text: str, context: str | None) -> None:
    """Evidence of the edits that blame by the file's path (``_path_blame``) says produced the
    span, with their share of its lines."""
    for eid, share in _path_blame(conn, display, path, lines, text, context).items():
        e = evidence.setdefault(eid, Evidence(eid))
        e.roles.add(schema.ROLE_EDIT_AFTER)
        e.produced = share
        e.lines = [lines[0], lines[1]]


def _kept_evidence(evidence: dict[int, Evidence], floor: float, show_all: bool
                   ) -> tuple[dict[int, Evidence], dict[int, float]]:
    """``(the evidence kept, each kept event's confidence)``: above ``floor``, or a producer (with
    ``all``: any confidence above 0). The confidences are final from here on."""
    conf_of: dict[int, float] = {}
    for k, v in evidence.items():
        c = v.produced if v.produced > v.quoted else v.quoted
        if c > floor or v.produced > 0 or (show_all and c > 0):
            conf_of[k] = c
    return {k: evidence[k] for k in conf_of}, conf_of


def _walk(conn, evidence: dict[int, Evidence], conf_of: dict[int, float], erows,
          min_confidence: float, show_all: bool) -> _Walked:
    """The lineage walk from the strongest evidence; ``erows`` gains the events it reaches."""
    walked = _Walked([], [], {"fanout": False, "edges": False}, {}, {}, {}, {})
    # the walk starts from the strongest evidence: producers first, then the best quotes (a
    # generic two-line span can match hundreds of events; its edge budget is bounded anyway)
    # (``heapq.nsmallest`` is ``sorted(...)[:n]``, without sorting a popular span's thousand)
    seeds = heapq.nsmallest(MAX_WALK_SEEDS, evidence.items(),
                            key=lambda kv: (-kv[1].produced, -conf_of[kv[0]], kv[0]))
    # the producers' earlier parts and dispatchers are crossed however many tapes read the span
    found = walk.walk(conn, {eid: conf_of[eid] for eid, _e in seeds},
                      min_confidence=min_confidence, all=show_all,
                      history={eid for eid, e in seeds if e.produced > 0})
    walked = walked._replace(lineage=found.get("lineage", []),
                             tombstones=found.get("tombstones", []),
                             truncated=found.get("truncated", walked.truncated))
    for eid, info in found.get("reached", {}).items():
        if eid in evidence:  # also direct evidence: remember how the walk reached it
            walked.history_paths[eid] = info.get("path", [])
            continue
        walked.via[eid] = info["via"]
        walked.extra_conf[eid] = info["confidence"]
        walked.paths_by_event[eid] = info.get("path", [])
    erows.update(queries.events(conn, [e for e in walked.via if e not in erows]))
    return walked


def _by_tape(evidence: dict[int, Evidence], conf_of: dict[int, float], erows, via: dict[int, str]):
    """``(tape → its direct evidence (event, produced, confidence), tape → the events the walk
    alone reached in it)``; a tape with direct evidence is not listed in the second."""
    per_tape: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for eid, e in evidence.items():
        r = erows.get(eid)
        if r is not None:
            per_tape[r.tape].append((eid, e.produced, conf_of[eid]))
    lineage_tapes: dict[int, list[int]] = defaultdict(list)
    for eid in via:
        r = erows.get(eid)
        if r is not None and r.tape not in per_tape:
            lineage_tapes[r.tape].append(eid)
    return per_tape, lineage_tapes


def _direct_candidates(per_tape: dict[int, list[tuple[int, float, float]]]) -> list[Candidate]:
    """A candidate per tape with direct evidence: the share of the span it produced (all its
    events together) and its confidence (a session that wrote it all: 1.0)."""
    sessions = []
    for tid, items in per_tape.items():
        if len(items) == 1:  # most sessions: one event
            _e, produced, conf = items[0]
            produced = min(1.0, produced)
            conf = max(produced, conf)
        else:
            produced = min(1.0, sum(p for _, p, _ in items))  # fingerprints owned by the session
            conf = max(produced, max(c for _, _, c in items))  # a session that wrote it all: 1.0
        sessions.append(Candidate(tid, "direct", produced if produced > PRODUCED_FLOOR else 0.0,
                                  conf, items))
    return sessions


def _history_tapes(producer_tapes: set[str], lineage_part: list[dict]) -> set[str]:
    """The producing tapes and the tapes that continue into a producer, or dispatched it
    (transitively): their reasoning is the history of the edit, however small a share of the
    span that session produced and however the walk reached them first (even when they also read
    the code themselves). One pass over the lineage, then a walk over its continuation and
    dispatch links from the producers."""
    links: dict[str, list[str]] = defaultdict(list)
    for e in lineage_part:
        if e.get("kind") in ("continuation", "dispatch"):
            links[e["from"]["tape_id"]].append(e["to"]["tape_id"])
    history_tapes = set(producer_tapes)
    todo = [t for t in history_tapes if t in links]
    while todo:
        for to in links[todo.pop()]:
            if to not in history_tapes:
                history_tapes.add(to)
                if to in links:
                    todo.append(to)
    return history_tapes


def _lineage_candidates(lineage_tapes: dict[int, list[int]], walked: _Walked, trows,
                        history_tapes: set[str], min_confidence: float, show_all: bool
                        ) -> list[Candidate]:
    """A candidate per tape the walk alone reached: those at ``min_confidence`` or above (any with
    ``all``), in the history of a producer, or reached through an agent link."""
    sessions = []
    for tid, eids in lineage_tapes.items():
        conf = max(walked.extra_conf[e] for e in eids)
        if conf < min_confidence and not show_all and trows[tid].tape_id not in history_tapes and not any(
                any(p.get("agent_link") for p in walked.paths_by_event.get(e, [])) for e in eids):
            continue
        items = [(e, 0.0, walked.extra_conf[e]) for e in eids]
        sessions.append(Candidate(tid, walked.via[eids[0]], 0.0, conf, items))
    return sessions


def _rank(sessions: list[Candidate], evidence: dict[int, Evidence], walked: _Walked, trows,
          producer_tapes: set[str], history_tapes: set[str]
          ) -> tuple[list[Candidate], dict[int, int]]:
    """``(the candidates in rank order, id(candidate) → its group)``: by group, then the share of
    the span produced, then overall confidence, then the most recent, then stable fields."""
    recency = {t: i for i, t in enumerate(sorted({trows[s.tape].last_t or "" for s in sessions},
                                                  reverse=True))}
    history_paths, paths_by_event = walked.history_paths, walked.paths_by_event
    after_role = schema.ROLE_EDIT_AFTER

    def is_history(path: list[dict]) -> bool:
        """A walk path from a producing session through history edges only."""
        return bool(path) and path[0].get("from", {}).get("tape_id") in producer_tapes and not any(
            e.get("kind") not in HISTORY_EDGE_KINDS and not e.get("agent_link") for e in path)

    def group(s: Candidate) -> int:
        """0 producers · 1 the history behind them (earlier writers reached through edit, move,
        re-insert or agent edges, and the continuations/dispatches of producing sessions) ·
        2 sessions that read or quoted the span · 3 the rest of the walk."""
        tid, v, produced, _conf, items = s
        if v == "direct":
            if produced > 0:
                return 0
            # wrote this text (in another file, or before: an edit the walk reaches from a
            # producer through edit/move edges), or led to the edit, vs quoted it (a plain loop:
            # a reader's items are every event of its tape that quoted the span)
            for e, _p, _c in items:
                ev = evidence.get(e)
                if ev is not None and after_role in ev.roles and (
                        ev.quoted >= WROTE_MIN or is_history(history_paths.get(e, []))):
                    return 1
            return 1 if trows[tid].tape_id in history_tapes else 2
        path = paths_by_event.get(items[0][0], [])
        history = not any(e.get("kind") not in HISTORY_EDGE_KINDS and not e.get("agent_link")
                          for e in path)
        if (path and history and path[0].get("from", {}).get("tape_id") in producer_tapes
                or trows[tid].tape_id in history_tapes):
            return 1
        return 3

    # the key: group; then the share of the span the session produced; then overall confidence;
    # then the most recent; then stable, path-independent fields (one per candidate, built in
    # one pass with its group)
    groups: dict[int, int] = {}
    keys = []
    for s in sessions:
        t = trows[s.tape]
        g = group(s)
        groups[id(s)] = g
        p = s.produced
        keys.append((g, -round(p, 2) if p else 0, -round(s.confidence, 2),
                     recency[t.last_t or ""], t.first_t or "", t.session or "", t.tape_id))
    sessions[:] = [sessions[i] for i in sorted(range(len(sessions)), key=keys.__getitem__)]
    return sessions, groups


def _cap_readers(sessions: list[Candidate], groups: dict[int, int], max_sessions: int | None,
                 show_all: bool, keep: set[int] = frozenset()) -> list[Candidate]:
    """The ranked candidates with the readers and quoters (group 2) beyond the cap dropped (the
    cap: ``max_sessions``, else ``MAX_SESSIONS`` unless ``all``); never the producers or the
    history behind them, nor the tapes of ``keep`` (notes: ``engram.agents.notes``)."""
    limit = max_sessions if max_sessions is not None else (None if show_all else MAX_SESSIONS)
    if limit is not None:
        readers = [s for s in sessions if groups[id(s)] == 2 and s.tape not in keep]
        drop = {id(s) for s in readers[limit:]}
        sessions = [s for s in sessions if id(s) not in drop]
    return sessions


def _session_entries(conn, sessions: list[Candidate], evidence: dict[int, Evidence], erows, trows,
                     paths_by_event: dict[int, list[dict]], shown: int, before: int, after: int,
                     expand_until: int | None, brief: bool) -> list[dict]:
    """The answer's session objects, in rank order: the top ``shown`` with transcript windows
    around their strongest anchors, those below with their best anchor only (no tape reads)."""
    access = TapeAccess(conn)
    out_sessions = []

    def anchor_key(it):
        r = erows[it[0]]
        return (-round(it[1], 4), _KIND_RANK.get(r.kind, 6), -round(it[2], 4), r.ofs)

    for rank, (tid, v, _produced, conf, items) in enumerate(sessions):
        t = trows[tid]
        light = rank >= shown  # beyond the top sessions: anchors only, no tape reads
        touches = len(items)
        # a light session shows one anchor: the first in this order
        if len(items) > 1:
            items = [min(items, key=anchor_key)] if light else sorted(items, key=anchor_key)
        r = erows[items[0][0]] if light else None
        if r is not None and r.ofs >= 0:  # (most sessions: one anchor, nothing read)
            windows = [_anchor(r, items[0][2], evidence.get(items[0][0]))]
        else:
            windows = _windows(conn, access, t, items, light, evidence, erows, before, after,
                               expand_until, brief)
        entry = {
            "tape_id": t.tape_id, "harness": t.harness, "session": t.session,
            "tier": t.tier or "agent", "label": t.label, "model": t.model, "cwd": t.cwd,
            "first_t": t.first_t, "last_t": t.last_t, "confidence": round(conf, ROUND),
            "touches": touches, "via": v,
            "signals": {"fingerprint": round(conf, ROUND), "semantic": None},
            "live": bool(t.live),
            "windows": windows,
        }
        if v != "direct":
            entry["lineage"] = paths_by_event.get(items[0][0], [])
        # a tape that cannot be read: marked (a window that read nothing has nothing to lift)
        out_sessions.append(window.lift_unreadable(entry) if r is None or r.ofs < 0 else entry)
    return out_sessions


def _windows(conn, access: TapeAccess, t, items: list[tuple[int, float, float]], light: bool,
             evidence: dict[int, Evidence], erows, before: int, after: int,
             expand_until: int | None, brief: bool) -> list[dict]:
    """One session's windows, over its anchors in order (``items``): at most ``MAX_WINDOWS`` (a
    light session: one, without events), skipping anchors under half the best confidence and
    anchors an earlier window already shows."""
    windows = []
    best = items[0][2] if len(items) == 1 else max(c for _e, _p, c in items)
    covered: list[tuple[int, int]] = []
    for eid, _p, c in items:
        if len(windows) >= (1 if light else MAX_WINDOWS):
            break
        r = erows[eid]
        if c < best * 0.5 and windows:
            continue
        o, seen = r.ofs, False
        for lo, hi in covered:  # (a plain loop, no generator: ~50 sessions an explain)
            if lo <= o <= hi:
                seen = True
                break
        if seen:
            continue  # already visible in an earlier window
        covered.append((r.ofs - before, r.ofs + after))
        w = _anchor(r, c, evidence.get(eid))
        if r.ofs < 0:  # -- sidecar enrichment (issue 6): engram/index/sidecar.py --
            from engram.index import sidecar

            body = sidecar.body(conn, eid)
            at = body.get("at") if isinstance(body.get("at"), int) else 1
            at = max(1, min(at, max(t.n_events - 1, 1)))
            w.update({"anchor": at, "kind": "sidecar", "source": "enrichment",
                      "enrichment": body})
            w.update(window.window(access, t, at, before, after, expand_until, brief))
            windows.append(w)
            continue  # -- end sidecar enrichment --
        if not light:
            w.update(window.window(access, t, r.ofs, before, after, expand_until, brief))
        windows.append(w)
    return windows


def _anchor(r, confidence: float, ev: Evidence | None) -> dict:
    """A window's anchor fields: the event ``r``, its confidence, and what its evidence says
    (the span's lines in it, the share it produced)."""
    w = {"anchor": r.ofs, "kind": schema.kind_name(r.kind), "confidence": round(confidence, ROUND),
         "file": r.file}
    if ev is not None and ev.lines:
        w["lines"] = ev.lines
    if ev is not None and ev.produced > PRODUCED_FLOOR:
        w["produced"] = round(ev.produced, ROUND)
    return w


def _add_semantic(conn, semantic, text: str, out_sessions: list[dict], shown: int, before: int,
                  after: int, brief: bool, stats: dict) -> None:
    """Append the sessions ``semantic`` finds that fingerprints did not (anchors only when ranked
    below the windowed sessions)."""
    known = {s["tape_id"] for s in out_sessions}
    below = not brief and len(out_sessions) >= shown  # ranked below the windowed sessions
    extra = [s for s in semantic(conn, text, out_sessions, before, after, brief or below)
             if s["tape_id"] not in known]
    if below:
        for s in extra:  # their anchor (and request) only, as for fingerprint sessions
            for w in s["windows"]:
                w.pop("events", None)
    out_sessions.extend(extra)
    stats["semantic_added"] = len(extra)


# anchors people want to see first: the edit, then a read, then words, then tool traffic (6: rest)
_KIND_RANK = {schema.KIND_CODE["code.edit"]: 0, schema.KIND_CODE["code.read"]: 1, schema.KIND_CODE["msg.out"]: 2,
              schema.KIND_CODE["msg.in"]: 3, schema.KIND_CODE["tool.call"]: 4, schema.KIND_CODE["tool.result"]: 5}
