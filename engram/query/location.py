"""Where a span sat in its file at the time of each logged edit: location through time.

Edits carry exact file ranges (``before_range`` / ``after_range``, from the harness's structured
patch), so the span's position can be carried backwards from now through every logged edit of the
same file, latest first, as ``git blame`` carries lines back through commits. That gives explain's
line-level blame two things fingerprints alone cannot:

* the edits that touched the span, however small (a one-line change of a signature reproduces too
  few fingerprints of a 40-line function to be found by containment);
* the edits that did *not*: sibling functions (``split_before`` / ``split_after`` /
  ``split_when``) share most of their lines, and an edit to a sibling reproduces the span's lines
  at a consistent offset. If its after-range was elsewhere in the file at its time, it did not write
  this span.

The track is only as good as the log: edits made outside any logged session (by hand, by a
formatter, by a checkout) shift lines unseen. ``explain`` therefore uses a track only when the
strongest fingerprint evidence agrees with it (see ``explain._assign_ownership``).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import operator

import apsw
import numpy as np
import xxhash

from engram.index import queries, schema

SLACK = 2                  # lines between an edit's after-range and the tracked span that still touch it
MAX_FILE_EDITS = 20_000    # a file with more logged edits than this is not tracked
MAX_EDIT_DIFFS = 4096      # edits whose diffs ``blame`` keeps by id (as many as ``diff_map``'s cache)


@dataclasses.dataclass
class Track:
    at: dict[int, tuple[int, int]]
    """edit event id → ``(start, end)`` (1-based, inclusive; end < start when the span had no
    line there yet) of the span in the file just after that edit."""
    rows: dict[int, queries.EventRow]
    """every logged edit of the file, by event id."""

    def touched(self, slack: int = 0) -> list[int]:
        """Edits whose after-range overlapped the span at their time."""
        out = []
        for eid, (s, e) in self.at.items():
            r = self.rows[eid]
            if r.a_end >= r.a_start and r.a_end >= s - slack and r.a_start <= max(e, s) + slack:
                out.append(eid)
        return sorted(out)

    def off(self, eid: int, lines: list[int] | None) -> bool:
        """Did edit ``eid``'s aligned after-lines (file lines) miss the span's position?"""
        pos = self.at.get(eid)
        if pos is None or not lines:
            return False
        lo, hi = lines
        return hi < pos[0] - SLACK or lo > max(pos) + SLACK


def _back(p: int, regions: list[tuple[int, int, int, int]]) -> int:
    """Line ``p`` after one tool call's regions (applied together) → its line before them.
    A line inside a changed region maps to the same relative line of its before side."""
    shift = 0
    for b_s, b_e, a_s, a_e, _id in regions:
        na, nb = a_e - a_s + 1, b_e - b_s + 1
        if p > a_e:
            shift += nb - na
        elif p >= a_s:
            return b_s + min(p - a_s, max(nb - 1, 0))
    return p + shift


def span_track(conn: apsw.Connection, rel: str | None, file: str, start: int, end: int) -> Track | None:
    """The span's position through every logged ``code.edit`` of the absolute path ``file``
    (whose repo-relative path is ``rel``), carried back from its current lines ``start..end``.
    Edits are ordered by time, then tape, then offset; the regions of one tool call (same tape,
    same timestamp) have simultaneous coordinates and are applied together."""
    hist = history(conn, rel, file)
    if hist is None:
        return None
    ordered, rows, _b = hist
    at: dict[int, tuple[int, int]] = {}
    s, e = start, end
    for ids, regions in ordered:
        for i in ids:
            at[i] = (s, e)
        s, e = _back(s, regions), _back(e, regions)
    return Track(at=at, rows=rows)


def history(conn: apsw.Connection, rel: str | None, file: str):
    """``_history`` of the file, memoised per index version (blame, re-anchoring and the language
    server's read-ahead all ask for it)."""
    return queries.memo(conn, ("location.history", rel, file), lambda: _history(conn, rel, file))


def _history(conn: apsw.Connection, rel: str | None, file: str):
    """``([(edit ids of one call, its regions (b_s, b_e, a_s, a_e, id) sorted)], latest call
    first), rows by id)`` for a file, or None when it has no edits or too many."""
    if rel is not None:
        cur = conn.execute(f"SELECT {queries.EVENT_COLS} FROM events WHERE rel = ? AND file = ? AND kind = ?"
                           " LIMIT ?", (rel, file, schema.KIND_CODE["code.edit"], MAX_FILE_EDITS + 1))
    else:
        cur = conn.execute(f"SELECT {queries.EVENT_COLS} FROM events WHERE file = ? AND kind = ? LIMIT ?",
                           (file, schema.KIND_CODE["code.edit"], MAX_FILE_EDITS + 1))
    rows = list(map(queries.EventRow._make, cur))
    if not rows or len(rows) > MAX_FILE_EDITS:
        return None
    # (a file's first explain reads its whole history: hundreds of edits, most of them one
    # region of one call each, which take the short paths below)
    calls: dict[tuple, list[queries.EventRow]] = {}
    for r in rows:
        if r.a_start is None or r.a_end is None or r.b_start is None or r.b_end is None:
            continue
        call = calls.get((r.tape, r.t))
        if call is None:
            calls[(r.tape, r.t)] = [r]
        else:
            call.append(r)
    ordered = sorted(calls.values(), key=_call_key, reverse=True)
    groups = [((rs[0].id,), [(rs[0].b_start, rs[0].b_end, rs[0].a_start, rs[0].a_end, rs[0].id)])
              if len(rs) == 1 else
              (tuple(r.id for r in rs), sorted((r.b_start, r.b_end, r.a_start, r.a_end, r.id) for r in rs))
              for rs in ordered]
    return groups, {r.id: r for rs in ordered for r in rs}, _bounds(groups)


def _call_key(rs: list[queries.EventRow]) -> tuple:
    """A call's place in time: its first edit's ``(t, tape, offset)``."""
    if len(rs) == 1:
        r = rs[0]
        return (r.t or "", r.tape, r.ofs)
    return min((r.t or "", r.tape, r.ofs) for r in rs)


def _bounds(groups) -> list[tuple[int, int, int]]:
    """Per call: ``(first after-line, last after-line, lines it added)`` over its regions, so that
    ``blame`` passes a call entirely above or below the live lines in O(1)."""
    return [(regions[0][2], regions[0][3], (regions[0][1] - regions[0][0]) - (regions[0][3] - regions[0][2]))
            if len(regions) == 1 else
            (min(r[2] for r in regions), max(r[3] for r in regions),
             sum((r[1] - r[0] + 1) - (r[3] - r[2] + 1) for r in regions)) for _ids, regions in groups]


@functools.lru_cache(maxsize=4096)
def diff_map(after: bytes, before: bytes) -> tuple[list[bool], list[int]]:
    """For each line of an edit's after-text (int32 line hashes): did the edit write it (inserted
    or replaced in a line diff of before → after, as ``git blame`` sees it), and the before-text
    line it was carried over from (-1 for written lines)."""
    from engram.linediff import SequenceMatcher

    a = np.frombuffer(after, dtype=np.int32).tolist()
    b = np.frombuffer(before, dtype=np.int32).tolist()
    new = [True] * len(a)
    back = [-1] * len(a)
    if b:
        for tag, i1, _i2, j1, j2 in SequenceMatcher(None, b, a, autojunk=False).get_opcodes():
            if tag == "equal":
                new[j1:j2] = [False] * (j2 - j1)
                back[j1:j2] = range(i1, i1 + j2 - j1)
    return new, back


def blame(conn: apsw.Connection, rel: str | None, file: str, start: int, end: int,
          span: np.ndarray) -> dict[int, int | None] | None:
    """``git blame`` through the log for lines ``start..end`` of ``file`` (line hashes ``span``).

    Every span line is carried back through the logged edits of the file, latest first; the first
    edit found to have *written* it (an inserted or replaced line of that edit's own diff) owns it.
    Returns ``{span line index: edit event id}`` for the lines so attributed, ``None`` for a line
    whose writer's text differs from it (an unlogged change moved or altered it: the track is off
    there), and nothing for lines that no logged edit wrote (older than the log, or edited by hand).
    None when the file has no usable history."""
    hist = history(conn, rel, file)
    if hist is None:
        return None
    ordered, _rows, bounds = hist
    held = queries.memo(conn, "location.edit_diffs", dict)

    def edit_diffs(ids):
        """``_edit_diff`` of each edit, memoised per index version by event id: the same few
        edits near a span are asked for by every explain around it, and looking them up by id
        saves hashing their line hashes again for ``diff_map``'s cache."""
        missing = [i for i in ids if i not in held]
        if missing:
            got = queries.edit_lines(conn, missing)
            if len(held) > MAX_EDIT_DIFFS:
                held.clear()
            held.update((i, _edit_diff(got.get(i))) for i in missing)
        return held

    return _carry_back(ordered, bounds, start, np.asarray(span, dtype=np.int64).tolist(),
                       edit_diffs)


def _edit_diff(el: queries.EditLines | None) -> tuple[list[int], list[bool], list[int]] | None:
    """``(after-text line hashes, diff_map's written and carried-from lines)`` of one edit, as
    plain lists; None for an edit whose lines are unknown."""
    if el is None:
        return None
    new, back = diff_map(*el.diff_keys())
    return el.after.tolist(), new, back


def _carry_back(ordered, bounds, start: int, span: list[int], edit_diffs) -> dict[int, int | None]:
    """``blame``'s walk over a file's calls (``_history``), with ``edit_diffs(ids)`` giving (at
    least) those edits' ``_edit_diff``.

    Plain Python over sorted lists rather than numpy: a call moves some live lines through a
    handful of regions, where a numpy operation (about a microsecond each on arrays this small)
    cost more than the work it did. ``pos`` stays sorted (edits keep line order; the lines are
    re-sorted after a call when they are not), so a region's lines are one slice found by
    bisection, and the lines between two regions move together: one slice each, shifted by what
    the regions above them added or removed."""
    owner: dict[int, int | None] = {}
    n = len(span)
    if not n:
        return owner
    idx = list(range(n))                              # live span lines ...
    pos = list(range(start, start + n))               # ... and their file lines then (sorted)
    g = 0  # shift not yet applied to ``pos`` (calls entirely above every live line)
    first, last = start, start + n - 1
    for (_ids, regions), (a_lo, a_hi, delta) in zip(ordered, bounds):
        if a_hi < first + g:                          # all above: one uniform shift
            g += delta
            continue
        if a_lo > last + g:                           # all below: nothing moves
            continue
        P = [p + g for p in pos] if g else pos
        g = 0
        ranges = []                                   # per region: its live lines P[lo:hi]
        simple = True                                 # ... one after the other (they always are
        end = 0                                       # in a well-formed patch)
        for r in regions:
            hi = bisect.bisect_right(P, r[3])
            lo = bisect.bisect_left(P, r[2], 0, hi)
            ranges.append((lo, hi))
            simple = simple and lo >= end
            end = max(end, hi)
        diffs = None
        carried: list[list[tuple[int, int]]] = []     # per region: (line, its before-line)
        for (b_s, _b_e, a_s, _a_e, eid), (lo, hi) in zip(regions, ranges):
            if lo >= hi:
                carried.append([])
                continue
            if diffs is None:  # the edits of the regions holding live lines (a call of a
                # whole session's edits can have hundreds of regions, most far from the span)
                diffs = edit_diffs([r[4] for r, (lo_, hi_) in zip(regions, ranges) if lo_ < hi_])
            carried.append(_region(P, idx, lo, hi, a_s, b_s, eid, diffs.get(eid), span, owner))
        if simple:
            pos, idx = _move_simple(P, idx, regions, ranges, carried)
        else:
            pos, idx = _move_general(P, idx, regions, ranges, carried)
        if not pos:
            break
        first, last = pos[0], pos[-1]
    return owner


def _region(P, idx, lo, hi, a_s, b_s, eid, diff, span, owner) -> list[tuple[int, int]]:
    """One region's live lines ``P[lo:hi]``: set ``owner`` for those its edit wrote (its own id
    when the text is the span's, else None) or lost track of (None); return ``(k, line)`` for those
    it carried over from its before-text. ``owner`` gets its keys in the order the numpy version
    gave them: the lines past the edit's text, then the written ones, then the untraceable ones."""
    if diff is None:
        for k in range(lo, hi):
            owner[idx[k]] = None
        return []
    after, new, back = diff
    cut = bisect.bisect_left(P, a_s + len(after), lo, hi)  # lines past the edit's text
    for k in range(cut, hi):
        owner[idx[k]] = None
    out = []
    lost = []
    for k in range(lo, cut):
        j = P[k] - a_s
        if new[j]:
            i = idx[k]
            owner[i] = eid if after[j] == span[i] else None
        elif back[j] >= 0:
            out.append((k, b_s + back[j]))
        else:
            lost.append(idx[k])
    for i in lost:
        owner[i] = None
    return out


def _move_simple(P, idx, regions, ranges, carried) -> tuple[list[int], list[int]]:
    """The live lines after a call whose regions' lines follow one another (``ranges``
    increasing and disjoint): the lines before each region keep the shift of those above them,
    a region's own lines go where its edit carried them from, the rest leave the track. Sorted
    (stably) by position; in the usual case they already are, checked at the seams."""
    pos: list[int] = []
    out: list[int] = []
    s = 0
    cur = 0
    ordered = True
    for (b_s, b_e, a_s, a_e, _eid), (lo, hi), moved in zip(regions, ranges, carried):
        if lo > cur:
            if pos and P[cur] + s < pos[-1]:
                ordered = False
            pos.extend([p + s for p in P[cur:lo]] if s else P[cur:lo])
            out.extend(idx[cur:lo])
        for k, p in moved:
            if pos and p < pos[-1]:
                ordered = False
            pos.append(p)
            out.append(idx[k])
        s += (b_e - b_s + 1) - (a_e - a_s + 1)
        cur = hi
    if cur < len(P):
        if pos and P[cur] + s < pos[-1]:
            ordered = False
        pos.extend([p + s for p in P[cur:]] if s else P[cur:])
        out.extend(idx[cur:])
    if ordered:
        return pos, out
    live = sorted(zip(pos, out), key=_first)         # stable, as numpy's argsort(kind="stable")
    return [p for p, _i in live], [i for _p, i in live]


def _move_general(P, idx, regions, ranges, carried) -> tuple[list[int], list[int]]:
    """``_move_simple`` for regions whose lines overlap (a malformed patch): line by line, each
    region applied in turn, as the numpy version did."""
    m = len(P)
    step = [0] * (m + 1)      # shift of the lines from here on (a line below a region moves)
    inside = [False] * m
    keep = [True] * m
    moved: dict[int, int] = {}
    for (b_s, b_e, a_s, a_e, _eid), (lo, hi), got in zip(regions, ranges, carried):
        step[hi] += (b_e - b_s + 1) - (a_e - a_s + 1)
        for k in range(lo, hi):
            keep[k] = False
            inside[k] = True
        for k, p in got:
            moved[k] = p
            keep[k] = True
    live = []
    s = 0
    for k in range(m):
        s += step[k]
        if keep[k]:
            live.append((P[k] + s if not inside[k] else moved.get(k, P[k]), idx[k]))
    live.sort(key=_first)                             # stable, as numpy's argsort(kind="stable")
    return [p for p, _i in live], [i for _p, i in live]


_first = operator.itemgetter(0)


# -- re-anchoring: the file as the log leaves it ---------------------------------------------------
#
# A change nobody logged (a hand edit, a formatter, a checkout) shifts the lines below it, and the
# log's ranges then point at other text: ``blame`` at today's line numbers lands beside the span.
# The log itself says what text its edits left at each line (replaying them in order), so today's
# file can be aligned with that text, as ``git blame`` aligns a working tree with the last commit,
# and blame asked at the span's line in the log's coordinates.


def log_text(conn: apsw.Connection, rel: str | None, file: str, exact: bool = False
             ) -> np.ndarray | None:
    """Line hashes (``store.line_hashes``; ``store.exact_hashes`` when ``exact``) of ``file`` as
    its logged edits leave it: every edit replayed in order (the calls' regions bottom-up, their
    ranges being simultaneous), each replacing its before-range by its after-text; ``-1`` for lines
    no logged edit ever showed (above the first edit of a file that existed before the log, and with
    ``exact`` the lines of edits indexed before exact hashes were kept). None without usable
    history. Memoised per index version (read-only: callers slice it, never write to it)."""
    return queries.memo(conn, ("location.log_text", rel, file, exact),
                  lambda: _log_text(conn, rel, file, exact))


def _log_text(conn: apsw.Connection, rel: str | None, file: str, exact: bool) -> np.ndarray | None:
    hist = history(conn, rel, file)
    if hist is None:
        return None
    ordered, _rows, _bounds = hist
    texts = queries.edit_lines(conn, [r[4] for _ids, regions in ordered for r in regions])
    return _replay(ordered, texts, exact)


def _replay(ordered, texts: dict, exact: bool) -> np.ndarray:
    """``_log_text``'s replay of a file's calls (``history``'s, latest first) over their edits'
    line hashes ``texts``, as one read-only int64 array. A list spliced in place: one splice per
    edit moves the lines below it once, where slicing and concatenating arrays copied the whole
    text per edit (a file of ~75 logged edits: 0.6 ms of numpy calls on arrays of a few hundred
    lines)."""
    text: list[int] = []
    for _ids, regions in reversed(ordered):                 # oldest call first
        for b_s, b_e, a_s, a_e, eid in reversed(regions):    # bottom-up: ranges stay valid
            n = max(a_e - a_s + 1, 0)                        # (a text's hashes end with the
            el = texts.get(eid)                              # empty string after its last \n)
            side = None if el is None else el.after_x if exact else el.after
            if side is not None and exact and len(side) != len(el.after):
                side = None
            after = side[:n].tolist() if side is not None else []
            if len(after) < n:
                after += [-1] * (n - len(after))
            lo = max(b_s - 1, 0)
            hi = max(b_e, lo)                                # an empty before-range inserts
            if lo > len(text):
                text += [-1] * (lo - len(text))
            text[lo:hi] = after
    out = np.array(text, dtype=np.int64)
    out.flags.writeable = False
    return out


def reanchor(conn: apsw.Connection, rel: str | None, file: str, now: np.ndarray) -> np.ndarray | None:
    """For each line of ``file``'s text today (its ``store.line_hashes``, ``now``): the line it
    matches in the file as the log leaves it (1-based), 0 where it matches none; None when the file
    has no usable history. Memoised per index version and text.

    The alignment is anchored, as a patience diff is: lines whose text occurs once in each version
    pair up, the longest chain of pairs in the same order on both sides is kept, and every other
    line maps by the offset of the anchor above or below it, when its text is the same there."""
    key = ("location.reanchor", rel, file, xxhash.xxh3_64_intdigest(now.tobytes()), len(now))

    def compute():
        logged = log_text(conn, rel, file)
        if logged is None:
            return None
        a = np.asarray(now, dtype=np.int64)
        out = np.zeros(len(a), dtype=np.int64)
        ua, ia, ca = np.unique(a, return_index=True, return_counts=True)
        ub, ib, cb = np.unique(logged, return_index=True, return_counts=True)
        once_a, once_b = ua[ca == 1], ub[cb == 1]
        common = np.intersect1d(once_a[once_a != 0], once_b[(once_b != 0) & (once_b != -1)])
        if not len(common):
            return out
        i = ia[np.searchsorted(ua, common)]
        j = ib[np.searchsorted(ub, common)]
        order = np.argsort(i, kind="stable")
        i, j = i[order], j[order]
        if (np.diff(j) > 0).all():   # nothing moved: every pair is in order (the usual case)
            return _by_anchors(a, logged, i, j, out)
        i, j = i.tolist(), j.tolist()
        # the longest chain increasing in both (patience sorting, O(n log n))
        tails: list[int] = []
        tail_at: list[int] = []
        prev = [-1] * len(j)
        for k, jj in enumerate(j):
            t = bisect.bisect_left(tails, jj)
            if t == len(tails):
                tails.append(jj)
                tail_at.append(k)
            else:
                tails[t] = jj
                tail_at[t] = k
            prev[k] = tail_at[t - 1] if t else -1
        chain = []
        k = tail_at[-1]
        while k >= 0:
            chain.append(k)
            k = prev[k]
        chain.reverse()
        return _by_anchors(a, logged, np.array([i[k] for k in chain], dtype=np.int64),
                           np.array([j[k] for k in chain], dtype=np.int64), out)

    return queries.memo(conn, key, compute)


def blame_mapped(conn: apsw.Connection, rel: str | None, file: str, mapped: np.ndarray
                 ) -> dict[int, int | None] | None:
    """``blame`` of lines re-anchored on the file as the log leaves it: ``mapped[i]`` is the
    logged line (1-based; 0 for none, as ``reanchor`` gives) of line ``i``. Returns ``{i: edit
    event id or None}`` for the mapped lines ``blame`` attributes; None without usable history."""
    kept = np.flatnonzero(mapped > 0)
    logged = log_text(conn, rel, file)
    if logged is None or not len(kept):
        return None
    lo, hi = int(mapped[kept].min()), int(mapped[kept].max())
    # the walk depends on the log and the logged lines asked for, not on today's text: held per
    # index version, an edited buffer of the same file is blamed again without it
    got = queries.memo(conn, ("location.blame_mapped", rel, file, lo, hi),
                       lambda: blame(conn, rel, file, lo, hi, logged[lo - 1:hi]))
    if got is None:
        return None
    at = mapped.tolist()   # plain ints: one numpy scalar per line was most of this call
    return {i: got[at[i] - lo] for i in kept.tolist() if at[i] - lo in got}


def _by_anchors(a: np.ndarray, logged: np.ndarray, ai: np.ndarray, aj: np.ndarray,
                out: np.ndarray) -> np.ndarray:
    """Every line of ``a``: the offset of the anchor ``(ai, aj)`` above it, else of the one below
    it, where the text there is the same (``out``: 1-based lines of ``logged``, 0 for none)."""
    lines = np.arange(len(a))
    k = np.searchsorted(ai, lines, "right") - 1
    for pick in (np.maximum(k, 0), np.minimum(k + 1, len(ai) - 1)):
        cand = lines + (aj[pick] - ai[pick])
        ok = (out == 0) & (cand >= 0) & (cand < len(logged))
        ok[ok] = logged[cand[ok]] == a[ok]
        out[ok] = cand[ok] + 1
    return out
