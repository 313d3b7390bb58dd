"""``engram embed``: the embedding pass over an index, and the cheap state checks around it.

The vector cache lives under ``<index dir>/vectors/<model-slug>/``, beside the index it embeds (derived: delete it and
run ``engram embed`` again). Only sealed tapes are embedded (a live session's tape does not exist
yet; it is embedded once sealed). The pass is resumable (``embed_tapes`` skips finished tapes and
stored chunks) and honours ``embedding.maxChunksPerMinute``.

``embedding.enabled``: ``false`` → nothing is embedded and the summary says why; ``auto`` → on when
``available()`` (torch, transformers and the model are installed), else a no-op with the reason;
``true`` → on, and an unavailable scorer is an error (``EmbedUnavailable``).

Everything here except ``embed_index`` and ``get_embedder`` is cheap: no torch import, no model
load (``model_id_for`` reads the model's ``config.json``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from engram.embed.model import EmbedUnavailable, available, resolve_model
from engram.embed.store import VectorStore, model_slug
from engram.paths import create_private
from engram.timestamps import utc_iso

log = logging.getLogger(__name__)

_LAST_RUN = "last_run.json"
#: torch CPU threads of an embedder loaded for queries (explain, search).
QUERY_THREADS = 1
_embedders: dict[tuple, object] = {}
_stores: dict[tuple, VectorStore] = {}
_lock = threading.Lock()
_available: dict[str | None, tuple[bool, str]] = {}
_model_ids: dict[str | None, str] = {}


def vectors_dir(where: Path) -> Path:
    """``<where>/vectors``, ``where`` being the index's directory (``$ENGRAM_HOME/index`` unless
    ``index.path`` says otherwise): every model's vector cache sits below it."""
    return Path(where) / "vectors"


def _setting(cfg, key: str, default=None):
    return (getattr(cfg, "embedding", None) or {}).get(key, default)


def enabled_setting(cfg) -> str:
    """``embedding.enabled`` normalised to ``auto`` / ``true`` / ``false`` (bad values → auto)."""
    v = _setting(cfg, "enabled", "auto")
    if isinstance(v, bool):
        return "true" if v else "false"
    v = str(v).strip().lower()
    if v in ("true", "yes", "on", "1"):
        return "true"
    if v in ("false", "no", "off", "0"):
        return "false"
    return "auto"


_SPEC_TTL = 30.0
_specs: dict[str, float] = {}


def _importable(mod: str) -> bool:
    """``mod`` is imported, or found on the path (a positive answer is trusted for 30 s: the
    look-up walks ``sys.path`` and costs ~0.2 ms, on every explain). A module blocked with
    ``sys.modules[mod] = None`` is not importable, at once."""
    if mod in sys.modules:
        return sys.modules[mod] is not None
    now = time.monotonic()
    if now - _specs.get(mod, -_SPEC_TTL) < _SPEC_TTL:
        return True
    if importlib.util.find_spec(mod) is None:
        return False
    _specs[mod] = now
    return True


def scorer_available(model: str | None) -> tuple[bool, str]:
    """``available(model)``, cached per model after the first positive answer (it reads package
    metadata: ~4 ms); the torch/transformers look-up itself is repeated every time (µs), so
    uninstalling them, or blocking them in ``sys.modules``, is seen at once."""
    for mod in ("torch", "transformers"):
        if not _importable(mod):
            return False, f"{mod} is not installed (pip install 'engram[embed]')"
    hit = _available.get(model)
    if hit is None:
        hit = available(model)
        if hit[0]:
            _available[model] = hit
    return hit


def wanted(cfg) -> tuple[bool, str]:
    """``(on, reason)`` from the config and ``available()`` only (no heavy import)."""
    en = enabled_setting(cfg)
    if en == "false":
        return False, "embedding.enabled is false"
    ok, why = scorer_available(_setting(cfg, "model"))
    if not ok:
        return False, why
    return True, why


def model_id_for(model: str | None) -> str | None:
    """The ``Embedder.model_id`` a configured model will have (``<name>-<dim>d``), read from its
    ``config.json`` without loading it (cached per model); None when the model cannot be found."""
    if model in _model_ids:
        return _model_ids[model]
    mid = _model_id(model)
    if mid is not None:
        _model_ids[model] = mid
    return mid


