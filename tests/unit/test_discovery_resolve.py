"""Discovery's path resolution (``ingestor._Resolver``) gives ``os.path.realpath``'s answer for
every kind of path a harness location holds, and its sources come in ``sorted()`` order."""

import os
from pathlib import Path

from engram.adapters.base import _path_order
from engram.ingest.ingestor import _Resolver


def _tree(tmp_path: Path) -> list[Path]:
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "c").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text("x")
    (root / "a" / "plain.jsonl").write_text("x")
    (root / "a" / "b" / "deep.jsonl").write_text("x")
    (root / "a" / "to-outside.jsonl").symlink_to(outside / "secret.jsonl")
    (root / "a" / "relative.jsonl").symlink_to("b/deep.jsonl")
    (root / "a" / "chain.jsonl").symlink_to("relative.jsonl")
    (root / "a" / "dangling.jsonl").symlink_to("nowhere.jsonl")
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    (root / "c" / "up").symlink_to("..", target_is_directory=True)
    return [root / "a" / "plain.jsonl", root / "a" / "b" / "deep.jsonl",
            root / "a" / "to-outside.jsonl", root / "a" / "relative.jsonl",
            root / "a" / "chain.jsonl", root / "a" / "dangling.jsonl",
            root / "dirlink" / "secret.jsonl", root / "c" / "up" / "a" / "plain.jsonl",
            root / "c" / "up" / "dirlink" / "secret.jsonl", root / "a" / "missing.jsonl",
            root / "dirlink", root / "a" / "b"]


def test_the_resolver_agrees_with_realpath(tmp_path):
    paths = _tree(tmp_path)
    resolve = _Resolver()
    for _ in range(2):   # the second time from its kept directories
        for p in paths:
            assert resolve(p) == os.path.realpath(p), p
            assert resolve(str(p)) == os.path.realpath(p), p


def test_a_directory_that_becomes_a_link_is_not_kept_across_runs(tmp_path):
    paths = _tree(tmp_path)
    assert _Resolver()(paths[0]) == str(paths[0])
    a = paths[0].parent
    a.rename(tmp_path / "moved")
    a.symlink_to(tmp_path / "moved", target_is_directory=True)
    assert _Resolver()(paths[0]) == os.path.realpath(paths[0]) == str(tmp_path / "moved" / "plain.jsonl")


def test_sources_sort_as_paths_do():
    names = ["/h/a-c/x.jsonl", "/h/a/b.jsonl", "/h/a/b/c.jsonl", "/h/a.jsonl", "/h/A/z.jsonl",
             "/h/a b/y.jsonl", "/h/a/.b.jsonl", "/h/ä/x.jsonl", "/h/a0/x.jsonl"]
    paths = [Path(n) for n in names]
    assert sorted(paths, key=_path_order) == sorted(paths)
    assert [str(p) for p in sorted(paths)] != sorted(names)   # not the strings' order
