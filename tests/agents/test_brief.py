"""engram brief: notes warnings first, the latest work's causal chain, recent changes, within a
token budget; and engram init --agents (the marked AGENTS.md section)."""

from __future__ import annotations

from conftest import run, run_json

from engram.agents import agents_md
from engram.agents.brief import estimate_tokens


def test_brief_orders_notes_then_chain_then_changes(world, capsys):
    run_json(capsys, "note", "net.py:16-19", "--kind", "todo", "use zlib.crc32 instead")
    run_json(capsys, "note", "net.py:4-12", "--kind", "decision", "three retries, agreed with ops")
    run_json(capsys, "note", "net.py:4-12", "--kind", "warning", "never retry forever: the pager fires")
    code, md, _err = run(capsys, "brief", "net.py")
    assert code == 0
    assert md.startswith("# Engram brief: net.py\n")
    w, d, t = md.index("**WARNING**"), md.index("**DECISION**"), md.index("**TODO**")
    assert w < d < t < md.index("## Latest work") < md.index("## Recent changes")
    assert "- request: “add a connect helper with retries to net.py”" in md
    assert "`pytest -q tests/test_net.py` → exit 0" in md
    assert "- `net.py` — 1 edit, 2026-01-05 09:00 · claude_code" in md

    res = run_json(capsys, "brief", "net.py", "--json")
    kinds = [i["kind"] for i in res["items"]]
    assert kinds == ["warning", "decision", "todo", "chain", "edit"]
    assert res["tokens"] == estimate_tokens(md) and res["tokens"] <= 1500
    assert all(i["stale"] is False for i in res["items"])


def test_brief_flags_possibly_stale_and_respects_the_budget(world, capsys):
    run_json(capsys, "note", "net.py:4-12", "--kind", "warning", "timeout 5 s matches the proxy")
    net = world.root / "net.py"
    net.write_text(net.read_text().replace("timeout=5.0", "timeout=60.0"))
    code, md, _ = run(capsys, "brief", "net.py")
    assert "**[POSSIBLY STALE]** (8 of 9 lines unchanged; now lines 4-12)" in md
    for i in range(30):
        run_json(capsys, "note", "net.py:16-19", "--kind", "discovery", f"observation number {i} " * 8)
    res = run_json(capsys, "brief", "net.py", "--json", "--budget", "300")
    assert res["tokens"] <= 300 and res["left_out"]["notes"] > 0
    for budget in (50, 51, 77, 120, 199, 333, 640, 1000):
        res = run_json(capsys, "brief", "net.py", "--json", "--budget", budget)
        assert res["tokens"] <= budget, (budget, res["tokens"])
    many = run_json(capsys, "brief", *[f"src/m{i}.py" for i in range(100)], "--json", "--budget", 50)
    assert many["tokens"] <= 50
    assert res["items"][0]["kind"] == "warning" and res["items"][0]["stale"] is True


def test_brief_without_paths_is_the_repository_and_unknown_paths_are_empty(world, capsys):
    code, md, _ = run(capsys, "brief")
    assert md.startswith("# Engram brief: this repository") and "`net.py`" in md
    code, md, _ = run(capsys, "brief", "docs/")
    assert "No notes and no logged sessions touched these paths." in md


def test_brief_bad_budget_is_a_usage_error(world, capsys):
    import pytest

    with pytest.raises(SystemExit) as e:
        run(capsys, "brief", "--budget", "ten")
    assert e.value.code == 2
    assert "expected a number of tokens, got 'ten'" in capsys.readouterr().err


def test_estimate_is_conservative_on_plain_prose():
    # ~4 characters a token is the usual figure for English; the estimate must count more
    text = "The quick brown fox jumps over the lazy dog. " * 20
    assert estimate_tokens(text) >= len(text) / 4


def test_init_agents_writes_the_section_once(world, capsys):
    (world.root / "CLAUDE.md").write_text("# Team rules\n\nUse tabs.\n")
    res = run_json(capsys, "init", "--agents")
    files = {f["path"].rsplit("/", 1)[1]: f for f in res["agents"]["files"]}
    assert files["AGENTS.md"]["created"] and files["CLAUDE.md"]["changed"]
    claude = (world.root / "CLAUDE.md").read_text()
    assert claude.startswith("# Team rules\n\nUse tabs.\n\n" + agents_md.BEGIN)
    assert "engram brief" in claude and claude.endswith(agents_md.END + "\n")
    before = {p: (world.root / p).read_text() for p in ("AGENTS.md", "CLAUDE.md")}
    res = run_json(capsys, "init", "--agents")
    assert [f["changed"] for f in res["agents"]["files"]] == [False, False]
    assert {p: (world.root / p).read_text() for p in before} == before
    # an older section is replaced in place; the user's text around it stays
    old = before["CLAUDE.md"].replace("leave a note on the code", "OLD WORDING") + "\nMore rules.\n"
    (world.root / "CLAUDE.md").write_text(old)
    run_json(capsys, "init", "--agents")
    assert (world.root / "CLAUDE.md").read_text() == before["CLAUDE.md"] + "\nMore rules.\n"
