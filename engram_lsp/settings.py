"""Editor settings for the language server, with defaults.

Precedence (lowest first): built-in defaults < ``initializationOptions`` < the client's
``workspace/configuration`` section ``engram`` (re-read on ``workspace/didChangeConfiguration``).
Engram's own config files (``$ENGRAM_HOME/config.yml``, ``<root>/.engram/config.yml``) are read by
the engine; the editor's ``sources``/``exclude``/``harnesses``/``embedding`` are layered on top.

An invalid value never stops the server: it falls back to the default and a warning is returned
(and logged to the client with ``window/logMessage``). ``apply`` puts parsed settings on the
server, ``pull`` asks the client for them (``workspace/configuration``).

Keys (camelCase as in the editor; every one optional)::

    sources: [str]            extra tape/log sources to ingest
    exclude: [str]            glob patterns to leave out
    harnesses: {name: {enabled: bool, paths: [str]}}
    indexPath: str            index file (default <root>/.engram-cache/index.sqlite)
    window: {before: int, after: int, sessions: int}
                              transcript window around each anchor (3/3), and how many of the
                              ranked sessions get windows (3)
    minConfidence: float      0..1 (0.5)
    embedding: {enabled: bool, device: str, model: str}
    codeLens: {enabled: bool, minSessions: int}            (true, 1)
    hover: {enabled: bool}                                  (true)
    watch: {enabled: bool, debounceMs: int}                 (true, 200)
    ingestOnStartup: bool     ingest in the background when the server starts (true)
    showNotifications: "off" | "onError" | "always"         ("onError")
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

log = logging.getLogger(__name__)

NOTIFICATION_LEVELS = ("off", "onError", "always")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Typed, validated editor settings; see the module docstring for each key."""

    sources: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    harnesses: dict[str, Any] = dataclasses.field(default_factory=dict)
    index_path: str | None = None
    before: int | None = None  # None: Engram's config (default 3)
    after: int | None = None
    window_sessions: int | None = None  # None: Engram's config (default 3)
    min_confidence: float | None = None  # None: Engram's config (default 0.5)
    embedding: dict[str, Any] = dataclasses.field(default_factory=dict)
    code_lens_enabled: bool = True
    min_sessions: int = 1
    hover_enabled: bool = True
    watch_enabled: bool = True
    debounce_ms: int = 200
    ingest_on_startup: bool = True
    show_notifications: str = "onError"

    def engine_key(self) -> tuple:
        """The settings that require a new Engine (and a re-ingest) when they change.

        ``window`` and ``minConfidence`` are not among them: they are passed with each explain.
        """
        return (
            self.sources,
            self.exclude,
            repr(sorted(self.harnesses.items())),
            self.index_path,
            repr(sorted(self.embedding.items())),
        )


def _unwrap(options: Any) -> dict:
    """Accept ``{...}`` or ``{"engram": {...}}``; anything else is empty."""
    if not isinstance(options, dict):
        return {}
    inner = options.get("engram")
    if isinstance(inner, dict):
        return inner
    return options


def merge(*layers: Any) -> dict:
    """Deep-merge option dicts, later layers winning."""
    out: dict = {}
    for layer in layers:
        for key, value in _unwrap(layer).items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            elif value is not None:
                out[key] = value
    return out


