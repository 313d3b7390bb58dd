"""Config: defaults, precedence, unions, invalid files fall back to defaults with a warning; one
schema (``engram.config.SCHEMA``) for the config files and the language server's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engram import config
from engram_lsp import settings as lsp_settings


def test_defaults_with_no_files(tmp_path):
    (tmp_path / ".git").mkdir()
    cfg = config.load(tmp_path)
    assert cfg.root == tmp_path.resolve()
    assert cfg.seal_after == 600 and cfg.mode == "permissive" and cfg.warnings == []
    assert cfg.harness_paths("claude_code", [Path("/default")]) == [Path("/default")]


def test_merge_global_and_repo(tmp_path, engram_home):
    (tmp_path / ".engram").mkdir()
    (engram_home / "config.yml").write_text(
        "sources: [/g/tapes]\nexclude: ['*.bak']\nharnesses:\n  codex: {paths: [/g/codex]}\nseal_after: 30\n")
    (tmp_path / ".engram" / "config.yml").write_text(
        "sources: [shared-tapes]\nexclude: ['**/scratch/*']\nharnesses:\n  codex: {paths: [/r/codex]}\n"
        "  aider: false\nseal_after: 60\n")
    cfg = config.load(tmp_path)
    assert cfg.sources == ["/g/tapes", "shared-tapes"]
    assert cfg.source_dirs() == [Path("/g/tapes"), tmp_path.resolve() / "shared-tapes"]
    assert cfg.exclude == ["*.bak", "**/scratch/*"]
    assert cfg.harness_paths("codex", []) == [Path("/g/codex"), Path("/r/codex")]
    assert cfg.harness_paths("aider", [Path("/x")]) == []
    assert cfg.seal_after == 60  # the repo file wins for scalars
    assert cfg.is_excluded(Path("/a/b/file.bak"))


def test_invalid_yaml_reports_file_and_line(tmp_path):
    (tmp_path / ".engram").mkdir()
    (tmp_path / ".engram" / "config.yml").write_text("harnesses:\n  codex: [\n")
    cfg = config.load(tmp_path)
    assert cfg.harnesses == {} and len(cfg.warnings) == 1
    assert "config.yml" in cfg.warnings[0] and "invalid YAML" in cfg.warnings[0]


def test_wrong_types_fall_back(tmp_path):
    (tmp_path / ".engram").mkdir()
    (tmp_path / ".engram" / "config.yml").write_text("sources: 3\nseal_after: soon\nmode: yolo\n")
    cfg = config.load(tmp_path)
    assert cfg.sources == [] and cfg.seal_after == 600 and cfg.mode == "permissive"
    assert len(cfg.warnings) == 3


def test_env_overrides_files(tmp_path, monkeypatch):
    (tmp_path / ".engram").mkdir()
    (tmp_path / ".engram" / "config.yml").write_text("seal_after: 60\n")
    monkeypatch.setenv("ENGRAM_SEAL_AFTER", "5")
    assert config.load(tmp_path).seal_after == 5


def test_init_writes_commented_config_and_gitignore(tmp_path):
    (tmp_path / ".gitignore").write_text("node_modules/")
    res = config.init_repo(tmp_path)
    assert res["created"] and res["gitignore_updated"]
    text = (tmp_path / ".engram" / "config.yml").read_text()
    assert text.startswith("#") and "harnesses:" in text
    assert (tmp_path / ".gitignore").read_text() == "node_modules/\n.engram/tapes/\n.engram-cache/\n"
    res2 = config.init_repo(tmp_path)  # idempotent, never overwrites
    assert not res2["created"] and not res2["gitignore_updated"]
    assert config.load(tmp_path).warnings == []


# -- one schema for the config files and the editor's settings ------------------------------------


def _messages(warnings: list[str]) -> list[str]:
    """The warnings without their origin (the file, or ``editor settings``)."""
    return sorted(w.split(": ", 1)[1] for w in warnings)


def test_the_config_file_and_the_editor_go_through_one_schema(tmp_path):
    bad = {"window": {"before": -1, "after": 2}, "minConfidence": 7, "sources": 3,
           "embedding": {"enabled": "maybe", "device": "cpu"}}
    (tmp_path / ".engram").mkdir()
    (tmp_path / ".engram" / "config.yml").write_text(yaml.safe_dump(bad))
    cfg = config.load(tmp_path)
    settings, warnings = lsp_settings.parse(bad)
    assert _messages(cfg.warnings) == _messages(warnings)
    assert _messages(warnings) == [
        "embedding.enabled: expected true, false or auto, got 'maybe'; ignored",
        "minConfidence: expected a number in [0, 1], got 7; ignored",
        "sources: expected a list of strings, got 3; ignored",
        "window.before: expected an integer in [0, 1000], got -1; ignored",
    ]
    assert all(w.startswith(str(tmp_path / ".engram" / "config.yml")) for w in cfg.warnings)
    assert all(w.startswith("editor settings: ") for w in warnings)
    # what was valid applies, the rest keeps its default
    assert (cfg.window_before, cfg.window_after, cfg.min_confidence) == (3, 2, 0.5)
    assert cfg.sources == [] and cfg.embedding["enabled"] == "auto"
    assert cfg.embedding["device"] == "cpu"
    assert (settings.before, settings.after, settings.min_confidence) == (None, 2, None)
    assert settings.sources == () and settings.embedding == {"device": "cpu"}


@pytest.mark.parametrize("setting", config.SCHEMA, ids=lambda s: s.key)
def test_a_wrong_value_of_any_setting_is_reported_and_left_out(setting):
    where = config.FILE if config.FILE in setting.where else config.EDITOR
    section, _, name = setting.key.rpartition(".")
    data = {section: {name: [1, 2]}} if section else {name: [1, 2]}
    values, warnings = config.validate(data, where, "here")
    assert setting.key not in values
    assert len(warnings) == 1 and warnings[0].startswith(f"here: {setting.key}: expected")


def test_where_a_setting_may_be_set_is_checked(tmp_path):
    (tmp_path / ".engram").mkdir()
    (tmp_path / ".engram" / "config.yml").write_text(
        "codeLens: {enabled: false}\nseal-after: 30\nwindow: {befor: 2}\n")
    assert _messages(config.load(tmp_path).warnings) == [
        "codeLens.enabled: is set in the editor's settings, not in a config file; ignored",
        "seal-after: unknown setting; ignored",
        "window.befor: unknown setting; ignored",
    ]
    # the editor's section also holds the client's own settings: those are not reported
    settings, warnings = lsp_settings.parse(
        {"seal_after": 30, "server": {"path": "/usr/bin/engram-lsp"}, "trace": {"server": "off"}})
    assert _messages(warnings) == [
        "seal_after: is set in a config file, not in the editor's settings; ignored"]
    assert settings == lsp_settings.Settings()


def test_harnesses_are_checked_one_by_one(tmp_path):
    (tmp_path / ".engram").mkdir()
    (tmp_path / ".engram" / "config.yml").write_text(
        "harnesses:\n  codex: {paths: [/c], enabled: sometimes}\n  aider: 3\n  claude_code: false\n"
        "  gemini_cli: {paths: [/g], colour: blue}\n")
    cfg = config.load(tmp_path)
    assert _messages(cfg.warnings) == [
        "harnesses.aider: expected {enabled, paths} or false, got 3; ignored",
        "harnesses.codex.enabled: expected true or false, got 'sometimes'; ignored",
        "harnesses.gemini_cli.colour: expected one of enabled, paths, got 'blue'; ignored",
    ]
    assert cfg.harness_paths("codex", []) == [Path("/c")]
    assert cfg.harness_paths("claude_code", [Path("/x")]) == []
    assert cfg.harness_paths("gemini_cli", []) == [Path("/g")]
    assert "aider" not in cfg.harnesses


def test_editor_settings_are_layered_over_the_files_checked_once(tmp_path):
    (tmp_path / ".engram").mkdir()
    (tmp_path / ".engram" / "config.yml").write_text(
        "sources: [/a]\nharnesses:\n  codex: {paths: [/c1]}\n")
    cfg = config.load(tmp_path)
    settings, warnings = lsp_settings.parse({"engram": {
        "sources": "/b", "harnesses": {"codex": {"paths": ["/c2"]}, "aider": False},
        "embedding": {"enabled": "yes", "maxChunksPerMinute": None},
        "codeLens": {"minSessions": 2}, "watch": {"debounceMs": 50}}})
    assert warnings == []
    assert (settings.min_sessions, settings.debounce_ms, settings.sources) == (2, 50, ("/b",))
    config.apply_values(cfg, settings.engine_values())
    assert cfg.sources == ["/a", "/b"]  # a union, as between the files
    assert cfg.harness_paths("codex", []) == [Path("/c1"), Path("/c2")]
    assert cfg.harness_paths("aider", [Path("/x")]) == []
    assert cfg.embedding["enabled"] is True and cfg.embedding["maxChunksPerMinute"] is None
    assert cfg.warnings == []


def test_a_bad_environment_value_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGRAM_SEAL_AFTER", "-5")
    cfg = config.load(tmp_path)
    assert cfg.seal_after == 600 and len(cfg.warnings) == 1 and "ENGRAM_SEAL_AFTER" in cfg.warnings[0]
