"""Native thread pools, bounded before they start (imported first by the package).

numpy's wheels bring OpenBLAS, which starts one thread per CPU when numpy loads; each
thread busy-waits for work for 2^28 cycles (~0.1 s) before it sleeps, at start and after
every BLAS call. On a 16-CPU node that is ~1.5 CPU-seconds burnt at every import, and a
fleet pays it in every worker. Where scipy is installed, numba's import (the trace
reader's first read) loads scipy's own OpenBLAS, a second pool that spins the same: a
16 MB trace read took 3.1 CPU-seconds for 1.2 s of wall time on 16 CPUs, 1.2 with the
wait cut. The library makes no BLAS call on its own paths (reading traces, building
period tables, the what-if replay, the report: tests/test_pools.py checks), so the pools
only matter for a user's own linear algebra. Unless the user has chosen, the wait is cut
to OpenBLAS's minimum (2^4 cycles) for every OpenBLAS loaded from now on (numpy's too,
when it is not loaded yet): the pools keep their size for the user's BLAS work, and idle
threads sleep at once instead of spinning.
"""

from __future__ import annotations

import os

# each OpenBLAS reads its environment when it is loaded (numpy's with numpy, scipy's with
# scipy): one loaded already keeps its wait
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
