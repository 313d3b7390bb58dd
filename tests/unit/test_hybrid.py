"""Hybrid retrieval with the real bundled model on CPU: semantic search by paraphrase, hybrid
explain (``via: "semantic"`` below fingerprint evidence), the no-spread rule, and the invariant that
without vectors (or without torch) explain is the fingerprint-only result byte for byte.

One small world (four sessions) is ingested and embedded once per module (~5 s on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from claude_log import World

from engram.embed import hybrid
from engram.embed import run as embed_run
from engram.embed.model import available
from engram.engine import Engine

pytestmark = pytest.mark.skipif(not available()[0], reason="embed extra not installed")

ROOT = Path(__file__).resolve().parents[2]

CHUNKED = '''def chunked(iterable, n, fillvalue=None):
    """Break *iterable* into groups of length *n*. When the length is not a multiple of
    *n*, the last group is padded with *fillvalue* so every group has the same size."""
    it = iter(iterable)
    while True:
        group = list(islice(it, n))
        if not group:
            return
        if len(group) < n:
            group += [fillvalue] * (n - len(group))
        yield group
'''
PROSE = ("About chunked: as I understand it, it splits the input into batches of a fixed size, "
         "and when the input does not divide evenly the trailing batch is topped up with a "
         "placeholder value so all batches are equally sized. No code change needed.")
OFF_TOPIC = [
    ("Set up the continuous integration pipeline to publish docker images whenever a release tag "
     "is pushed, and cache the pip downloads between runs."),
    ("The invoice page should show currency totals with two decimals and a thousands separator; "
     "the accountants complained about rounding in the quarterly report."),
]


def _strip(res: dict) -> str:
    res = json.loads(json.dumps(res))
    res["stats"].pop("elapsed_ms", None)
    return json.dumps(res, sort_keys=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hybrid")
    mp = pytest.MonkeyPatch()
    mp.setenv("ENGRAM_HOME", str(tmp / "engram-home"))
    mp.setenv("HOME", str(tmp / "home"))
    w = World(tmp)
    s = w.session(name="writer")
    s.user("Add a chunked helper to src/chunks.py that pads the last group.")
    s.write("src/chunks.py", "from itertools import islice\n\n\n" + CHUNKED)
    s.say("Added chunked to src/chunks.py; it pads the last group with fillvalue.")
    s.save()
    p = w.session(name="prose")
    p.user("Quick question about chunked, no need to open the code.")
    p.say(PROSE)
    p.save()
    for i, text in enumerate(OFF_TOPIC):
        o = w.session(name=f"other{i}")
        o.user("Next task, please.")
        o.say(text)
        o.save()
    w.checkout()
    eng = Engine(w.root)
    eng.ingest(seal=True)
    span = (str(w.root / "src/chunks.py"), 4, 14)
    before = eng.explain(*span)  # no vectors yet: fingerprint only
    summary = embed_run.embed_index(eng)
    yield {"world": w, "engine": eng, "span": span, "before": before, "embed": summary}
    eng.close()
    mp.undo()


def _session_of(eng: Engine, name_text: str) -> str:
    for t in eng.tapes():
        shown = json.dumps(eng.show(t["tape_id"]))
        if name_text in shown:
            return t["tape_id"]
    raise AssertionError(name_text)


def test_embed_index_summary(world):
    s = world["embed"]
    assert s["state"].startswith("on (all-MiniLM-L6-v2-384d, cpu")
    assert s["embedded"] > 0 and s["vectors"] == s["embedded"] and not s["errors"]
    assert Path(s["store"]).parent == world["engine"].index_path.parent / "vectors"
    st = world["engine"].status()["embedding"]
    assert st["vectors"] == s["vectors"] and st["model_id"] == "all-MiniLM-L6-v2-384d"
    assert st["state"].startswith("on (") and st["last_run"]["embedded"] == s["embedded"]


def test_semantic_search_finds_prose_by_paraphrase(world):
    eng = world["engine"]
    prose_tape = _session_of(eng, "trailing batch is topped up")
    res = eng.search("why is the last chunk filled with a default value to keep sizes equal",
                     limit=5)
    assert res["semantic"].startswith("on (")
    assert res["results"][0]["tape_id"] == prose_tape
    assert res["results"][0]["signals"]["semantic"] > 0.4
    again = eng.search("why is the last chunk filled with a default value to keep sizes equal",
                       limit=5)
    assert json.dumps(again["results"]) == json.dumps(res["results"])  # deterministic


def test_hybrid_explain_adds_semantic_session_below_fingerprints(world):
    eng = world["engine"]
    prose_tape = _session_of(eng, "trailing batch is topped up")
    res = eng.explain(*world["span"])
    vias = [s["via"] for s in res["sessions"]]
    assert vias[0] == "direct" and "semantic" in vias
    first_sem = vias.index("semantic")
    assert all(v == "semantic" for v in vias[first_sem:])  # ranked below all fingerprint evidence
    sem = [s for s in res["sessions"] if s["via"] == "semantic"]
    assert [s["tape_id"] for s in sem] == [prose_tape]  # off-topic sessions are not added
    s = sem[0]
    assert s["signals"]["fingerprint"] is None and s["signals"]["semantic"] >= hybrid.THRESHOLD
    assert s["windows"] and any("topped up" in (e.get("text") or "")
                                for e in s["windows"][0]["events"])
    # the fingerprint part is unchanged
    base = json.loads(json.dumps(world["before"]))
    fp = {**res, "sessions": [x for x in res["sessions"] if x["via"] != "semantic"]}
    assert json.dumps(fp["sessions"], sort_keys=True) == json.dumps(base["sessions"],
                                                                    sort_keys=True)
    assert res["stats"]["semantic_added"] == 1


def test_no_spread_adds_nothing(world, monkeypatch):
    eng = world["engine"]
    base = eng.explain(*world["span"])
    fake = [{"tape_id": t, "score": 0.9, "offset": 1, "offsets": [1]}
            for t in ("a" * 32, "b" * 32, "c" * 32)]
    monkeypatch.setattr(hybrid, "candidates", lambda *a, **k: fake)
    res = eng.explain(*world["span"])
    assert res["stats"]["semantic_added"] == 0
    assert [s["tape_id"] for s in res["sessions"]] == [
        s["tape_id"] for s in base["sessions"] if s["via"] != "semantic"]


def test_without_vectors_or_torch_explain_is_fingerprint_only(world, monkeypatch):
    eng = world["engine"]
    want = _strip(world["before"])
    assert "semantic_added" not in world["before"]["stats"]
    # embedding disabled in config
    monkeypatch.setitem(eng.config.embedding, "enabled", False)
    assert _strip(eng.explain(*world["span"])) == want
    monkeypatch.setitem(eng.config.embedding, "enabled", "auto")
    # torch not installed (available() looks it up without importing it)
    monkeypatch.setitem(sys.modules, "torch", None)
    assert not available()[0]
    assert _strip(eng.explain(*world["span"])) == want
    assert hybrid.semantic_event_hits(eng, "chunked", 5)[1].startswith("off: torch")


def test_no_vectors_never_loads_the_model(world, tmp_path):
    """A fresh process with an index but no vectors: explain and search never import torch."""
    w = world["world"]
    code = (
        "import json, sys\n"
        "from engram.engine import Engine\n"
        f"eng = Engine({str(w.root)!r})\n"
        "eng.explain(%r, 4, 14)\n"
        "r = eng.search('chunked pads the last group')\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'state': r['semantic'],"
        " 'emb': eng.status()['embedding']['state']}))\n" % world["span"][0])
    env = {"ENGRAM_HOME": str(tmp_path / "h"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    # point the vector cache at nothing: a copy of the index without vectors/ beside it
    import shutil

    shutil.copytree(world["engine"].index_path.parent, tmp_path / "h" / "index",
                    ignore=shutil.ignore_patterns("vectors"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"torch": False, "state": "no vectors yet: run engram embed",
                   "emb": "no vectors yet: run engram embed"}


def test_span_query_reads_names_docstrings_comments():
    q = hybrid.span_query(CHUNKED + "    # keep groups equal\n")
    assert q.startswith("chunked: Break *iterable* into groups")
    assert "keep groups equal" in q
    assert hybrid.span_query("x = compute_total(rows)\n").startswith("x")


def test_doc_summary_drops_doctests():
    doc = "Return the first *n* items.\n\n    >>> take(2, 'abc')\n    ['a', 'b']\n\nFewer if short."
    assert hybrid._doc_summary(doc) == "Return the first *n* items. Fewer if short."


def test_code_blocks_are_not_embedded():
    from engram.embed.chunk import reasoning_texts

    ev = {"k": "msg.out", "text": "Here is take:\n\n```python\ndef take(n, it):\n    return 1\n```"
                                  "\n\nIt returns the first items."}
    assert reasoning_texts(ev) == ["Here is take:\n\n[code]\n\nIt returns the first items."]


def test_rechunked_tape_drops_stale_refs(tmp_path):
    import numpy as np

    from engram.embed.store import VectorStore

    st = VectorStore(tmp_path, "fake-4d")
    v = np.eye(4, dtype=np.float32)[:2]
    st.add(["old", "new"], v, [("old", "t1", 3), ("new", "t2", 1)])
    st.drop_refs(["t1"])
    st.add_refs([("new", "t1", 3)])
    assert st.refs(["old", "new"]) == {"old": [], "new": [("t1", 3), ("t2", 1)]}
    st.close()


def test_embed_again_without_loading_the_model(world, monkeypatch):
    monkeypatch.setattr(embed_run, "_embedders", {})
    again = embed_run.embed_index(world["engine"])
    assert again["embedded"] == 0 and again["tapes_skipped"] == again["tapes"] > 0
    assert again["vectors"] == world["embed"]["vectors"]
    assert embed_run._embedders == {}  # nothing new: answered from the store, no model load


def test_keyword_query_is_the_docstring_words_without_the_name():
    q = hybrid.keyword_query(CHUNKED)
    words = [w.strip('"') for w in q.split(" OR ")]
    assert words[:4] == ["break", "iterable", "groups", "length"]
    assert "chunked" not in words and "the" not in words and "into" not in words
    assert len(words) == len(set(words))  # distinct
    assert hybrid.keyword_query("def f(x):\n    return x + 1\n") is None  # no prose: no keywords


def test_keyword_signal_scores_tapes_sharing_docstring_words(world):
    eng = world["engine"]
    conn = eng.conn()
    writer = _session_of(eng, "pads the last group")
    others = [_session_of(eng, t[:40]) for t in OFF_TOPIC]
    evs = {(t, o): e for t in [writer, *others] for e, o in conn.execute(
        "SELECT e.id, e.ofs FROM events e JOIN tapes t ON t.id = e.tape WHERE t.tape_id=?", (t,))}
    kw = hybrid.keyword_scores(conn, CHUNKED, evs)
    assert any(t == writer for t, _o in kw)  # "last group" / "groups"
    assert all(t == writer for t, _o in kw)  # no docstring word in the off-topic sessions
    pool = hybrid.candidates(eng, conn, CHUNKED, [], keyword_weight=0.6)
    by = {c["tape_id"]: c for c in pool}
    assert by[writer]["keyword"] == 1.0  # relative to the pool's best
    for c in pool:  # score = cosine + weight x keyword, best first
        assert c["score"] == round(c["cosine"] + 0.6 * c["keyword"], 6)
    assert [c["score"] for c in pool] == sorted((c["score"] for c in pool), reverse=True)
    # the shipped weight is 0: no FTS query, the score is the cosine (unless asked, as the
    # calibration does)
    plain = hybrid.candidates(eng, conn, CHUNKED, [])
    assert hybrid.KEYWORD_WEIGHT == 0.0 and all(c["keyword"] == 0.0 for c in plain)
    assert [(c["tape_id"], c["score"]) for c in plain] == [
        (c["tape_id"], c["cosine"]) for c in hybrid.rescore(pool, 0.0)]
    asked = hybrid.candidates(eng, conn, CHUNKED, [], keywords=True)
    assert [c["keyword"] for c in asked] == [c["keyword"] for c in hybrid.rescore(pool, 0.0)]
    sem = [s for s in eng.explain(*world["span"])["sessions"] if s["via"] == "semantic"]
    sig = sem[0]["signals"]
    assert sig["semantic"] == sig["cosine"] and "keyword" not in sig


def test_keyword_weight_reorders_the_pool_and_the_additions():
    pool = [{"tape_id": "a" * 32, "cosine": 0.70, "keyword": 0.0, "offset": 1, "offsets": [1]},
            {"tape_id": "b" * 32, "cosine": 0.66, "keyword": 1.0, "offset": 2, "offsets": [2]},
            {"tape_id": "c" * 32, "cosine": 0.50, "keyword": 0.2, "offset": 3, "offsets": [3]}]
    plain = hybrid.rescore(pool, 0.0)
    assert [c["tape_id"][0] for c in plain] == ["a", "b", "c"]
    mixed = hybrid.rescore(pool, 0.6)
    assert [c["tape_id"][0] for c in mixed] == ["b", "a", "c"]
    assert mixed[0]["score"] == 1.26 and "score" not in pool[0]  # the input is left alone
    # the margin rule against the 2nd-best candidate: cosine alone cannot tell a from b (0.04
    # apart, margin 0.05); with the keyword signal b stands out
    assert hybrid.select(plain, set(), 0.58, 0.05, 2) == []
    assert hybrid.select(mixed, set(), 0.58, 0.05, 2) == [("b" * 32, 1.26)]
