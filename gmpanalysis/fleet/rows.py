"""A fleet summary row's figures, from one bundle: its period table's counts and rates
(:func:`summarize_bundle`), or those of a run no quota limited (:func:`summarize_unlimited`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def summarize_bundle(run: Any, per: pd.DataFrame) -> dict[str, Any]:
    """The summary row's figures from a run and its periods. The counts are
    :func:`gmpanalysis.compare.period_summary`'s, so with holes in the samples they still
    equal the kernel's counter deltas over the table (what ambiguous groups hold included):
    ``periods`` (every CFS period of the table: wall clock), ``active_periods``
    (nr_periods), ``throttled_periods`` (nr_throttled), ``unknown_periods`` (rows whose
    throttling the samples cannot tell); ``span_s`` the table's wall seconds;
    ``frozen_cpu_s`` CPU-seconds the group's run queues stood throttled (cpu.stat's
    throttled time, a sum over CPUs); ``stall_s`` wall seconds frozen by any level (Σ
    frozen_us, a pod's quota too; Σ stall_us for a table without it) over the
    ``stall_known_s`` seconds of periods that know it; ``stw_spanning`` stop-the-world
    pauses still open when a throttled period ended; ``gomaxprocs`` (in force at the start),
    ``limit_cpus`` (quota / period, NaN: none), ``ncpu``; ``wall_start`` (meta.json, ISO)
    and ``trace_s`` the seconds of periods the trace covers."""
    from ..compare import frozen_wall, period_summary

    ps = period_summary(per)
    m = run.meta
    q, p = m.get("quota_us"), m.get("period_us")
    g = per["gomaxprocs"].dropna()
    frozen, known = frozen_wall(per)
    length = (per["end_ns"] - per["start_ns"]).to_numpy(dtype=np.float64) / 1e9
    traced = per["stw_count"].notna().to_numpy() if "stw_count" in per else np.zeros(len(per), dtype=bool)
    return {
        "wall_start": str(m.get("wall_start") or ""),
        "span_s": float(length.sum()),
        "trace_s": float(length[traced].sum()),
        "periods": int(ps["periods"]),
        "active_periods": int(ps["active_periods"]),
        "throttled_periods": int(ps["throttled_periods"]),
        "unknown_periods": int(ps["unknown_periods"]),
        "frozen_cpu_s": float(ps["throttled_rq_s"]),
        "stall_s": float(frozen[known].sum() / 1e6),
        "stall_known_s": float(length[known].sum()),
        "stw_spanning": int(per["stw_spans_boundary"].fillna(False).astype(bool).sum()),
        "gomaxprocs": float(g.iloc[0]) if len(g) else float(m.get("gomaxprocs_effective") or math.nan),
        "limit_cpus": q / p if isinstance(q, (int, float)) and isinstance(p, (int, float)) and p else math.nan,
        "ncpu": float(m.get("ncpu") or math.nan),
    }


def summarize_unlimited(run: Any) -> dict[str, Any]:
    """:func:`summarize_bundle`'s row for a run no quota limited: the samples' span, never
    throttled or frozen (0, over the whole span), no periods to count (NaN)."""
    t = run.samples["t_ns"]
    span = float(t.iloc[-1] - t.iloc[0]) / 1e9 if len(t) > 1 else 0.0
    m = run.meta
    return {
        "wall_start": str(m.get("wall_start") or ""),
        "span_s": span,
        "trace_s": math.nan,
        "periods": math.nan,
        "active_periods": math.nan,
        "throttled_periods": 0,
        "unknown_periods": math.nan,
        "frozen_cpu_s": 0.0,
        "stall_s": 0.0,
        "stall_known_s": span,
        "stw_spanning": 0,
        "gomaxprocs": float(m.get("gomaxprocs_effective") or math.nan),
        "limit_cpus": math.nan,
        "ncpu": float(m.get("ncpu") or math.nan),
    }
