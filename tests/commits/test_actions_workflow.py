"""The GitHub Actions example (docs/github-actions/engram-review.yml): its Index and Provenance
steps, run as written with bash in a real repository with a remote and a pull-request branch
(GitHub itself is not contacted: the Comment step is not run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from claude_log import World

ROOT = Path(__file__).resolve().parent.parent.parent
WORKFLOW = ROOT / "docs" / "github-actions" / "engram-review.yml"


def git(root, *args):
    e = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
         "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com"}
    return subprocess.run(["git", *args], cwd=root, env=e, check=True, capture_output=True, text=True).stdout


def test_workflow_steps_produce_the_comment(tmp_path):
    steps = {s.get("name"): s for s in yaml.safe_load(WORKFLOW.read_text())["jobs"]["provenance"]["steps"]}
    w = World(tmp_path)
    os.rmdir(w.root / ".git")
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    git(w.root, "init", "-q", "-b", "main")
    (w.root / "README.md").write_text("service\n")
    git(w.root, "add", "README.md")
    git(w.root, "commit", "-q", "-m", "start")
    git(w.root, "remote", "add", "origin", str(origin))
    git(w.root, "push", "-q", "origin", "main")
    git(w.root, "checkout", "-q", "-b", "feature")
    s = w.session(name="pr").user("add a retrying fetch helper")
    s.write("svc/fetch.py", "def fetch_with_retry(client, url, attempts=3):\n"
            "    for attempt in range(attempts):\n        response = client.get(url, timeout=10)\n"
            "        if response.status_code < 500:\n            return response\n"
            "    raise ServiceUnavailable(url)\n").save()
    w.checkout()
    git(w.root, "add", "svc/fetch.py")
    git(w.root, "commit", "-q", "-m", "fetch helper")
    (w.root / "CHANGES.md").write_text("- a retrying fetch helper, reviewed on tuesday\n")
    git(w.root, "add", "CHANGES.md")
    git(w.root, "commit", "-q", "-m", "changelog (by hand)")
    env = {**os.environ, "BASE": "origin/main", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for name in ("Index", "Provenance of this pull request"):
        subprocess.run(["bash", "-e", "-c", steps[name]["run"]], cwd=w.root, env=env, check=True,
                       capture_output=True)
    md = (w.root / "engram-review.md").read_text()
    assert md.startswith("## Engram provenance for `origin/main..HEAD`")
    assert "add a retrying fetch helper" in md
    assert md.count("<details>") == 2 and "○" in md and "◆" in md
    assert steps["Comment"]["run"].startswith('gh pr comment "$PR" --body-file engram-review.md')