def _model_id(model: str | None) -> str | None:
    try:
        d, name = resolve_model(model)
        dim = json.loads((d / "config.json").read_text(encoding="utf-8")).get("hidden_size")
    except (EmbedUnavailable, OSError, ValueError):
        return None
    return f"{name}-{int(dim)}d" if isinstance(dim, int) else None


@functools.lru_cache(maxsize=64)
def store_path(root: Path, model_id: str) -> Path:
    """The vector cache directory of ``model_id`` under ``root`` (memoised: every explain checks
    it for vectors)."""
    return vectors_dir(root) / model_slug(model_id)


def vector_count(root: Path, model_id: str | None) -> int:
    """Committed vectors in the cache of ``model_id`` (0 when there is none). Opens nothing that
    does not exist: a missing manifest means no vectors."""
    if not model_id:
        return 0
    p = store_path(root, model_id)
    if not (p / "manifest.json").is_file() or not (p / "index.sqlite").is_file():
        return 0
    try:
        return len(get_store(root, model_id))
    except Exception:  # an unreadable cache counts as empty (it is derived)
        log.debug("vector cache %s unreadable", p, exc_info=True)
        return 0


def last_run(root: Path, model_id: str | None) -> dict | None:
    if not model_id:
        return None
    try:
        return json.loads((store_path(root, model_id) / _LAST_RUN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def get_store(root: Path, model_id: str) -> VectorStore:
    """The process-wide ``VectorStore`` of ``root``'s cache for ``model_id`` (memory map and hash
    list reused between queries; new rows are picked up on the next search)."""
    key = (str(Path(root).resolve()), model_id)
    with _lock:
        st = _stores.get(key)
        if st is None:
            st = _stores[key] = VectorStore(vectors_dir(root), model_id)
        return st


def get_embedder(cfg, *, threads: int | None = None):
    """The process-wide ``Embedder`` for the configured model and device (loaded once, on first
    use: ~1 s on CPU). ``threads`` (CPU only) applies when this call loads it: queries ask for
    ``QUERY_THREADS`` (one short text: a single thread is faster and has no oversubscription
    stalls on a busy machine), ``embed_index`` raises the count for its pass. Raises
    ``EmbedUnavailable``."""
    from engram.embed.model import Embedder

    key = (_setting(cfg, "model"), str(_setting(cfg, "device") or "auto"))
    with _lock:
        emb = _embedders.get(key)
        if emb is None:
            emb = _embedders[key] = Embedder(key[0], key[1], threads=threads)
        return emb


@contextlib.contextmanager
def _cpu_threads(emb):
    """All usable CPUs for a batch pass on CPU, restoring torch's previous setting afterwards."""
    if emb.device != "cpu":
        yield
        return
    import torch

    from engram.embed.model import _cpu_threads as usable

    before = torch.get_num_threads()
    cap = os.environ.get("ENGRAM_EMBED_THREADS")  # a server embedding in the background sets 1
    torch.set_num_threads(max(1, int(cap)) if cap and cap.isdigit() else usable())
    try:
        yield
    finally:
        torch.set_num_threads(before)


def loaded_embedder(cfg):
    """The cached ``Embedder`` when one is already loaded in this process, else None (no load)."""
    return _embedders.get((_setting(cfg, "model"), str(_setting(cfg, "device") or "auto")))


def sealed_tapes(conn) -> list[tuple[str, Path]]:
    """``(tape_id, path)`` of every sealed tape in the index, in tape-id order."""
    return [(t, Path(p)) for t, p in conn.execute(
        "SELECT tape_id, path FROM tapes WHERE live=0 AND path IS NOT NULL ORDER BY tape_id")]


def embed_index(engine, progress: Callable[[int, int], None] | None = None,
                should_stop: Callable[[], bool] | None = None, *,
                tapes: list[tuple[str, Path]] | None = None) -> dict:
    """Embed the reasoning text of every sealed tape of ``engine``'s index.

    ``tapes`` restricts the pass to those ``(tape_id, path)`` pairs (benchmarks). Returns
    ``{"state", "model_id", "device", "store", "tapes", "tapes_skipped", "chunks", "embedded",
    "reused", "vectors", "seconds", "chunks_per_s", "stopped", "errors", "max_chunks_per_minute"}``
    — or, when embedding is off, ``{"state": "off: <reason>", "embedded": 0, "message"}``.
    """
    cfg = engine.config
    on, why = wanted(cfg)
    if not on:
        if enabled_setting(cfg) == "true":
            raise EmbedUnavailable(f"semantic scoring is off: {why}")
        msg = (f"semantic scoring is off ({why}); nothing embedded"
               + ("" if why.startswith("embedding.enabled") else
                  ". Install the extra: pip install 'engram[embed]'"))
        log.warning("%s", msg)
        return {"state": f"off: {why}", "embedded": 0, "message": msg}
    t0 = time.perf_counter()
    todo = tapes if tapes is not None else sealed_tapes(engine.conn())
    side = sidecar_chunks(engine.conn(), {t for t, _p in todo} if tapes is not None else None)
    quick = _nothing_to_do(engine.index_path.parent, cfg, todo, side)
    if quick is not None:  # every tape embedded already: answer without loading the model
        _embed_sidecars(get_store(engine.index_path.parent, quick["model_id"]), None, side)
        quick["seconds"] = round(time.perf_counter() - t0, 3)
        return quick
    emb = get_embedder(cfg)
    store = get_store(engine.index_path.parent, emb.model_id)
    cap = _setting(cfg, "maxChunksPerMinute")
    try:
        cap = float(cap) if cap else None
    except (TypeError, ValueError):
        cap = None
    with _cpu_threads(emb):
        s = _embed_tapes(todo, store, emb, progress=progress, max_chunks_per_minute=cap,
                         should_stop=should_stop)
        if not s["stopped"]:
            n_side = _embed_sidecars(store, emb, side)
            s["embedded"] += n_side
            s["chunks"] += len(side)
    seconds = round(time.perf_counter() - t0, 3)
    out = {"state": f"on ({emb.model_id}, {emb.device})", "model_id": emb.model_id,
           "device": emb.device, "store": str(store.path), "tapes": s["tapes"],
           "tapes_skipped": s["tapes_skipped"], "tapes_done": s["tapes_done"],
           "chunks": s["chunks"], "embedded": s["embedded"], "reused": s["reused"],
           "vectors": len(store), "seconds": seconds, "chunks_per_s": s["chunks_per_s"],
           "stopped": s["stopped"], "errors": s["errors"], "max_chunks_per_minute": cap}
    record = {k: out[k] for k in ("model_id", "device", "tapes", "embedded", "vectors", "seconds",
                                  "chunks_per_s", "stopped")}
    record["at"] = utc_iso()
    try:
        last = store.path / _LAST_RUN
        create_private(last)
        last.write_text(json.dumps(record, sort_keys=True) + "\n")
    except OSError:
        log.debug("cannot write %s", store.path / _LAST_RUN, exc_info=True)
    return out


def sidecar_chunks(conn, tape_ids: set[str] | None = None) -> list:
    """``Chunk``s of the sidecar notes in the index (``engram.index.sidecar``: event rows with a
    negative offset under their tape, the object in ``live_events``): their ``text`` / ``note`` /
    ``summary``. ``tape_ids`` restricts them to those tapes."""
    import orjson

    from engram.digest import text_hash
    from engram.embed.chunk import Chunk, chunk_text

    out = []
    rows = conn.execute("SELECT t.tape_id, e.ofs, l.body FROM events e JOIN tapes t ON e.tape=t.id"
                        " JOIN live_events l ON l.event=e.id WHERE e.ofs < 0"
                        " ORDER BY t.tape_id, e.ofs DESC")
    for tape_id, ofs, body in rows:
        if tape_ids is not None and tape_id not in tape_ids:
            continue
        try:
            rec = orjson.loads(body)
        except orjson.JSONDecodeError:
            continue
        texts = [rec.get(k) for k in ("text", "note", "summary")]
        part = 0
        for text in dict.fromkeys(t for t in texts if isinstance(t, str) and t.strip()):
            for piece in chunk_text(text):
                out.append(Chunk(text_hash(piece), piece, tape_id, ofs, "sidecar", part))
                part += 1
    return out


def _embed_sidecars(store: VectorStore, emb, side: list) -> int:
    """Bring the store's sidecar references (negative offsets) in line with ``side``, embedding
    the texts it lacks (``emb`` may be None when none is lacking). Returns chunks embedded."""
    stale = {t for (t,) in store._db.execute("SELECT DISTINCT tape_id FROM refs WHERE ofs < 0")}
    stale |= {c.tape_id for c in side}
    if stale:
        with store._db:
            store._db.executemany("DELETE FROM refs WHERE tape_id=? AND ofs < 0",
                                  [(t,) for t in sorted(stale)])
    if not side:
        return 0
    refs = [(c.hash, c.tape_id, c.offset) for c in side]
    missing = store.missing([c.hash for c in side])
    if missing:
        text = {c.hash: c.text for c in side}
        store.add(missing, emb.embed([text[h] for h in missing]), refs)
    else:
        store.add_refs(refs)
    return len(missing)


def _nothing_to_do(root: Path, cfg, todo: list[tuple[str, Path]],
                   side: list = ()) -> dict | None:
    """The summary of a pass with nothing to embed, when that can be told without the model: the
    store of the configured model already lists every tape under the chunker key the worker will
    use (window = the model's ``max_seq_length`` from its files, capped at 256). Else None."""
    from engram.embed.chunk import DEFAULT_OVERLAP, DEFAULT_WINDOW, chunker_key

    model = _setting(cfg, "model")
    mid = model_id_for(model)
    if mid is None or not (todo or side) or vector_count(root, mid) == 0:
        return None
    try:
        d, _name = resolve_model(model)
        msl = json.loads((d / "sentence_bert_config.json").read_text()).get("max_seq_length")
    except (EmbedUnavailable, OSError, ValueError):
        return None
    if not isinstance(msl, int) or msl <= 0:
        return None
    store = get_store(root, mid)
    key = chunker_key(min(msl, DEFAULT_WINDOW), DEFAULT_OVERLAP)
    if not all(store.tape_done(t, key) for t, _p in todo):
        return None
    if side and store.missing([c.hash for c in side]):
        return None
    run = last_run(root, mid) or {}
    dev = run.get("device") or _setting(cfg, "device") or "auto"
    return {"state": f"on ({mid}, {dev})", "model_id": mid, "device": dev,
            "store": str(store.path), "tapes": len(todo), "tapes_skipped": len(todo),
            "tapes_done": 0, "chunks": 0, "embedded": 0, "reused": 0, "vectors": len(store),
            "seconds": 0.0, "chunks_per_s": 0.0, "stopped": False, "errors": [],
            "max_chunks_per_minute": _setting(cfg, "maxChunksPerMinute")}


def _embed_tapes(*args, **kw) -> dict:
    from engram.embed.worker import embed_tapes

    return embed_tapes(*args, **kw)


def state(engine) -> dict:
    """What ``engram status`` / ``engram/status`` report; cheap (no torch import, no model load)."""
    cfg = engine.config if hasattr(engine, "config") else engine
    root = (engine.index_path.parent if hasattr(engine, "index_path")
            else cfg.index_file().parent if hasattr(cfg, "index_file") else None)
    model = _setting(cfg, "model")
    out: dict = {"enabled": _setting(cfg, "enabled", "auto"), "device": _setting(cfg, "device"),
                 "model": model}
    on, why = wanted(cfg)
    ok, reason = scorer_available(model)
    out.update({"available": ok, "reason": reason})
    mid = model_id_for(model) if ok else None
    n = vector_count(root, mid) if root is not None else 0
    emb = loaded_embedder(cfg)
    run = last_run(root, mid) if root is not None else None
    out.update({"model_id": mid, "vectors": n,
                "store": str(store_path(root, mid)) if (mid and root is not None) else None,
                "device_in_use": emb.device if emb is not None else None,
                "last_run": run})
    if not on:
        out["state"] = f"off: {why}"
    elif n == 0:
        out["state"] = "no vectors yet: run engram embed"
    else:
        dev = (emb.device if emb is not None else (run or {}).get("device")
               or _setting(cfg, "device") or "auto")
        out["state"] = f"on ({mid}, {dev})"
    out["active"] = bool(on and n)
    return out
