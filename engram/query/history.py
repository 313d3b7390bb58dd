"""``engram trace FILE`` and ``engram blame FILE``.

**trace**: every session that touched the file, oldest first, with what it did (reads and edits
with their line ranges). A session counts when one of its code events names the file (the same
repo-relative path or absolute path: ``match: "path"``; only the same base name: ``"basename"``)
or when one of its edit/read texts is mostly present in the file's current content
(``"content"``: found by fingerprint wherever the session thought the file lived — a move, another
checkout).

**blame**: per line of the file, the session that most likely produced it, in two steps.

1. *Through the log* (``via: "log"``): when sessions logged edits of the file (its absolute
   path, else a repo-relative path sharing its last two or more components), today's lines are
   re-anchored on the file as those edits leave it (``location.reanchor``; a trivial line — blank,
   ``)``, ``# ok`` — only where its exact text is the same) and each line found there belongs to
   the edit that wrote it (``location.blame``, as ``git blame`` carries lines back through
   commits). Lines a person added or changed since are not in the logged text and get no edit.
2. *By fingerprints* (``via: "direct"``), for every other line: the file's winnowed fingerprints
   are looked up once; for each line the fingerprints starting within ``BLAME_CONTEXT`` lines of
   it are scored per session — or, on a line the log does not show although the file has a
   logged history, only the fingerprints starting on the line itself, so that code written by
   hand next to a session's code is not credited to it. The score is the share found in that
   session's edit-after texts (what it wrote — not lines its edit only carried over as context),
   else in its other texts (what it read or quoted). The best producer wins (ties: the latest
   session), then the best reader; lines without fingerprints (blank lines, lone braces) take
   their neighbours' answer (``inferred: true``).

``produced`` says whether the session wrote the line. Sessions whose edits produced an *earlier*
version of the attributed code are listed under ``earlier`` when the lineage walk reaches them.
One fingerprint pass and one index lookup for the whole file: fast on thousands of lines.
"""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from engram import fingerprint
from engram.errors import BadSpan
from engram.files import read_text_file
from engram.index import postings, queries, schema, store
from engram.query import walk
from engram.sortedset import member, uniq

CONTENT_MIN = 0.6          # share of an event's text found in today's file to count for trace
BLAME_CONTEXT = 2          # lines on each side whose k-grams score a line
BLAME_MIN = 0.3            # below this a line has no session
MAX_TRACE_SESSIONS = 500
ROUND = 4

_CODE_KINDS = (schema.kind_code("code.edit"), schema.kind_code("code.read"))


def _read(engine, file: str) -> tuple[Path, str | None]:
    p = Path(file)
    if not p.is_absolute():
        p = Path.cwd() / p
    try:  # a regular file of bounded size only (engram.files): not a FIFO, /dev/zero, ...
        return p, read_text_file(p, shown=file)
    except FileNotFoundError:
        return p, None


def _rel(engine, p: Path) -> str:
    try:
        return str(p.resolve().relative_to(engine.root))
    except ValueError:
        return str(p)


# ---------------------------------------------------------------------------------------------
# trace


def trace(engine, file: str) -> dict:
    conn = engine.conn()
    p, text = _read(engine, file)
    rel = _rel(engine, p)
    base = os.path.basename(rel)
    hits: dict[int, str] = {}
    for eid, efile, erel in conn.execute(
            "SELECT id, file, rel FROM events WHERE kind IN (?,?) AND (rel=? OR file=? OR rel=?"
            " OR file LIKE ? ESCAPE '\\' OR rel LIKE ? ESCAPE '\\')",
            (*_CODE_KINDS, rel, str(p), base, "%/" + _esc(base), "%/" + _esc(base))):
        exact = erel == rel or efile == str(p) or (efile or "").endswith("/" + rel)
        hits[eid] = "path" if exact else "basename"
    if text is not None:
        for eid in _content_events(conn, text):
            hits.setdefault(eid, "content")
    if text is None and not hits:
        raise BadSpan("no such file, and no session touched a file of that name", path=file)
    erows = queries.events(conn, hits)
    trows = queries.tapes(conn, {r.tape for r in erows.values()})
    per_tape: dict[int, list] = defaultdict(list)
    for _eid, r in erows.items():
        per_tape[r.tape].append(r)
    sessions = []
    for tid, rows in per_tape.items():
        t = trows[tid]
        rows.sort(key=lambda r: r.ofs)
        actions = [_action(r, hits[r.id]) for r in rows]
        sessions.append({
            "tape_id": t.tape_id, "harness": t.harness, "session": t.session,
            "tier": t.tier or "agent", "label": t.label, "model": t.model, "live": bool(t.live),
            "first_t": t.first_t, "last_t": t.last_t,
            "reads": sum(1 for a in actions if a["k"] == "code.read"),
            "edits": sum(1 for a in actions if a["k"] == "code.edit"),
            "match": sorted({a["match"] for a in actions}),
            "actions": actions})
    sessions.sort(key=lambda s: (s["first_t"] or "", s["tape_id"]))
    truncated = len(sessions) > MAX_TRACE_SESSIONS
    return {"file": rel, "exists": text is not None, "sessions": sessions[:MAX_TRACE_SESSIONS],
            "truncated": truncated}


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _action(r: queries.EventRow, match: str) -> dict:
    a = {"offset": r.ofs, "t": r.t, "k": schema.kind_name(r.kind), "file": r.file, "match": match}
    if r.kind == schema.kind_code("code.edit"):
        a["before_range"] = [r.b_start, r.b_end]
        a["after_range"] = [r.a_start, r.a_end]
        if r.b_start is not None and r.b_end is not None and r.b_end < r.b_start:
            a["did"] = "insert"
        elif r.a_start is not None and r.a_end is not None and r.a_end < r.a_start:
            a["did"] = "delete"
        else:
            a["did"] = "replace"
    else:
        a["range"] = [r.a_start, r.a_end]
        a["did"] = "read"
    return a


