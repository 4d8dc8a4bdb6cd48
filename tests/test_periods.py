"""The per-period table on the real fixture bundles, with invariants checked against plain
loop implementations, and crafted damage (resets, holes) derived from real runs."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import RUNS

import gmpanalysis as gmp
from gmpanalysis.intervals import coverage
from gmpanalysis.levels import level_run
from gmpanalysis.periods import PERIOD_COLUMNS, df_conservation, df_period_groups

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "16cpu-v2"

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
    s = level_run(run, per.attrs["level"]).samples  # the table's level (a bundle may sample several)
    assert list(per.columns) == PERIOD_COLUMNS
    assert len(per) >= 0.85 * (s["t_ns"].iloc[-1] - s["t_ns"].iloc[0]) / (run.meta["period_us"] * 1000)
    P = run.meta["period_us"] * 1000
    assert ((per["end_ns"] - per["start_ns"]) == P).all()
    assert (np.diff(per["period"]) == 1).all()
    # Σ throttled rows = Δnr_throttled, Σ throttled_rq_us = Δthrottled time, over the table's span
    ref_thr = reference_attribution(per, s, "nr_throttled")
    ref_us = reference_attribution(per, s, "throttled_us")
    assert per["throttled"].sum() == sum(1 for x in ref_thr if x > 0) == sum(ref_thr)
    assert per["throttled_rq_us"].sum() == pytest.approx(sum(ref_us), abs=1e-3)
    # ... and row by row: each credit lands on the period that ended at its boundary, except
    # where a quota was written: the kernel unthrottles the group at the write (measured here:
    # throttled time rose within ~1 ms of it, nr_throttled not counted), so that throttled time
    # belongs to the period of the write, not to the boundary before it
    wrote = per["reason"].fillna("").str.startswith("limit changed").to_numpy()
    near = wrote | np.r_[wrote[1:], False]
    assert per["throttled"].tolist() == [x > 0 for x in ref_thr]
    assert np.allclose(per["throttled_rq_us"].to_numpy()[~near], np.asarray(ref_us)[~near])
    assert per["throttled_rq_us"].to_numpy()[near].sum() == pytest.approx(np.asarray(ref_us)[near].sum())
    # Σ usage = Δusage between the first and last boundary (usage interpolated there)
    u = np.interp([per["start_ns"].iloc[0], per["end_ns"].iloc[-1]], s["t_ns"], s["usage_us"])
    assert per["usage_us"].sum() == pytest.approx(u[1] - u[0], rel=1e-9)
    # no single-resource overlap exceeds the period
    for c in ("stw_us", "gc_mark_us"):
        assert (per[c].dropna() <= P / 1e3 + 1e-6).all(), c
    assert (per["stall_us"] <= P / 1e3).all() and (per["stall_us"] >= 0).all()
    # quota-bound periods use about their quota (5 ms slices, enforced at ticks: 44-58 ms seen)
    thr = per[per["throttled"].fillna(False)]
    assert (thr["usage_us"] / thr["quota_us"]).median() == pytest.approx(1.0, rel=0.1)


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
    span = (r.sched_ns >= per.start_ns.iloc[0]) & (r.sched_ns < per.end_ns.iloc[-1])
    assert per["requests"].sum() == span.sum()  # arrivals, whatever their fate
    assert per["requests_ok"].sum() == (span & (r.status // 100 == 2)).sum()
    assert (per["requests_ok"] + per["requests_failed"] == per["requests"]).all()
    assert (per.loc[per.requests_ok > 0, "latency_p99_ms"] >= per.loc[per.requests_ok > 0, "latency_p50_ms"]).all()


@pytest.mark.parametrize("fate", ["all timed out", "half failed", "no requests.csv"])
def test_overload_gives_a_table_not_an_exception(fate):
    """An overloaded service where requests time out (status 0) is what this tool is for."""
    run = _copy_run("cpu-0.5cpu-gmp8")
    r = run.requests.copy()
    if fate == "all timed out":
        r["status"] = 0
    elif fate == "half failed":
        r.loc[r.index % 2 == 0, "status"] = 0
    run.requests = None if fate == "no requests.csv" else r
    per = gmp.df_periods(run)
    cmp = gmp.compare_runs([run], periods=[per])
    if fate == "no requests.csv":
        assert (per["requests"] == 0).all() and per["latency_p99_ms"].isna().all()
        return
    assert per["requests"].sum() > 0
    assert (
        per["requests_failed"].sum()
        == ((r.status == 0) & r.sched_ns.between(per.start_ns.iloc[0], per.end_ns.iloc[-1] - 1)).sum()
    )
    if fate == "all timed out":
        assert per["latency_p50_ms"].isna().all() and (per["requests_ok"] == 0).all()
        assert cmp["throughput_rps"].iloc[0] == 0 and np.isnan(cmp["latency_p99_ms"].iloc[0])
    else:
        ok = per[per.requests_ok > 0]
        assert ok["latency_p50_ms"].notna().all()
        assert per.loc[per.requests_ok == 0, "latency_p50_ms"].isna().all()


def _copy_run(name):
    run = gmp.load_run(BY_NAME[name])
    return copy.copy(run)


def test_hole_over_several_boundaries_is_an_explicit_group(tables):
    """A 500 ms hole holds five period ends: the counters prove only their sums, which the
    rows carry as one ambiguous group; nothing is silently False or 0."""
    full = tables["cpu-0.5cpu-gmp8"][1]
    run = _copy_run("cpu-0.5cpu-gmp8")
    t = run.samples.t_ns
    hole = (t > t.iloc[0] + 2_000_000_000) & (t < t.iloc[0] + 2_500_000_000)
    run.samples = run.samples[~hole].reset_index(drop=True)
    per = gmp.df_periods(run)
    groups = df_period_groups(per)
    assert len(groups) == 1
    g = groups.iloc[0]
    rows = per[per["group"] == g["group"]]
    assert len(rows) == g["boundaries"] >= 4
    assert rows["reason"].str.contains("hole").all()
    assert rows["throttled_rq_us"].isna().all()  # only the sum over the group is known
    # the group's sums are the clean rows' sums: the counters are cumulative
    clean = full[full["period"].isin(rows["period"])]
    assert g["nr_throttled"] == clean["nr_throttled"].sum()
    assert g["throttled_us"] == pytest.approx(clean["throttled_rq_us"].sum())
    if g["nr_throttled_resolved"]:  # every period in the hole was throttled: that is exact
        assert rows["throttled"].tolist() == clean["throttled"].tolist()
    else:
        assert rows["throttled"].isna().all()
    # usage across the hole is interpolated, says so, and its bracket holds the clean value
    gap = per[per["gap"]]
    assert gap["reason"].str.contains("interpolated").all()
    m = gap.merge(full, on="period", suffixes=("", "_full"))
    assert ((m["usage_us_full"] >= m["usage_lo_us"] - 1e-6) & (m["usage_us_full"] <= m["usage_hi_us"] + 1e-6)).all()
    # away from the hole nothing changes but for the grid, which lost a few brackets
    same = per.merge(full, on="period", suffixes=("", "_full"))
    far = ~same["gap"] & same["group"].isna()
    assert (same.loc[far, "throttled"] == same.loc[far, "throttled_full"]).all()
    assert np.allclose(same.loc[far, "throttled_rq_us"], same.loc[far, "throttled_rq_us_full"])
    assert (
        (same["usage_us_full"] >= same["usage_lo_us"] - 1e-6) & (same["usage_us_full"] <= same["usage_hi_us"] + 1e-6)
    ).all()
    assert_conserved(per, run.samples)


def test_hole_over_one_boundary_stays_exact(tables):
    """A 34 ms hole around a period end: one boundary inside it, so the counters say exactly
    what that boundary credited."""
    full = tables["cpu-0.5cpu-gmp8"][1]
    run = _copy_run("cpu-0.5cpu-gmp8")
    b = int(full["end_ns"].iloc[20])
    t = run.samples.t_ns
    run.samples = run.samples[(t < b - 17_000_000) | (t > b + 17_000_000)].reset_index(drop=True)
    per = gmp.df_periods(run)
    assert len(df_period_groups(per)) == 0 and per["group"].isna().all()
    m = per.merge(full, on="period", suffixes=("", "_full"))
    assert (m["throttled"] == m["throttled_full"]).all()
    assert np.allclose(m["throttled_rq_us"], m["throttled_rq_us_full"])
    assert per["gap"].sum() == 2
    assert_conserved(per, run.samples)


def assert_conserved(per, samples):
    """Σ known rows + Σ unresolved group sums + credits outside the table = last - first
    read, per segment and counter, recomputed here from the raw samples."""
    cons = df_conservation(per)
    grid = per.attrs["grid"]
    groups = df_period_groups(per)
    for i, seg in enumerate(grid.segments):
        ss = samples.iloc[seg.first_row : seg.last_row + 1]
        rows = per[per["segment"] == i]
        g = groups[groups["segment"] == i]
        for c, col in (
            ("nr_periods", "nr_periods"),
            ("nr_throttled", "nr_throttled"),
            ("throttled_us", "throttled_rq_us"),
        ):
            delta = float(ss[c].iloc[-1] - ss[c].iloc[0])
            rec = cons[(cons.segment == i) & (cons.counter == c)].iloc[0]
            assert rec["delta"] == pytest.approx(delta, abs=1e-6)
            known = float(rows[col].astype("Float64").sum())
            unresolved = float(g.loc[~g[f"{c}_resolved"].astype(bool), c].sum())
            assert rec["rows"] == pytest.approx(known, abs=1e-6)
            assert rec["groups"] == pytest.approx(unresolved, abs=1e-6)
            assert known + unresolved + rec["outside"] == pytest.approx(delta, abs=1e-6), c
            # what lies outside the table is at most the credit of one period before it and
            # one after it (plus a group reaching over its edge)
            if c == "nr_periods":
                assert 0 <= rec["outside"] <= 2 + g["boundaries"].sum()
        u = ss["usage_us"].to_numpy()
        t = ss["t_ns"].to_numpy()
        inner = np.interp([rows["start_ns"].iloc[0], rows["end_ns"].iloc[-1]], t, u)
        assert rows["usage_us"].sum() == pytest.approx(inner[1] - inner[0], rel=1e-9)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_conservation_on_the_shipped_runs(tables, name):
    run, per = tables[name]
    for level in gmp.df_levels(run).dropna(subset=["quota_us"])["level"]:  # per level, on its own grid
        assert_conserved(gmp.df_periods(run, level=level), level_run(run, level).samples)
    # exact everywhere: no hole, no group; a reason only where the limit changed (resize runs),
    # and, in a nested run, at the table's ends, where the other level's reads do not reach
    assert per["group"].isna().all()
    said = per["reason"].fillna("")
    edge = said.str.contains("reads do not cover this period", regex=False).to_numpy(dtype=bool)
    assert set(np.flatnonzero(edge)) <= {0, len(per) - 1}
    assert said[~edge & (said != "")].str.startswith("limit changed").all()
    # (a resize's two reads 10 ms apart touch one period, or two when they straddle a boundary)
    allowed = {1, 2} if run.meta.get("resizes") else {0}
    assert int(((said != "") & ~edge).sum()) in allowed


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
    # over the same periods the classic ratio is at least the wall-clock share (the timer's
    # active periods are among all); over the whole collection it counts the two periods in
    # progress at its ends too, within two periods' worth of it
    n = cmp["periods"]
    assert (cmp["throttled_pct_active"] >= cmp["throttled_pct_wall"] - 100 * 2 / n).all()
    assert cmp.loc["cpu-0.5cpu-gmp1", "gomaxprocs"] == 1 and cmp.loc["cpu-0.5cpu-gmp8", "gomaxprocs"] == 8
    assert cmp.loc["alloc-0.5cpu-gmp8", "stw_spanning_boundary"] >= 2
    assert cmp.loc["alloc-0.5cpu-gmp8", "stw_max_us"] > 10_000 > cmp.loc["cpu-0.5cpu-gmp1", "stw_max_us"]
    assert cmp.loc["alloc-0.5cpu-gmp8", "gc_cpu_pct"] > cmp.loc["cpu-0.5cpu-gmp8", "gc_cpu_pct"]
    assert (cmp["phase_uncertainty_us"] <= 150).all()  # measured 78-111 µs


def test_coverage_inline():
    # intervals [0,10) and [5,20) (overlapping) over the boundaries 0, 10, 20, 30
    c = coverage(np.array([0, 5]), np.array([10, 20]), np.array([0, 10, 20, 30]))
    assert np.diff(c).tolist() == [15.0, 10.0, 0.0]


def test_stw_across_a_frozen_boundary_counts_when_its_period_starts_before_the_trace(tables):
    """The trace may begin inside the period in which a stretched STW started: the boundary
    it crossed lies in the trace window, so the crossing is seen and counted."""
    run, per = tables["alloc-0.5cpu-gmp8"]
    stw = run.trace.stw
    long = stw[(stw.end_ns - stw.start_ns) >= 10_000_000]
    assert per["stw_spans_boundary"].sum() == len(long) >= 2
    for s0 in long["start_ns"]:
        cut = copy.copy(run)
        tr = copy.copy(run.trace)
        tr.meta = dict(tr.meta, first_ns=int(s0) - 1_000_000)  # the trace starts 1 ms before the STW
        cut._trace = tr
        p = gmp.df_periods(cut)
        k = p[(p.start_ns <= s0) & (p.end_ns > s0)].iloc[0]
        assert k["start_ns"] < tr.meta["first_ns"]  # that period is only partly inside the trace
        assert np.isnan(k["stw_us"])  # its trace sums are unknown ...
        assert k["stw_spans_boundary"]  # ... but the crossing of its end is seen
        assert p["stw_spans_boundary"].sum() == per.loc[per.end_ns >= tr.meta["first_ns"], "stw_spans_boundary"].sum()


@pytest.mark.parametrize("every", [50, 70, 80, 90, 95])
def test_sparse_reads_give_the_right_grid_or_a_clear_error(tables, every):
    """Reads 50-95 ms apart bracket each boundary with more than half a period: on the
    circle of offsets such a bracket can hold the truth twice, so it must not pin a phase."""
    full = tables["cpu-0.5cpu-gmp8"][1]
    run = _copy_run("cpu-0.5cpu-gmp8")
    run.samples = run.samples.iloc[::every].reset_index(drop=True)
    try:
        per = gmp.df_periods(run)
    except gmp.MissingDataError as e:
        assert "50 ms" in str(e)
        return
    P = 100_000_000
    for seg in per.attrs["grid"].segments:
        d = abs((seg.phase_ns - full.attrs["grid"].phase_ns + P // 2) % P - P // 2)
        assert d <= seg.uncertainty_ns + full.attrs["grid"].uncertainty_ns
    assert_conserved(per, run.samples)


def test_coarse_sampling_brackets_hold_the_fine_exhaustion(tables):
    """A sampler every 10 ms: a step of ~1 ms of CPU after the last running-pace read may hide
    running at 1 ms resolution, so the bracket reaches the read after it."""
    from gmpanalysis import degrade as D

    run0, full = tables["alloc-0.5cpu-gmp8"]
    run = _copy_run("alloc-0.5cpu-gmp8")
    run.samples = D.thin_lateness(run0.samples, np.zeros(1, dtype=np.int64), 10_000_000, np.random.default_rng(80))
    per = gmp.df_periods(run)
    m = per.merge(full, on="period", suffixes=("", "_c"))
    m = m[m["throttled"].fillna(False).astype(bool) & m["throttled_c"].fillna(False).astype(bool)]
    assert len(m) > 40
    inside = (m["exhausted_at_us_c"] >= m["exhausted_lo_us"] - 1e-6) & (
        m["exhausted_at_us_c"] <= m["exhausted_hi_us"] + 1e-6
    )
    assert inside.all(), m.loc[~inside, ["period", "exhausted_at_us_c", "exhausted_lo_us", "exhausted_hi_us"]]


def test_rows_written_twice_are_one_read(tables):
    run0, full = tables["cpu-0.5cpu-gmp1"]
    run = _copy_run("cpu-0.5cpu-gmp1")
    s = run0.samples
    run.samples = pd.concat([s, s.iloc[::13]]).sort_values("t_ns", kind="stable").reset_index(drop=True)
    per = gmp.df_periods(run)
    for c in ("exhausted_at_us", "exhausted_lo_us", "exhausted_hi_us", "usage_us", "throttled_rq_us"):
        assert np.allclose(per[c].to_numpy(dtype=float), full[c].to_numpy(dtype=float), equal_nan=True), c


def test_reads_at_one_t_ns_keep_every_increment(tables):
    """Two reads stamped alike (a writer's clock coarser than its sampling) with different
    counters: the later holds every increment, so the counters' deltas over the table stay
    the file's, and the file gets a note naming both lines."""
    from gmpanalysis.bundle import check_counters

    run0, full = tables["cpu-0.5cpu-gmp1"]
    run = _copy_run("cpu-0.5cpu-gmp1")
    s = run0.samples
    last = s.iloc[[-1]].copy()
    for c in ("usage_us", "nr_periods", "nr_throttled", "throttled_us"):
        last[c] = last[c] + 1
    run.samples = pd.concat([s, last]).reset_index(drop=True)
    cons = gmp.df_conservation(gmp.df_periods(run)).groupby("counter").sum(numeric_only=True)
    for c in ("nr_periods", "nr_throttled", "usage_us"):
        raw = float(run.samples[c].iloc[-1] - run.samples[c].iloc[0])
        assert raw == float(s[c].iloc[-1] - s[c].iloc[0]) + 1
        row = cons.loc[c]
        assert row["delta"] == pytest.approx(raw) and row["rows"] + row["groups"] + row["outside"] == pytest.approx(raw)
    notes = check_counters(run.samples, "cpu_stat.csv")
    n = len(s) + 1  # the tied pair's lines (a header, then rows from line 2)
    assert any(f"lines {n} and {n + 1}: two reads at one t_ns" in x for x in notes), notes


def test_less_than_one_period_is_a_clear_error():
    run = _copy_run("cpu-0.5cpu-gmp8")
    t = run.samples.t_ns
    first_end = gmp.df_periods(run)["start_ns"].iloc[0]  # the first boundary inside the samples
    run.samples = run.samples[t < first_end + 90_000_000].reset_index(drop=True)  # ... and no second
    with pytest.raises(gmp.MissingDataError, match="no complete CFS period|cannot place"):
        gmp.df_periods(run)


def test_throttled_time_rising_mid_period_belongs_to_the_period_in_progress():
    """The slack timer can unthrottle run queues mid-period (runtime handed back by other
    CPUs): that throttled time is the current period's, not a late credit of the last
    boundary. Kernel-model samples: a boundary every 100 ms, reads every 997 µs."""
    from test_grid import synth

    s = synth(30_000_000, 997_000, 2.0)
    s["throttled_us"] = 0.0
    # 7 ms of throttled time credited 40 ms after a boundary
    b = 30_000_000 + ((int(s.t_ns.iloc[0]) - 30_000_000) // 100_000_000 + 5) * 100_000_000
    s.loc[s.t_ns >= b + 40_000_000, "throttled_us"] = 7_000.0
    run = _copy_run("cpu-0.5cpu-gmp8")
    run.samples, run.requests, run.trace_path, run._trace = s, None, None, None
    per = gmp.df_periods(run)
    row = per[(per.start_ns <= b + 40_000_000) & (per.end_ns > b + 40_000_000)].iloc[0]
    assert row["throttled_rq_us"] == 7_000.0
    assert per["throttled_rq_us"].sum() == 7_000.0


TRACED = [p for p in RUNS if (p / "trace.out").exists()]


@pytest.mark.parametrize("path", TRACED, ids=[p.name for p in TRACED])
def test_a_big_trace_is_summed_per_period_one_generation_at_a_time(monkeypatch, path):
    """Past STREAM_TRACE_BYTES, df_periods never holds the running table: it reads the STW,
    GC, GOMAXPROCS, assist and label tables, then sums the running intervals per period one
    generation at a time. Same columns as from the whole trace (sums in float, to rounding)."""
    from gmpanalysis import bundle

    whole = gmp.df_periods(gmp.load_run(path))
    monkeypatch.setattr(bundle, "STREAM_TRACE_BYTES", 0)
    run = gmp.load_run(path)
    streamed = gmp.df_periods(run)
    assert run._trace is None  # the full trace was never read
    assert list(streamed.columns) == list(whole.columns)
    for c in ("stw_us", "stw_max_us", "stw_count", "gc_mark_us", "stw_spans_boundary", "gomaxprocs"):
        assert streamed[c].equals(whole[c]), c
    for c in ("gc_worker_us", "assist_us", "go_running_us"):
        a, b = whole[c].to_numpy(), streamed[c].to_numpy()
        assert np.array_equal(np.isnan(a), np.isnan(b)), c
        assert np.allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=1e-9, atol=1e-3), c
    assert whole.go_running_us.notna().any()
    if "alloc" in path.name:  # GC workers and assists at work: both sums are exercised
        assert (whole.gc_worker_us.fillna(0) > 0).any() and (whole.assist_us.fillna(0) > 0).any()


def test_a_period_whose_counter_rose_more_than_its_cpus_run_says_why():
    """At a 2 ms period (a real run, fixtures/short-period) the usage counter, charged at
    ticks (4 ms at HZ=250), gains more in some periods than 2 CPUs run in 2 ms: those rows
    say so in ``reason``, the rest do not, and every increment stays in the table."""
    run = gmp.load_run("fixtures/short-period/period-2ms-0.5cpu-gmp2")
    per = gmp.df_periods(run)
    over = per["usage_us"] > 2 * 2000 + 1
    said = per["reason"].fillna("").str.contains("more than 2 CPUs can run in its 2 ms")
    assert over.any() and (said == over).all()
    s = run.samples
    inside = s[(s.t_ns >= per.start_ns.iloc[0]) & (s.t_ns <= per.end_ns.iloc[-1])]
    assert per["usage_us"].sum() == pytest.approx(
        np.interp(per.end_ns.iloc[-1], s.t_ns, s.usage_us) - np.interp(per.start_ns.iloc[0], s.t_ns, s.usage_us),
        rel=1e-9,
    ) and len(inside)


def test_a_usage_jump_no_tick_explains_is_called_one():
    """The usage counter of a real run raised by 5 s from one read on (a damaged file): the
    period it lands in says no charging at ticks explains it and where to look; the tick
    wording is for what a tick per CPU can explain."""
    run = copy.copy(level_run(gmp.load_run(next(p for p in RUNS if p.name == "cpu-0.5cpu-gmp2"))))
    s = run.samples.copy()
    s.loc[len(s) // 2 :, "usage_us"] += 5_000_000
    run.samples = s
    said = gmp.df_periods(run)["reason"].fillna("")
    jumped = said.str.contains("a jump the kernel does not make")
    assert jumped.sum() == 1 and not said[jumped].str.contains("a tick .4 ms. late").any()


def test_reads_a_period_or_more_apart_are_said():
    """A real 2 ms-period run read every ~1 ms (fixtures/short-period) says nothing of its
    spacing; the same run with every other read dropped (reads ~2 ms apart, one period) says
    the periods' counters come from reads in their neighbours. The shipped runs, read at
    least twice a period, never say it."""
    run = gmp.load_run("fixtures/short-period/period-2ms-0.5cpu-gmp2")
    gmp.df_periods(run)
    assert not [n for n in run.notes if "read at least twice a period" in n]
    thin = copy.copy(run)
    thin.notes = []
    thin.samples = run.samples.iloc[::2].reset_index(drop=True)
    gmp.df_periods(thin)
    said = [n for n in thin.notes if "read at least twice a period" in n]
    assert len(said) == 1 and "2 ms CFS period" in said[0]
    for path in RUNS:
        r = gmp.load_run(path)
        gmp.df_periods(r)
        assert not [n for n in r.notes if "read at least twice a period" in n], path


def test_the_classic_ratio_is_the_counters_deltas():
    """throttled_pct_active of a whole table is nr_throttled / nr_periods over the counters'
    deltas (the periods in progress when the reads began and ended counted, as cAdvisor's
    rate of the same window counts them); of a filtered table, over its rows."""
    paths = [*RUNS, *(p for p in sorted(SHARED.iterdir()) if (p / "meta.json").exists())] if SHARED.is_dir() else RUNS
    for path in paths:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            per = gmp.df_periods(gmp.load_run(path))
        c = gmp.df_conservation(per).groupby("counter")["delta"].sum()
        if not c["nr_periods"]:
            continue
        got = gmp.period_summary(per)["throttled_pct_active"]
        assert got == pytest.approx(100 * c["nr_throttled"] / c["nr_periods"]), path.name
        part = per.iloc[1:-1]
        want = 100 * part["nr_throttled"].sum() / part["nr_periods"].sum()
        assert gmp.period_summary(part)["throttled_pct_active"] == pytest.approx(want), path.name
