"""Commit → sessions: the lines a commit adds, attributed by the rules of ``engram blame``'s
fingerprint step, at the time of the commit.

For each file a commit changes, the lines it adds (first-parent diff, blank lines not counted)
and ``diff.CONTEXT`` unchanged lines around each hunk are cut into k-grams (every k-gram, not
only the winnowed ones, as ``engram trace`` looks text up). A k-gram counts for a session when
one of its edits *produced* it (in the edit's after-text, not in its before-text: lines an edit
only carried over belong to whoever wrote them), and only sessions that began before the commit
was made count (a session cannot have written a commit older than itself). Each added line goes
to the session holding the largest share of the k-grams that cover it, if that share reaches
``history.BLAME_MIN`` (ties: the session that ended last); other lines are hand-written.
``engram blame``'s first step (re-anchoring on the file's logged edits) is not used here: it
reads the file's whole logged history and took ~0.5 s a commit on the bench corpus, against
~5 ms for this one index lookup shared by every commit attributed in one call.

An edit *writes* the lines its own line diff (before → after) marks inserted or replaced; lines
it kept it only carried. A line the commit both deletes and adds in one file (moved: imports
sorted, a function moved) was carried by the commit and keeps the session that wrote it, as
``git blame -M`` keeps a moved line's commit.

``Engram-Session:`` trailers add their sessions (``via: "trailer"``) and mark the ones content
found too. The result per commit is the JSON object of ``engram log``, computed once per commit
and repository and cached in the index (``engram.commits.cache``).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict

import numpy as np

from engram import fingerprint
from engram.commits import cache, diff
from engram.commits.git import Git
from engram.fingerprint import winnow
from engram.index import queries, schema, store
from engram.query.history import BLAME_MIN

log = logging.getLogger(__name__)

VERSION = cache.ATTRIBUTION_VERSION  # bump it there when the rules change: cached rows are recomputed
MAX_BLAME_BYTES = 4 << 20   # review reads final files up to this size
STRAY_LINES = 2             # see _stray_lines
STRAY_SHARE = 0.2
EVIDENCE = 0.5              # share of the expected indexed k-grams a line must show to have a session


def commits(engine, git: Git, shas: list[str]) -> list[dict]:
    """The attribution of each commit of ``shas`` (in that order): from the cache, else computed
    (all missing commits' diffs in one git process and their k-grams in one index lookup)."""
    conn = engine.conn()
    repo = str(git.root)
    have = cache.load(conn, repo, shas, VERSION)
    todo = [s for s in dict.fromkeys(shas) if s not in have]
    if todo:
        tmax = cache.tapes_max(conn)
        diffs = diff.commit_diffs(git, todo)
        tapes = _TapeInfo(conn)
        owners = _line_owners(conn, [diffs[s] for s in todo if s in diffs], tapes)
        rows = []
        for sha in todo:
            d = diffs.get(sha)
            if d is None:
                continue
            obj = _attribute(d, owners.get(sha, {}), tapes)
            have[sha] = obj
            rows.append((sha, d.committed, obj))
        cache.store(conn, repo, rows, VERSION, tmax)
    return [have[s] for s in shas if s in have]


def _runs(f: diff.FileDiff) -> list[list[tuple[int, str, bool]]]:
    """The file's hunks as runs of consecutive new-file lines ``(line, text, added)``."""
    lines = sorted([(n, t, True) for n, t in f.added] + [(n, t, False) for n, t in f.context])
    runs: list[list[tuple[int, str, bool]]] = []
    for x in lines:
        if runs and runs[-1][-1][0] + 1 == x[0]:
            runs[-1].append(x)
        else:
            runs.append([x])
    return [r for r in runs if any(a and t.strip() for _n, t, a in r)]


def _line_owners(conn, ds: list[diff.CommitDiff], tapes: _TapeInfo) -> dict[str, dict]:
    """``{sha: {path: {line: (tape_id, rule)}}}`` for the added lines some session produced;
    ``rule``: ``"log"`` (the line's text is in one of the session's logged edits), ``"moved"``
    (see ``_moved``) or ``"fingerprint"`` (the session holds the largest share of the line's
    k-grams)."""
    k = fingerprint.DEFAULT_K
    runs = [(d, f, run) for d in ds for f in d.files if not f.binary for run in _runs(f)]
    if not runs:
        return {}
    # every run tokenised and line-hashed in one pass over their joined text: no token crosses
    # a line, so a run's tokens and line hashes are those of its own text
    big = "\n".join("\n".join(t for _n, t, _a in run) for _d, _f, run in runs)
    tok_h, tok_l = fingerprint.text_tokens(big)
    lh_all = store.line_hashes(big).tolist()
    xh_all = store.exact_hashes(big).tolist()
    pieces = []   # (commit, path, run, kgram hashes, first line, last line, line hashes, exact ones)
    starts = np.cumsum([0] + [len(run) for _d, _f, run in runs])
    cut = np.searchsorted(tok_l, starts.astype(tok_l.dtype)).tolist()   # each run's first token
    off = 0
    for r, (d, f, run) in enumerate(runs):
        n = len(run)
        a, b = cut[r], cut[r + 1]
        tl = np.asarray(tok_l[a:b], np.int64) - off
        # a run shorter than a k-gram (a moved import) has no k-grams; the exact-line rules
        # still apply to it
        kg = np.asarray(winnow._kgram_hashes(tok_h[a:b], k), np.int64)
        lh = lh_all[off:off + n]
        xh = [x if h else 0 for x, h in zip(xh_all[off:off + n], lh, strict=True)]
        pieces.append((d, f.path, run, kg, tl[:len(kg)], tl[k - 1:k - 1 + len(kg)], lh, xh))
        off += n
    hits = _producers(conn, _unique(np.concatenate([p[3] for p in pieces])))
    edit_tape = hits.edit_tape
    by_path = _path_edits(conn, {p[1] for p in pieces})
    for eds in by_path.values():
        edit_tape.update(eds)
    info = tapes.rows(set(edit_tape.values()))
    begun = _BegunArrays(info)
    lines_of = _edit_lines(conn, set(edit_tape))
    # per run: exact writers first, then the fingerprint share; then, per commit, a line whose
    # exact text an edit of the commit's own sessions carries goes to that session
    per_run = []
    recent_of: dict[tuple, set[int]] = {}
    for d, path, run, kg, first, last, lh, xh in pieces:
        allowed = begun.at(d.committed or "~")
        # edits the run's k-grams point at, and the file's logged edits by sessions still active
        # after the parent commit was made (a session that ended before it is in the parent)
        key = (path, d.parent_t)
        if key not in recent_of:
            recent_of[key] = {e for e, t in by_path.get(path, {}).items()
                              if d.parent_t is None or (info[t].last_t or "") > d.parent_t}
        pi, pe, pt, pp = hits.of(kg)
        ok = allowed[pt]
        edits = set(pe[ok].tolist())
        edits.update(e for e in recent_of[key] if allowed[edit_tape[e]])
        exact = _line_writers(run, xh, edits, lines_of, edit_tape, info, produced_only=True, exact=True)
        stripped = _line_writers(run, lh, edits, lines_of, edit_tape, info, produced_only=True)
        sel = ok & pp
        per_run.append([d, path, run, lh, edits, exact, stripped,
                        (kg, first, last, allowed, pi[sel], pt[sel])])
    own_sessions: dict[str, set[str]] = defaultdict(set)
    for d, _p, _r, _lh, _e, exact, stripped, _fp in per_run:
        own_sessions[d.sha] |= set(exact.values()) | set(stripped.values())
    row_of = {r.tape_id: t for t, r in info.items()}
    rank = begun.rank
    for item in per_run:
        d, path, run, _lh, _e, _x, _s, (kg, first, last, allowed, pi, pt) = item
        # by fingerprints, the commit's own sessions (those that wrote some of its lines exactly)
        # first: another session holding as much of a line's k-grams rarely wrote it here
        prefer = {row_of[x] for x in own_sessions[d.sha] if allowed[row_of[x]]}
        item[7] = _run_owners(run, kg, first, last, pi, pt, hits.found, info, rank, prefer)
    for d, _p, _r, _lh, _e, _x, _s, fp in per_run:
        if not own_sessions[d.sha]:
            own_sessions[d.sha] |= set(fp.values())
    out: dict[str, dict] = {}
    alt: dict[str, dict] = {}
    for d, path, run, lh, edits, exact, stripped, fp in per_run:
        mine = {row_of[x] for x in own_sessions[d.sha]}
        carried = _line_writers(run, lh, {e for e in edits if edit_tape[e] in mine},
                                lines_of, edit_tape, info, produced_only=False)
        owners = {**{n: (t, "fingerprint") for n, t in fp.items()},
                  **{n: (t, "log") for d_ in (stripped, carried, exact) for n, t in d_.items()},
                  **{n: (t, "moved") for n, t in _moved(d, path, run, lh, by_path, lines_of,
                                                         edit_tape, info).items()}}
        if owners:
            out.setdefault(d.sha, {}).setdefault(path, {}).update(owners)
            alt.setdefault(d.sha, {}).setdefault(path, {}).update(carried)
    for sha, files in out.items():
        _stray_lines(files, alt.get(sha, {}))
    return out


def _sorted_in(a: np.ndarray, sorted_b: np.ndarray) -> np.ndarray:
    """``np.isin(a, sorted_b)`` for a sorted ``sorted_b``, by bisection (no sort of either)."""
    if not len(sorted_b):
        return np.zeros(len(a), bool)
    return sorted_b[np.minimum(np.searchsorted(sorted_b, a), len(sorted_b) - 1)] == a


def _unique(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (by a sort: numpy 2's hashing ``np.unique`` is several times slower
    on these arrays)."""
    a = np.sort(a)
    return a[np.r_[True, a[1:] != a[:-1]]] if len(a) else a


class _BegunArrays:
    """Per tape row id: whether the session began by a given time (``at(when)``, a boolean array
    memoised per time), and its rank by (end, tape id) — later sessions rank higher."""

    def __init__(self, info):
        size = max(info, default=0) + 1
        self.first = np.full(size, "\uffff", dtype=object)
        keys = sorted(info, key=lambda t: (info[t].last_t or "", info[t].tape_id))
        self.rank = np.full(size, -1, np.int64)
        self.rank[np.asarray(keys, np.int64)] = np.arange(len(keys))
        for t, r in info.items():
            self.first[t] = r.first_t or ""
        self.first = self.first.astype(str)
        self.memo: dict[str, np.ndarray] = {}

    def at(self, when: str) -> np.ndarray:
        got = self.memo.get(when)
        if got is None:
            got = self.memo[when] = self.first <= when
        return got


class _Hits:
    """The indexed k-grams of every run and the logged edits whose after-text holds them, held
    sorted by hash for all runs at once: ``of(kgrams)`` gives a run's ``(k-gram index, edit,
    tape, produced)`` rows (produced: the edit's before-text does not hold the k-gram)."""

    def __init__(self, found, hashes, eids, tapes, prod, edit_tape):
        self.found, self.edit_tape = found, edit_tape
        order = np.lexsort((eids, hashes))
        hashes, self.eids, self.tapes, self.prod = hashes[order], eids[order], tapes[order], prod[order]
        if len(hashes):
            start = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])
        else:
            start = np.zeros(0, np.int64)
        self.keys = hashes[start]
        self.off = np.r_[start, len(hashes)].astype(np.int64)

    def of(self, kg: np.ndarray) -> tuple[np.ndarray, ...]:
        if not len(kg) or not len(self.keys):
            z = np.zeros(0, np.int64)
            return z, z, z, np.zeros(0, bool)
        idx = np.minimum(np.searchsorted(self.keys, kg), len(self.keys) - 1)
        hit = np.flatnonzero(self.keys[idx] == kg)
        lo, hi = self.off[idx[hit]], self.off[idx[hit] + 1]
        cnt = hi - lo
        ki = np.repeat(hit, cnt)
        pos = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
        return ki, self.eids[pos], self.tapes[pos], self.prod[pos]


