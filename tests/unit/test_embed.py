"""The embedding scorer: lazy imports, chunk selection/addressing, vector store, worker, no-spread
rule, and the real bundled model on CPU (skipped cleanly without torch/transformers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xxhash

from engram.embed import chunk as chunk_mod
from engram.embed import worker as worker_mod
from engram.embed.chunk import chunk_text, chunker_key, estimate_tokens, reasoning_chunks, reasoning_texts
from engram.embed.model import EmbedUnavailable, available
from engram.embed.search import calibrated_additions, group_by_tape, merge_signals, no_spread, semantic_neighbours
from engram.embed.store import VectorStore, VectorStoreError, model_slug
from engram.embed.worker import embed_tapes

ROOT = Path(__file__).resolve().parents[2]
TAPE_ID = "t" * 32


# --------------------------------------------------------------------------- helpers


def _unit(rng, n, d=16):
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class FakeEmbedder:
    """Deterministic stand-in: a unit vector seeded by the text's hash (for worker logic)."""

    model_id = "fake-16d"
    device = "cpu"
    dim = 16
    max_tokens = 128
    batch_size = 8

    def __init__(self):
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            rng = np.random.default_rng(xxhash.xxh3_64_intdigest(t.encode()))
            v = rng.standard_normal(self.dim)
            out[i] = v / np.linalg.norm(v)
        return out


def _session(i: int, extra: str = "") -> list[dict]:
    return [
        {"t": "2026-01-01T00:00:00Z", "k": "meta", "harness": "test", "session": f"s{i}",
         "label": f"Session number {i} about the parser"},
        {"t": "2026-01-01T00:00:01Z", "k": "msg.in",
         "text": f"Please fix the tokenizer bug number {i} in the parser module."},
        {"t": "2026-01-01T00:00:02Z", "k": "code.read", "file": "a.py", "range": [1, 3],
         "text": "def tokenize(s):\n    return s.split()\n"},
        {"t": "2026-01-01T00:00:03Z", "k": "msg.out",
         "text": "The shared preamble every session repeats verbatim for testing reuse."},
        {"t": "2026-01-01T00:00:04Z", "k": "tool.call", "tool": "Bash", "call_id": "c1",
         "args": {"command": "pytest -x tests", "description": f"Run the tests for case {i}"}},
        {"t": "2026-01-01T00:00:05Z", "k": "tool.result", "tool": "Bash", "call_id": "c1",
         "stdout": "secret tool output body that must never be embedded", "exit": 0},
        {"t": "2026-01-01T00:00:06Z", "k": "code.edit", "file": "a.py", "before_range": [1, 2],
         "after_range": [1, 2], "before_text": "x = 1\n", "after_text": "x = 2 edited body\n"},
        {"t": "2026-01-01T00:00:07Z", "k": "msg.out", "text": f"Done with item {i}. {extra}"},
    ]


def _write_tapes(tmp_path: Path, sessions: list[list[dict]]) -> list[tuple[str, Path]]:
    try:
        from engram.tape.writer import write_tape
    except ImportError:  # pragma: no cover - the tape package is always there in-tree
        pytest.skip("engram.tape.writer not available")
    out = []
    for evs in sessions:
        ref = write_tape(tmp_path / "tapes", evs)
        out.append((ref.tape_id, ref.path))
    return out


def _read(path: Path) -> list[dict]:
    from engram.tape.reader import read_tape

    return read_tape(path)


# --------------------------------------------------------------------------- lazy import


