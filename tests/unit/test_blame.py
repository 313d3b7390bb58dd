"""Line-level blame through the log: location through time (``engram/query/location.py``) and the
line diff that decides which lines an edit wrote (``explain._assign_ownership``).

Sessions are real Claude Code JSONL logs (``tests/claude_log.py``), ingested and explained through
the real CLI, as in ``test_lineage.py``.
"""

from __future__ import annotations

import pytest
from claude_log import World, run_json

from engram.cli import main
from engram.engine import Engine
from engram.query import location

A = "aaaa0002-0000-0000-0000-000000000001"
B = "bbbb0002-0000-0000-0000-000000000002"
C = "cccc0002-0000-0000-0000-000000000003"

SPLIT_BEFORE = '''def split_before(iterable, pred, maxsplit=-1):
    """Yield lists of items from *iterable*, where each list ends just before an item for
    which callable *pred* returns ``True``."""
    if maxsplit == 0:
        yield list(iterable)
        return
    buf = []
    it = iter(iterable)
    for item in it:
        if pred(item) and buf:
            yield buf
            if maxsplit == 1:
                yield [item] + list(it)
                return
            buf = []
            maxsplit -= 1
        buf.append(item)
    if buf:
        yield buf
'''
SPLIT_AFTER = '''def split_after(iterable, pred, maxsplit=-1):
    """Yield lists of items from *iterable*, where each list ends with an item where callable
    *pred* returns ``True``."""
    if maxsplit == 0:
        yield list(iterable)
        return
    buf = []
    it = iter(iterable)
    for item in it:
        buf.append(item)
        if pred(item) and buf:
            yield buf
            if maxsplit == 1:
                buf = list(it)
                if buf:
                    yield buf
                return
            buf = []
            maxsplit -= 1
    if buf:
        yield buf
'''
# a later session rewrites split_after's loop into the very lines split_before has
SPLIT_AFTER_V2 = SPLIT_AFTER.replace('''    for item in it:
        buf.append(item)
        if pred(item) and buf:
            yield buf
            if maxsplit == 1:
                buf = list(it)
                if buf:
                    yield buf
                return
            buf = []
            maxsplit -= 1
''', '''    for item in it:
        if pred(item) and buf:
            yield buf
            if maxsplit == 1:
                yield [item] + list(it)
                return
            buf = []
            maxsplit -= 1
        buf.append(item)
''')


HAND_HEADER = "# Copyright the authors.\n# Licensed under the MIT licence; see LICENSE.\n#\n# Edited by hand.\n"


def explain(capsys, w: World, rel: str, needle: str) -> dict:
    text = (w.root / rel).read_text()
    a = text[:text.index(needle)].count("\n") + 1
    b = a + needle.rstrip("\n").count("\n")
    return run_json(capsys, "explain", f"{rel}:{a}-{b}", "--brief")


def produced(res: dict) -> dict[str, float]:
    return {s["session"]: max([w.get("produced") or 0 for w in s["windows"]] + [0])
            for s in res["sessions"]}


def test_an_edit_to_a_sibling_does_not_take_the_lines_it_shares(world, capsys):
    w = world
    w.session(session_id=A).user("add the splitters").write(
        "split.py", "import itertools\n\n\n" + SPLIT_BEFORE + "\n\n" + SPLIT_AFTER).save()
    w.session(session_id=B).user("make split_after mirror split_before").edit(
        "split.py", SPLIT_AFTER, SPLIT_AFTER_V2).save()
    w.checkout()
    run_json(capsys, "ingest", "--seal")
    res = explain(capsys, w, "split.py", SPLIT_BEFORE)
    assert res["sessions"][0]["session"] == A
    # B's edit reproduces most of split_before at a consistent offset, but it was made 24 lines
    # further down the file: it wrote none of split_before
    assert produced(res).get(B, 0) == 0
    # ... while it does own the lines it rewrote in split_after (A wrote the rest)
    res = explain(capsys, w, "split.py", SPLIT_AFTER_V2)
    assert [s["session"] for s in res["sessions"][:2]] == [A, B]
    assert produced(res)[B] > 0