def _producers(conn, uq: np.ndarray) -> _Hits:
    """The index's postings of the distinct k-gram hashes ``uq`` (sorted; boilerplate left
    out), joined to the logged edits whose after-text block holds them."""
    z = np.zeros(0, np.int64)
    if not len(uq):
        return _Hits(z, z, z, z, np.zeros(0, bool), {})
    keys = queries.index_keys(uq)              # non-decreasing: uq is sorted
    last = np.r_[keys[1:] != keys[:-1], True]  # a key stands for the largest hash sharing it
    # boilerplate left out as ``queries.boilerplate`` finds it (the hash a key stands for)
    bp = queries.memo(conn, "boilerplate", lambda: frozenset(
        r[0] for r in conn.execute("SELECT hash FROM boilerplate")))
    if bp:
        common = _sorted_in(keys, _unique(np.fromiter(bp, np.int64, len(bp)))) & last
        if common.any():
            uq = uq[~common]
            keys = keys[~common]
            last = np.r_[keys[1:] != keys[:-1], True]
    if not len(uq):
        return _Hits(z, z, z, z, np.zeros(0, bool), {})
    ukeys, uhash = keys[last], uq[last]
    # the distinct (key, block) pairs as sorted codes key·2³² + block
    codes = queries.key_block_codes(conn, ukeys)
    if not len(codes):
        return _Hits(z, z, z, z, np.zeros(0, bool), {})
    pk, pb = codes >> 32, codes & 0xFFFFFFFF
    ph = uhash[np.searchsorted(ukeys, pk)]
    found = _unique(ph)
    refs = [r for r in queries.refs_for_blocks(conn, set(pb.tolist()))
            if r[2] in (schema.ROLE_EDIT_AFTER, schema.ROLE_EDIT_BEFORE)]
    erows = queries.events(conn, {eid for _b, eid, _r, _l in refs})
    before_of = {eid: b for b, eid, role, _l in refs if role == schema.ROLE_EDIT_BEFORE}
    after = sorted((b, eid, erows[eid].tape, before_of.get(eid, -1)) for b, eid, role, _l in refs
                   if role == schema.ROLE_EDIT_AFTER and eid in erows)
    edit_tape = {e: r.tape for e, r in erows.items()}
    if not after:
        return _Hits(found, z, z, z, np.zeros(0, bool), edit_tape)
    ab, ae, at, abefore = (np.asarray(c, np.int64) for c in zip(*after, strict=True))
    lo, hi = np.searchsorted(ab, pb, "left"), np.searchsorted(ab, pb, "right")
    cnt = hi - lo
    pj = np.repeat(np.arange(len(pb)), cnt)
    pos = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
    # produced: the edit's before-text block does not hold the same k-gram
    bb = abefore[pos]
    prod = (bb < 0) | ~_sorted_in((pk[pj] << 32) | np.where(bb < 0, 0, bb), codes)
    return _Hits(found, ph[pj], ae[pos], at[pos], prod, edit_tape)


