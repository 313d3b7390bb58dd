"""``engram log / show / review / stats / graph / export`` on real git repositories and real
Claude Code logs (``tests/claude_log.py``), through the real CLI (``engram.cli.main``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from claude_log import World

from engram.cli import main

A = '''def load_settings(path):
    """Read the TOML settings file and apply environment overrides."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    for key, value in os.environ.items():
        if key.startswith("APP_"):
            data[key[4:].lower()] = value
    return data
'''
B = '''def connect_database(settings, *, retries=3):
    """Open the connection pool described by the settings, retrying while the server starts."""
    for attempt in range(retries):
        try:
            return Pool(settings["dsn"], min_size=2, max_size=settings.get("pool", 10))
        except ConnectionRefused:
            time.sleep(2 ** attempt)
    raise DatabaseUnavailable(settings["dsn"])
'''
HAND = '''def summarize_ledger(entries, cutoff):
    """Totals per account above the cutoff, typed in by a person."""
    totals = {}
    for account, amount in entries:
        if amount > cutoff:
            totals[account] = totals.get(account, 0) + amount
    return sorted(totals.items())
'''


def git(root, *args, env=None):
    e = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
         "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com", **(env or {})}
    return subprocess.run(["git", *args], cwd=root, env=e, check=True, capture_output=True,
                          text=True).stdout


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def run_json(capsys, *argv):
    return json.loads(run(capsys, *argv))


def fail(capsys, *argv) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A real git repository with two agent sessions, a hand-written commit and their logs."""
    w = World(tmp_path)
    shutil.rmtree(w.root / ".git")
    git(w.root, "init", "-q", "-b", "main")
    monkeypatch.chdir(w.root)
    s1 = w.session(name="s1").user("add a settings loader").say("I will read the TOML file.")
    s1.write("app/settings.py", A).save()
    w.checkout()
    git(w.root, "add", "app/settings.py")
    git(w.root, "commit", "-q", "-m", "settings loader")
    s2 = w.session(name="s2").user("connect to the database with retries")
    s2.say("Retry with exponential backoff while the server starts.")
    s2.write("app/db.py", B).save()
    w.checkout()
    git(w.root, "add", "app/db.py")
    git(w.root, "commit", "-q", "-m", "database connection")
    (w.root / "app" / "ledger.py").write_text(HAND)
    git(w.root, "add", "app/ledger.py")
    git(w.root, "commit", "-q", "-m", "ledger summary (by hand)")
    assert main(["ingest", "--seal"]) == 0
    w.s1, w.s2 = s1.sid, s2.sid
    return w


def by_subject(res):
    return {c["subject"]: c for c in res["commits"]}


def test_log_attributes_commits_to_their_sessions_and_hand_commits_to_none(repo, capsys):
    res = run_json(capsys, "log")
    c = by_subject(res)
    assert len(res["commits"]) == 3
    assert [s["session"] for s in c["settings loader"]["sessions"]] == [repo.s1]
    assert [s["session"] for s in c["database connection"]["sessions"]] == [repo.s2]
    assert c["ledger summary (by hand)"]["sessions"] == []
    assert c["ledger summary (by hand)"]["agent_lines"] == 0
    db = c["database connection"]
    assert db["added_lines"] == 8 and db["agent_lines"] == 8 and db["agent_share"] == 1.0
    s = db["sessions"][0]
    assert s["harness"] == "claude_code" and s["label"] == "connect to the database with retries"
    # -n and --agent, and the same answer from the cache
    assert len(run_json(capsys, "log", "-n", "1")["commits"]) == 1
    assert {x["subject"] for x in run_json(capsys, "log", "--agent", "claude")["commits"]} == {
        "settings loader", "database connection"}
    assert run_json(capsys, "log") == res
    pretty = run(capsys, "log", "--pretty")
    assert "◆" in pretty and "○" in pretty


def test_attribution_survives_rebase_squash_and_reformatting(repo, capsys):
    root = repo.root
    # a formatter run over the agent's file: whitespace only
    text = (root / "app" / "db.py").read_text().replace("    ", "  ")
    (root / "app" / "db.py").write_text(text)
    git(root, "commit", "-q", "-am", "reformat")
    # squash the whole history into one commit on a new branch
    git(root, "checkout", "-q", "--orphan", "squashed")
    git(root, "commit", "-q", "-m", "everything, squashed")
    res = by_subject(run_json(capsys, "log", "squashed"))["everything, squashed"]
    assert {s["session"] for s in res["sessions"]} == {repo.s1, repo.s2}
    assert res["hand_lines"] == 7  # the ledger
    # the reformatting commit still names the session that wrote the text
    c = by_subject(run_json(capsys, "log", "main"))["reformat"]
    assert [s["session"] for s in c["sessions"]] == [repo.s2]
    # amend (a new sha, same content): the same session
    git(root, "checkout", "-q", "main")
    git(root, "commit", "-q", "--amend", "-m", "reformat, amended")
    c = by_subject(run_json(capsys, "log"))["reformat, amended"]
    assert [s["session"] for s in c["sessions"]] == [repo.s2]


def test_show_commit_head_and_tape(repo, capsys):
    res = run_json(capsys, "show", "HEAD~1")
    c = res["commit"]
    assert c["subject"] == "database connection"
    assert c["files"][0]["path"] == "app/db.py"
    s = c["sessions"][0]
    assert s["session"] == repo.s2
    assert any("backoff" in (x["reasoning"] or "") for x in s["reasoning"])
    assert s["tokens"] is not None
    # a tape id still shows the tape
    tape = s["tape_id"]
    shown = run_json(capsys, "show", tape)
    assert shown["tape_id"] == tape and shown["events"]


def test_review_json_and_markdown(repo, capsys):
    res = run_json(capsys, "review", "HEAD~2..HEAD")
    assert res["range"] == "HEAD~2..HEAD"
    assert len(res["commits"]) == 2
    assert res["no_session_commits"] == [by_subject(res)["ledger summary (by hand)"]["sha"]]
    assert res["agent_share"] == round(8 / 15, 4)
    assert {f["path"] for f in res["files"]} == {"app/db.py", "app/ledger.py"}
    md = run(capsys, "review", "HEAD~2..HEAD", "--markdown")
    assert md.startswith("## Engram provenance") and "<details>" in md and "○" in md and "◆" in md


def test_review_markdown_truncates_at_the_limit(repo):
    from engram.commits import review

    c = {"sha": "a" * 40, "subject": "x" * 300, "agent_share": 1.0, "sessions": [], "files": [
        {"path": f"f{i}.py", "added_lines": 1, "agent_lines": 0} for i in range(200)]}
    r = {"range": "A..B", "agent_share": 0.5, "added_lines": 2, "agent_lines": 1, "commits": [c] * 500,
         "no_session_commits": [], "sessions": [], "dead_ends": [], "warnings": []}
    md = review.markdown(r)
    assert len(md) <= review.MAX_MARKDOWN
    assert "… truncated:" in md


def test_dead_ends_are_edits_that_do_not_survive(repo, capsys):
    w = repo
    s3 = w.session(name="s3").user("try a cache for the settings")
    s3.write("app/cache.py", "def cached_settings(path):\n    global SETTINGS_CACHE\n"
             "    SETTINGS_CACHE = SETTINGS_CACHE or load_settings(path)\n    return SETTINGS_CACHE\n")
    s3.write("app/cache.py", "def cached_settings(path):\n    return load_settings(path)\n").save()
    w.checkout()
    git(w.root, "add", "app/cache.py")
    git(w.root, "commit", "-q", "-m", "cache")
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()
    res = run_json(capsys, "review", "HEAD~1..HEAD")
    assert [d["file"] for d in res["dead_ends"]] == ["app/cache.py"]
    assert (res["dead_ends"][0]["lines_written"], res["dead_ends"][0]["lines_surviving"]) == (4, 1)


def test_trailers_and_the_prepare_commit_msg_hook(repo, capsys):
    from engram.commits import hooks

    w = repo
    got = hooks.install(w.root)
    assert os.access(got["hook"], os.X_OK)
    s4 = w.session(name="s4").user("add a health check")
    s4.write("app/health.py", "def health_check(pool):\n    \"\"\"Ping the pool; True when it answers.\"\"\"\n"
             "    return pool.execute(\"SELECT 1\") == 1\n").save()
    w.checkout()
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()
    git(w.root, "add", "app/health.py")
    git(w.root, "commit", "-q", "-m", "health check")
    body = git(w.root, "log", "-1", "--format=%B")
    assert f"Engram-Session: {s4.sid}" in body
    c = run_json(capsys, "log", "-n", "1")["commits"][0]
    assert c["trailers"] == [s4.sid]
    assert c["sessions"][0]["session"] == s4.sid and c["sessions"][0]["trailer"] is True
    # a trailer naming a session content does not find is listed as such
    (w.root / "notes.txt").write_text("release checklist reviewed on monday\n")
    git(w.root, "add", "notes.txt")
    git(w.root, "commit", "-q", "-m", "notes\n\nEngram-Session: not-indexed-42")
    c = run_json(capsys, "log", "-n", "1")["commits"][0]
    assert c["sessions"] == [{"session": "not-indexed-42", "tape_id": None, "harness": None,
                              "model": None, "label": None, "tier": None, "lines": 0,
                              "via": "trailer", "indexed": False}]
    # a hand-written commit gets no trailer, and uninstall removes only our hook
    (w.root / "app" / "hand.py").write_text(HAND.replace("ledger", "journal"))
    git(w.root, "add", "app/hand.py")
    git(w.root, "commit", "-q", "-m", "by hand")
    assert "Engram-Session" not in git(w.root, "log", "-1", "--format=%B")
    assert hooks.uninstall(w.root)["removed"] is True
    assert not os.path.exists(got["hook"])


def test_foreign_hook_is_never_overwritten(repo):
    from engram.commits import hooks
    from engram.errors import EngramError

    p = repo.root / ".git" / "hooks" / "prepare-commit-msg"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("#!/bin/sh\necho mine\n")
    with pytest.raises(EngramError, match="not Engram's"):
        hooks.install(repo.root)
    assert p.read_text() == "#!/bin/sh\necho mine\n"
    assert hooks.uninstall(repo.root)["removed"] is False


def test_git_ai_notes_and_agent_trace_are_checked_evidence(repo, capsys):
    root = repo.root
    sha_db = git(root, "rev-parse", "HEAD~1").strip()
    sha_hand = git(root, "rev-parse", "HEAD").strip()
    note = ("app/db.py\n  s_abc::t_1 1-8\n---\n" + json.dumps({
        "schema_version": "authorship/3.0.0", "prompts": {},
        "sessions": {"s_abc": {"agent_id": {"tool": "claude", "id": repo.s2, "model": "x"}}}}))
    git(root, "notes", "--ref=ai", "add", "-m", note, sha_db)
    (root / ".agent-trace").mkdir()
    rec = {"version": "0.1.0", "id": "1", "vcs": {"type": "git", "revision": sha_hand},
           "tool": {"name": "other"}, "files": [{"path": "app/ledger.py", "conversations": [
               {"contributor": {"type": "ai", "model_id": "m"}, "ranges": [{"start_line": 1, "end_line": 7}],
                "url": "sess-9"}]}]}
    (root / ".agent-trace" / "t.jsonl").write_text(json.dumps(rec) + "\n")
    c = by_subject(run_json(capsys, "log"))
    p = c["database connection"]["peers"][0]
    assert p["via"] == "git-ai" and p["check"] == "agrees" and p["session"] == repo.s2
    hand = c["ledger summary (by hand)"]
    assert hand["peers"][0]["via"] == "agent-trace" and hand["peers"][0]["check"] == "conflicts"
    assert hand["sessions"][0]["via"] == "agent-trace" and hand["sessions"][0]["lines"] == 0


def test_export_agent_trace(repo, capsys):
    out = run(capsys, "export", "agent-trace", "HEAD~2..HEAD")
    recs = [json.loads(x) for x in out.splitlines()]
    assert [r["vcs"]["revision"] for r in recs] == git(repo.root, "rev-list", "--reverse", "HEAD~2..HEAD").split()
    db, hand = recs
    assert db["version"] == "0.1.0" and db["tool"]["name"] == "engram"
    conv = db["files"][0]["conversations"][0]
    assert conv["contributor"]["type"] == "ai" and conv["ranges"] == [{"start_line": 1, "end_line": 8}]
    assert db["metadata"]["dev.engram"]["sessions"][0]["session"] == repo.s2
    assert hand["files"][0]["conversations"] == [
        {"contributor": {"type": "human"}, "ranges": [{"start_line": 1, "end_line": 7}]}]
    assert run(capsys, "export", "agent-trace", "HEAD~2..HEAD") == out  # deterministic


def test_stats_and_graph(repo, capsys):
    res = run_json(capsys, "stats", "--by", "session")
    assert {r["key"] for r in res["rows"]} == {repo.s1, repo.s2}
    assert res["head"]["lines"] == 8 + 8 + 7 and res["head"]["agent_lines"] == 16
    assert res["total"]["lines_at_head"] == 16
    assert res["prices"]["date"]
    g = run_json(capsys, "graph", "app/db.py")
    kinds = {n["kind"] for n in g["nodes"]}
    assert kinds == {"session", "edit", "commit"}
    assert any(e["kind"] == "commit" for e in g["edges"])
    assert run(capsys, "graph", "app/db.py", "--format", "dot").startswith("digraph engram {")
    assert run(capsys, "graph", "app/db.py", "--format", "mermaid").startswith("flowchart LR")


def test_span_commits_for_the_editor(repo):
    from engram.engine import Engine

    eng = Engine(repo.root, semantic=False)
    try:
        r = eng.span_commits("app/db.py", 2, 4)
    finally:
        eng.close()
    assert [c["subject"] for c in r["commits"]] == ["database connection"]
    assert r["commits"][0]["span_lines"] == 3
    assert r["commits"][0]["sessions"][0]["session"] == repo.s2


def test_cache_is_recomputed_when_a_session_that_predates_the_commit_is_ingested(repo, capsys):
    w = repo
    s5 = w.session(name="s5").user("add request logging")
    s5.write("app/logging_mw.py", "def log_requests(app, logger):\n"
             "    @app.middleware(\"http\")\n    async def middleware(request, call_next):\n"
             "        response = await call_next(request)\n"
             "        logger.info(\"%s %s %d\", request.method, request.url.path, response.status_code)\n"
             "        return response\n    return middleware\n").save()
    w.checkout()
    git(w.root, "add", "app/logging_mw.py")
    git(w.root, "commit", "-q", "-m", "request logging")
    first = run_json(capsys, "log", "-n", "1")["commits"][0]
    assert first["sessions"] == [] and first["hand_lines"] == 7   # not ingested yet: cached so
    assert run_json(capsys, "log", "-n", "1")["commits"][0] == first
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()
    again = run_json(capsys, "log", "-n", "1")["commits"][0]
    assert [s["session"] for s in again["sessions"]] == [s5.sid] and again["agent_lines"] == 7


def test_a_moved_line_keeps_its_writer(repo, capsys):
    """A later session swaps two lines and adds a function: git's diff shows one of the swapped
    lines deleted and added again; that line was carried, so it stays with the session that
    wrote it, and only the new function is the later session's."""
    w = repo
    s1 = w.session(name="s7").user("settings helpers")
    s1.write("app/paths.py", "import os\nimport sys\n\n\n" + A).save()
    w.checkout()
    git(w.root, "add", "app/paths.py")
    git(w.root, "commit", "-q", "-m", "paths")
    s2 = w.session(name="s8").user("sort the imports and add the pool")
    s2.edit("app/paths.py", "import os\nimport sys\n", "import sys\nimport os\n")
    s2.edit("app/paths.py", "    return data\n", "    return data\n\n\n" + B).save()
    w.checkout()
    git(w.root, "commit", "-q", "-am", "imports sorted, pool")
    diff = git(w.root, "show", "--format=", "-U0", "HEAD", "--", "app/paths.py")
    moved = [ln[1:] for ln in diff.splitlines() if ln[:1] == "+" and "-" + ln[1:] in diff.splitlines()]
    assert moved and all(m.startswith("import ") for m in moved)   # git calls it added
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()
    c = run_json(capsys, "show", "HEAD")["commit"]
    assert c["subject"] == "imports sorted, pool"
    assert c["files"][0]["sessions"] == {_tape(c, s2.sid): 8, _tape(c, s1.sid): len(moved)}
    assert c["added_lines"] == 8 + len(moved) and c["agent_lines"] == c["added_lines"]


def _tape(c, sid):
    return next(s["tape_id"] for s in c["sessions"] if s["session"] == sid)


def test_a_copied_line_is_the_copying_sessions(repo, capsys):
    """A later session's edit repeats an existing line (the same text twice now): the commit that
    adds the copy is that session's, not the session that wrote the first one."""
    w = repo
    s1 = w.session(name="s9").user("configure the pool")
    s1.write("app/pool.py", B).save()
    w.checkout()
    git(w.root, "add", "app/pool.py")
    git(w.root, "commit", "-q", "-m", "pool")
    line = "            time.sleep(2 ** attempt)\n"
    s2 = w.session(name="s10").user("wait twice as long between retries")
    s2.edit("app/pool.py", line, line + line).save()
    w.checkout()
    git(w.root, "commit", "-q", "-am", "longer waits")
    assert main(["ingest", "--seal"]) == 0
    capsys.readouterr()
    c = run_json(capsys, "show", "HEAD")["commit"]
    assert c["subject"] == "longer waits" and c["added_lines"] == 1
    assert [s["session"] for s in c["sessions"]] == [s2.sid]