def _content_events(conn, text: str) -> list[int]:
    """Code events whose text is mostly (≥ CONTENT_MIN of its fingerprints) in ``text``."""
    allk, _ = fingerprint.all_kgrams(text, fingerprint.DEFAULT_K)
    uq = np.unique(np.asarray(allk, dtype=np.int64))
    if not len(uq):
        return []
    bp = queries.boilerplate(conn, uq)
    if bp:
        uq = uq[~np.isin(uq, np.fromiter(bp, np.int64, len(bp)))]
    per_block: dict[int, int] = defaultdict(int)
    for _h, b, _ln in queries.postings(conn, uq):
        per_block[b] += 1
    if not per_block:
        return []
    nfp = {}
    blocks = sorted(per_block)
    for i in range(0, len(blocks), 20000):
        import apsw

        ch = blocks[i:i + 20000]
        for bid, n in conn.execute("SELECT id, n_fp FROM blocks WHERE id IN carray(?)",
                                   (apsw.carray(queries._i64(ch)),)):
            nfp[bid] = n
    good = {b for b, c in per_block.items() if nfp.get(b) and c / nfp[b] >= CONTENT_MIN}
    out = []
    for _b, eid, role, _l in queries.refs_for_blocks(conn, good):
        if role in (schema.ROLE_EDIT_AFTER, schema.ROLE_EDIT_BEFORE, schema.ROLE_READ):
            out.append(eid)
    return sorted(set(out))


# ---------------------------------------------------------------------------------------------
# blame


def blame(engine, file: str, text: str | None = None, *, earlier: bool = True) -> dict:
    """Per line of ``file``, the session that most likely produced it (see the module's doc).
    ``text``: the file's content as an editor holds it (unsaved edits included) instead of disk.
    ``earlier=False`` skips the lineage walk behind ``result["earlier"]`` (commit attribution
    needs only the lines)."""
    result, j = _judged(engine, file, text, earlier)
    if j is None:
        return result
    out_lines, line_tapes = _line_entries(j["L"], j["best"], j["own"], j["log"], j["log_rows"], j["trows"])
    result["lines"] = out_lines
    _add_sessions(result, out_lines, line_tapes, j["trows"])
    result["runs"] = _runs(out_lines, line_tapes)
    if earlier:
        _earlier(engine.conn(), result, {**j["erows"], **j["log_rows"]}, j["trows"])
    return result


_SESSION_KEYS = ("session", "harness", "model", "label", "first_t", "last_t")


def annotate(engine, file: str, text: str) -> dict:
    """The editor's line annotation of ``text`` (the buffer of ``file``): the lines ``blame``
    says a session *produced*, as ``{"lines": n, "sessions": [...], "runs": [...]}`` — ``runs``
    the maximal runs of consecutive lines of one session by one rule (``start``/``end`` 0-based,
    inclusive; ``session`` an index into ``sessions``; ``via`` ``"log"`` or ``"direct"``),
    ``sessions`` in the order they first appear, each with its marked lines. The same answer as
    building it from ``blame(earlier=False)``'s per-line entries, computed on arrays without
    them (the 5,000 entries of a 5,000-line file were a fifth of its time), and from the
    producers alone: a line blame gives to a session that only read or quoted it is not marked,
    so the readers' refs and blame's second scoring pass are not computed (half the CPU)."""
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    out = {"lines": lines, "sessions": [], "runs": []}
    if not text:
        return out
    _result, j = _judged(engine, file, text, False, produced_only=True)
    if j is None:
        return out
    tape, via = _line_owner_arrays(j["L"], j["best"], j["own"], j["log"], j["log_rows"])
    key = np.where(tape >= 0, tape * 4 + via, -1)   # via: 1 log, 2 direct, 0 not produced
    key[via == 0] = -1
    if not bool((key >= 0).any()):
        return out
    starts = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1]
    ends = np.r_[starts[1:], len(key)] - 1
    keep = key[starts] >= 0
    index: dict[int, int] = {}
    trows = j["trows"]
    for a, b, k in zip(starts[keep].tolist(), ends[keep].tolist(), key[starts[keep]].tolist(), strict=True):
        t = k >> 2
        i = index.get(t)
        if i is None:
            i = index[t] = len(out["sessions"])
            r = trows[t]
            out["sessions"].append({"tape_id": r.tape_id, **{f: getattr(r, f) for f in _SESSION_KEYS},
                                    "lines": 0})
        out["sessions"][i]["lines"] += b - a + 1
        out["runs"].append({"start": a, "end": b, "session": i, "via": "log" if k & 3 == 1 else "direct"})
    return out