def _path_edits(conn, paths: set[str]) -> dict[str, dict[int, int]]:
    """``{path: {edit event: tape}}``: the logged edits of a file whose logged path (or path
    relative to its session's directory) ends with the repository path's last two components
    (its name alone for a top-level file), as blame matches logged paths; ASCII case is ignored,
    as SQLite's ``LIKE`` does."""
    code = schema.kind_code("code.edit")
    by_tail: dict[str, dict[int, int]] = defaultdict(dict)
    for eid, tape, file, rel in conn.execute("SELECT id, tape, file, rel FROM events WHERE kind=?", (code,)):
        for p in {file, rel}:
            if not p:
                continue
            parts = _ascii_lower(p).split("/")
            by_tail[parts[-1]][eid] = tape
            if len(parts) > 1:
                by_tail["/".join(parts[-2:])][eid] = tape
    out: dict[str, dict[int, int]] = {}
    for p in sorted(paths):
        tail = _ascii_lower("/".join(p.split("/")[-2:]))
        out[p] = dict(by_tail.get(tail, {}))
    return out


def _ascii_lower(s: str) -> str:
    return s.translate(_LOWER)


_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _run_owners(run, kg, first, last, pi, pt, found, info, rank,
                prefer: set[int] = frozenset()) -> dict[int, str]:
    """Per added line of ``run``: the session with the largest share of the line's k-grams that
    the index holds (only winnowed k-grams are indexed, so a share of all k-grams would be
    ~1/w at best), when it reaches ``BLAME_MIN`` (ties: the session that ended last). A line
    whose k-grams the index does not hold at all (new text) has no session. ``pi, pt``: the
    (k-gram, tape) rows of the sessions begun before the commit that produced each k-gram."""
    n = len(run)
    if not len(pi) or not len(found):
        return {}
    # the index holds a winnowed ~2/(w+1) of a text's k-grams: a line the index knows shows about
    # that share of its covering k-grams; new text shows (almost) none, whatever a lone k-gram
    # shared by chance says
    end = np.minimum(last, n - 1) + 1
    known = _sorted_in(kg, found)
    c = np.zeros(n + 1, np.int64)
    np.add.at(c, first[known], 1)
    np.add.at(c, end[known], -1)
    total = np.cumsum(c)[:n]
    c = np.zeros(n + 1, np.int64)
    np.add.at(c, first, 1)
    np.add.at(c, end, -1)
    enough = total >= np.maximum(1, EVIDENCE * np.cumsum(c)[:n] * 2 / (fingerprint.DEFAULT_W + 1))
    # text typed by hand shares a k-gram with some session here and there; a session's text
    # (reformatted, moved) is known on most of its lines: a run most of whose added lines the
    # index does not know is left to the exact-line rules
    added = [j for j, (_l, t, a) in enumerate(run) if a and t.strip()]
    if sum(1 for j in added if enough[j]) * 2 < len(added):
        return {}
    # one row per session, latest first (a tie stays with the later session): the k-grams it
    # produced that cover each line
    pairs = _unique(pi * (1 << 32) + pt)
    pi, pt = pairs >> 32, pairs & 0xFFFFFFFF
    tapes = _unique(pt)
    tapes = tapes[np.argsort(-rank[tapes], kind="stable")]
    row = np.empty(int(tapes.max()) + 1, np.int64)
    row[tapes] = np.arange(len(tapes))
    cov = np.zeros((len(tapes), n + 1), np.int64)
    np.add.at(cov, (row[pt], first[pi]), 1)
    np.add.at(cov, (row[pt], end[pi]), -1)
    per = np.cumsum(cov, axis=1)[:, :n]
    pref = np.fromiter((t in prefer for t in tapes.tolist()), bool, len(tapes))
    owners: dict[int, str] = {}
    best_all = per.argmax(axis=0)
    best_pref = np.flatnonzero(pref)[per[pref].argmax(axis=0)] if pref.any() else None
    for j, (line, text, is_added) in enumerate(run):
        if not is_added or not text.strip() or total[j] == 0 or not enough[j]:
            continue
        for best in ((best_pref[j],) if best_pref is not None else ()) + (best_all[j],):
            cnt = per[best, j]
            if cnt > 0 and cnt / total[j] >= BLAME_MIN:
                owners[line] = info[int(tapes[best])].tape_id
                break
    return owners



