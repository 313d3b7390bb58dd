"""The background embedding pass: tapes → reasoning chunks → vectors in the store.

``embed_tapes`` is incremental and resumable at two levels: a tape whose chunks are all stored is
recorded in the store (with the chunker key) and not even read next time; inside a tape, chunks
whose hash is already stored are not embedded again (identical text in any tape is embedded once).
Stopping (``should_stop``), a crash or kill -9 lose at most the batch in flight.

Work is planned first (read + chunk every pending tape, keep only the texts not yet embedded) so
progress has a total; planning costs a decompression per pending tape and holds the pending
reasoning text in memory (a small fraction of the tapes: code and tool output are not embedded).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from engram.embed.chunk import DEFAULT_OVERLAP, DEFAULT_WINDOW, chunker_key, reasoning_chunks
from engram.errors import EngramError

log = logging.getLogger(__name__)

#: chunks embedded and committed together (one fsync + one SQLite transaction each).
DEFAULT_FLUSH = 256


def embed_tapes(tapes: Iterable[tuple[str, Path]], store, embedder, *,
                progress: Callable[[int, int], None] | None = None,
                max_chunks_per_minute: float | None = None,
                should_stop: Callable[[], bool] | None = None,
                read: Callable[[Path], list[dict]] | None = None,
                window: int | None = None, overlap: int = DEFAULT_OVERLAP,
                flush_every: int | None = None) -> dict:
    """Embed the reasoning text of ``tapes`` (``(tape_id, path)`` pairs) into ``store``.

    * ``progress(done, total)``: called after planning (``done=0``) and after every committed
      batch; ``total`` is the number of chunks to embed in this call.
    * ``max_chunks_per_minute``: a cap on the embedding rate (sleeps between batches).
    * ``should_stop()``: polled between batches (and while sleeping); when true, the pass stops
      after committing what is done and the summary says ``"stopped": true``.
    * ``read``: tape reader, default ``engram.tape.reader.read_tape`` (verifies the tape id).
    * ``window``: chunk window in model tokens, default ``min(embedder.max_tokens, 256)``.

    A tape that cannot be read is reported in ``errors`` and skipped; the rest go on. Returns
    ``{"tapes", "tapes_skipped", "tapes_done", "chunks", "embedded", "reused", "stopped",
    "errors", "elapsed_s", "chunks_per_s", "model_id", "device"}``.
    """
    if read is None:
        from engram.tape.reader import read_tape as read
    t0 = time.perf_counter()
    window = window or min(int(embedder.max_tokens), DEFAULT_WINDOW)
    key = chunker_key(window, overlap)
    flush_every = max(1, int(flush_every or max(DEFAULT_FLUSH, embedder.batch_size)))
    if max_chunks_per_minute:  # small batches, so a capped pass works in short bursts (~10 s)
        flush_every = max(1, min(flush_every, int(max_chunks_per_minute // 6)))
    stop = should_stop or (lambda: False)
    summary = {"tapes": 0, "tapes_skipped": 0, "tapes_done": 0, "chunks": 0, "embedded": 0,
               "reused": 0, "stopped": False, "errors": [], "elapsed_s": 0.0,
               "chunks_per_s": 0.0, "model_id": embedder.model_id,
               "device": embedder.device}
    plan = _Plan()
    for tape_id, path in tapes:
        summary["tapes"] += 1
        if store.tape_done(tape_id, key):
            summary["tapes_skipped"] += 1
            continue
        if stop():
            summary["stopped"] = True
            break
        plan.add_tape(tape_id, path, store, read, summary, window, overlap)
    store.mark_tapes_done(plan.finished, key)
    summary["tapes_done"] += len(plan.finished)
    t_embed = time.perf_counter()
    _embed_pending(plan, store, embedder, key, summary, progress=progress, stop=stop,
                   flush_every=flush_every, max_chunks_per_minute=max_chunks_per_minute)
    elapsed = time.perf_counter() - t0
    summary["elapsed_s"] = round(elapsed, 3)
    embed_s = time.perf_counter() - t_embed
    summary["chunks_per_s"] = round(summary["embedded"] / embed_s, 2) if embed_s > 0 else 0.0
    return summary


class _Plan:
    """The texts a pass still has to embed, and which tapes wait for which of them."""

    def __init__(self) -> None:
        self.pending: dict[str, str] = {}  # hash → text, in first-seen order
        self.waiting: dict[str, set[str]] = {}  # tape → hashes it still waits for
        self.waiters: dict[str, list[str]] = {}  # hash → tapes waiting for it
        self.pending_refs: dict[str, list[tuple[str, str, int]]] = {}  # hash → refs to add with it
        self.n_chunks: dict[str, int] = {}
        self.finished: list[tuple[str, int]] = []  # tapes with every vector already stored

    def add_tape(self, tape_id: str, path, store, read, summary: dict, window: int,
                 overlap: int) -> None:
        """Read and chunk one tape; refs to vectors already stored are added now, the other
        texts join ``pending``. A tape that cannot be read is reported and skipped."""
        try:
            events = read(Path(path))
        except EngramError as e:
            summary["errors"].append(e.to_dict())
            log.warning("embed: skipping tape %s: %s", tape_id, e)
            return
        chunks = reasoning_chunks(events, tape_id, window=window, overlap=overlap)
        if hasattr(store, "drop_refs"):  # refs of an earlier chunker version (or a cut-off pass)
            store.drop_refs([tape_id])
        summary["chunks"] += len(chunks)
        self.n_chunks[tape_id] = len(chunks)
        pending = self.pending
        hashes = [c.hash for c in chunks]
        missing = set(store.missing([h for h in hashes if h not in pending]))
        texts = {c.hash: c.text for c in chunks}
        refs = [(c.hash, c.tape_id, c.offset) for c in chunks]
        wait = {h for h in hashes if h in missing or h in pending}
        store.add_refs([r for r in refs if r[0] not in wait])
        for h in hashes:
            if h in wait and h not in pending:
                pending[h] = texts[h]
        for r in refs:
            if r[0] in wait:
                self.pending_refs.setdefault(r[0], []).append(r)
        summary["reused"] += sum(1 for h in hashes if h not in wait)
        if not wait:
            self.finished.append((tape_id, len(chunks)))
            return
        self.waiting[tape_id] = wait
        for h in sorted(wait):
            self.waiters.setdefault(h, []).append(tape_id)

    def complete(self, batch: list[str]) -> list[tuple[str, int]]:
        """The tapes whose last awaited text is in ``batch``, with their chunk counts."""
        done = []
        for h in batch:
            for tape in self.waiters.pop(h, ()):
                w = self.waiting[tape]
                w.discard(h)
                if not w:
                    done.append((tape, self.n_chunks[tape]))
                    del self.waiting[tape]
        return done


def _embed_pending(plan: _Plan, store, embedder, key: str, summary: dict, *, progress, stop,
                   flush_every: int, max_chunks_per_minute: float | None) -> None:
    """Embed ``plan.pending`` in batches, committing each; honour the rate cap and stop
    requests."""
    order = list(plan.pending)
    total = len(order)
    if progress:
        progress(0, total)
    done = 0
    t_embed = time.perf_counter()
    for s in range(0, total, flush_every):
        if summary["stopped"] or stop():
            summary["stopped"] = True
            break
        batch = order[s:s + flush_every]
        vecs = embedder.embed([plan.pending[h] for h in batch])
        refs = [r for h in batch for r in plan.pending_refs.pop(h, ())]
        store.add(batch, vecs, refs)
        done += len(batch)
        summary["embedded"] += len(batch)
        complete = plan.complete(batch)
        store.mark_tapes_done(complete, key)
        summary["tapes_done"] += len(complete)
        if progress:
            progress(done, total)
        if max_chunks_per_minute and done < total:
            due = t_embed + done * 60.0 / float(max_chunks_per_minute)
            while not stop():
                left = due - time.perf_counter()
                if left <= 0:
                    break
                time.sleep(min(left, 0.25))
