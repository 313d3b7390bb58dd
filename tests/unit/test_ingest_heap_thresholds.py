"""The ingest's mmap threshold (``engram.ingest.worker.bound_heap``): the CLI maps arrays of
``HEAP_MMAP_THRESHOLD`` (128 KiB) and up apart — at 256 KiB the lineage pass's arrays of a few
hundred KB came from the heap, whose free space grew with the log — and ``_heap_reused`` gives it
back after a tape's parts are prepared. The parse worker keeps glibc's own (its many texts and
arrays of that size each mapped apart cost page faults)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_ingest_bound_heap import GLIBC

MAPPED = (
    "import ctypes, sys\n"
    "import numpy as np\n"
    "from engram.ingest import worker\n"
    "class M(ctypes.Structure):\n"
    "    _fields_ = [(n, ctypes.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks',\n"
    "                'hblkhd', 'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
    "f = ctypes.CDLL(None).mallinfo2\n"
    "f.restype = M\n"
    "def mapped(nbytes):\n"   # how many of 8 live arrays of nbytes are mapped apart
    "    before = f().hblks\n"
    "    kept = [np.ones(nbytes // 8) for _ in range(8)]\n"
    "    return f().hblks - before\n"
    "{setup}\n"
    "print(mapped(192 << 10), mapped(2 << 20))\n"
)


def _mapped(setup: str) -> tuple[int, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", MAPPED.replace("{setup}", setup)], env=env,
                         capture_output=True, text=True, check=True)
    small, big = out.stdout.split()
    return int(small), int(big)


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_the_cli_maps_arrays_of_a_few_hundred_kb():
    assert _mapped("assert worker.bound_heap()") == (8, 8)


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_heap_reused_gives_the_threshold_back():
    # the arrays taken inside stay alive: freed, their heap space could serve one of the arrays
    # measured after it whatever the threshold (glibc looks in its free lists before it maps)
    setup = ("assert worker.bound_heap()\n"
             "h0 = f().hblks\n"
             "with worker._heap_reused():\n"
             "    held = [np.ones((2 << 20) // 8) for _ in range(8)]\n"
             "    assert f().hblks == h0\n")   # (under PREPARE_MMAP_THRESHOLD: the heap's)
    assert _mapped(setup) == (8, 8)