def _moved(d, path, run, lh, by_path, lines_of, edit_tape, info) -> dict[int, str]:
    """Added lines the commit also deletes from the same file, same text (a moved line: imports
    sorted, a function moved up) were carried, not written, by the commit, as ``git blame -M``
    sees it: each goes to the latest session, begun before the commit, one of whose logged edits
    of this file produced that exact text (in its after-text, not its before-text); none found:
    the other rules decide."""
    f = next((x for x in d.files if x.path == path), None)
    if f is None or not f.removed:
        return {}
    gone = {t.rstrip() for t in f.removed}
    allowed = _Begun(info, d.committed or "~")
    mine = by_path.get(path, {})
    by_exact = lines_of[None][1]
    out: dict[int, str] = {}
    for j, (line, text, added) in enumerate(run):
        if not added or lh[j] == 0 or text.rstrip() not in gone:
            continue
        h = int(store.exact_hashes(text.rstrip())[0])
        best = _latest_tape(info, edit_tape, (
            e for e in by_exact.get(h, ())
            if e in mine and edit_tape[e] in allowed and h not in lines_of[e][3]))
        if best is not None:
            out[line] = best
    return out


def _stray_lines(files: dict[str, dict[int, tuple[str, str]]], carried: dict[str, dict[int, str]]) -> None:
    """A session with at most ``STRAY_LINES`` lines of a commit, under ``STRAY_SHARE`` of its agent
    lines, beside a session with more, is mostly a common line it once wrote that the commit's main
    session carried (``import os``, ``return None``): such a line goes to the session that carried
    it; one only fingerprints gave it, beside sessions whose lines their logged edits hold, goes to
    the one of those with the most lines (a stray k-gram match is the likelier story than a
    one-line contribution; the line is still known agent text)."""
    from collections import Counter as _C

    count = _C(t for lines in files.values() for t, _r in lines.values())
    total = sum(count.values())
    if len(count) < 2:
        return
    stray = {t for t, n in count.items() if n <= STRAY_LINES and n < STRAY_SHARE * total}
    if not stray or stray == set(count):
        return
    backed = _C(t for lines in files.values() for t, r in lines.values() if r in ("log", "moved") and t not in stray)
    main = min(backed, key=lambda t: (-backed[t], t)) if backed else None
    for path, lines in files.items():
        for n, (t, rule) in list(lines.items()):
            if t not in stray or rule == "moved":
                continue
            other = carried.get(path, {}).get(n)
            if other is not None and other not in stray:
                lines[n] = (other, "log")
            elif rule == "fingerprint" and main is not None:
                lines[n] = (main, "fingerprint")


