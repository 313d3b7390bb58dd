"""``explain_blocks`` of one block: the hover's path (``_explain_one``) against the general one on
every block a hover can ask for (each line's enclosing block, as its own text) of every source
file of a repository, on an existing index, as the language server reads it (postings and rows held
in memory). Prints how many blocks were compared, how many had sessions, how many differed, and
the CPU time per block of each path.

    python bench/blocks_check.py --repo /tmp/scale/full/repos/click --home COPY_OF_ENGRAM_HOME
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--home", type=Path, required=True, help="the ENGRAM_HOME (a copy: read only)")
    ap.add_argument("--ext", default=".py")
    a = ap.parse_args(argv)
    os.environ["ENGRAM_HOME"] = str(a.home.resolve())
    sys.path.insert(0, str(HERE.parent))
    from engram.engine import Engine
    from engram.index import postings
    from engram.query import blocks as B

    eng = Engine(a.repo.resolve())
    eng.hold_postings()
    conn = eng.conn()
    for _ in range(600):
        if postings.held_postings_status(conn.filename)["postings"] is not None:
            break
        time.sleep(0.05)
    eng.prefill_postings()
    files = sorted(p for p in a.repo.rglob(f"*{a.ext}") if ".git" not in p.parts)
    paths = {"general": lambda cache, t, b: B._explain_blocks(cache, conn, t, [b], True, True,
                                                              _empty()),
             "one": lambda cache, t, b: B._explain_one(cache, conn, t, b, True, True, _empty())}
    n = hit = diff = 0
    cpu = dict.fromkeys(paths, 0.0)
    for p in files:
        text = p.read_text(errors="replace")
        lines = text.split("\n")
        table = eng.block_table(text, str(p)) or []
        for s, e in sorted({(r[2], r[3]) for r in table}):
            alone = lines[s - 1:e]
            t, block = "\n".join(alone) + "\n", (1, len(alone))
            res = {}
            # in turn first (the first reads the window from the tape, the second from the memo)
            for name in (("general", "one") if n % 2 else ("one", "general")):
                with B._reading(conn) as cache:
                    c0 = time.thread_time()
                    res[name] = paths[name](cache, t, block)
                    cpu[name] += time.thread_time() - c0
            n += 1
            hit += bool(res["one"][0]["sessions"])
            diff += res["one"] != res["general"]
    print(json.dumps({"files": len(files), "blocks": n, "with_sessions": hit, "differ": diff,
                      "cpu_ms_per_block": {k: round(v * 1000 / max(n, 1), 3)
                                           for k, v in cpu.items()},
                      "load": os.getloadavg()}))
    eng.close()
    return 0 if not diff else 1


def _empty() -> list[dict]:
    return [{"range": [1, 1], "sessions": 0, "best": 0.0, "latest": None, "top": None}]


if __name__ == "__main__":
    raise SystemExit(main())
