"""Dump every answer the engine gives on the bench corpus, for byte-identity checks across refactors.

Ingests the corpus from scratch (an isolated HOME, as ``accuracy.py`` does), then writes one JSON
line per truth span (``Engine.explain``), one per file (``blame``, ``trace``, ``explain_blocks`` of
the file's top-level blocks) and the tape list, with the one field that is a timing
(``stats.elapsed_ms``) removed. Prints the SHA-256 of the dump: two versions of the code that
print the same digest gave the same answers, byte for byte.

    python bench/explain_dump.py --out /tmp/before.jsonl            # this tree
    python bench/explain_dump.py --src /path/to/other/tree --out /tmp/after.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _scrub(x):
    if isinstance(x, dict):
        return {k: _scrub(v) for k, v in x.items() if k != "elapsed_ms"}
    if isinstance(x, list):
        return [_scrub(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=HERE / "corpus" / "full")
    ap.add_argument("--src", type=Path, default=HERE.parent, help="the source tree to import engram from")
    ap.add_argument("--home", type=Path, default=Path(tempfile.gettempdir()) / "engram-explain-dump",
                    help="the isolated HOME (runs at once need one each)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=0, help="at most N truth spans (0 = all)")
    a = ap.parse_args(argv)
    corpus = a.corpus.resolve()
    sys.path.insert(0, str(a.src.resolve()))
    sys.path.insert(1, str(HERE))
    from accuracy import setup_home

    setup_home(corpus, a.home.resolve(), wipe=True)
    import engram
    from engram.engine import Engine

    if not Path(engram.__file__).resolve().is_relative_to(a.src.resolve()):
        raise SystemExit(f"explain_dump: engram was imported from {engram.__file__}, not {a.src}")

    repo = corpus / "repo"
    for d in (".engram-cache", ".engram"):
        shutil.rmtree(repo / d, ignore_errors=True)
    truth = json.loads((corpus / "truth.json").read_text())
    if a.limit:
        truth = truth[: a.limit]
    eng = Engine(root=repo)
    eng.ingest(seal=True, rebuild=True)
    digest = hashlib.sha256()
    with a.out.open("w") as out:
        def put(kind: str, key, value) -> None:
            line = json.dumps({"kind": kind, "key": key, "value": _scrub(value)}, sort_keys=True) + "\n"
            digest.update(line.encode())
            out.write(line)

        # (a tape's file lies under the run's HOME: its directory is not an answer)
        put("tapes", None, [{**t, "path": Path(t["path"]).name if t.get("path") else t.get("path")}
                            for t in eng.tapes()])
        texts: dict[str, str] = {}
        for x in truth:
            f = x["file"]
            if f not in texts:
                texts[f] = (repo / f).read_text()
            put("explain", [f, x["start"], x["end"]],
                eng.explain(str(repo / f), x["start"], x["end"], text=texts[f]))
        from engram.query import history, symbols

        def eng_blame(p: Path) -> dict:
            return history.blame(eng, str(p))
        for f in sorted(texts):
            text = texts[f]
            blocks = [(s, e) for s, e, _ in symbols.top_level_blocks(text, f)]
            if blocks:
                put("blocks", f, eng.explain_blocks(str(repo / f), text, blocks))
            put("blame", f, eng_blame(repo / f))
            put("trace", f, history.trace(eng, str(repo / f)))
    print(digest.hexdigest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
