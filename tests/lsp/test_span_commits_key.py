"""``SpanCommits.key``: the commits of a hovered block are asked for by the file's state only when
the buffer holds the file's text; whether it does is remembered per buffer version and file state
for the recently hovered buffers (hovers go from file to file), and found again when either
changes."""

from __future__ import annotations

import builtins
import os

from engram_lsp import commits
from engram_lsp.commits import SpanCommits
from engram_lsp.documents import Doc


def test_a_buffers_sameness_with_its_file_is_remembered_per_version_and_state(tmp_path,
                                                                            monkeypatch):
    reads: list[str] = []

    def counting_open(path, *args, **kwargs):
        reads.append(str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(commits, "open", counting_open, raising=False)
    docs = []
    for i in range(3):
        path = tmp_path / f"f{i}.py"
        path.write_text(f"def f{i}():\n    return {i}\n")
        docs.append(Doc(uri=path.as_uri(), path=path, file=path.name, text=path.read_text(),
                        version=1))
    spans = SpanCommits()
    for _ in range(4):  # from file to file: each file read once
        for d in docs:
            st = os.stat(d.path)
            assert spans.key(d, 1, 2) == (str(d.path), st.st_size, st.st_mtime_ns, 1, 2)
    assert sorted(reads) == sorted(str(d.path) for d in docs)
    # an unsaved edit (a new version): no commits for it, and the file is not read again for it
    edited = Doc(uri=docs[0].uri, path=docs[0].path, file="f0.py", text="def f0():\n    return 9\n",
                 version=2)
    assert spans.key(edited, 1, 2) is None and spans.key(edited, 1, 2) is None
    assert len(reads) == 4
    # the file changes on disk to the buffer's text: found again (a new file state)
    edited.path.write_text(edited.text)
    os.utime(edited.path, ns=(1, 2))
    assert spans.key(edited, 1, 2) is not None and len(reads) == 5
    # the buffer goes back to version 1's text: not the file's any more
    assert spans.key(docs[0], 1, 2) is None