class _Begun:
    """The sessions (tape row ids) that began at or before ``when``, as a membership test."""

    def __init__(self, info, when: str):
        self.info, self.when = info, when

    def __contains__(self, t: int) -> bool:
        r = self.info.get(t)
        return r is not None and (r.first_t or "") <= self.when



def _edit_lines(conn, eids: set[int]) -> dict[int, tuple[set[int], ...]]:
    """``{edit: (line hashes of its after-text, of its before-text, exact hashes of both)}``
    (``block_lines``; the exact ones keep indentation)."""
    import apsw

    blocks: dict[int, dict[int, int]] = {}
    il = sorted(eids)
    for i in range(0, len(il), 20000):
        for eid, b, role in conn.execute(
                "SELECT event, block, role FROM refs WHERE event IN carray(?) AND role IN (?, ?)",
                (apsw.carray(queries._i64(il[i:i + 20000])), schema.ROLE_EDIT_AFTER,
                 schema.ROLE_EDIT_BEFORE)):
            blocks.setdefault(eid, {})[role] = b
    bl = sorted({b for d in blocks.values() for b in d.values()})
    blob: dict[int, list[int]] = {}
    exact: dict[int, list[int]] = {}
    for i in range(0, len(bl), 20000):
        for b, h, x in conn.execute("SELECT block, hashes, exact FROM block_lines WHERE block IN carray(?)",
                                    (apsw.carray(queries._i64(bl[i:i + 20000])),)):
            blob[b] = np.frombuffer(h, dtype=np.int32).tolist()
            exact[b] = np.frombuffer(x, dtype=np.int32).tolist() if x is not None else []
    out: dict = {}
    by_hash: dict[int, list[int]] = defaultdict(list)
    by_exact: dict[int, list[int]] = defaultdict(list)
    for eid, d in sorted(blocks.items()):
        a, b = d.get(schema.ROLE_EDIT_AFTER), d.get(schema.ROLE_EDIT_BEFORE)
        out[eid] = _written(blob.get(a, []), exact.get(a, []), exact.get(b, []))
        for h in out[eid][0]:
            by_hash[h].append(eid)
        for h in out[eid][2]:
            by_exact[h].append(eid)
    out[None] = (by_hash, by_exact)
    return out