def _judged(engine, file: str, text: str | None, earlier: bool, produced_only: bool = False):
    """``(blame's result without its lines, what was judged per line)``; the second is None for
    an empty file. ``produced_only`` (the annotation, which marks only the lines a session
    produced): the choices are right only where a producer wins a line (``best[m][2]``), the
    same as without it there; what a session only read or quoted is not looked at (no
    ``other`` pairs, no second scoring pass)."""
    conn = engine.conn()
    if text is None:
        p, text = _read(engine, file)
    else:
        p = Path(file) if Path(file).is_absolute() else Path.cwd() / file
    if text is None:
        raise BadSpan("no such file", path=file)
    rel = _rel(engine, p)
    # the lines of ``text.split("\n")``, less a last empty one (counted, not split: 0.5 ms)
    n_lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    # the file's winnowed fingerprints against the index's (same selection on both sides, so a
    # shared run of text shares its fingerprints except near the edges of a block)
    win = fingerprint.fingerprint(text)
    allk = np.asarray(win.hashes, dtype=np.int64)
    klines = np.asarray(win.lines, dtype=np.int64)
    result = {"file": rel, "path": str(p), "lines": [], "sessions": {}, "runs": []}
    if n_lines == 0:
        return result, None
    uq, inv, by_col = _unique_inverse(allk)
    pairs, by_key, after_rows, other_rows, erows = _block_roles(conn, uq, rows=earlier,
                                                                after_only=produced_only)
    tape_list, prod, other = _tape_matrices(uq, pairs, by_key, after_rows, other_rows)
    L = n_lines
    kl = np.clip(klines, 0, L - 1)
    per_line_total = np.bincount(kl, minlength=L).astype(np.float64)
    trows = queries.tapes(conn, tape_list)
    # blame through the log: lines that are today where the file's logged edits left them
    # belong to the edit that wrote them; lines the log does not show (changed since, by hand or
    # by a session nobody logged) are judged by their own fingerprints, not their neighbours'
    log = _log_owners(conn, rel, str(p), text, L)
    log_rows = queries.events(conn, {int(e) for e in log[0][log[0] > 0]}) if log is not None else {}
    trows.update(queries.tapes(conn, {r.tape for r in log_rows.values()} - set(trows)))
    own = per_line_total > 0
    best = _best_tapes(tape_list, trows, prod, other, inv, kl, per_line_total,
                       _modes_needed(L, log, log_rows, own), readers=not produced_only, by_col=by_col)
    return result, {"L": L, "best": best, "own": own, "log": log, "log_rows": log_rows,
                    "trows": trows, "erows": erows}


def _line_owner_arrays(L: int, best, own: np.ndarray, log, log_rows) -> tuple[np.ndarray, np.ndarray]:
    """``(tape per line or -1, how: 1 through the log, 2 by fingerprints and produced, 0
    otherwise)``: the choices of ``_line_entries``, as arrays."""
    if log is None:
        strict = np.zeros(L, bool)
        log_tape = np.full(L, -1, np.int64)
    else:
        strict = ~log[1] & own
        log_tape = _log_tapes(log[0], log_rows)
    b_tape = np.where(strict, best["strict"][0], best["context"][0])
    b_conf = np.where(strict, best["strict"][1], best["context"][1])
    b_prod = np.where(strict, best["strict"][2], best["context"][2])
    by_log = log_tape >= 0
    direct = ~by_log & (b_tape >= 0) & (b_conf >= BLAME_MIN)
    tape = np.where(by_log, log_tape, np.where(direct, b_tape, -1))
    via = np.where(by_log, 1, np.where(direct & b_prod.astype(bool), 2, 0))
    return tape, via


def _log_tapes(owners: np.ndarray, log_rows) -> np.ndarray:
    """The tape of each line's edit event in ``owners`` (0: none), -1 where it has none or the
    event is not in ``log_rows``: on arrays, not one dict lookup per line."""
    known = np.fromiter(sorted(log_rows), np.int64, len(log_rows))
    if not len(known):
        return np.full(len(owners), -1, dtype=np.int64)
    tape_of = np.fromiter((log_rows[e].tape for e in known.tolist()), np.int64, len(known))
    at = np.minimum(np.searchsorted(known, owners), len(known) - 1)
    return np.where(known[at] == owners, tape_of[at], -1)


