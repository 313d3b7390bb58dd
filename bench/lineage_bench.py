"""Lineage benchmark (issue 6): the scenario metrics of the realistic corpus (``bench/corpus.py
--scenarios all``) plus what the lineage pass costs, in an index of its own.

* continuation recall — spans edited after a compaction: the pre-compaction session is reported;
* orchestrator recall — the orchestrator that dispatched (and quoted) the code is reported;
* history recall@10 — moved functions: the session that wrote them before the move is in the top 10;
* false-lineage rate — unrelated code written where deleted code used to be: share of spans whose
  result names a session of the deleted code (target 0);
* the lineage pass: seconds, edges / location-only edges / tombstones / continuations / dispatch
  rows, and the same metrics with the lineage walk switched off (``min_confidence`` 2.0, so only
  agent links are crossed) to show what lineage adds, and with explain's session cap lifted
  (``with_lineage_uncapped``: lineage sessions rank after every direct one, so a cap can cut them).

Runs with its own ``HOME``/``ENGRAM_HOME`` (``bench/out/home-lineage``) and index
(``bench/out/lineage-index.sqlite``), so it never disturbs ``bench/accuracy.py``.

    python bench/lineage_bench.py [--corpus bench/corpus/full] [--no-ingest]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HARNESSES = ["claude_code", "codex", "gemini_cli", "opencode", "cursor", "openclaw", "aider"]


def setup_home(corpus: Path, out: Path) -> Path:
    home = out / "home-lineage"
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    lines = ["harnesses:"]
    for h in HARNESSES:
        if h == "claude_code":
            lines.append(f"  claude_code:\n    paths: [{(corpus / 'logs').resolve()}]")
        elif h == "openclaw" and (corpus / "openclaw").exists():
            lines.append(f"  openclaw:\n    paths: [{(corpus / 'openclaw').resolve()}]")
        else:
            lines.append(f"  {h}: false")
    (home / "config.yml").write_text("\n".join(lines) + "\n")
    os.environ["HOME"] = str(home)
    os.environ["ENGRAM_HOME"] = str(home)
    return home


def ids(res: dict) -> list[str]:
    return [s.get("session") or s.get("tape_id") for s in res.get("sessions", [])]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=HERE / "corpus" / "full")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--no-ingest", action="store_true")
    a = ap.parse_args(argv)
    corpus = a.corpus.resolve()
    scen = {n: json.loads((corpus / "scenarios" / f"{n}.json").read_text())
            for n in ("continuation", "orchestrator", "moved", "false_lineage")
            if (corpus / "scenarios" / f"{n}.json").exists()}
    if not scen:
        print(f"no scenario truth under {corpus}/scenarios (bench/corpus.py --scenarios all)",
              file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    index = (a.out / "lineage-index.sqlite").resolve()
    if not a.no_ingest:
        setup_home(corpus, a.out)
        for s in ("", "-wal", "-shm"):
            Path(str(index) + s).unlink(missing_ok=True)
    else:
        os.environ["HOME"] = os.environ["ENGRAM_HOME"] = str(a.out / "home-lineage")
    sys.path.insert(0, str(REPO))
    from engram.engine import Engine

    repo = corpus / "repo"
    eng = Engine(root=repo, index_path=index)
    result: dict = {"corpus": str(corpus)}
    if not a.no_ingest:
        t0 = time.perf_counter()
        summary = eng.ingest(seal=True)
        result["ingest_s"] = round(time.perf_counter() - t0, 2)
        result["lineage_pass"] = summary.get("lineage")
    conn = eng.conn()
    result["rows"] = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                      for t in ("edges", "tombstones", "continuations")}
    result["rows"]["location_only"] = conn.execute(
        "SELECT count(*) FROM edges WHERE location_only=1").fetchone()[0]
    texts: dict[str, str] = {}

    def explain(x: dict, **kw) -> tuple[dict, float]:
        f = x["file"]
        if f not in texts:
            texts[f] = (repo / f).read_text()
        t0 = time.perf_counter()
        res = eng.explain(str(repo / f), x["start"], x["end"], text=texts[f], brief=True, **kw)
        return res, (time.perf_counter() - t0) * 1000

    from engram.query import explain as explain_query

    cap = getattr(explain_query, "MAX_SESSIONS", None)
    for label, kw, uncapped in (("with_lineage", {}, False),
                                ("with_lineage_uncapped", {}, True),
                                ("without_lineage", {"min_confidence": 2.0}, False)):
        if cap is not None:  # explain returns the top MAX_SESSIONS sessions unless --all
            explain_query.MAX_SESSIONS = 10**9 if uncapped else cap
        sm: dict = {}
        lat: list[float] = []

        def run(x, kw=kw, lat=lat):
            res, ms = explain(x, **kw)
            lat.append(ms)
            return ids(res)

        if "continuation" in scen:
            xs = scen["continuation"]
            sm["continuation_recall"] = round(sum(x["continued_from"] in run(x) for x in xs) / len(xs), 4)
        if "orchestrator" in scen:
            xs = scen["orchestrator"]
            sm["orchestrator_recall"] = round(
                sum(x["orchestrator_session"] in run(x) for x in xs) / len(xs), 4)
        if "moved" in scen:
            xs = scen["moved"]
            sm["history_recall_at_10"] = round(
                sum(x["writer_before_move"] in run(x)[:10] for x in xs) / len(xs), 4)
        if "false_lineage" in scen:
            xs = scen["false_lineage"]
            sm["false_lineage_rate"] = round(
                sum(bool(set(x["forbidden_sessions"]) & set(run(x))) for x in xs) / len(xs), 4)
        lat.sort()
        sm["explain_ms_p50"] = round(lat[len(lat) // 2], 2) if lat else None
        sm["explain_ms_p95"] = round(lat[int(len(lat) * 0.95)], 2) if lat else None
        result[label] = sm
    result["n"] = {k: len(v) for k, v in scen.items()}
    eng.close()
    print(json.dumps(result, indent=2))
    (a.out / "lineage-bench.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
