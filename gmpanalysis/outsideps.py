"""The CPU a Go process runs outside its Ps, measured from a run with a trace.

A goroutine runs on a P, and GOMAXPROCS bounds the Ps; but a thread in a system call hands
its P to another thread after 20 µs (sysmon's retake) and runs on in the kernel, and sysmon
itself runs without a P. That CPU is the group's (cpu.stat counts it) and GOMAXPROCS does
not bound it: a service at GOMAXPROCS 1 under a 1-CPU limit is throttled whenever its one P
is busy a whole period (on the 16-CPU machine, `cpu-1cpu-gmp1`: 17 % of its periods, each
frozen about 1 ms, with usage 100.2 ms a period against a 100 ms quota).

The execution trace shows the goroutines' running time on the Ps, not the CPU beside them:
in a period no level froze (no thread stood throttled while its goroutine "ran") and the
host did not hold the threads back, the CPU the counters measured over the goroutines'
running time is ``1 + share``. Measured: 0.8 % on that run (GOMAXPROCS 1, 46 such periods),
2.3-3.4 % on the 0.5-CPU open-loop runs there (13 periods each: GOMAXPROCS 1 to 8, where
spinning threads hunting for work, which hold a P but run no goroutine, count too).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

# the fewest periods the share is taken over: fewer is noise (a period's usage is read
# between two samples, its goroutines' time cut at the boundary exactly)
MIN_PERIODS = 5
# nor over less running time than this (µs): a mostly idle service's share is of almost nothing
MIN_RUNNING_US = 50_000.0


def outside_share(per: pd.DataFrame) -> dict[str, Any] | None:
    """The CPU outside the Ps per unit of goroutine running time, from a period table with
    the trace's columns (df_periods of a run with a trace): over the periods the trace
    covers whole, that no level froze and no sampling hole cut, Σ usage_us / Σ go_running_us
    - 1. Returns ``share`` (0 or more), ``se`` (its standard error, from the periods'
    spread) and ``periods``; None where the table has no trace columns or too few such
    periods (:data:`MIN_PERIODS`, :data:`MIN_RUNNING_US`). A share below 0 is taken as 0:
    goroutines "ran" longer than the group's CPU only where the host held their threads
    back (another task on the CPU), which hides the CPU outside the Ps rather than
    measuring it."""
    if "go_running_us" not in per:
        return None
    ok = per["go_running_us"].fillna(0).to_numpy(dtype=np.float64) > 0
    ok &= per["usage_us"].notna().to_numpy() & ~per["throttled"].fillna(True).to_numpy(dtype=bool)
    if "frozen_by" in per:
        ok &= (per["frozen_by"].fillna("") == "").to_numpy(dtype=bool)  # "": no level froze it
    if "frozen_other_us" in per:
        ok &= ~(per["frozen_other_us"].fillna(0).to_numpy(dtype=np.float64) > 0)
    if "gap" in per:
        ok &= ~per["gap"].fillna(True).to_numpy(dtype=bool)
    u = per["usage_us"].to_numpy(dtype=np.float64)[ok]
    r = per["go_running_us"].to_numpy(dtype=np.float64)[ok]
    if len(u) < MIN_PERIODS or r.sum() < MIN_RUNNING_US:
        return None
    share = float(u.sum() / r.sum() - 1.0)
    # the ratio estimator's standard error, from the periods' residuals about it
    res = u - (1.0 + share) * r
    se = float(math.sqrt(np.sum(res**2) / (len(u) - 1) * len(u)) / r.sum())
    return {"share": max(share, 0.0), "se": se, "periods": int(len(u))}