def _block_roles(conn, uq: np.ndarray, rows: bool = True, after_only: bool = False):
    """The index's postings of the file's distinct hashes ``uq`` (less boilerplate), by role, as
    arrays: ``(pairs, by_key, after, other, the events)`` where ``pairs`` are the distinct
    ``(column of the hash in uq, block)`` codes ``column << 32 | block``, sorted, ``by_key`` the
    same pairs as ``block << 32 | column``, sorted; ``after`` the
    rows ``(block, tape, block of the edit's before-text or -1)`` of edits whose after-text a block
    is; ``other`` the rows ``(block, tape)`` of the tapes holding a block otherwise. ``rows=False``:
    the events are not returned (``{}``), only their tapes looked up. ``after_only``: only the
    edits' refs are kept (``other`` is empty; the annotation needs only the producers)."""
    pairs = _posting_pairs(conn, uq, _not_boilerplate(conn, uq))
    # the pairs by block (one sort gives the blocks and ``_tape_matrices``' join); columns and
    # blocks are below 2³²
    by_key = np.sort(((pairs & _LO32) << 32) | (pairs >> 32))
    blocks = _uniq(by_key >> 32)
    if after_only:
        R = _edit_rows(conn, blocks)
        R, tape, erows = R[:, :4], R[:, 4], {}
        ok = tape >= 0
    else:
        R, tape, ok, erows = _ref_rows(conn, blocks, rows)
    # an edit produced a hash when it is in its after-text but not in its before-text (lines
    # carried over as context were there before the edit: they belong to whoever wrote them)
    is_after = ok & (R[:, 2] == schema.ROLE_EDIT_AFTER)
    is_other = ok & ~is_after
    bef = is_other & (R[:, 2] == schema.ROLE_EDIT_BEFORE)
    before_of = dict(zip(R[bef, 1].tolist(), R[bef, 0].tolist()))   # the last one, as refs go
    a_eid = R[is_after, 1].tolist()
    after_rows = np.column_stack([R[is_after, 0], tape[is_after],
                                  np.fromiter(map(before_of.get, a_eid, itertools.repeat(-1)), np.int64, len(a_eid))])
    codes = _uniq((R[is_other, 0] << 32) | tape[is_other])       # distinct (block, tape), sorted
    other_rows = np.column_stack([codes >> 32, codes & _LO32])
    return pairs, by_key, after_rows.reshape(-1, 3), other_rows.reshape(-1, 2), erows


_LO32 = (1 << 32) - 1
_EDIT_ROLES = (schema.ROLE_EDIT_AFTER, schema.ROLE_EDIT_BEFORE)


def _ref_rows(conn, blocks: np.ndarray, rows: bool):
    """``(refs (block, event, role, line0), each one's tape, whether its event exists, the
    event rows or {})`` of ``blocks`` (``queries.refs_for_blocks``' order)."""
    refs = queries.refs_for_blocks(conn, blocks.tolist())
    eids = {eid for _b, eid, _r, _l in refs}
    if rows:
        erows = queries.events(conn, eids)
        tapes_of = {e: r.tape for e, r in erows.items()}
    else:
        erows, tapes_of = {}, _event_tapes(conn, eids)
    R = np.fromiter(itertools.chain.from_iterable(refs), np.int64, 4 * len(refs)).reshape(-1, 4)
    known = np.array(sorted(tapes_of), dtype=np.int64)
    tape_of = np.array([tapes_of[e] for e in known.tolist()], dtype=np.int64)
    at = np.minimum(np.searchsorted(known, R[:, 1]), max(len(known) - 1, 0))
    ok = known[at] == R[:, 1] if len(known) else np.zeros(len(R), bool)
    tape = tape_of[at] if len(known) else np.zeros(len(R), np.int64)
    return R, tape, ok, erows


class _EditRows:
    """The edit refs of the blocks looked up so far (one index version), as arrays: ``seen`` the
    blocks looked up (sorted), ``rows`` their after- and before-text refs ``(block, event, role,
    line0, the event's tape or -1)`` sorted as the refs table is (block, event, role)."""

    def __init__(self):
        self.seen = self.blocks = np.zeros(0, dtype=np.int64)   # blocks: ``rows[:, 0]``, contiguous
        self.rows = np.zeros((0, 5), dtype=np.int64)


def _edit_rows(conn, blocks: np.ndarray) -> np.ndarray:
    """The rows ``(block, event, role, line0, tape or -1)`` of ``_ref_rows(conn, blocks)`` (sorted
    distinct ``blocks``) that are an edit's after-text or before-text, of the edits whose
    after-text is one of ``blocks``, in the same order. Held per index version, as arrays: most of
    a file's blocks (reads, tool outputs, messages) have no edit ref, the annotation looks at the
    edits only, and a block's rows are found by binary search instead of a loop over blocks."""
    held = queries.memo(conn, "history.edit_rows", _EditRows)
    if len(held.seen) > queries.ROW_CACHE:
        held.__init__()
    missing = blocks[~member(blocks, held.seen)]
    if len(missing):
        new = [r for r in queries.refs_for_blocks(conn, missing.tolist()) if r[2] in _EDIT_ROLES]
        tapes = _event_tapes(conn, {r[1] for r in new})
        add = np.array([(*r, tapes.get(r[1], -1)) for r in new], dtype=np.int64).reshape(-1, 5)
        allr = np.concatenate([held.rows, add])
        held.rows = allr[np.lexsort((allr[:, 2], allr[:, 1], allr[:, 0]))]
        held.blocks = np.ascontiguousarray(held.rows[:, 0])
        held.seen = np.union1d(held.seen, missing)
    rows = held.rows
    lo = np.searchsorted(held.blocks, blocks, "left")
    n = np.searchsorted(held.blocks, blocks, "right") - lo
    R = rows[np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))]
    return R[member(R[:, 1], _uniq(R[R[:, 2] == schema.ROLE_EDIT_AFTER, 1]))]


