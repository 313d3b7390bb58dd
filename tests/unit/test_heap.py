"""engram_lsp.heap: glibc keeps the memory the server frees (one arena, high thresholds)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

PROBE = (
    "from engram_lsp import heap; a = heap.kept(); b = heap.keep_heap(); "
    "print(a, b, heap.keep_heap() is b)"
)


def _probe(env: dict) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_glibc_takes_the_settings():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    assert _probe(env) == "None True True"


def test_user_malloc_settings_are_left_alone():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["MALLOC_ARENA_MAX"] = "4"
    assert _probe(env) == "None False True"


@pytest.mark.skipif(not GLIBC, reason="glibc reports its own settings")
def test_freed_memory_stays_in_the_process():
    """The point of it: after a big request's arrays are freed, the next one faults no pages in."""
    code = (
        "import resource, numpy as np\n"
        "from engram_lsp import heap\n"
        "import sys; keep = sys.argv[1] == '1'\n"
        "keep and heap.keep_heap()\n"
        "def big():\n"
        "    xs = [np.ones(1 << 19) for _ in range(8)]\n"   # 8 x 4 MB, touched
        "    return sum(float(x[-1]) for x in xs)\n"
        "big()\n"
        "f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "big()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def faults(keep: bool) -> int:
        out = subprocess.run([sys.executable, "-c", code, "1" if keep else "0"], env=env,
                             capture_output=True, text=True, check=True)
        return int(out.stdout)

    # 32 MB of pages is 8,192 faults; default glibc gives them back (mmap) and faults them again
    assert faults(False) > 4000
    assert faults(True) < 500