DOCUMENTED = SPLIT_BEFORE.replace('''``True``."""''', '''``True``.

        >>> list(split_before('OneTwo', lambda s: s.isupper()))
        [['O', 'n', 'e'], ['T', 'w', 'o']]

        >>> list(split_before(range(10), lambda n: n % 3 == 0))
        [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]

    At most *maxsplit* splits are done. If *maxsplit* is not specified or -1,
    then there is no limit on the number of splits:

        >>> list(split_before(range(10), lambda n: n % 3 == 0, maxsplit=2))
        [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    """''')


HAND_LINE = ("    At most *maxsplit* splits are done.", "    At most *maxsplit* splits are done (see #12).")


@pytest.mark.parametrize("by_hand, in_span", [("", None), (HAND_HEADER, None), (HAND_HEADER, HAND_LINE)],
                         ids=["logged", "after-an-unlogged-shift", "after-a-shift-and-a-changed-line"])
def test_a_one_line_change_is_found_by_its_location(world, capsys, by_hand, in_span):
    """After a hand edit above the function (no session logged it), blame through the log is
    asked at the function's place in the log's own text (``location.reanchor``) — line by line
    when a line of the function was changed by hand too."""
    w = world
    w.session(session_id=A).user("add split_before").write(
        "split.py", "import itertools\n\n\n" + DOCUMENTED).save()
    renamed = DOCUMENTED.replace("maxsplit=-1):", "maxsplit=-1, *, strict=False):")
    w.session(session_id=C).user("add a strict flag").edit("split.py", DOCUMENTED, renamed).save()
    w.checkout()
    if by_hand:
        (w.root / "split.py").write_text(by_hand + "import itertools\n\n\n" + renamed)
    if in_span:
        renamed = renamed.replace(*in_span)
        (w.root / "split.py").write_text(by_hand + "import itertools\n\n\n" + renamed)
    run_json(capsys, "ingest", "--seal")
    res = explain(capsys, w, "split.py", renamed)
    owners = produced(res)
    assert res["sessions"][0]["session"] == A
    # one changed line of 31 shares too few fingerprints with the function for containment to
    # find it; its after-range sat on the function at its time, and its line matches
    assert 0 < owners[C] < 0.1
    assert owners[A] > 0.8


def test_track_carries_positions_back_through_edits(world):
    w = world
    w.session(session_id=A).user("add the splitters").write(
        "split.py", "import itertools\n\n\n" + SPLIT_AFTER + "\n\n" + SPLIT_BEFORE).save()
    # five lines inserted above split_before, after it was written
    w.session(session_id=B).user("document the module").edit(
        "split.py", "import itertools\n", '"""Splitting."""\n\nimport itertools\nimport operator\n\n').save()
    w.checkout()
    assert main(["ingest", "--seal"]) == 0
    text = (w.root / "split.py").read_text()
    start = text[:text.index(SPLIT_BEFORE)].count("\n") + 1
    end = start + SPLIT_BEFORE.count("\n") - 1
    eng = Engine(w.root)
    try:
        conn = eng.conn()
        rows = list(conn.execute("SELECT e.id, e.file, e.rel, t.session, e.a_start FROM events e"
                                 " JOIN tapes t ON t.id = e.tape WHERE e.kind = 6"))
        file, rel = rows[0][1], rows[0][2]
        track = location.span_track(conn, rel, file, start, end)
        at = {sess: track.at[eid] for eid, _f, _r, sess, _a in rows}
    finally:
        eng.close()
    # now at start..end; before B's edit (4 lines added above it) it sat 4 lines higher
    assert at[B] == (start, end)
    assert at[A] == (start - 4, end - 4)
    assert text.splitlines()[start - 1].startswith("def split_before")