def _event_tapes(conn, eids: set[int]) -> dict[int, int]:
    """``{event: its tape}`` for the events that exist, held per index version (the line
    annotation needs only the tapes, not the event rows)."""
    held = queries.memo(conn, "history.event_tapes", dict)
    missing = sorted(e for e in eids if e not in held)
    if missing:
        import apsw

        if len(held) > 2_000_000:
            held.clear()
        for i in range(0, len(missing), 20000):
            held.update(conn.execute("SELECT id, tape FROM events WHERE id IN carray(?)",
                                     (apsw.carray(queries._i64(missing[i:i + 20000])),)))
    return {e: held[e] for e in eids if e in held}


def _uniq(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (``sortedset.uniq``): an already sorted array is only deduplicated,
    another sorted by numpy's default sort (several times faster than the stable sort on
    unordered integers; equal integers are indistinguishable, so the result is the same)."""
    if len(a) < 2:
        return np.sort(a)
    s = a if bool((a[1:] >= a[:-1]).all()) else np.sort(a)
    return s[np.r_[True, s[1:] != s[:-1]]]


def _not_boilerplate(conn, uq: np.ndarray) -> np.ndarray:
    """Which of the sorted distinct hashes ``uq`` are not boilerplate, as ``queries.boilerplate``
    finds it (a boilerplate index key stands for the largest hash sharing it), without its
    hash-based uniques."""
    if not len(uq):
        return np.ones(0, bool)
    keys = queries.index_keys(uq)               # non-decreasing: uq is sorted
    bp = queries.memo(conn, "boilerplate", lambda: frozenset(
        r[0] for r in conn.execute("SELECT hash FROM boilerplate")))
    if not bp:
        return np.ones(len(uq), bool)
    last = np.r_[keys[1:] != keys[:-1], True]
    return ~(last & member(keys, _uniq(np.fromiter(bp, np.int64, len(bp)))))


def _posting_pairs(conn, uq: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Distinct ``column << 32 | block`` codes of the postings of ``uq[keep]`` (the index holds
    the top bits of each hash, ``queries.index_keys``: a key stands for the largest of the
    hashes that share it, as ``queries.postings`` answers)."""
    if not keep.any():
        return np.zeros(0, dtype=np.int64)
    keys = queries.index_keys(uq)
    want = _uniq(keys[keep])
    # from the postings a long-running process holds in memory when it does (the language
    # server: ``engram.index.postings``), else from SQLite; the same codes either way
    cache = postings._cache(conn)
    with cache.lock:
        own = not conn.in_transaction
        if own:
            conn.execute("BEGIN")
        try:
            cache.check(conn)
            codes, kid = postings._postings(conn, want, cache)
        finally:
            if own:
                conn.execute("COMMIT")
    # the column of each key: the largest hash with that key (found per key, then per code)
    col = (np.searchsorted(keys, want, "right") - 1)[kid]
    # sorted and distinct as the codes are: distinct keys have distinct columns
    return (col << 32) | (codes & _LO32)


