"""Harness adapters, one module per harness. ``get(name)`` / ``all_adapters()`` import lazily."""

from __future__ import annotations

import importlib

from engram.adapters.base import Adapter

#: harness name → module under ``engram.adapters`` (each defines ``ADAPTER``, an Adapter instance)
REGISTRY: dict[str, str] = {
    "claude_code": "claude_code",
    "codex": "codex",
    "gemini_cli": "gemini_cli",
    "opencode": "opencode",
    "cursor": "cursor",
    "openclaw": "openclaw",
    "aider": "aider",
    "engram_sdk": "engram_sdk",  # custom agents logging through engram.sdk.Session
}


def get(name: str) -> Adapter:
    if name not in REGISTRY:
        raise KeyError(f"unknown harness {name!r}; known: {', '.join(sorted(REGISTRY))}")
    mod = importlib.import_module(f"engram.adapters.{REGISTRY[name]}")
    return mod.ADAPTER


def available() -> list[str]:
    """Harness names whose adapter module exists and imports."""
    out = []
    for name in REGISTRY:
        try:
            get(name)
        except ImportError:
            continue
        out.append(name)
    return out


def all_adapters() -> list[Adapter]:
    return [get(n) for n in available()]