def parse(options: Any) -> tuple[Settings, list[str]]:
    """Validate raw options into ``Settings``; returns the settings and warnings for bad keys."""
    raw = _unwrap(options)
    warnings: list[str] = []
    d = Settings()
    values: dict[str, Any] = {}

    def bad(key: str, value: Any, expected: str) -> None:
        warnings.append(f"engram.{key}: expected {expected}, got {value!r}; using the default")

    def str_list(key: str, field: str) -> None:
        if key not in raw:
            return
        v = raw[key]
        if isinstance(v, str):
            v = [v]
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            values[field] = tuple(v)
        else:
            bad(key, v, "a list of strings")

    def dict_of(key: str, field: str) -> None:
        if key not in raw:
            return
        v = raw[key]
        if isinstance(v, dict):
            values[field] = dict(v)
        else:
            bad(key, v, "an object")

    def integer(container: dict, key: str, field: str, lo: int, hi: int, label: str) -> None:
        if key not in container:
            return
        v = container[key]
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or int(v) != v
            or not lo <= v <= hi
        ):
            bad(label, v, f"an integer in [{lo}, {hi}]")
        else:
            values[field] = int(v)

    def boolean(container: dict, key: str, field: str, label: str) -> None:
        if key not in container:
            return
        v = container[key]
        if isinstance(v, bool):
            values[field] = v
        else:
            bad(label, v, "true or false")

    def section(key: str) -> dict:
        v = raw.get(key, {})
        if isinstance(v, dict):
            return v
        bad(key, v, "an object")
        return {}

    str_list("sources", "sources")
    str_list("exclude", "exclude")
    dict_of("harnesses", "harnesses")
    dict_of("embedding", "embedding")
    if "indexPath" in raw:
        v = raw["indexPath"]
        if isinstance(v, str) and v.strip():
            values["index_path"] = v
        elif v not in (None, ""):
            bad("indexPath", v, "a path")
    window = section("window")
    integer(window, "before", "before", 0, 1000, "window.before")
    integer(window, "after", "after", 0, 1000, "window.after")
    integer(window, "sessions", "window_sessions", 0, 1000, "window.sessions")
    if "minConfidence" in raw:
        v = raw["minConfidence"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            bad("minConfidence", v, "a number in [0, 1]")
        else:
            values["min_confidence"] = float(v)
    lens = section("codeLens")
    boolean(lens, "enabled", "code_lens_enabled", "codeLens.enabled")
    integer(lens, "minSessions", "min_sessions", 1, 1_000_000, "codeLens.minSessions")
    boolean(section("hover"), "enabled", "hover_enabled", "hover.enabled")
    watch = section("watch")
    boolean(watch, "enabled", "watch_enabled", "watch.enabled")
    integer(watch, "debounceMs", "debounce_ms", 0, 60_000, "watch.debounceMs")
    boolean(raw, "ingestOnStartup", "ingest_on_startup", "ingestOnStartup")
    if "showNotifications" in raw:
        v = raw["showNotifications"]
        if v in NOTIFICATION_LEVELS:
            values["show_notifications"] = v
        else:
            bad("showNotifications", v, " | ".join(NOTIFICATION_LEVELS))
    return dataclasses.replace(d, **values), warnings


# --- on the server -----------------------------------------------------------------------------


def apply(ls, raw, *, announce: bool = True) -> list[str]:
    """Parse ``raw`` into ``ls.settings``; warnings go to the log (or wait for ``initialized``)."""
    parsed, warnings = parse(merge(raw or {}))
    ls.settings = parsed
    if ls.backend is not None and parsed.engine_key() == ls.backend.settings.engine_key():
        ls.backend.settings = parsed
    if announce:
        for w in warnings:
            log.warning("%s", w)
    else:
        ls._init_warnings = warnings
    return warnings


async def pull(ls) -> bool:
    """Ask the client for section ``engram`` when it supports ``workspace/configuration``."""
    from lsprotocol import types

    caps = ls.client_capabilities
    if not (caps and caps.workspace and caps.workspace.configuration):
        return False
    try:
        result = await asyncio.wait_for(
            ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="engram")])
            ),
            timeout=5.0,
        )
    except Exception as exc:  # a client that cannot answer keeps the init options
        log.warning("workspace/configuration failed: %s", exc)
        return False
    log.debug("workspace/configuration: %r", result)
    section = result[0] if isinstance(result, (list, tuple)) and result else None
    if section is not None and not isinstance(section, dict):
        from engram_lsp.params import plain

        section = plain(section)
    apply(ls, merge(ls.init_options or {}, section or {}))
    return True