def _tape_matrices(uq: np.ndarray, pairs: np.ndarray, by_key: np.ndarray,
                   after_rows: np.ndarray, other_rows: np.ndarray):
    """``(tapes, produced, other)``: the tapes that hold any of the hashes ``uq`` (sorted), and
    the (tape, hash) pairs, as ``tape index × len(uq) + hash index`` (sorted, distinct), where
    one of the tape's edits produced the hash / where the tape holds it otherwise (an edit whose
    before-text block also holds the hash only carried it over)."""
    # ``by_key``: the pairs by block (``_block_roles``); the joined rows end in sets, so the
    # order among a block's columns does not matter
    by_blk, by_col = by_key >> 32, by_key & _LO32

    def join(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, column) for every row whose block is in a pair with that column."""
        lo = np.searchsorted(by_blk, blocks, "left")
        n = np.searchsorted(by_blk, blocks, "right") - lo
        rows = np.repeat(np.arange(len(blocks)), n)
        idx = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
        return rows, by_col[idx]

    a_row, a_col = join(after_rows[:, 0])
    o_row, o_col = join(other_rows[:, 0])
    a_tape, o_tape = after_rows[a_row, 1], other_rows[o_row, 1]
    # carried over: the edit's before-text block holds the hash too. Both joins come out sorted
    # by (row, column) (rows in order, a block's columns sorted): a merge-friendly membership
    b_row, b_col = join(after_rows[:, 2])   # before-text blocks (-1: none, joins nothing)
    carried = member((a_row << 32) | a_col, (b_row << 32) | b_col)
    tape_list = _uniq(np.concatenate([a_tape, o_tape])).tolist()
    tl = np.asarray(tape_list, dtype=np.int64)
    n_u = len(uq)
    prod = _uniq(np.searchsorted(tl, a_tape[~carried]) * n_u + a_col[~carried])
    other = _uniq(np.concatenate([np.searchsorted(tl, a_tape[carried]) * n_u + a_col[carried],
                                      np.searchsorted(tl, o_tape) * n_u + o_col]))
    return tape_list, prod, other


def _modes_needed(L: int, log, log_rows, own: np.ndarray) -> dict[str, np.ndarray]:
    """The lines ``_line_entries`` will judge by each mode of ``_best_tapes``: by fingerprints
    (the log does not give them), ``strict`` where the log does not show the line but its own
    fingerprints can judge it, ``context`` on the others."""
    if log is None:
        return {"context": np.ones(L, bool), "strict": np.zeros(L, bool)}
    by_log = _log_tapes(log[0], log_rows) >= 0
    strict = ~by_log & ~log[1] & own
    return {"context": ~by_log & ~strict, "strict": strict}


def _best_tapes(tape_list, trows, prod, other, inv, kl, per_line_total, need=None, readers=True,
                by_col=None):
    """``{"context" | "strict": (best tape per line, its score, whether it produced the line)}``.

    Per line: counts of k-grams starting in [L - ctx, L + ctx], and how many each tape holds;
    also with no context (``strict``: the k-grams starting on the line itself). Producers first
    (latest tape wins ties), then any tape, on lines no producer reached ``BLAME_MIN``. Computed
    on the (tape, line) pairs that have a k-gram (sparse: a file's lines meet few of the tapes).
    A line's score is found / total with the same total for every tape, so the best tape is the
    one that holds the most of its k-grams. ``need``: per mode, the lines whose answer is used
    (every line when not given); the others' answers are not computed (they may be anything).
    ``readers=False``: producers only (no second pass; a line no producer won keeps the best
    producer's score below ``BLAME_MIN``, or -1). ``by_col``: ``argsort(inv, kind="stable")``
    when the caller has it (``_unique_inverse``)."""
    L = len(per_line_total)
    n_t = len(tape_list)
    totals = {"context": _around(per_line_total, L), "strict": per_line_total}
    best = {m: (np.full(L, -1, dtype=np.int64), np.zeros(L), np.zeros(L, dtype=bool))
            for m in ("context", "strict")}
    if not n_t:
        return best
    recency = [_time_rank(trows[t]) for t in tape_list]
    order = sorted(range(n_t), key=recency.__getitem__, reverse=True)  # latest first
    rank = np.empty(n_t, dtype=np.int64)
    rank[order] = np.arange(n_t)
    tapes = np.asarray(tape_list, dtype=np.int64)[order]  # by rank
    n_u = int(inv.max()) + 1 if len(inv) else 1
    if by_col is None:
        by_col = np.argsort(inv, kind="stable")
    # each column's k-grams: by_col[col_lo[c]:col_lo[c] + col_n[c]]
    col_n = np.bincount(inv, minlength=n_u)
    col_lo = np.cumsum(col_n) - col_n
    if need is None:
        need = {m: np.ones(L, bool) for m in ("context", "strict")}
    found1 = {}
    for pass_prod in (True, False) if readers else (True,):
        # only the k-grams that can score a line a mode still has to judge: a line a producer
        # already won is not judged again by the second pass
        wants = {}
        for mode in ("context", "strict"):
            want = need[mode] & ~best[mode][2] if not pass_prod else need[mode]
            if want.any() and mode == "context":
                want = np.convolve(want, np.ones(2 * BLAME_CONTEXT + 1), mode="same")[:L] > 0 \
                    if L > 2 * BLAME_CONTEXT else np.ones(L, bool)
            wants[mode] = want
        if pass_prod:
            pairs = prod
        else:
            # the pairs of hashes none of whose k-grams is on such a line are left out first
            col_ok = np.zeros(n_u, bool)
            col_ok[inv[(wants["context"] | wants["strict"])[kl]]] = True
            pairs = uniq(np.concatenate([prod[col_ok[prod % n_u]], other[col_ok[other % n_u]]]))
        t_idx, c_idx = pairs // n_u, pairs % n_u
        lo, n = col_lo[c_idx], col_n[c_idx]
        ks = by_col[np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))]
        k_rank, k_line = np.repeat(rank[t_idx], n), kl[ks]
        for mode in ("context", "strict"):
            want = wants[mode]
            if not want.any():
                continue
            sel = want[k_line]
            own = _counted(k_rank[sel] * L + k_line[sel])
            code, found = own if mode == "strict" else _spread(*own, L)
            r, line = code // L, code % L
            key = np.full(L, -1, dtype=np.int64)  # most k-grams, then the lowest rank
            np.maximum.at(key, line, found.astype(np.int64) * (n_t + 1) + (n_t - r))
            has = key >= 0
            f = np.where(has, key // (n_t + 1), 0)
            b_tape, b_conf, b_prod = best[mode]
            if pass_prod:
                win = has
                found1[mode] = f
            else:
                win = has & ~b_prod & (f > found1[mode])
            tot = totals[mode]
            b_tape[win] = tapes[n_t - key[win] % (n_t + 1)]
            b_conf[win] = f[win] / tot[win]
            if pass_prod:
                b_prod |= win & (b_conf >= BLAME_MIN)
    return best


def _around(x: np.ndarray, L: int) -> np.ndarray:
    """Sum of ``x`` over [L - ctx, L + ctx] for each line (``convolve(mode="same")`` gives
    ``len(win)`` values, not ``L``, on a file shorter than the window)."""
    return np.convolve(x, np.ones(2 * BLAME_CONTEXT + 1), mode="full")[BLAME_CONTEXT:BLAME_CONTEXT + L]


def _unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)`` by a stable sort (numpy's hash-based unique is
    slower on hashes, see ``engram.sortedset``), and that sort's order, which is also
    ``argsort(inverse, kind="stable")`` (equal values keep their order either way)."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    first = np.r_[True, s[1:] != s[:-1]] if len(s) else np.zeros(0, dtype=bool)
    inv = np.empty(len(a), dtype=np.int64)
    inv[order] = np.cumsum(first) - 1
    return s[first], inv, order


def _counted(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_counts=True)`` by a sort."""
    s = np.sort(a)   # equal integers are indistinguishable: no need for a stable sort
    if not len(s):
        return s, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    return s[starts], np.diff(np.r_[starts, len(s)])


def _spread(code: np.ndarray, count: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray]:
    """``(row * L + line, count)`` pairs summed over [line - ctx, line + ctx] of each line
    (``code`` sorted and distinct, as ``_counted`` gives it)."""
    if not len(code):
        return code, count
    line = code % L
    if int(code.max()) + BLAME_CONTEXT < (1 << 40) and int(count.max()) < (1 << 22):
        # each shifted code with its weight in the low bits: one sorted run per shift (the codes
        # are sorted), merged by the stable sort (timsort finds the runs: ~2x faster than a
        # sort of the values interleaved); the sums per value do not depend on the order
        # among equal values
        runs = []
        for d in range(-BLAME_CONTEXT, BLAME_CONTEXT + 1):
            ok = (line >= -d) & (line < L - d)
            runs.append(((code[ok] + d) << 22) | count[ok])
        packed = np.sort(np.concatenate(runs), kind="stable")
        values, weights = packed >> 22, packed & ((1 << 22) - 1)
    else:
        off = np.arange(-BLAME_CONTEXT, BLAME_CONTEXT + 1)
        lines = line[:, None] + off
        ok = (lines >= 0) & (lines < L)
        values = (((code // L) * L)[:, None] + lines)[ok]
        weights = np.broadcast_to(count[:, None], lines.shape)[ok]
        order = np.argsort(values, kind="stable")
        values, weights = values[order], weights[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return values[starts], np.add.reduceat(weights, starts)


def _line_entries(L: int, best, own: np.ndarray, log, log_rows, trows) -> tuple[list[dict], list[int]]:
    """``(one entry per line, its tape or -1)``: the log's edit where it shows the line, else the
    best tape by fingerprints (``strict`` on a line the log does not show but whose own
    fingerprints can judge it, ``context`` otherwise). The choices are made on arrays, the
    entries built from plain lists."""
    own_l = own.tolist()
    if log is None:
        strict = np.zeros(L, bool)
        log_tape = [None] * L
    else:
        strict = ~log[1] & own
        log_tape = [log_rows[e].tape if e in log_rows else None for e in log[0].tolist()]
    b_tape = np.where(strict, best["strict"][0], best["context"][0]).tolist()
    b_conf = np.where(strict, best["strict"][1], best["context"][1]).tolist()
    b_prod = np.where(strict, best["strict"][2], best["context"][2]).tolist()
    tid = {t: r.tape_id for t, r in trows.items()}
    rounded = {c: round(c, ROUND) for c in set(b_conf)}   # few distinct scores: round each once
    out_lines = []
    line_tapes = []
    for i in range(L):
        t = log_tape[i]
        if t is not None:
            entry = {"line": i + 1, "tape_id": tid[t], "confidence": 1.0, "via": "log",
                     "produced": True}
        else:
            t, c = b_tape[i], b_conf[i]
            if t < 0 or c < BLAME_MIN:
                entry = {"line": i + 1, "tape_id": None, "confidence": rounded[c], "via": None}
                t = -1
            else:
                entry = {"line": i + 1, "tape_id": tid[t], "confidence": rounded[c],
                         "via": "direct", "produced": b_prod[i]}
                if not own_l[i]:
                    entry["inferred"] = True   # no fingerprint starts on this line: its neighbours decide
        line_tapes.append(t)
        out_lines.append(entry)
    return out_lines, line_tapes


def _add_sessions(result: dict, out_lines: list[dict], line_tapes: list[int], trows) -> None:
    """``result["sessions"]``: each session some line is attributed to, with its line count."""
    per_tape: dict[int, int] = defaultdict(int)     # a line's tape_id is its tape's (-1: none)
    for t in line_tapes:
        per_tape[t] += 1
    used = {trows[t].tape_id: trows[t] for t in per_tape if t >= 0}
    count = {trows[t].tape_id: n for t, n in per_tape.items() if t >= 0}
    for tid, t in sorted(used.items()):
        n = count[tid]
        if n == 0:
            continue
        result["sessions"][tid] = {"harness": t.harness, "session": t.session,
                                   "tier": t.tier or "agent", "label": t.label, "model": t.model,
                                   "first_t": t.first_t, "last_t": t.last_t, "lines": n}


def _log_owners(conn, rel: str, path: str, text: str, n_lines: int
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(edit event that wrote each line, 0 for none; whether the line is where the log left
    it)`` from blame through the log of the file's logged edits (``location.blame`` of the file as
    the log leaves it, with today's lines re-anchored on it). The logged file (its absolute path,
    else a repo-relative path sharing two or more trailing components) whose history attributes
    the most lines wins; None when there is none, or two attribute equally many."""
    from engram.query import explain, location

    paths = explain.edited_paths(conn, rel, path, whole=True)
    if not paths:  # no logged edit of the file: nothing to hash
        return None
    now = store.line_hashes(text)[:n_lines]
    trivial = np.flatnonzero(now == 0)
    now_x = store.exact_hashes(text)[:n_lines].astype(np.int64) if len(trivial) else None
    found = []
    for r, f in paths:
        where = location.reanchor(conn, r, f, now)
        if where is None:
            continue
        # a trivial line (blank, ``)``, ``# ok``: its line hash is 0) is re-anchored by the
        # offset of its neighbours; it is where the log left it only when its exact text is too
        if now_x is not None:
            at = trivial[where[trivial] > 0]
            same = location.log_text(conn, r, f, exact=True)[where[at] - 1] == now_x[at]
            where = where.copy()
            where[at[~same]] = 0
        got = location.blame_mapped(conn, r, f, where) or {}
        owners = np.zeros(n_lines, dtype=np.int64)
        owners[np.fromiter(got, np.int64, len(got))] = np.fromiter(
            (e or 0 for e in got.values()), np.int64, len(got))
        found.append((int((owners > 0).sum()), owners, where > 0))
    found.sort(key=lambda x: -x[0])
    if not found or not found[0][0] or (len(found) > 1 and found[0][0] == found[1][0]):
        return None
    return found[0][1], found[0][2]


def _time_rank(t: queries.TapeRow) -> tuple:
    return (t.last_t or "", t.tape_id)


def _runs(lines: list[dict], line_tapes: list[int]) -> list[dict]:
    """Consecutive lines of one session (or of none) as ``{start, end, tape_id, confidence}``,
    the largest confidence of the run's lines; found on arrays (one tape per line)."""
    if not lines:
        return []
    t = np.asarray(line_tapes, dtype=np.int64)
    conf = np.fromiter((ln["confidence"] for ln in lines), np.float64, len(lines))
    starts = np.r_[0, np.flatnonzero(t[1:] != t[:-1]) + 1]
    ends = np.r_[starts[1:], len(lines)] - 1
    best = np.maximum.reduceat(conf, starts).tolist()
    return [{"start": lines[a]["line"], "end": lines[b]["line"], "tape_id": lines[a]["tape_id"],
             "confidence": c} for a, b, c in zip(starts.tolist(), ends.tolist(), best, strict=True)]


def _earlier(conn, result, erows, trows) -> None:
    """Sessions reached by the lineage walk from each attributed session's producing edits."""
    by_tape_id = {t.tape_id: t.id for t in trows.values()}
    seeds: dict[int, float] = {}
    attributed = {by_tape_id[tid] for tid in result["sessions"] if tid in by_tape_id}
    # the producing edit events of the attributed sessions
    for eid, r in erows.items():
        if r.tape in attributed and r.kind == schema.kind_code("code.edit"):
            seeds[eid] = 1.0
    if not seeds:
        return
    w = walk.walk(conn, seeds, min_confidence=0.5)
    earlier: dict[str, dict] = {}
    ev = queries.events(conn, w["reached"])
    tr = queries.tapes(conn, {r.tape for r in ev.values()})
    for eid, info in w["reached"].items():
        r = ev.get(eid)
        if r is None:
            continue
        t = tr[r.tape]
        if t.tape_id in result["sessions"] or t.tape_id in earlier:
            continue
        earlier[t.tape_id] = {"harness": t.harness, "session": t.session, "tier": t.tier or "agent",
                              "label": t.label, "last_t": t.last_t, "via": info["via"],
                              "confidence": info["confidence"]}
    result["earlier"] = dict(sorted(earlier.items(), key=lambda kv: (kv[1]["last_t"] or "", kv[0])))
    result["truncated"] = w["truncated"]


