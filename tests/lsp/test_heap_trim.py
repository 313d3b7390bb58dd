"""engram_lsp.heap.trim: the heap the server keeps is given back past a few requests' worth (after
an ingest, once idle), and only then."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

CODE = (
    "import numpy as np\n"
    "from engram_lsp import heap\n"
    "def rss():\n"
    "    return int(open('/proc/self/statm').read().split()[1]) * 4096 >> 20\n"
    "heap.keep_heap()\n"
    "xs = [np.ones(1 << 20) for _ in range({n})]\n"   # n x 8 MB, touched, then freed
    "del xs\n"
    "before = rss()\n"
    "trimmed = heap.trim()\n"
    "print(trimmed, before, rss())\n"
)


def _run(n: int) -> tuple[bool, int, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", CODE.replace("{n}", str(n))], env=env,
                         capture_output=True, text=True, check=True)
    trimmed, before, after = out.stdout.split()
    return trimmed == "True", int(before), int(after)


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_a_large_free_heap_goes_back_to_the_kernel():
    trimmed, before, after = _run(40)  # 320 MB freed: kept by the raised thresholds until trimmed
    assert trimmed
    assert before - after >= 250, (before, after)


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_a_few_requests_worth_is_kept():
    trimmed, before, after = _run(4)  # 32 MB free: under heap.KEEP_FREE, kept for the next request
    assert not trimmed
    assert after >= before - 4


def test_without_keep_heap_nothing_is_trimmed():
    from engram_lsp import heap

    if heap.kept():
        pytest.skip("this process took the settings")
    assert heap.trim() is False
