"""What happens inside each period: usage by offset from the period's start (FlameScope's
sub-second offset view, on the CFS grid), and the most CPUs a group can run on."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .bundle import Run
from .cgroup import bundle_cpus, bundle_period_us
from .errors import UsageError
from .freezes import covered_by
from .gomaxprocs import effective as effective_gomaxprocs
from .intervals import known_true
from .levels import level_names, level_run


def default_bucket_ms(period_ns: int) -> float:
    """10 ms, or a tenth of a period shorter than 100 ms."""
    return min(10.0, period_ns / 1e7)


def period_offsets(run: Run, per: pd.DataFrame, bucket_ms: float | None) -> pd.DataFrame:
    """:func:`df_period_offsets` over a given period table."""
    names = level_names(run)
    single = len(names) == 1 and "cgroup" not in run.samples
    s = run.samples if single else level_run(run, per.attrs.get("level") or names[0]).samples
    P = int(per["end_ns"].iloc[0] - per["start_ns"].iloc[0]) if len(per) else bundle_period_us(run.meta) * 1000
    if bucket_ms is None:
        bucket_ms = default_bucket_ms(P)
    if not (isinstance(bucket_ms, int | float) and 0 < bucket_ms * 1e6 <= P):
        raise UsageError(f"df_period_offsets: bucket_ms {bucket_ms!r} must lie in (0, {P / 1e6:g}] (the period)")
    b_ns = int(bucket_ms * 1e6)
    nb = max(1, P // b_ns)
    edges = per["start_ns"].to_numpy()[:, None] + np.arange(nb + 1, dtype=np.int64)[None, :] * b_ns
    u = np.interp(
        edges.ravel().astype(np.float64), s["t_ns"].to_numpy().astype(np.float64), s["usage_us"].to_numpy()
    ).reshape(edges.shape)
    cpus = np.diff(u, axis=1) / (b_ns / 1e3)
    cap = cpus_available(run)
    cap = np.inf if np.isnan(cap) else cap  # nothing to cap at: the tick steps stay as read
    # a period that as a whole shows more than the cap (tick charges at its edges) is capped
    # at its own mean instead, so its CPU-seconds still fit
    lim = np.maximum(cap, cpus.mean(axis=1)) if len(cpus) else np.zeros(0)
    for i in range(nb - 1, 0, -1):  # a few buckets per period; vectorised over periods
        over = np.maximum(cpus[:, i] - lim, 0.0)
        cpus[:, i] -= over
        cpus[:, i - 1] += over
    for i in range(nb - 1):  # what the first bucket cannot hold goes forward again
        over = np.maximum(cpus[:, i] - lim, 0.0)
        cpus[:, i] -= over
        cpus[:, i + 1] += over
    off = np.arange(nb) * bucket_ms
    led = per.attrs.get("ledger")
    freezes = led.freezes if led is not None and led.freezes is not None else None
    if freezes is not None:
        # a bucket is frozen when a freeze of any level covers its middle
        mids = per["start_ns"].to_numpy()[:, None] + (np.arange(nb, dtype=np.int64) * b_ns + b_ns // 2)[None, :]
        by = covered_by(freezes, mids.ravel())
        frozen = by != ""
    else:
        ex = per["exhausted_at_us"].to_numpy() / 1e3
        thr = known_true(per["throttled"])
        frozen = (thr[:, None] & (off[None, :] >= np.nan_to_num(ex, nan=np.inf)[:, None])).ravel()
        by = np.where(frozen, str(per.attrs.get("level", "container")), "")
    out = pd.DataFrame(
        {
            "period": np.repeat(per["period"].to_numpy(), nb),
            "offset_ms": np.tile(off, len(per)),
            "cpus": cpus.ravel(),
            "frozen": frozen,
            "frozen_by": pd.array(by, dtype="string"),
            "unknown": np.repeat((per["frozen_by"] if "frozen_by" in per else per["throttled"]).isna().to_numpy(), nb),
        }
    )
    out.attrs["level"] = per.attrs.get("level")
    out.attrs["cpus_max"] = cap if np.isfinite(cap) else np.nan
    return out


def cpus_available(run: Run) -> float:
    """The most CPUs the group can run on at once: the CPUs its threads may use
    (:func:`gmpanalysis.cgroup.bundle_cpus`) and GOMAXPROCS
    (:attr:`gmpanalysis.Analysis.gomaxprocs`), whichever is known and smaller; NaN when
    neither is (the analyst's own machine says nothing about the run's)."""
    vals = [v for v in (bundle_cpus(run.meta), effective_gomaxprocs(run)) if isinstance(v, int | float) and v > 0]
    return float(min(vals)) if vals else float("nan")
