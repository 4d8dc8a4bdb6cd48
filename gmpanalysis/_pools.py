"""Native thread pools, bounded before numpy loads (imported first by the package).

numpy's wheels bring OpenBLAS, which starts one thread per CPU when numpy loads; each
thread busy-waits for work for 2^28 cycles (~0.1 s) before it sleeps, at start and after
every BLAS call. On a 16-CPU node that is ~1.5 CPU-seconds burnt at every import, and a
fleet pays it in every worker. The library makes no BLAS call on its own paths (reading
traces, building period tables, the what-if replay: tests/test_pools.py checks), so the
pool only matters for a user's own linear algebra. Where numpy is not loaded yet and the
user has not chosen, the wait is cut to OpenBLAS's minimum (2^4 cycles): the pool keeps
its size for the user's BLAS work, and idle threads sleep at once instead of spinning.
"""

from __future__ import annotations

import os
import sys

if "numpy" not in sys.modules:  # OpenBLAS reads its environment when numpy loads it
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
