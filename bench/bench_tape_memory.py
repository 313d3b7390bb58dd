"""Peak memory of indexing one big session's tape from a tape directory (a pulled tape, a
configured tape source, a repository's ``.engram/tapes``), beside that of ingesting its log.

    python bench/bench_tape_memory.py [--sizes 100,400] [--logs DIR] [--tapes DIR] [--src TREE]

For each size, a generated Claude Code log of one session (``bench_ingest_memory.py``'s) is
ingested (``engram ingest --seal``, measured as ``bench_ingest_memory.py`` measures it); its tape
is then put alone in the tape source (``sources:``) of a fresh home whose harnesses are all off,
and ``engram ingest`` of that home is measured the same way: peak RSS of the largest process of
the ingest (``getrusage(RUSAGE_CHILDREN).ru_maxrss``, children included), its heap and file
pages, CPU seconds of the process tree, and the load average. ``--tapes DIR`` keeps each size's
tape in ``DIR/log<MB>/`` and reuses one found there (the log's ingest is then not run again):
two trees (``--src``) measured on the same tape. ``--logs DIR`` reuses logs as
``bench_ingest_memory.py --logs`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_ingest_memory import REPO, measure, setup  # noqa: E402

_OFF = ("claude_code", "codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider")


def _tapes_of(root: Path, home: Path) -> list[Path]:
    return sorted([*(home / "tapes").rglob("*.jsonl.zst"), *(root / ".engram" / "tapes").rglob("*.jsonl.zst")])


def _jsonl_bytes(tape: Path) -> int:
    import zstandard

    n = 0
    with open(tape, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as r:
        while chunk := r.read(1 << 20):
            n += len(chunk)
    return n


def measure_tape(tape: Path, tmp: Path, src: Path) -> dict:
    """``engram ingest`` of a fresh home whose only input is a tape source holding ``tape``."""
    source = tmp / "tape-source"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    shutil.copy2(tape, source / tape.name)
    home = tmp / "tape-home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    hs = {h: {"enabled": False} for h in _OFF}
    (home / "config.yml").write_text(json.dumps({"harnesses": hs, "sources": [str(source)]},
                                                sort_keys=True))
    root = tmp / "tape-repo"
    shutil.rmtree(root, ignore_errors=True)
    (root / ".git").mkdir(parents=True)
    try:
        return measure(root, home, True, src)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,400", help="log sizes in MB (comma separated)")
    ap.add_argument("--logs", type=Path,
                    help="reuse the logs generated in DIR/log<MB>/ (generated there if missing)")
    ap.add_argument("--tapes", type=Path,
                    help="keep each size's tape in DIR/log<MB>/ and reuse one found there")
    ap.add_argument("--src", type=Path, default=REPO, help="the source tree to run engram from")
    a = ap.parse_args(argv)
    src = a.src.resolve()
    print(f"machine: {os.cpu_count()} CPUs, {platform.machine()}, python "
          f"{platform.python_version()}; source {src}")
    print("| log MB | tape file / JSONL MB | events | ingest of the log: peak RSS MB (CPU s, load) "
          "| ingest of its tape from a tape source: peak RSS MB | of it: heap / file pages MB "
          "| CPU s | seconds | load | tape / log peak |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mb in [int(x) for x in a.sizes.split(",") if x.strip()]:
        tmp = Path(tempfile.mkdtemp(prefix=f"engram-tapemem-{mb}-"))
        kept = a.tapes / f"log{mb}" if a.tapes is not None else None
        try:
            found = sorted(kept.glob("*.jsonl.zst")) if kept is not None and kept.is_dir() else []
            log_cell = "(not run: tape reused)"
            if not found:
                if a.logs is not None and (a.logs / f"log{mb}" / "info.json").exists():
                    d = a.logs / f"log{mb}"
                    root, home = d / "repo", tmp / "engram-home"
                    info = json.loads((d / "info.json").read_text())
                else:
                    d = a.logs / f"log{mb}" if a.logs is not None else tmp / "gen"
                    d.mkdir(parents=True, exist_ok=True)
                    root, home, info = setup(d, mb * 1_000_000)
                    home = tmp / "engram-home"
                    if a.logs is not None:
                        (d / "info.json").write_text(json.dumps(info))
                m = measure(root, home, True, src)
                log_cell = f"{m['peak_rss_mb']:,} ({m['cpu_s']} s, {m['load']})"
                found = _tapes_of(root, home)
                if len(found) != 1:
                    raise SystemExit(f"expected one tape from the log, found {len(found)}")
                if kept is not None:
                    kept.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(found[0], kept / found[0].name)
                tape = tmp / found[0].name
                shutil.copy2(found[0], tape)
                shutil.rmtree(home, ignore_errors=True)
                shutil.rmtree(root / ".engram" / "tapes", ignore_errors=True)
                shutil.rmtree(root / ".engram-cache", ignore_errors=True)
                found = [tape]
            tape = found[0]
            t = measure_tape(tape, tmp, src)
            if t["errors"]:
                raise SystemExit(f"the tape's ingest reported {t['errors']} errors")
            ratio = ""
            if not log_cell.startswith("("):
                ratio = f"{t['peak_rss_mb'] / int(log_cell.split()[0].replace(',', '')):.2f}"
            print(f"| {mb} | {tape.stat().st_size / 1e6:.1f} / {_jsonl_bytes(tape) / 1e6:.1f} | "
                  f"{t['events']:,} | {log_cell} | {t['peak_rss_mb']:,} | "
                  f"{t['anon_mb']:,} / {t['file_mb']:,} | {t['cpu_s']} | {t['seconds']} | "
                  f"{t['load']} | {ratio} |", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
