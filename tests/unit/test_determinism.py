"""The Claude Code adapter gives byte-identical tapes in every process.

The in-process check (test_adapter_claude_code.py::test_deterministic) cannot see an order that
depends on ``str`` hashing (set iteration, a dict built from a set): that order is fixed within a
process and differs between processes with different ``PYTHONHASHSEED``. Ingest parses in a worker
process, and tape ids are hashes of the canonical bytes, so a difference would mean a different
tape for the same log. Here the real fixture logs are parsed in two fresh interpreters with
different hash seeds and their canonical encoded events (``encode_events``) compared byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engram.adapters import get
from engram.tape.writer import encode_events

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("tests/data/harness/claude_code")  # relative, as ingest and the golden tapes see it
CASES = sorted(p.name for p in (ROOT / DATA).glob("*.jsonl"))
SEEDS = ("0", "12345")

_PARSE = """
import sys
from pathlib import Path
from engram.adapters import get
from engram.tape.writer import encode_events

data, out = Path(sys.argv[1]), Path(sys.argv[2])
adapter = get("claude_code")
for name in sys.argv[3:]:
    res = adapter.parse_source(data / name)
    for i, session in enumerate(res.sessions):
        (out / f"{name}.{i}").write_bytes(encode_events(session.events))
    (out / f"{name}.errors").write_text(repr(res.errors))
"""


def _parse_in_subprocess(seed: str, out: Path) -> dict[str, bytes]:
    out.mkdir()
    env = dict(os.environ, PYTHONHASHSEED=seed)
    proc = subprocess.run([sys.executable, "-c", _PARSE, str(DATA), str(out), *CASES], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _first_difference(a: bytes, b: bytes) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for n, (x, y) in enumerate(zip(la, lb), 1):
        if x != y:
            return f"line {n}:\n  {x[:300]!r}\n  {y[:300]!r}"
    return f"{len(la)} vs {len(lb)} lines"


def test_claude_code_tapes_identical_across_hash_seeds(tmp_path, monkeypatch):
    """Two interpreters with PYTHONHASHSEED 0 and 12345 (and this one, whatever its seed) write
    the same canonical bytes for every session of every fixture log."""
    assert CASES, f"no fixture logs in {DATA}"
    a, b = (_parse_in_subprocess(seed, tmp_path / f"seed-{seed}") for seed in SEEDS)
    assert sorted(a) == sorted(b)
    for case in CASES:
        assert f"{case}.0" in a, f"{case}: no session parsed"
    diffs = [f"{name}: {_first_difference(a[name], b[name])}"
             for name in sorted(a) if a[name] != b[name]]
    assert not diffs, (f"tapes differ between PYTHONHASHSEED={SEEDS[0]} and {SEEDS[1]}:\n"
                       + "\n".join(diffs))
    monkeypatch.chdir(ROOT)
    for case in CASES:
        for i, session in enumerate(get("claude_code").parse_source(DATA / case).sessions):
            assert encode_events(session.events) == a[f"{case}.{i}"], f"{case}: differs in-process"
