"""``engram embed`` end to end on the real Claude Code fixtures (bundled model on CPU), plus the
``embedding.enabled: false`` no-op and the status report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from claude_log import run_json

from engram.embed.model import available
from engram.paths import index_dir

DATA = Path(__file__).resolve().parents[1] / "data" / "harness" / "claude_code"


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    logs = tmp_path / "logs"
    # the small fixtures (the 2.6 MB compaction log alone takes ~40 s to embed on 2 cores)
    shutil.copytree(DATA, logs, ignore=shutil.ignore_patterns("*.md", "*compaction*"))
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".engram").mkdir()
    cfg = f"harnesses:\n  claude_code:\n    paths: [{logs}]\n"
    for name in ("codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider"):
        cfg += f"  {name}: false\n"
    (root / ".engram" / "config.yml").write_text(cfg)
    monkeypatch.chdir(root)
    return root


def test_embed_disabled_is_a_clear_no_op(repo, capsys):
    with open(repo / ".engram" / "config.yml", "a") as f:
        f.write("embedding:\n  enabled: false\n")
    run_json(capsys, "ingest", "--seal")
    res = run_json(capsys, "embed")
    assert res["embedded"] == 0 and res["state"] == "off: embedding.enabled is false"
    assert "nothing embedded" in res["message"]
    assert not (index_dir() / "vectors").exists()
    st = run_json(capsys, "status")
    assert st["embedding"]["state"] == "off: embedding.enabled is false"


@pytest.mark.skipif(not available()[0], reason="embed extra not installed")
def test_embed_end_to_end(repo, capsys):
    with open(repo / ".engram" / "config.yml", "a") as f:
        f.write("embedding:\n  device: cpu\n")
    run_json(capsys, "ingest", "--seal")
    st = run_json(capsys, "status")
    assert st["embedding"]["state"] == "no vectors yet: run engram embed"
    assert st["embedding"]["vectors"] == 0
    first = run_json(capsys, "embed")
    assert first["state"] == "on (all-MiniLM-L6-v2-384d, cpu)"
    assert first["model_id"] == "all-MiniLM-L6-v2-384d" and first["device"] == "cpu"
    assert first["tapes"] == st["counts"]["tapes"] and first["embedded"] > 0
    assert first["vectors"] == first["embedded"] and not first["errors"]
    store = Path(first["store"])
    assert store == index_dir() / "vectors" / "all-MiniLM-L6-v2-384d"
    assert (store / "manifest.json").is_file() and (store / "vectors.f16").is_file()
    again = run_json(capsys, "embed")  # resumable: everything is done already
    assert again["embedded"] == 0 and again["tapes_skipped"] == again["tapes"]
    assert again["vectors"] == first["vectors"]
    st = run_json(capsys, "status")["embedding"]
    assert st["vectors"] == first["vectors"] and st["state"].startswith("on (all-MiniLM-L6-v2")
    assert st["last_run"]["device"] == "cpu"
    res = run_json(capsys, "search", "write a program that greets the world")
    assert res["semantic"].startswith("on (") and res["stats"]["semantic_hits"] > 0
    assert any(r["signals"]["semantic"] is not None for r in res["results"])
    # explain: the CLI adds semantic sessions only on request; fingerprint evidence is unchanged
    (repo / "hello.py").write_text('#!/usr/bin/env python3\n\ndef main():\n    print("Hello, World!")\n')
    plain = run_json(capsys, "explain", "hello.py:3-4", "--brief")
    hybrid = run_json(capsys, "explain", "hello.py:3-4", "--brief", "--semantic")
    assert "semantic_added" not in plain["stats"] and "semantic_added" in hybrid["stats"]
    direct = [s for s in hybrid["sessions"] if s["via"] != "semantic"]
    assert [s["tape_id"] for s in direct] == [s["tape_id"] for s in plain["sessions"]]
    assert all(s["signals"]["semantic"] is not None for s in hybrid["sessions"] if s["via"] == "semantic")


@pytest.mark.skipif(not available()[0], reason="embed extra not installed")
def test_sidecar_notes_are_embedded(repo, capsys):
    for p in (repo.parent / "logs").glob("*.jsonl"):  # one small session is enough here
        if "thinking" not in p.name:
            p.unlink()
    run_json(capsys, "ingest", "--seal")
    row = run_json(capsys, "tapes")[0]
    tape, tape_dir = row["tape_id"], Path(row["path"]).parent
    note = ("Reviewer decision: wheels must be signed with the project's GPG key before they are "
            "uploaded; the release checklist lives in the wiki.")
    (tape_dir / f"{tape}.sidecar.jsonl").write_text(
        json.dumps({"text": note, "at": 1, "ticket": "REL-7"}) + "\n")
    assert run_json(capsys, "ingest").get("sidecars") == 1
    first = run_json(capsys, "embed")
    assert first["embedded"] > 0
    res = run_json(capsys, "search", "signing wheels with a GPG key before uploading")
    top = res["results"][0]
    assert top["tape_id"] == tape and top["signals"]["semantic"] is not None
    win = top["windows"][0]
    assert win["source"] == "enrichment" and win["enrichment"]["ticket"] == "REL-7"
    assert win["anchor"] == 1 and win["events"]
    # a second pass keeps the note's reference without loading anything new
    again = run_json(capsys, "embed")
    assert again["embedded"] == 0
    res2 = run_json(capsys, "search", "signing wheels with a GPG key before uploading")
    assert res2["results"][0]["windows"] == res["results"][0]["windows"]