def _written(after: list[int], after_x: list[int], before_x: list[int]) -> tuple[set[int], ...]:
    """``(line hashes of the after-text, those of them the edit did not write, exact hashes of the
    after-text, those of them it did not write)``: an edit writes the after-lines its own line
    diff (before → after, exact lines, ``linediff``) marks inserted or replaced, as blame through
    the log decides; a line it kept (``equal``) it only carried, wherever it had it before."""
    a_set = set(after) - {0}
    x_set = set(after_x)
    if not before_x or len(after) != len(after_x):
        return a_set, set(), x_set, set()
    from engram.linediff import SequenceMatcher

    kept = [False] * len(after_x)
    for _i, j, n in SequenceMatcher(None, before_x, after_x, autojunk=False).get_matching_blocks():
        kept[j:j + n] = [True] * n
    wrote_s = {h for h, k in zip(after, kept, strict=True) if not k}
    wrote_x = {h for h, k in zip(after_x, kept, strict=True) if not k}
    return a_set, a_set - wrote_s, x_set, x_set - wrote_x


def _line_writers(run, lh, edits, lines_of, edit_tape, info, produced_only: bool,
                  exact: bool = False) -> dict[int, str]:
    """Added lines whose exact text (``store.line_hashes``: whitespace-stripped, trivial lines
    left out) one of ``edits`` wrote — in its after-text and, with ``produced_only``, not in its
    before-text — go to the latest session with such an edit (blame's "through the logged
    edits" for a line whose text is the edit's). ``lines_of`` holds, besides each edit's line
    sets, the inverted index ``lines_of[None]``: line hash → the edits whose after-text has it."""
    if not edits:
        return {}
    by_hash = lines_of[None][1 if exact else 0]
    out: dict[int, str] = {}
    for j, (line, _text, added) in enumerate(run):
        h = lh[j]
        if not added or h == 0:
            continue
        col = 3 if exact else 1
        best = _latest_tape(info, edit_tape, (
            e for e in by_hash.get(h, ())
            if e in edits and not (produced_only and h in lines_of[e][col])))
        if best is not None:
            out[line] = best
    return out


