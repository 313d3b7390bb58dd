"""Editor settings for the language server, with defaults.

Precedence (lowest first): built-in defaults < ``initializationOptions`` < the client's
``workspace/configuration`` section ``engram`` (re-read on ``workspace/didChangeConfiguration``).
Engram's own config files (``$ENGRAM_HOME/config.yml``, ``<root>/.engram/config.yml``) are read by
the engine; the editor's ``sources``/``exclude``/``harnesses``/``embedding`` are layered on top.

Every key is checked by the one schema that also checks the config files
(``engram.config.SCHEMA``, ``validate``): an invalid value never stops the server, it falls back to
the default and a warning is returned (and logged to the client with ``window/logMessage``); a key
the schema does not know is left alone (the section also holds the client's own settings).
``apply`` puts parsed settings on the server, ``pull`` asks the client for them
(``workspace/configuration``).

Keys (camelCase as in the editor; every one optional)::

    sources: [str]            extra tape directories to ingest
    exclude: [str]            glob patterns to leave out
    harnesses: {name: {enabled: bool, paths: [str]} | false}
    index.path: str           a private index file (default: the machine's one index)
    window: {before: int, after: int, sessions: int}
                              transcript window around each anchor (Engram's config: 3/3), and
                              how many of the ranked sessions get windows (3)
    minConfidence: float      0..1 (Engram's config: 0.5)
    embedding: {enabled: true | false | auto, device: str, model: str, maxChunksPerMinute: num}
    codeLens: {enabled: bool, minSessions: int}            (true, 1)
    hover: {enabled: bool}                                  (true)
    watch: {enabled: bool, debounceMs: int}                 (true, 200)
    ingestOnStartup: bool     ingest in the background when the server starts (true)
    showNotifications: "off" | "onError" | "always"         ("onError")
    sharing: {autoPull: bool, pullInterval: seconds ≥ 60}    pull the team's tapes in the
                              background (Engram's config: false, 600); the server never pushes
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from engram import config as config_mod

log = logging.getLogger(__name__)

NOTIFICATION_LEVELS = config_mod.NOTIFICATION_LEVELS


def _default(key: str):
    return config_mod.SETTINGS[key].default


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
    code_lens_enabled: bool = _default("codeLens.enabled")
    min_sessions: int = _default("codeLens.minSessions")
    hover_enabled: bool = _default("hover.enabled")
    watch_enabled: bool = _default("watch.enabled")
    debounce_ms: int = _default("watch.debounceMs")
    ingest_on_startup: bool = _default("ingestOnStartup")
    show_notifications: str = _default("showNotifications")
    auto_pull: bool | None = None  # None: Engram's config (``sharing.autoPull``, default false)
    pull_interval: float | None = None  # None: Engram's config (``sharing.pullInterval``, 600 s)

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

    def engine_values(self) -> dict[str, Any]:
        """What the editor sets of Engram's config, as ``engram.config.apply_values`` takes it
        (already validated): layered over the config files when the engine is opened."""
        values: dict[str, Any] = {}
        if self.sources:
            values["sources"] = list(self.sources)
        if self.exclude:
            values["exclude"] = list(self.exclude)
        if self.harnesses:
            values["harnesses"] = self.harnesses
        for key, value in self.embedding.items():
            values[f"embedding.{key}"] = value
        return values


# schema key -> Settings field (embedding.* go to ``embedding``)
_FIELDS = {
    "sources": "sources",
    "exclude": "exclude",
    "harnesses": "harnesses",
    "index.path": "index_path",
    "window.before": "before",
    "window.after": "after",
    "window.sessions": "window_sessions",
    "min_confidence": "min_confidence",
    "codeLens.enabled": "code_lens_enabled",
    "codeLens.minSessions": "min_sessions",
    "hover.enabled": "hover_enabled",
    "watch.enabled": "watch_enabled",
    "watch.debounceMs": "debounce_ms",
    "ingestOnStartup": "ingest_on_startup",
    "showNotifications": "show_notifications",
    "sharing.autoPull": "auto_pull",
    "sharing.pullInterval": "pull_interval",
}


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
    """Validate raw options into ``Settings`` (``engram.config.validate``, the editor's keys);
    returns the settings and warnings for the values left out."""
    values, warnings = config_mod.validate(_unwrap(options), config_mod.EDITOR, "editor settings")
    fields: dict[str, Any] = {}
    embedding: dict[str, Any] = {}
    for key, value in values.items():
        if key.startswith("embedding."):
            embedding[key.partition(".")[2]] = value
        elif key in ("sources", "exclude"):
            fields[_FIELDS[key]] = tuple(value)
        else:
            fields[_FIELDS[key]] = value
    if embedding:
        fields["embedding"] = embedding
    return dataclasses.replace(Settings(), **fields), warnings


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