def test_import_does_not_load_torch_or_transformers():
    code = ("import sys, engram, engram.embed\n"
            "from engram.embed import available, Embedder, VectorStore, embed_tapes\n"
            "available()\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers', 'huggingface_hub', 'sentence_transformers'))\n"
            "print(repr(heavy))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_unavailable_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # find_spec("torch") → None
    ok, reason = available()
    assert not ok and "torch" in reason
    from engram.embed import Embedder

    with pytest.raises(EmbedUnavailable) as ei:
        Embedder()
    assert ei.value.code == "embed-unavailable"


# --------------------------------------------------------------------------- chunks


def test_chunk_is_content_addressed():
    a = reasoning_chunks(_session(1), "a" * 32)
    b = reasoning_chunks(_session(2), "b" * 32)
    for c in a:
        assert c.hash == xxhash.xxh3_128_hexdigest(c.text.encode())
        assert c.tape_id == "a" * 32
    shared = "The shared preamble every session repeats verbatim for testing reuse."
    ha = {c.hash for c in a if c.text == shared}
    hb = {c.hash for c in b if c.text == shared}
    assert ha and ha == hb
    # whitespace-only differences give the same chunk
    assert chunk_text("one  two\nthree\tfour") == chunk_text("one two three four")


def test_chunk_selection_is_reasoning_only():
    chunks = reasoning_chunks(_session(3), TAPE_ID)
    kinds = {c.offset: c.kind for c in chunks}
    assert kinds == {0: "meta", 1: "msg.in", 3: "msg.out", 4: "tool.call", 7: "msg.out"}
    texts = " ".join(c.text for c in chunks)
    assert "tool output body" not in texts and "edited body" not in texts
    assert "def tokenize" not in texts
    tool = next(c for c in chunks if c.kind == "tool.call")
    assert tool.text.startswith("Bash: ") and "Run the tests for case 3" in tool.text
    # sidecar notes, reasoning fields, span.link notes; file contents in args never
    note = {"k": "note", "source": "enrichment", "text": "orchestrator decided X"}
    assert reasoning_texts(note) == ["orchestrator decided X"]
    assert reasoning_texts({"k": "msg.out", "text": "answer", "reasoning": "because Y"}) \
        == ["answer", "because Y"]
    assert reasoning_texts({"k": "span.link", "note": "moved helper to utils"}) \
        == ["moved helper to utils"]
    assert reasoning_texts({"k": "tool.call", "tool": "Write",
                            "args": {"file_path": "a.py", "content": "print(1)"}}) == []
    assert reasoning_texts({"k": "code.edit", "source": "enrichment", "text": "x"}) == []
    # too-short messages carry nothing
    assert reasoning_chunks([{"k": "msg.in", "text": "ok"}], TAPE_ID) == []


def test_chunk_window_and_overlap():
    words = [f"word{i}" for i in range(1000)]
    pieces = chunk_text(" ".join(words), window=64, overlap=16)
    assert len(pieces) > 5
    budget = int((64 - 2) / chunk_mod._SAFETY)
    for p in pieces:
        assert sum(estimate_tokens(w) for w in p.split()) <= budget
    # consecutive chunks overlap, and together they cover every word in order
    for a, b in zip(pieces, pieces[1:]):
        assert a.split()[-1] in b.split()
    seen = []
    for p in pieces:
        for w in p.split():
            if not seen or int(w[4:]) > int(seen[-1][4:]):
                seen.append(w)
    assert seen == words
    giant = "x" * 5000  # a word over the window gets a chunk of its own; chunking still ends
    assert giant in chunk_text(f"a b {giant} c d", window=32)
    assert chunker_key(64, 16) != chunker_key(64, 8)


# --------------------------------------------------------------------------- store


@pytest.mark.parametrize("device", ["numpy", "torch"])
def test_store_round_trip_and_resume(tmp_path, device):
    if device == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    vecs = _unit(rng, 50)
    hashes = [f"h{i:03d}" for i in range(50)]
    refs = [(h, "tape-a", i) for i, h in enumerate(hashes)] + [("h007", "tape-b", 3)]
    with VectorStore(tmp_path, "m-16d", device=device) as st:
        assert len(st) == 0 and st.search(vecs[0], 5) == []
        assert st.add(hashes[:30], vecs[:30], refs[:30]) == 30
        assert st.add(hashes[:40], vecs[:40], refs) == 10  # first 30 already there
        hits = st.search(vecs[7], 3)
        assert hits[0][1] == "h007" and hits[0][0] == pytest.approx(1.0, abs=2e-3)
        assert hits[0][2] == [("tape-a", 7), ("tape-b", 3)]
        assert [s for s, _, _ in hits] == sorted((s for s, _, _ in hits), reverse=True)
    # reopen: everything committed is known, nothing is re-added
    with VectorStore(tmp_path, "m-16d", device=device) as st:
        assert len(st) == 40 and st.has("h039") and not st.has("h040")
        assert st.missing(hashes) == hashes[40:]
        assert st.add(hashes, vecs) == 10 and len(st) == 50
        np.testing.assert_allclose(st.get(["h049", "h000"]), vecs[[49, 0]], atol=1e-3)
        full = st.scores(vecs[3])
        assert full.shape == (50,) and int(np.argmax(full)) == 3
        assert st.tape_hashes("tape-b") == [(3, "h007")]


def test_store_is_keyed_by_model(tmp_path):
    rng = np.random.default_rng(1)
    with VectorStore(tmp_path, "model-a-16d") as a:
        a.add(["x"], _unit(rng, 1))
    with VectorStore(tmp_path, "org/model b:8d") as b:
        assert len(b) == 0 and b.path != a.path and b.path.parent == tmp_path
        b.add(["x"], _unit(rng, 1, d=8))
        assert b.dim == 8
    assert model_slug("model-a-16d") == "model-a-16d"
    assert "/" not in model_slug("org/model b:8d")
    man = json.loads((a.path / "manifest.json").read_text())
    assert man["model_id"] == "model-a-16d" and man["dim"] == 16
    # a directory belonging to another model is refused, never mixed
    man["model_id"] = "other"
    (a.path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(VectorStoreError):
        VectorStore(tmp_path, "model-a-16d")


def test_store_ignores_uncommitted_tail_and_checks_dim(tmp_path):
    rng = np.random.default_rng(2)
    vecs = _unit(rng, 4)
    with VectorStore(tmp_path, "m") as st:
        st.add(["a", "b"], vecs[:2])
        vec_file = st.path / "vectors.f16"
    with open(vec_file, "ab") as f:  # a crash after the append, before the commit
        f.write(b"\x00\x3c" * 16 * 3)
    with VectorStore(tmp_path, "m") as st:
        assert len(st) == 2
        assert [h for _, h, _ in st.search(vecs[1], 5)] == ["b", "a"]
        st.add(["c"], vecs[2:3])
        assert vec_file.stat().st_size == 3 * 16 * 2
        assert st.search(vecs[2], 1)[0][1] == "c"
        with pytest.raises(VectorStoreError):
            st.add(["d"], _unit(rng, 1, d=8))


# --------------------------------------------------------------------------- no-spread rule


def test_no_spread_adds_and_reorders_nothing():
    flat = [("s1", 0.71), ("s2", 0.71), ("s3", 0.71)]
    assert no_spread([s for _, s in flat])
    assert calibrated_additions(flat, threshold=0.1) == []
    keyword = [("s2", 9.0), ("s1", 4.0), ("s4", 1.0)]
    merged = merge_signals(keyword, flat)
    assert [m["key"] for m in merged] == ["s2", "s1", "s4"]
    assert merge_signals(keyword, []) == merged
    assert all(m["signals"]["semantic"] is None for m in merged)


def test_spread_semantic_signal_counts():
    pool = [("found", 0.9), ("s1", 0.62), ("s2", 0.40), ("s3", 0.61)]
    adds = calibrated_additions(pool, threshold=0.5, exclude={"found"})
    assert adds == [("s1", 0.62), ("s3", 0.61)]
    assert calibrated_additions([("only", 0.8)], threshold=0.5) == [("only", 0.8)]
    assert calibrated_additions([("only", 0.3)], threshold=0.5) == []
    merged = merge_signals([("a", 3.0), ("b", 2.0)], [("b", 0.9), ("c", 0.8), ("a", 0.1)])
    assert [m["key"] for m in merged] == ["b", "a", "c"]
    b = merged[0]
    assert b["signals"] == {"keyword": 2.0, "semantic": 0.9}
    assert merged[2]["signals"] == {"keyword": None, "semantic": 0.8}
    # ties never depend on input order
    tie = merge_signals([("y", 1.0), ("x", 1.0)], [])
    assert tie == merge_signals([("x", 1.0), ("y", 1.0)], [])


def test_group_by_tape():
    hits = [{"hash": "h1", "score": 0.9, "refs": [{"tape_id": "B", "offset": 4}]},
            {"hash": "h2", "score": 0.7, "refs": [{"tape_id": "A", "offset": 2},
                                                  {"tape_id": "B", "offset": 1}]}]
    assert group_by_tape(hits) == [{"tape_id": "B", "score": 0.9, "offsets": [4, 1]},
                                   {"tape_id": "A", "score": 0.7, "offsets": [2]}]


# --------------------------------------------------------------------------- worker (fake model)


def test_worker_embeds_once_and_resumes(tmp_path):
    tapes = _write_tapes(tmp_path, [_session(i) for i in range(4)])
    emb = FakeEmbedder()
    seen = []
    with VectorStore(tmp_path / "vec", emb.model_id) as st:
        out = embed_tapes(tapes, st, emb, progress=lambda d, t: seen.append((d, t)), read=_read,
                          flush_every=5)
        n_unique = len({c.hash for tid, p in tapes for c in reasoning_chunks(_read(p), tid)})
        assert out["embedded"] == n_unique == len(st)
        assert out["tapes_done"] == 4 and out["errors"] == [] and not out["stopped"]
        assert seen[0] == (0, n_unique) and seen[-1] == (n_unique, n_unique)
        embedded_texts = [t for call in emb.calls for t in call]
        assert len(embedded_texts) == len(set(embedded_texts))  # identical text embedded once
        # the shared message points at every tape
        shared = reasoning_chunks(_session(0), "x")[2]
        assert "shared preamble" in shared.text
        assert {t for t, _ in st.refs([shared.hash])[shared.hash]} == {t for t, _ in tapes}
        # second pass: tapes are known done, nothing is read or embedded
        again = embed_tapes(tapes, st, emb, read=lambda p: pytest.fail("tape re-read"))
        assert again["tapes_skipped"] == 4 and again["embedded"] == 0


def test_worker_stop_resume_errors_and_cap(tmp_path, monkeypatch):
    tapes = _write_tapes(tmp_path, [_session(i, extra=f"extra words {i}") for i in range(6)])
    bad = tmp_path / "tapes" / ("0" * 32 + ".jsonl.zst")
    bad.write_bytes(b"not zstd")
    tapes.insert(2, ("0" * 32, bad))
    emb = FakeEmbedder()
    with VectorStore(tmp_path / "vec", emb.model_id) as st:
        batches = []
        out = embed_tapes(tapes, st, emb, read=_read, flush_every=4,
                          progress=lambda d, t: batches.append(d),
                          should_stop=lambda: len(batches) >= 3)
        assert out["stopped"] and out["embedded"] == 8 == len(st)
        assert out["errors"][0]["error"]["code"] == "corrupt-tape"
        # resume: the rest is embedded, nothing twice
        rest = embed_tapes(tapes, st, emb, read=_read)
        total = len({c.hash for tid, p in tapes[:2] + tapes[3:]
                     for c in reasoning_chunks(_read(p), tid)})
        assert rest["embedded"] == total - 8 and len(st) == total
        assert rest["tapes_done"] + rest["tapes_skipped"] == 6

    # the rate cap sleeps between batches (fake clock: no real waiting)
    class Clock:
        now = 0.0

        def perf_counter(self):
            return self.now

        def sleep(self, s):
            self.now += s

        def time(self):
            return 0.0

    clock = Clock()
    monkeypatch.setattr(worker_mod, "time", clock)
    tapes2 = _write_tapes(tmp_path / "two", [_session(100 + i) for i in range(3)])
    with VectorStore(tmp_path / "vec2", emb.model_id) as st:
        out = embed_tapes(tapes2, st, emb, read=_read, max_chunks_per_minute=60)
    n = out["embedded"]
    assert n > 10
    # 60/min → batches of 10, each followed by a wait until done * 1 s (not after the last)
    assert clock.now == pytest.approx(10 * ((n - 1) // 10), abs=0.5)


# --------------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def embedder():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    ok, reason = available()
    if not ok:
        pytest.skip(reason)
    from engram.embed import Embedder

    return Embedder(device="cpu", batch_size=4)


def test_model_identity(embedder):
    assert embedder.model_id == "all-MiniLM-L6-v2-384d"
    assert embedder.device == "cpu" and embedder.dim == 384 and embedder.max_tokens == 256
    assert embedder.describe()["model_id"] == embedder.model_id
    assert embedder.embed([]).shape == (0, 384)


def test_vectors_are_deterministic_unit_and_in_order(embedder):
    texts = ["Consolidate token validation into one module.",
             "short",
             "Why does chunked pad the last group with None values when the input is uneven?",
             "Refactor the authentication timeout handling in the session middleware.",
             "",
             "The quick brown fox jumps over the lazy dog."]
    a = embedder.embed(texts)
    b = embedder.embed(texts)
    assert a.dtype == np.float32 and a.shape == (6, 384)
    assert np.array_equal(a, b)  # bit-identical on CPU
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    # length-sorted batching returns input order: each row equals the text embedded alone
    for i in (0, 2, 5):
        np.testing.assert_allclose(embedder.embed([texts[i]])[0], a[i], atol=1e-5)


def test_similar_sentences_score_above_unrelated(embedder):
    v = embedder.embed(["Merge the token validation helpers into a single module.",
                        "Consolidate token validation into one module.",
                        "The recipe needs two cups of flour and an egg."])
    assert v[0] @ v[1] > 0.6
    assert v[0] @ v[1] > v[0] @ v[2] + 0.4


def test_chunks_fit_the_real_tokenizer(embedder):
    prose = ("The orchestrator decided to consolidate `validate_token()` and `check_jwt_expiry` "
             "into engram/auth/tokens.py, keeping the 30s clock-skew allowance. ") * 40
    pieces = chunk_text(prose, window=embedder.max_tokens)
    assert len(pieces) > 1
    assert max(embedder.token_counts(pieces)) <= embedder.max_tokens


def test_semantic_search_end_to_end(embedder, tmp_path):
    sessions = [
        [{"t": "t", "k": "meta", "label": "auth work"},
         {"t": "t", "k": "msg.in", "text": "Consolidate token validation into one module."}],
        [{"t": "t", "k": "meta", "label": "cooking"},
         {"t": "t", "k": "msg.out", "text": "Bake the bread at two hundred degrees for an hour."}],
        [{"t": "t", "k": "meta", "label": "ci"},
         {"t": "t", "k": "msg.out", "text": "The CI pipeline caches pip wheels between runs."}],
    ]
    tapes = _write_tapes(tmp_path, sessions)
    with VectorStore(tmp_path / "vec", embedder.model_id) as st:
        out = embed_tapes(tapes, st, embedder, read=_read)
        assert out["embedded"] == 3 and out["model_id"] == embedder.model_id
        hits = semantic_neighbours(st, embedder, "merge the JWT validation helpers together", 3)
        assert hits[0]["refs"] == [{"tape_id": tapes[0][0], "offset": 1}]
        assert hits[0]["score"] > hits[1]["score"]
        assert semantic_neighbours(st, embedder, "   ", 3) == []


def test_openmp_threads_wait_passively_unless_told_otherwise(embedder):
    """Loading the model asks OpenMP for passive waiting (threads sleep between batches instead of
    spinning: ~40% less CPU for a whole-corpus embed on a shared machine); a value the user set
    wins. Checked in fresh processes, where torch starts its thread pool after the setting."""
    import os

    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); from engram.embed import Embedder; "
            "Embedder(device='cpu'); import torch; torch.ones(2) + 1; "
            "print(os.environ.get('OMP_WAIT_POLICY'))")
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code, root], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "PASSIVE"
    out = subprocess.run([sys.executable, "-c", code, root], env={**env, "OMP_WAIT_POLICY": "ACTIVE"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "ACTIVE"
