"""The array steps of ``engram blame`` / the line annotation (``engram/query/history.py``) against
plain-Python definitions of what they compute: the ±2-line context sums, the unique with its
inverse and sort order, and the (tape, hash) pairs an edit produced or only carried over."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.query import history

CTX = history.BLAME_CONTEXT


def _spread_reference(code, count, L):
    sums = defaultdict(int)
    for c, n in zip(code.tolist(), count.tolist(), strict=True):
        row, line = divmod(c, L)
        for d in range(-CTX, CTX + 1):
            if 0 <= line + d < L:
                sums[row * L + line + d] += n
    keys = sorted(sums)
    return keys, [sums[k] for k in keys]


@settings(max_examples=200, deadline=None)
@given(L=st.integers(1, 40), rows=st.integers(1, 6), big=st.booleans(),
       data=st.data())
def test_spread_sums_each_line_window(L, rows, big, data):
    # ``big``: rows far apart, so the codes pass 2**40 and the other branch runs
    scale = (1 << 41) // L if big else 1
    cells = data.draw(st.sets(st.tuples(st.integers(0, rows - 1), st.integers(0, L - 1)), max_size=60))
    code = np.array(sorted(r * scale * L + line for r, line in cells), dtype=np.int64)
    count = np.array(data.draw(st.lists(st.integers(1, 9), min_size=len(code), max_size=len(code))),
                     dtype=np.int64)
    got_code, got_sum = history._spread(code, count, L)
    want_code, want_sum = _spread_reference(code, count, L)
    assert got_code.tolist() == want_code
    assert got_sum.tolist() == want_sum


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-5, 5), max_size=80))
def test_unique_inverse_and_its_order(values):
    a = np.array(values, dtype=np.int64)
    uq, inv, order = history._unique_inverse(a)
    assert uq.tolist() == sorted(set(values))
    assert uq[inv].tolist() == values
    assert order.tolist() == np.argsort(inv, kind="stable").tolist()


def _matrices_reference(n_u, pairs, after_rows, other_rows):
    """By the definitions: an edit (after block, tape, before block) produced hash ``c`` when its
    after block holds ``c`` and its before block does not; otherwise the tape holds it."""
    holds = defaultdict(set)     # block -> columns
    for p in pairs.tolist():
        holds[p & history._LO32].add(p >> 32)
    prod, other = set(), set()
    for blk, tape, before in after_rows.tolist():
        for c in holds[blk]:
            (other if before >= 0 and c in holds[before] else prod).add((tape, c))
    for blk, tape in other_rows.tolist():
        for c in holds[blk]:
            other.add((tape, c))
    tapes = sorted({t for t, _c in prod | other})
    at = {t: i for i, t in enumerate(tapes)}
    return tapes, sorted(at[t] * n_u + c for t, c in prod), sorted(at[t] * n_u + c for t, c in other)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_tape_matrices_split_produced_from_carried(data):
    n_u = data.draw(st.integers(1, 12))
    blocks = st.integers(0, 9)
    cells = data.draw(st.sets(st.tuples(st.integers(0, n_u - 1), blocks), max_size=50))
    pairs = np.array(sorted((c << 32) | b for c, b in cells), dtype=np.int64)
    after = data.draw(st.lists(st.tuples(blocks, st.integers(100, 104), st.integers(-1, 9)), max_size=12))
    other = data.draw(st.sets(st.tuples(blocks, st.integers(100, 106)), max_size=12))
    after_rows = np.array(after, dtype=np.int64).reshape(-1, 3)
    other_rows = np.array(sorted(other), dtype=np.int64).reshape(-1, 2)
    by_key = np.sort(((pairs & history._LO32) << 32) | (pairs >> 32))
    uq = np.arange(n_u, dtype=np.int64)
    tapes, prod, oth = history._tape_matrices(uq, pairs, by_key, after_rows, other_rows)
    assert (list(tapes), prod.tolist(), oth.tolist()) == _matrices_reference(n_u, pairs, after_rows, other_rows)


BASE = '''def tally_words_by_initial(lines):
    counts = {}
    for line in lines:
        for word in line.split():
            initial = word[0].lower()
            counts[initial] = counts.get(initial, 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return dict(ordered)


def longest_common_prefix_of(words):
    if not words:
        return ""
    shortest = min(words, key=len)
    for index, letter in enumerate(shortest):
        if any(word[index] != letter for word in words):
            return shortest[:index]
    return shortest
'''
CARRIED = BASE[BASE.index("def longest"):]
ADDED = '''

def histogram_as_text(counts, width=40):
    peak = max(counts.values(), default=1)
    rows = []
    for key, value in sorted(counts.items()):
        bar = "#" * max(1, round(width * value / peak))
        rows.append(f"{key:>3} {bar} {value}")
    return "\\n".join(rows)
'''

WRAPPED = "class Words:\n    @staticmethod\n" + "".join(
    "    " + ln if ln else ln for ln in (CARRIED + ADDED).replace("(counts,", "(self, counts,").splitlines(True))


def test_the_annotation_leaves_carried_lines_with_their_writer(world):
    """Session A writes a file of two functions; session B's edit wraps the second one in a
    class (every line re-indented: one changed hunk whose before- and after-text both hold its
    code) and adds a method. In a copy of the file at a path no session logged (so only
    fingerprints decide), the annotation gives the wrapped function to A (B's edit only carried
    it over) and the new method to B, exactly as blame does."""
    from engram.engine import Engine
    from engram_lsp.features.annotate import annotation

    world.session(session_id="aaaa0009-0000-0000-0000-000000000001").user(
        "write the word helpers").write("words.py", BASE).save()
    world.session(session_id="bbbb0009-0000-0000-0000-000000000002").user(
        "add a histogram").edit("words.py", CARRIED, WRAPPED).save()
    text = world.files["words.py"]
    copy = world.root / "elsewhere" / "copied.py"
    eng = Engine(world.root, semantic=False)
    try:
        eng.ingest(seal=True)
        got = eng.annotate(str(copy), text)
        sessions, runs = annotation(eng.blame(str(copy), text=text, earlier=False))
    finally:
        eng.close()
    assert got == {"lines": text.count("\n"), "sessions": sessions, "runs": runs}
    owner = {line: got["sessions"][r["session"]]["session"][:4]
             for r in got["runs"] for line in range(r["start"], r["end"] + 1)}
    lines = text.split("\n")
    assert owner.get(lines.index("        shortest = min(words, key=len)")) == "aaaa"
    assert owner.get(lines.index("            initial = word[0].lower()")) == "aaaa"
    assert owner.get(lines.index("        rows = []")) == "bbbb"
    assert {r["via"] for r in got["runs"]} == {"direct"}
