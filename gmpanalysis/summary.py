"""Whole-run totals straight from the raw counters: one row per bundle."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from .bundle import Run


def _increase(values: np.ndarray) -> float:
    """Total increase of a cumulative counter, skipping resets (a recreated cgroup starts
    from zero again: the fall is not a negative increase)."""
    if len(values) < 2:
        return 0.0
    d = np.diff(values.astype(np.float64))
    return float(d[d > 0].sum())


# Usage counted as "flat": after the quota runs out, threads of the group still trickle
# leftover slice (36–78 µs steps seen here), and cpuacct.usage lags the truth by up to one
# tick per CPU (4 ms at HZ=250), so flatness is judged on the cumulative value.
FLAT_TOL_US = 300.0


def stall_estimate_ns(samples: pd.DataFrame, period_ns: int, tol_us: float = FLAT_TOL_US) -> float:
    """Wall time the group stood frozen, from samples alone: for each throttle credit
    (nr_throttled rising between reads e-1 and e, i.e. at a period boundary there), the time
    from the first read whose usage was within ``tol_us`` of the usage just before the
    boundary, to the boundary (taken as the midpoint of the two reads); capped at one
    period. A whole-run estimate; per-period values come from the period grid."""
    t = samples["t_ns"].to_numpy()
    u = samples["usage_us"].to_numpy()
    if len(t) < 3:
        return 0.0
    resets = np.flatnonzero(np.diff(u) < 0) + 1
    if len(resets):
        # a recreated cgroup restarts its counters: estimate each segment on its own
        return sum(stall_estimate_ns(seg, period_ns, tol_us) for seg in np.split(samples, resets) if len(seg))
    e = np.flatnonzero(np.diff(samples["nr_throttled"].to_numpy()) > 0) + 1
    if not len(e):
        return 0.0
    # usage is non-decreasing within a segment: the plateau starts at the first read
    # reaching (usage before the boundary - tol)
    j = np.searchsorted(u, u[e - 1] - tol_us, side="left")
    boundary = (t[e - 1] + t[e]) / 2
    return float(np.clip(boundary - t[j], 0, period_ns).sum())


def df_run_totals(runs: Iterable[Run]) -> pd.DataFrame:
    """One row per run, from the whole sampled span.

    Columns: ``name``; ``gomaxprocs`` (effective, from the app; else the env value);
    ``cpu_limit`` (e.g. "500m"); ``quota_us``, ``period_us`` µs; ``span_s`` s sampled;
    ``samples``; ``interval_p50_us`` µs between reads; ``usage_cpus`` CPUs used on average
    (Δusage / span); ``usage_ms_per_period`` ms of CPU per active period (≈ the quota when
    the group is quota-bound); ``nr_periods`` active periods; ``nr_throttled`` throttled periods;
    ``throttled_pct`` % of active periods throttled (the cAdvisor ratio); ``throttled_ms_per_throttled``
    ms of throttled time per throttled period, a SUM over CPUs; ``stall_ms_per_throttled`` ms
    of wall time frozen per throttled period (:func:`stall_estimate_ns`); ``cpus_throttled``
    throttled time / frozen wall time: how many CPUs' run queues stood throttled, ≈ the
    CPUs the group was using when its quota ran out; ``requests``, ``ok``; ``throughput_rps``
    ok responses per s; ``latency_p50_ms``, ``latency_p99_ms`` from the scheduled start;
    ``trace_bytes``.
    """
    rows = []
    for run in runs:
        s, m = run.samples, run.meta
        groups = [g for _, g in s.groupby("cgroup")] if "cgroup" in s else [s]
        g0 = groups[0]
        t = g0["t_ns"].to_numpy()
        span_s = (t[-1] - t[0]) / 1e9 if len(t) > 1 else 0.0
        periods = _increase(g0["nr_periods"].to_numpy())
        throttled = _increase(g0["nr_throttled"].to_numpy())
        thr_us = _increase(g0["throttled_us"].to_numpy())
        usage_us = _increase(g0["usage_us"].to_numpy())
        row = {
            "name": run.name,
            "gomaxprocs": m.get("gomaxprocs_effective", m.get("gomaxprocs_env")),
            "cpu_limit": m.get("cpu_limit"),
            "quota_us": m.get("quota_us"),
            "period_us": m.get("period_us"),
            "span_s": span_s,
            "samples": len(g0),
            "interval_p50_us": float(np.median(np.diff(t))) / 1e3 if len(t) > 1 else np.nan,
            "usage_cpus": usage_us / 1e6 / span_s if span_s else np.nan,
            "usage_ms_per_period": usage_us / 1e3 / periods if periods else np.nan,
            "nr_periods": int(periods),
            "nr_throttled": int(throttled),
            "throttled_pct": 100 * throttled / periods if periods else np.nan,
            "throttled_ms_per_throttled": thr_us / 1e3 / throttled if throttled else np.nan,
        }
        stall_ns = stall_estimate_ns(g0, int(m.get("period_us") or 100_000) * 1000)
        row["stall_ms_per_throttled"] = stall_ns / 1e6 / throttled if throttled else np.nan
        row["cpus_throttled"] = thr_us * 1e3 / stall_ns if stall_ns else np.nan
        r = run.requests
        if r is not None and len(r):
            ok = r[(r["status"] >= 200) & (r["status"] < 300)]
            lat = (ok["end_ns"] - ok["sched_ns"]).to_numpy() / 1e6
            rspan = (r["end_ns"].max() - r["start_ns"].min()) / 1e9
            row.update(
                requests=len(r),
                ok=len(ok),
                throughput_rps=len(ok) / rspan if rspan > 0 else np.nan,
                latency_p50_ms=float(np.percentile(lat, 50)) if len(lat) else np.nan,
                latency_p99_ms=float(np.percentile(lat, 99)) if len(lat) else np.nan,
            )
        else:
            row.update(requests=0, ok=0, throughput_rps=np.nan, latency_p50_ms=np.nan, latency_p99_ms=np.nan)
        row["trace_bytes"] = run.trace_path.stat().st_size if run.trace_path is not None else 0
        rows.append(row)
    return pd.DataFrame(rows)
