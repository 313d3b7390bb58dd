"""Environment variables: read when used, a bad value falls back to the default, every one
documented (docs/configuration.md, "Environment variables")."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from engram.env import env_flag, env_int

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
NAME = re.compile(r"\bENGRAM_[A-Z][A-Z0-9_]*")


# -- env_int / env_flag ----------------------------------------------------------------------------


def test_env_int(monkeypatch, caplog):
    monkeypatch.delenv("ENGRAM_X", raising=False)
    assert env_int("ENGRAM_X", 7) == 7
    for raw, want in (("12", 12), (" 3 ", 3), ("-2", -2), ("", 7), ("  ", 7)):
        monkeypatch.setenv("ENGRAM_X", raw)
        assert env_int("ENGRAM_X", 7) == want
    assert not caplog.records
    for bad in ("twelve", "1.5", "0x10"):
        monkeypatch.setenv("ENGRAM_X", bad)
        with caplog.at_level(logging.WARNING, logger="engram.env"):
            assert env_int("ENGRAM_X", 7) == 7
        assert "ENGRAM_X" in caplog.text and bad in caplog.text
        caplog.clear()


def test_env_int_reads_at_call_time(monkeypatch):
    monkeypatch.setenv("ENGRAM_X", "1")
    assert env_int("ENGRAM_X", 0) == 1
    monkeypatch.setenv("ENGRAM_X", "2")
    assert env_int("ENGRAM_X", 0) == 2


def test_env_flag(monkeypatch, caplog):
    monkeypatch.delenv("ENGRAM_X", raising=False)
    assert env_flag("ENGRAM_X") is False
    for raw in ("1", "true", "TRUE", "yes", "on", " On "):
        monkeypatch.setenv("ENGRAM_X", raw)
        assert env_flag("ENGRAM_X") is True
    for raw in ("", "0", "false", "no", "off", "OFF"):
        monkeypatch.setenv("ENGRAM_X", raw)
        assert env_flag("ENGRAM_X") is False
    assert not caplog.records
    monkeypatch.setenv("ENGRAM_X", "maybe")
    with caplog.at_level(logging.WARNING, logger="engram.env"):
        assert env_flag("ENGRAM_X") is False
    assert "ENGRAM_X" in caplog.text and "maybe" in caplog.text


# -- ENGRAM_CALIBRATE_K / _W: read on first use, bad values fall back -------------------------------


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_CALIBRATE_")}
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


_IMPORT_ALL = """
import importlib, pkgutil, engram
for m in pkgutil.walk_packages(engram.__path__, "engram."):
    importlib.import_module(m.name)
"""


@pytest.mark.parametrize("bad", ["abc", "0", "-3", "5.5"])
def test_bad_calibration_value_does_not_break_import(bad):
    proc = _python(_IMPORT_ALL + """
from engram import fingerprint
from engram.fingerprint import winnow
from engram.index.db import fingerprint_params
assert winnow._params is None, "read at import"
assert (fingerprint.DEFAULT_K, fingerprint.DEFAULT_W) == (winnow.BENCH_K, winnow.BENCH_W) == (5, 8)
assert fingerprint_params()["k"] == 5
print("ok")
""", ENGRAM_CALIBRATE_K=bad, ENGRAM_CALIBRATE_W=bad)
    assert proc.stdout.strip() == "ok"
    assert "ENGRAM_CALIBRATE_K" in proc.stderr and "ENGRAM_CALIBRATE_W" in proc.stderr  # warned


def test_calibration_values_are_used_and_recorded_in_the_index(tmp_path):
    """k and w from the environment reach every default (the functions' and the index's
    parameters); an index built with other ones is refused (IndexMismatch), as before."""
    index = tmp_path / "index.sqlite"
    _python(f"from engram.index import db\ndb.connect({str(index)!r}).close()")
    proc = _python(f"""
import numpy as np
from engram import fingerprint
from engram.fingerprint import winnow
from engram.index import db
from engram.errors import IndexMismatch
assert winnow._params is None, "read at import"
assert (fingerprint.DEFAULT_K, fingerprint.DEFAULT_W) == (7, 3)
assert db.fingerprint_params()["k"] == 7 and db.fingerprint_params()["w"] == 3
text = "def f(a, b):\\n    return a + b * 2 - g(a, b) + h(b, a)\\n" * 3
assert np.array_equal(fingerprint.fingerprint(text).hashes, fingerprint.fingerprint(text, 7, 3).hashes)
assert not np.array_equal(fingerprint.fingerprint(text).hashes, fingerprint.fingerprint(text, 5, 8).hashes)
assert np.array_equal(fingerprint.all_kgrams(text)[0], fingerprint.all_kgrams(text, 7)[0])
try:
    db.connect({str(index)!r})
except IndexMismatch:
    print("mismatch")
""", ENGRAM_CALIBRATE_K="7", ENGRAM_CALIBRATE_W="3")
    assert proc.stdout.strip() == "mismatch"


# -- every ENGRAM_* variable is documented -----------------------------------------------------------


def _names_in_source() -> dict[str, str]:
    """``ENGRAM_*`` names in the strings and comments of engram/ and engram_lsp/ (where an
    environment variable's name is written: ``os.environ.get("ENGRAM_X")``, docstrings), each
    with its first place. Python identifiers are not variables (``ENGRAM_ERROR``, a JSON-RPC
    error code, is a constant)."""
    kinds = {tokenize.STRING, tokenize.COMMENT}
    if hasattr(tokenize, "FSTRING_MIDDLE"):  # Python 3.12+: f-strings are split into tokens
        kinds.add(tokenize.FSTRING_MIDDLE)
    found: dict[str, str] = {}
    for pkg in ("engram", "engram_lsp"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            src = path.read_text(encoding="utf-8")
            for tok in tokenize.generate_tokens(io.StringIO(src).readline):
                if tok.type in kinds:
                    for name in NAME.findall(tok.string):
                        found.setdefault(name, f"{path.relative_to(ROOT)}:{tok.start[0]}")
    return found


def _documented() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"^## Environment variables\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"{DOC.relative_to(ROOT)} has no '## Environment variables' section"
    return {row.group(1) for row in re.finditer(r"^\| `(ENGRAM_[A-Z0-9_]+)` \|", m.group(1), re.M)}


def test_every_environment_variable_is_documented():
    source, documented = _names_in_source(), _documented()
    assert {"ENGRAM_HOME", "ENGRAM_CALIBRATE_K", "ENGRAM_TAPE_CACHE_MB"} <= source.keys()
    missing = sorted(set(source) - documented)
    assert not missing, ("ENGRAM_* variables the code names but docs/configuration.md "
                         "(## Environment variables) does not document:\n"
                         + "\n".join(f"  {n}  ({source[n]})" for n in missing))
    stale = sorted(documented - set(source))
    assert not stale, "documented but named nowhere in engram/ or engram_lsp/: " + ", ".join(stale)
