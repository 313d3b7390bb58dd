"""Bad input for the commit commands: a clear one-line error or a degraded answer that says what
is missing — never a traceback (real git, real repositories)."""

from __future__ import annotations

import json
import os
import subprocess

from engram.cli import main


def git(root, *args):
    e = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
         "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com"}
    return subprocess.run(["git", *args], cwd=root, env=e, check=True, capture_output=True,
                          text=True).stdout


def error(capsys, *argv) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def ok(capsys, *argv) -> dict:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def make_repo(path, n=2):
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for i in range(n):
        (path / f"f{i}.txt").write_text(f"line {i}\n")
        git(path, "add", ".")
        git(path, "commit", "-q", "-m", f"c{i}")
    return path


def test_not_a_repository(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for argv in (["log"], ["review", "A..B"], ["show", "HEAD"], ["export", "agent-trace", "A..B"]):
        err = error(capsys, *argv)
        assert "not a git repository" in err or "no indexed tape" in err


def test_bad_revisions(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(make_repo(tmp_path / "r"))
    assert "no such revision: 'nosuch'" in error(capsys, "log", "nosuch")
    assert "no such revision" in error(capsys, "review", "main..nosuch")
    assert "a range is A..B" in error(capsys, "review", "main")
    # neither a commit nor a tape: the tape error, as before
    assert "no indexed tape" in error(capsys, "show", "nosuch")


def test_empty_repository(tmp_path, monkeypatch, capsys):
    r = tmp_path / "empty"
    r.mkdir()
    git(r, "init", "-q")
    monkeypatch.chdir(r)
    assert "no commits yet" in error(capsys, "log")


def test_git_not_installed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(make_repo(tmp_path / "r"))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    assert "git is not installed" in error(capsys, "log")


def test_shallow_clone_and_detached_head_say_so(tmp_path, monkeypatch, capsys):
    src = make_repo(tmp_path / "src", n=4)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{src}", str(clone)], check=True)
    monkeypatch.chdir(clone)
    res = ok(capsys, "log")
    assert len(res["commits"]) == 1
    assert any("shallow clone" in w for w in res["warnings"])
    monkeypatch.chdir(src)
    git(src, "checkout", "-q", "HEAD~1")
    res = ok(capsys, "log")
    assert len(res["commits"]) == 3 and "detached HEAD" in res["warnings"]


def test_big_binary_file_is_listed_not_read(tmp_path, monkeypatch, capsys):
    r = make_repo(tmp_path / "r", n=1)
    with open(r / "blob.bin", "wb") as f:  # 40 MB: over the 16 MB git-as-binary threshold
        f.seek(40 << 20)
        f.write(b"\x01")
    (r / "code.py").write_text("print('hello')\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "binary")
    monkeypatch.chdir(r)
    c = ok(capsys, "show", "HEAD")["commit"]
    files = {f["path"]: f for f in c["files"]}
    assert files["blob.bin"]["binary"] is True and "not_attributed" in files["blob.bin"]
    assert files["code.py"]["added_lines"] == 1


def test_a_commit_touching_more_files_than_kept_is_marked_truncated(tmp_path, monkeypatch, capsys):
    from engram.commits import diff

    r = make_repo(tmp_path / "r", n=1)
    n = diff.MAX_FILES + 50
    d = r / "many"
    d.mkdir()
    for i in range(n):
        (d / f"{i:05d}.txt").write_text(f"value {i}\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "many files")
    monkeypatch.chdir(r)
    c = ok(capsys, "show", "HEAD")["commit"]
    assert len(c["files"]) == diff.MAX_FILES
    assert any("more than" in x and "files" in x for x in c["degraded"])


def test_added_lines_that_look_like_diff_headers(tmp_path, monkeypatch, capsys):
    r = make_repo(tmp_path / "r", n=1)
    text = "++ not a header\n--- nor this\n@@ -1 +1 @@ nor this\ndiff --git a/x b/x\n+++ b/y\n"
    (r / "tricky.txt").write_text(text)
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "tricky")
    monkeypatch.chdir(r)
    c = ok(capsys, "show", "HEAD")["commit"]
    assert [(f["path"], f["added_lines"], f["added_ranges"]) for f in c["files"]] == [("tricky.txt", 5, "1-5")]
