"""No native thread pool spins while the library works (gmpanalysis._pools).

Each check runs in a fresh interpreter, since OpenBLAS reads its environment once, when
numpy loads. Thread CPU comes from /proc/self/task/*/stat. On a machine with one CPU
OpenBLAS starts no pool and these hold trivially.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
def others_cpu_ms():
    total, n = 0, 0
    for tid in os.listdir("/proc/self/task"):
        n += 1
        if int(tid) == os.getpid():
            continue
        with open(f"/proc/self/task/{tid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        total += (int(parts[11]) + int(parts[12])) * 1000 // os.sysconf("SC_CLK_TCK")
    return total, n
if sys.argv[1] == "numpy-first":
    import numpy
import gmpanalysis as gmp
if sys.argv[1] == "work":
    # what the first read loads (numba, and scipy where numba finds it: a second OpenBLAS)
    # is loaded before the measured work: this checks the library's own calls
    gmp.read_trace(os.path.join(sys.argv[2], "fixtures/traces/tiny-go1.26.trace"))
time.sleep(0.5)  # whatever spins after start has run its course
before, threads_before = others_cpu_ms()
out = {"timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT"), "import_ms": before}
if sys.argv[1] == "work":
    root = sys.argv[2]
    trace = gmp.read_trace(os.path.join(root, "fixtures/traces/go1.26.trace"))
    run = gmp.load_run(os.path.join(root, "fixtures/runs/cpu-0.5cpu-gmp8"))
    gmp.df_periods(run)
    gmp.df_gomaxprocs(run)
    gmp.whatif.predict(run, gmp.load_run(os.path.join(root, "fixtures/runs/cpu-0.5cpu-gmp2")))
    gmp.to_report(run, os.path.join(sys.argv[3], "report.html"))
after, threads_after = others_cpu_ms()
out.update(work_ms=after - before, threads_before=threads_before, threads_after=threads_after)
print(json.dumps(out))
"""


def _child(*args: str, env: dict[str, str] | None = None) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OPENBLAS_", "GOTO_", "OMP_"))}
    e.update(env or {})
    p = subprocess.run(
        [sys.executable, "-c", CHILD, *args], env=e, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_import_leaves_no_pool_spinning():
    # numpy alone on this machine: the one extra OpenBLAS thread of 2 CPUs spins ~100 ms
    got = _child("import")
    assert got["timeout"] == "4"
    assert got["import_ms"] < 30, got


def test_pools_loaded_later_are_bounded_too():
    # numpy (and its OpenBLAS) loaded first keeps its wait; one loaded after the package
    # (scipy's, which numba loads at the first read) reads the bound from the environment
    assert _child("numpy-first")["timeout"] == "4"


def test_a_users_choice_is_kept():
    assert _child("import", env={"OPENBLAS_THREAD_TIMEOUT": "12"})["timeout"] == "12"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: OpenBLAS starts no pool to watch")
def test_library_work_makes_no_pool_spin(tmp_path):
    # with OpenBLAS's default wait, any BLAS call wide enough to use the pool would leave
    # its threads spinning ~0.1 s each after it: the work must not wake them. (Other
    # threads' CPU is the measure: the library's own work runs on one thread.)
    got = _child("work", str(ROOT), str(tmp_path), env={"OPENBLAS_THREAD_TIMEOUT": "28"})
    assert got["work_ms"] < 30, got
    assert got["threads_after"] <= got["threads_before"], got