def _latest_tape(info, edit_tape, edits) -> str | None:
    """The tape id of the session that ended last (ties: the larger id) among ``edits``' tapes."""
    best = None
    for e in edits:
        t = info[edit_tape[e]]
        key = (t.last_t or "", t.tape_id)
        if best is None or key > best[0]:
            best = (key, t.tape_id)
    return None if best is None else best[1]


class _TapeInfo:
    """Session facts by tape id and by harness session id (memoised)."""

    def __init__(self, conn):
        self.conn = conn
        self.by_tape: dict[str, dict | None] = {}

    def tape(self, tape_id: str) -> dict | None:
        if tape_id not in self.by_tape:
            row = self.conn.execute(
                "SELECT tape_id, session, harness, model, label, tier, first_t, last_t FROM tapes"
                " WHERE tape_id=?", (tape_id,)).fetchone()
            self.by_tape[tape_id] = None if row is None else dict(zip(
                ("tape_id", "session", "harness", "model", "label", "tier", "first_t", "last_t"),
                row, strict=True))
        return self.by_tape[tape_id]

    def rows(self, ids) -> dict[int, queries.TapeRow]:
        return queries.tapes(self.conn, ids)

    def session(self, session_id: str) -> dict | None:
        row = self.conn.execute("SELECT tape_id FROM tapes WHERE session=? ORDER BY first_t, tape_id"
                                " LIMIT 1", (session_id,)).fetchone()
        return self.tape(row[0]) if row else None