WINDOW = ("class Window:\n    def __init__(self, items):\n        self._items = list(items)\n\n"
          "    def __iter__(self):\n        return self\n\n"
          "    def __len__(self):\n        return len(self._items)\n")


def test_a_span_too_common_to_fingerprint_is_blamed_by_its_path(world, capsys, monkeypatch):
    from engram.index import store

    # on a real index "def __iter__(self): return self" sits in thousands of blocks: boilerplate,
    # so no fingerprint of it identifies anything; here every fingerprint in 2+ blocks is
    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)
    w = world
    w.session(session_id=A).user("add Window").write("pkg/window.py", WINDOW).save()
    w.session(session_id=B).user("what does Window do?").read("pkg/window.py").save()
    w.checkout()
    run_json(capsys, "ingest", "--seal")
    res = run_json(capsys, "explain", "pkg/window.py:5-6", "--brief")
    assert res["stats"]["matched"] == 0
    assert res["sessions"] and res["sessions"][0]["session"] == A
    assert produced(res)[A] == 1.0


def test_path_blame_checks_the_text(world, capsys):
    w = world
    w.session(session_id=A).user("add Window").write(
        "pkg/window.py", "class Window:\n    def __iter__(self):\n        return self\n").save()
    w.checkout()
    # the file was changed by hand afterwards: the logged history no longer matches these lines
    (w.root / "pkg" / "window.py").write_text("class Window:\n    def __len__(self):\n        return 0\n")
    run_json(capsys, "ingest", "--seal")
    res = run_json(capsys, "explain", "pkg/window.py:2-3", "--brief")
    assert all(s["session"] != A or produced(res)[A] == 0 for s in res["sessions"])


def test_path_blame_follows_a_span_that_an_unlogged_edit_shifted(world, capsys, monkeypatch):
    """A comment block typed above the code by hand (no session logged it) moves every line below
    it away from the log's ranges; blame finds the span where it sits in the file as the log
    leaves it (``location.reanchor``) and checks the text there."""
    from engram.index import store

    monkeypatch.setattr(store, "BOILERPLATE_MIN", 2)  # as above: no fingerprint identifies it
    w = world
    w.session(session_id=A).user("add Window").write("pkg/window.py", WINDOW).save()
    w.session(session_id=B).user("what does Window do?").read("pkg/window.py").save()
    w.checkout()
    (w.root / "pkg" / "window.py").write_text(HAND_HEADER + WINDOW)
    run_json(capsys, "ingest", "--seal")
    shift = HAND_HEADER.count("\n")
    res = run_json(capsys, "explain", f"pkg/window.py:{5 + shift}-{6 + shift}", "--brief")
    assert res["stats"]["matched"] == 0
    assert res["sessions"] and res["sessions"][0]["session"] == A
    assert produced(res)[A] == 1.0


def test_reanchor_maps_todays_lines_to_the_logs(world):
    w = world
    w.session(session_id=A).user("add the splitters").write(
        "split.py", "import itertools\n\n\n" + SPLIT_AFTER + "\n\n" + SPLIT_BEFORE).save()
    w.checkout()
    assert main(["ingest", "--seal"]) == 0
    logged = (w.root / "split.py").read_text()
    today = HAND_HEADER + logged.replace("    buf = []\n", "    buf = []  # by hand\n", 1)
    eng = Engine(w.root)
    try:
        from engram.index import store

        conn = eng.conn()
        file, rel = conn.execute("SELECT file, rel FROM events WHERE kind = 6").fetchone()
        where = location.reanchor(conn, rel, file, store.line_hashes(today))
        text = location.log_text(conn, rel, file)
    finally:
        eng.close()
    shift = HAND_HEADER.count("\n")
    n = logged.count("\n")
    assert (text[:n] == store.line_hashes(logged)[:n]).all()       # the log's own text
    assert (where[:shift] == 0).all()                              # the hand-typed header
    changed = today.splitlines().index("    buf = []  # by hand")
    assert where[changed] == 0                                     # the changed line
    moved = [i for i in range(shift, len(today.splitlines())) if i != changed]
    assert all(where[i] == i + 1 - shift for i in moved)           # the rest, 4 lines up


