"""Config: defaults, precedence, unions, invalid files fall back to defaults with a warning."""

from __future__ import annotations

from pathlib import Path

from engram import config


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
    assert (tmp_path / ".gitignore").read_text() == "node_modules/\n.engram-cache/\n"
    res2 = config.init_repo(tmp_path)  # idempotent, never overwrites
    assert not res2["created"] and not res2["gitignore_updated"]
    assert config.load(tmp_path).warnings == []
