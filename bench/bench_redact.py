"""Redaction, measured: recall on the secrets corpus, false positives on the three non-secret
corpora, throughput on the real harness logs, and the time of pathological 1 MB lines.

    python bench/bench_redact.py                      # the project's redactor
    python bench/bench_redact.py --module old.py      # another version of redact.py, to compare
    git show e134858:engram/adapters/redact.py > /tmp/old.py   # the redactor before the rewrite
    python bench/bench_redact.py --module /tmp/old.py --old-labels   # ... and its labels, cut first
    python bench/bench_redact.py --only speed         # recall | fp | speed | worst

Recall and false positives come from ``tests/data/secrets/corpus.py`` (the same figures
``tests/unit/test_redact_corpus.py`` asserts). Throughput: every event the adapters make of
``tests/data/harness/`` (parsed once, unredacted) goes through ``redact_event``; MB are the UTF-8
bytes of the strings redaction looks at; best of ``--repeat`` runs, the module's caches cleared
before each; CPU time (``time.process_time``), so that other work on a shared machine weighs less.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "data" / "secrets"))

import corpus  # noqa: E402


def load_module(path: str | None):
    if not path:
        from engram.adapters import redact

        return redact
    spec = importlib.util.spec_from_file_location("redact_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def recall(mod, old_labels: bool = False) -> None:
    cases = corpus.run_cases(mod, old_labels)
    caught = sum(c.leaked is None for c in cases)
    print(f"recall: {caught}/{len(cases)} = {caught / len(cases):.4f} "
          f"({len({c.rec['id'] for c in cases})} formats, {len(corpus.PLACES)} places)")
    print("| family | caught | cases | recall |\n|---|---|---|---|")
    for fam, (c, n) in corpus.recall_by(cases, lambda c: c.rec["family"]).items():
        print(f"| {fam} | {c} | {n} | {c / n:.3f} |")
    print("| place | caught | cases | recall |\n|---|---|---|---|")
    for pl, (c, n) in corpus.recall_by(cases, lambda c: c.place).items():
        print(f"| {pl} | {c} | {n} | {c / n:.3f} |")
    missed = [c for c in cases if c.leaked is not None]
    for c in missed[:40]:
        print(f"  missed {c.rec['id']} in {c.place}: {c.leaked[:140]!r}")
    if len(missed) > 40:
        print(f"  ... {len(missed) - 40} more")


def false_positives(mod) -> None:
    ns = corpus.load_nonsecrets()
    bad = [mod.redact_text(s)[0] for s in ns if mod.redact_text(s)[1]]
    print(f"non-secret lines: {len(bad)} of {len(ns)} redacted")
    for out in bad:
        print(f"  {out[:160]!r}")
    texts = corpus.fixture_texts()
    hits = [(src, s) for src, s in texts if mod.redact_text(s)[1]]
    n_src = len({src for src, _ in texts})
    mb = sum(len(s.encode("utf-8", "surrogatepass")) for _, s in texts) / 1e6
    print(f"real harness logs: {len(hits)} of {len(texts)} strings redacted ({n_src} sources, {mb:.1f} MB)")
    _show(mod, hits)
    files = corpus.code_sample()
    code_hits, mb = [], 0.0
    for name, p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        mb += len(text.encode("utf-8", "surrogatepass")) / 1e6
        if mod.redact_text(text)[1]:
            code_hits.append((name, text))
    print(f"real code: {len(code_hits)} of {len(files)} files redacted ({mb:.1f} MB)")
    _show(mod, code_hits)


def _show(mod, hits) -> None:
    find = getattr(mod, "find_secrets", None)
    for src, s in hits[:30]:
        if find is None:
            print(f"  {src}")
            continue
        for st, en, rule in find(s):
            print(f"  {src}: {rule}: {s[max(0, st - 60):en + 20]!r}")


def speed(mod, repeat: int) -> None:
    texts_events = [ev for _, ev in corpus.fixture_events()]
    mb = sum(len(s.encode("utf-8", "surrogatepass")) for ev in texts_events for k, v in ev.items()
             if k not in mod._SKIP_KEYS for s in corpus.strings(v)) / 1e6
    best = None
    for _ in range(repeat):
        evs = copy.deepcopy(texts_events)
        for f in vars(mod).values():  # no help from an earlier repeat
            if hasattr(f, "cache_clear") and not isinstance(f, type):  # not a cache class
                f.cache_clear()
        t0 = time.process_time()
        for ev in evs:
            mod.redact_event(ev)
        dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    print(f"throughput: {mb:.2f} MB of event strings in {best:.3f} s = {mb / best:.1f} MB/s "
          f"({len(texts_events)} events, best of {repeat})")


WORST = {
    "a": "a" * 1_000_000,
    "=": "=" * 1_000_000,
    "space": " " * 1_000_000,
    "key=": "key=" * 250_000,
    "password: ": "password: " * 100_000,
    "token=a": "token=a" * 142_857,
    ":": ":" * 1_000_000,
    "@": "@" * 1_000_000,
    "://": "://" * 333_333,
    "a:b@": "a:b@" * 250_000,
    "://a:": "://a:" * 200_000,
    "sk-": "sk-" * 333_333,
    "A": "A" * 1_000_000,
    "eyJ.": "eyJhbGciOiJIUzI1NiJ9." * 50_000,
    "BEGIN": "-----BEGIN PRIVATE KEY-----\n" + "A" * 1_000_000,
    "BEGIN no end, lines": "-----BEGIN RSA PRIVATE KEY-----\n" + ("QUJD" * 16 + "\n") * 15_000,
    "BEGIN x many": "-----BEGIN PRIVATE KEY-----" * 37_000,
    "gutter": "     1→KEY=" * 90_000,
    "quotes": '"password": "' * 70_000,
    "curl -u": "curl -u " * 120_000,
    "bearer": "Bearer " * 140_000,
    "Authorization: ": "Authorization: " * 66_000,
    "base64": "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODkw" * 23_000,
    "hex": "0123456789abcdef" * 62_500,
    "words": "the secret token key password api auth " * 25_000,
}


def worst(mod, limit: int = 20) -> None:
    import signal

    def give_up(*_):
        raise TimeoutError

    signal.signal(signal.SIGALRM, give_up)
    print(f"pathological texts (time of one redact_text; given up after {limit} s):")
    for name, text in WORST.items():
        t0 = time.perf_counter()
        signal.alarm(limit)
        try:
            mod._redact(text)
            took = f"{(time.perf_counter() - t0) * 1000:8.1f} ms"
        except TimeoutError:
            took = f"   > {limit} s"
        finally:
            signal.alarm(0)
        print(f"  {name!r:24} {len(text) / 1e6:.2f} MB  {took}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", help="path of a redact.py to measure instead of the project's")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=["recall", "fp", "speed", "worst"])
    ap.add_argument("--old-labels", action="store_true",
                    help="labels cut before redaction, as before they were redacted first (a before/after)")
    a = ap.parse_args(argv)
    mod = load_module(a.module)
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"module {a.module or 'engram.adapters.redact'}")
    if a.only in (None, "recall"):
        recall(mod, a.old_labels)
    if a.only in (None, "fp"):
        false_positives(mod)
    if a.only in (None, "speed"):
        speed(mod, a.repeat)
    if a.only in (None, "worst"):
        worst(mod)
    return 0


if __name__ == "__main__":
    sys.exit(main())