def test_line_hashes_count_letters_on_the_bytes_as_the_definition_does():
    """``store.line_hashes`` tests for trivial lines on the UTF-8 bytes at once; its values are
    those of the per-line definition (3+ ASCII letters or digits, xxh3 of the stripped line)."""
    import re
    from pathlib import Path

    import xxhash

    from engram.index import store

    def definition(text: str) -> list[int]:
        out = []
        for ln in text.split("\n"):
            s = ln.strip()
            h = 0
            if len(re.findall(r"[A-Za-z0-9]", s)) >= 3:
                h = xxhash.xxh3_64_intdigest(s.encode("utf-8", "surrogatepass")) >> 32
                h = (h - (1 << 32) if h >= (1 << 31) else h) or 1
            out.append(h)
        return out

    texts = ["", "\n", "a\nb", "  é ü ñ x\nabc\tdef", "ab1\n\r\n\u2028 xyz \u00a0", "\ud800abc def\n",
             "日本語 abc\n  ab\n", " a1b2 \x0c\n", "x" * 3, "if (a) {\n  return b;\n}\n"]
    texts += [p.read_text(encoding="utf-8") for p in sorted(Path(store.__file__).parent.glob("*.py"))]
    for text in texts:
        assert store.line_hashes(text).tolist() == definition(text), text[:40]


def _carry_back_numpy(ordered, bounds, start, span, edit_lines):
    """``location._carry_back`` as it was written first, on numpy arrays: the reference the plain
    Python version must agree with, keys of the result in the same order included."""
    import numpy as np

    span = np.asarray(span, dtype=np.int64)
    idx = np.arange(len(span))
    pos = np.arange(start, start + len(span), dtype=np.int64)
    owner = {}
    g = 0
    if not len(span):
        return owner
    first, last = start, start + len(span) - 1
    for (_ids, regions), (a_lo, a_hi, delta) in zip(ordered, bounds):
        if a_hi < first + g:
            g += delta
            continue
        if a_lo > last + g:
            continue
        P = pos + g
        g = 0
        shift = np.zeros(len(P), dtype=np.int64)
        moved = P.copy()
        keep = np.ones(len(P), dtype=bool)
        inside = np.zeros(len(P), dtype=bool)
        for b_s, b_e, a_s, a_e, eid in regions:
            shift[P > a_e] += (b_e - b_s + 1) - (a_e - a_s + 1)
            ins = np.flatnonzero((P >= a_s) & (P <= a_e))
            if not len(ins):
                continue
            el = edit_lines.get(eid)
            keep[ins] = False
            inside[ins] = True
            if el is None:
                owner.update((int(i), None) for i in idx[ins])
                continue
            after, new, back = el
            after, new, back = np.asarray(after), np.asarray(new, dtype=bool), np.asarray(back)
            j = P[ins] - a_s
            ok = j < len(after)
            for i in idx[ins[~ok]]:
                owner[int(i)] = None
            ins, j = ins[ok], j[ok]
            wrote = new[j]
            for i, jj in zip(idx[ins[wrote]].tolist(), j[wrote].tolist()):
                owner[i] = eid if int(after[jj]) == int(span[i]) else None
            carried = ~wrote & (back[j] >= 0)
            moved[ins[carried]] = b_s + back[j[carried]]
            keep[ins[carried]] = True
            for i in idx[ins[~wrote & (back[j] < 0)]]:
                owner[int(i)] = None
        moved[~inside] = P[~inside] + shift[~inside]
        idx, pos = idx[keep], moved[keep]
        if not len(idx):
            break
        order = np.argsort(pos, kind="stable")
        idx, pos = idx[order], pos[order]
        first, last = int(pos[0]), int(pos[-1])
    return owner


