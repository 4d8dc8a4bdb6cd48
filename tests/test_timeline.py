"""The per-period table on the real fixture bundles, with invariants checked against plain
loop implementations, and crafted damage (resets, holes) derived from real runs."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from conftest import RUNS

import gmpanalysis as gmp
from gmpanalysis.timeline import PERIOD_COLUMNS, coverage

BY_NAME = {p.name: p for p in RUNS}


@pytest.fixture(scope="module")
def tables():
    return {p.name: (gmp.load_run(p), gmp.df_periods(gmp.load_run(p))) for p in RUNS}


def reference_attribution(per, s, col):
    """Loop version: each increment goes to the period whose END boundary is the last one at
    or before the read that saw it."""
    ends = per["end_ns"].tolist()
    starts = per["start_ns"].tolist()
    out = [0.0] * len(per)
    v = s[col].tolist()
    t = s["t_ns"].tolist()
    for i in range(1, len(v)):
        inc = v[i] - v[i - 1]
        if inc <= 0:
            continue
        owner = None
        for k in range(len(per)):
            if ends[k] <= t[i] + 50_000 and (k + 1 == len(per) or ends[k + 1] > t[i] + 50_000):
                owner = k
        if owner is None and starts and t[i] + 50_000 >= starts[0]:
            continue  # before the first full period ended: credit of the boundary opening the table
        if owner is not None:
            out[owner] += inc
    return out


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_columns_and_invariants(tables, name):
    run, per = tables[name]
    s = run.samples
    assert list(per.columns) == PERIOD_COLUMNS
    assert len(per) >= 50
    P = run.meta["period_us"] * 1000
    assert ((per["end_ns"] - per["start_ns"]) == P).all()
    assert (np.diff(per["period"]) == 1).all()
    # Σ throttled rows = Δnr_throttled, Σ throttled_rq_us = Δthrottled time, over the table's span
    ref_thr = reference_attribution(per, s, "nr_throttled")
    ref_us = reference_attribution(per, s, "throttled_us")
    assert per["throttled"].sum() == sum(1 for x in ref_thr if x > 0) == sum(ref_thr)
    assert per["throttled_rq_us"].sum() == pytest.approx(sum(ref_us), abs=1e-3)
    # ... and row by row: each credit lands on the period that ended at its boundary
    assert per["throttled"].tolist() == [x > 0 for x in ref_thr]
    assert np.allclose(per["throttled_rq_us"].to_numpy(), ref_us)
    # Σ usage = Δusage between the first and last boundary (usage interpolated there)
    u = np.interp([per["start_ns"].iloc[0], per["end_ns"].iloc[-1]], s["t_ns"], s["usage_us"])
    assert per["usage_us"].sum() == pytest.approx(u[1] - u[0], rel=1e-9)
    # no single-resource overlap exceeds the period
    for c in ("stw_us", "gc_mark_us"):
        assert (per[c].dropna() <= P / 1e3 + 1e-6).all(), c
    assert (per["stall_us"] <= P / 1e3).all() and (per["stall_us"] >= 0).all()
    # quota-bound periods use about their quota (5 ms slices, enforced at ticks: 44-58 ms seen)
    thr = per[per["throttled"]]
    assert thr["usage_us"].median() == pytest.approx(50_000, rel=0.1)


def test_exhaustion_and_cpus_reproduce_the_sweep(tables):
    g1 = tables["cpu-0.5cpu-gmp1"][1]
    g8 = tables["cpu-0.5cpu-gmp8"][1]
    assert g1.loc[g1.throttled, "exhausted_at_us"].median() == pytest.approx(50_000, abs=6_000)
    assert g1["cpus_throttled"].median() == pytest.approx(1.0, abs=0.1)
    assert g8.loc[g8.throttled, "exhausted_at_us"].median() < 35_000
    assert g8["cpus_throttled"].median() == pytest.approx(2.0, abs=0.15)


def test_long_stws_are_the_ones_spanning_throttled_boundaries(tables):
    run, per = tables["alloc-0.5cpu-gmp8"]
    stw = run.trace.stw
    long = stw[(stw.end_ns - stw.start_ns) >= 10_000_000]
    assert len(long) >= 2
    flagged = per[per["stw_spans_boundary"]]
    assert len(flagged) == len(long)
    for b in flagged["end_ns"]:
        inside = long[(long.start_ns < b) & (long.end_ns > b)]
        assert len(inside) == 1  # the flagged boundary cuts through one of the long STWs
    # ... and each long STW began in the last stretch of a throttled period (quota ran out)
    for _, row in long.iterrows():
        k = per[(per.start_ns <= row.start_ns) & (per.end_ns > row.start_ns)].iloc[0]
        assert k.throttled and row.start_ns - k.start_ns >= k.exhausted_at_us * 1e3 - 5_000_000
    for name in ("cpu-0.5cpu-gmp1", "cpu-0.5cpu-gmp2"):
        assert tables[name][1]["stw_spans_boundary"].sum() == 0


def test_trace_columns_only_inside_the_trace_window(tables):
    run, per = tables["cpu-0.5cpu-gmp8"]
    inside = (per.start_ns >= run.trace.meta["first_ns"]) & (per.end_ns <= run.trace.meta["last_ns"])
    assert per.loc[inside, "go_running_us"].notna().all() and per.loc[~inside, "go_running_us"].isna().all()
    assert (per.loc[inside, "gomaxprocs"] == 8).all()


def test_requests_per_period(tables):
    run, per = tables["cpu-0.5cpu-gmp2"]
    r = run.requests
    span = (r.sched_ns >= per.start_ns.iloc[0]) & (r.sched_ns < per.end_ns.iloc[-1]) & (r.status == 200)
    assert per["requests"].sum() == span.sum()
    assert (per.loc[per.requests > 0, "latency_p99_ms"] >= per.loc[per.requests > 0, "latency_p50_ms"]).all()


def _copy_run(name):
    run = gmp.load_run(BY_NAME[name])
    return copy.copy(run)


def test_hole_in_the_samples_gives_nan_not_numbers(tables):
    full = tables["cpu-0.5cpu-gmp8"][1]
    run = _copy_run("cpu-0.5cpu-gmp8")
    t = run.samples.t_ns
    hole = (t > t.iloc[0] + 2_000_000_000) & (t < t.iloc[0] + 2_500_000_000)
    run.samples = run.samples[~hole].reset_index(drop=True)
    per = gmp.df_periods(run)
    gap = per["gap"]
    assert 5 <= gap.sum() <= 7
    assert per.loc[gap, "usage_us"].isna().all() and per.loc[gap, "throttled_rq_us"].isna().all()
    assert not per.loc[gap, "throttled"].any()
    # away from the hole nothing changes
    same = per.merge(full, on="period", suffixes=("", "_full"))
    far = ~same["gap"] & ~same["period"].isin(per.loc[gap, "period"] + 1)
    assert np.allclose(same.loc[far, "usage_us"], same.loc[far, "usage_us_full"])
    assert (same.loc[far, "throttled"] == same.loc[far, "throttled_full"]).all()


def test_counter_reset_gives_segments(tables):
    """A restarted container: the second run's cgroup starts its counters from zero with
    a new timer phase. Built from two real runs, the second shifted in time after the first."""
    a = _copy_run("cpu-0.5cpu-gmp1")
    b = gmp.load_run(BY_NAME["cpu-0.5cpu-gmp8"])
    shift = int(a.samples.t_ns.iloc[-1] - b.samples.t_ns.iloc[0]) + 3_000_000
    bs = b.samples.assign(t_ns=b.samples.t_ns + shift)
    a.samples = pd.concat([a.samples, bs], ignore_index=True)
    a._trace = None
    a.trace_path = None
    a.requests = None
    per = gmp.df_periods(a)
    assert set(per["segment"]) == {0, 1}
    one = tables["cpu-0.5cpu-gmp1"][1]
    two = tables["cpu-0.5cpu-gmp8"][1]
    s0, s1 = per[per.segment == 0], per[per.segment == 1]
    assert len(s0) == len(one) and len(s1) == len(two)
    assert s0["throttled"].sum() == one["throttled"].sum() and s1["throttled"].sum() == two["throttled"].sum()
    assert (per["usage_us"].dropna() >= 0).all()
    assert np.allclose(s1["throttled_rq_us"].to_numpy(), two["throttled_rq_us"].to_numpy())


def test_no_limit_is_a_clear_error():
    run = _copy_run("cpu-0.5cpu-gmp1")
    run.meta = dict(run.meta, quota_us=None)
    with pytest.raises(gmp.MissingDataError, match="no CPU limit"):
        gmp.df_periods(run)


def test_compare_runs_reads_the_sweep():
    cmp = gmp.compare_runs([gmp.load_run(p) for p in RUNS]).set_index("name")
    assert (cmp["throttled_pct_active"] >= cmp["throttled_pct_wall"]).all()
    assert cmp.loc["cpu-0.5cpu-gmp1", "gomaxprocs"] == 1 and cmp.loc["cpu-0.5cpu-gmp8", "gomaxprocs"] == 8
    assert cmp.loc["alloc-0.5cpu-gmp8", "stw_spanning_boundary"] >= 2
    assert cmp.loc["alloc-0.5cpu-gmp8", "stw_max_us"] > 10_000 > cmp.loc["cpu-0.5cpu-gmp1", "stw_max_us"]
    assert cmp.loc["alloc-0.5cpu-gmp8", "gc_cpu_pct"] > cmp.loc["cpu-0.5cpu-gmp8", "gc_cpu_pct"]
    assert (cmp["phase_uncertainty_us"] <= 100).all()


def test_coverage_inline():
    # intervals [0,10) and [5,20) (overlapping) over the boundaries 0, 10, 20, 30
    c = coverage(np.array([0, 5]), np.array([10, 20]), np.array([0, 10, 20, 30]))
    assert np.diff(c).tolist() == [15.0, 10.0, 0.0]
