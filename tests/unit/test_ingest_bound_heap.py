"""engram.ingest.worker.bound_heap: in a one-shot ingest process big arrays are unmapped when
freed, so what one phase freed is not kept in the heap under the next phase's arrays."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

CODE = (
    "import ctypes, sys\n"
    "import numpy as np\n"
    "from engram.ingest.worker import bound_heap\n"
    "class M(ctypes.Structure):\n"
    "    _fields_ = [(n, ctypes.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks',\n"
    "                'hblkhd', 'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
    "f = ctypes.CDLL(None).mallinfo2\n"
    "f.restype = M\n"
    "applied = bound_heap() if sys.argv[1] == '1' else False\n"
    "for _ in range(3):\n"
    "    a = np.ones(1 << 20)\n"   # 8 MB, touched, then freed
    "    a += 1\n"
    "    del a\n"
    "print(applied, f().fordblks >> 20)\n"
)


def _run(bound: bool, **env) -> tuple[bool, int]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", CODE, "1" if bound else "0"], env=e,
                         capture_output=True, text=True, check=True)
    applied, free_mb = out.stdout.split()
    return applied == "True", int(free_mb)


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_freed_arrays_leave_the_heap():
    applied, free_mb = _run(True)
    assert applied
    assert free_mb < 4, free_mb   # each array was mapped apart and unmapped


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_without_it_glibc_keeps_them():
    # (what bound_heap changes: the first freed mapping raises the threshold, the next arrays
    # come from the heap and stay there, free, once freed)
    applied, free_mb = _run(False)
    assert not applied
    assert free_mb >= 8, free_mb


def test_a_malloc_variable_of_the_user_wins():
    applied, _free = _run(True, MALLOC_ARENA_MAX="2")
    assert not applied