@pytest.mark.parametrize("seed", range(40))
def test_blame_carries_lines_as_the_numpy_version_did(seed):
    """Random histories, well-formed (regions one below the other) and not (overlapping regions,
    lines moved out of order, edits without line hashes, after-texts shorter than their range):
    ``_carry_back`` gives what its numpy original gave, in the same key order."""
    import random

    rnd = random.Random(seed)
    diffs = {}
    ordered = []
    eid = 0
    for _call in range(rnd.randint(1, 30)):
        regions = []
        line = rnd.randint(1, 20)
        for _r in range(rnd.randint(1, 4)):
            eid += 1
            if rnd.random() < 0.15:                    # malformed: anywhere, overlapping
                line = rnd.randint(1, 60)
            b_s, a_s = line, line + rnd.randint(-3, 3)
            b_e, a_e = b_s + rnd.randint(-1, 6), a_s + rnd.randint(-1, 8)
            regions.append((b_s, b_e, max(a_s, 1), a_e, eid))
            line = max(b_e, a_e) + rnd.randint(1, 8)
            n = max(a_e - a_s + 1, 0) - (rnd.random() < 0.1)
            if rnd.random() < 0.1:
                continue                               # an edit whose lines are unknown
            new = [rnd.random() < 0.5 for _ in range(max(n, 0))]
            back = [-1 if w or rnd.random() < 0.1 else rnd.randint(0, 10) for w in new]
            diffs[eid] = ([rnd.randint(1, 4) for _ in new], new, back)
        regions.sort()
        ordered.append((tuple(r[4] for r in regions), regions))
    bounds = location._bounds(ordered)
    for _span in range(5):
        start = rnd.randint(1, 50)
        span = [rnd.randint(1, 4) for _ in range(rnd.randint(0, 40))]
        want = _carry_back_numpy(ordered, bounds, start, span, diffs)
        got = location._carry_back(ordered, bounds, start, span, lambda ids: diffs)
        assert list(got.items()) == list(want.items())


CHECK = '''def check_path(self, value, param, ctx):
    """Fail unless *value* names an existing, readable file."""
    if not os.path.exists(value):
        self.fail(message, param, ctx)
    if not os.access(value, os.R_OK):
        raise PermissionError(value)
    return os.path.realpath(value)
'''


def test_short_lines_the_log_gives_an_edit_count_for_it(world, capsys):
    """Lines of at most two words identify no author when a diff of ours places them, but blame
    through the log uses the harness's own diff: an edit that only re-wrapped a call wrote them."""
    w = world
    w.session(session_id=A).user("add check_path").write("paths.py", "import os\n\n\n" + CHECK).save()
    wrapped = CHECK.replace("        self.fail(message, param, ctx)\n",
                            "        self.fail(\n            message,\n            param,\n"
                            "            ctx,\n        )\n")
    w.session(session_id=B).user("one argument per line").edit("paths.py", CHECK, wrapped).save()
    w.checkout()
    run_json(capsys, "ingest", "--seal")
    res = explain(capsys, w, "paths.py", wrapped)
    owners = produced(res)
    assert res["sessions"][0]["session"] == A and owners[A] > 0.5
    assert 0.2 < owners[B] < 0.5   # the five lines of the wrapped call (four of them short)


def test_shares_count_the_span_lines_only(world, capsys):
    """Each line of the span counts once (A's Write wrote its blank line too); the empty string
    after the span's last newline is not a line (it used to go to the owner of the last line)."""
    w = world
    body = ("def area(shape):\n    width, height = shape.bounds()\n\n"
            "    scale = shape.units.to_metres()\n    return width * height * scale\n")
    w.session(session_id=A).user("add area").write("geo.py", body).save()
    w.session(session_id=B).user("square the scale").edit(
        "geo.py", "    return width * height * scale\n", "    return width * height * scale ** 2\n").save()
    w.checkout()
    run_json(capsys, "ingest", "--seal")
    owners = produced(explain(capsys, w, "geo.py", w.files["geo.py"]))
    assert (owners[A], owners[B]) == (0.8, 0.2)