def _attribute(d: diff.CommitDiff, owners: dict[str, dict[int, str]], tapes: _TapeInfo) -> dict:
    files = []
    per_session: Counter = Counter()
    by_log: Counter = Counter()
    degraded: list[str] = []
    added_total = agent_total = 0
    for f in d.files:
        nonblank = [(n, t) for n, t in f.added if t.strip()]
        entry = {"path": f.path, "status": f.status, "added_lines": len(nonblank),
                 "agent_lines": 0, "sessions": {}}
        if f.old_path and f.old_path != f.path:
            entry["old_path"] = f.old_path
        if f.binary:
            entry["binary"] = True
            entry["not_attributed"] = "binary or larger than " + diff.BIG_FILE
        added_total += len(nonblank)
        mine = owners.get(f.path, {})
        owned = Counter(mine[n][0] for n, _t in nonblank if n in mine)
        entry["sessions"] = dict(sorted(owned.items()))
        entry["agent_lines"] = sum(owned.values())
        if nonblank:
            entry["added_ranges"] = _ranges([n for n, _t in nonblank])
        if owned:
            entry["line_ranges"] = {tid: _ranges(sorted(n for n, _t in nonblank if mine.get(n, ("",))[0] == tid))
                                    for tid in sorted(owned)}
        for n, _t in nonblank:
            if n in mine:
                by_log[mine[n][0]] += mine[n][1] in ("log", "moved")
        per_session.update(owned)
        agent_total += entry["agent_lines"]
        files.append(entry)
    sessions = []
    for tid, n in sorted(per_session.items(), key=lambda kv: (-kv[1], kv[0])):
        info = tapes.tape(tid) or {"tape_id": tid}
        # confidence: the share of its lines whose exact text the session's logged edits hold
        sessions.append({**_public(info), "lines": n,
                         "via": "log" if by_log[tid] * 2 >= n else "fingerprint",
                         "confidence": round(by_log[tid] / n, 4)})
    _trailers(d, sessions, tapes)
    obj = {"sha": d.sha, "parents": d.parents, "subject": d.subject, "author": d.author,
           "email": d.email, "t": d.t, "committed": d.committed, "added_lines": added_total,
           "agent_lines": agent_total, "hand_lines": added_total - agent_total,
           "agent_share": round(agent_total / added_total, 4) if added_total else None,
           "sessions": sessions, "files": files}
    if d.trailers:
        obj["trailers"] = d.trailers
    if d.truncated:
        degraded.append(d.truncated)
    if degraded:
        obj["degraded"] = degraded
    return obj


def _ranges(lines: list[int]) -> str:
    """``[1, 2, 3, 7]`` → ``"1-3,7"``."""
    runs: list[list[int]] = []
    for n in lines:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _public(info: dict) -> dict:
    return {"session": info.get("session"), "tape_id": info.get("tape_id"),
            "harness": info.get("harness"), "model": info.get("model"), "label": info.get("label"),
            "tier": info.get("tier") or "agent"}


def _trailers(d: diff.CommitDiff, sessions: list[dict], tapes: _TapeInfo) -> None:
    """``Engram-Session:`` trailers: a session content found too is marked ``trailer: true``; one
    it did not is listed with ``via: "trailer"`` and no lines (its tape, when indexed)."""
    by_session = {s["session"]: s for s in sessions}
    for sid in d.trailers:
        if sid in by_session:
            by_session[sid]["trailer"] = True
            continue
        info = tapes.session(sid)
        s = {**(_public(info) if info else {"session": sid, "tape_id": None, "harness": None,
                                             "model": None, "label": None, "tier": None}),
             "lines": 0, "via": "trailer"}
        if info is None:
            s["indexed"] = False
        sessions.append(s)
        by_session[sid] = s
