"""The analysis object: one run's tables built once, rebuilt when the inputs change."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import RUNS

import gmpanalysis as gmp
from gmpanalysis.analysis import analyze, period_ns

ALLOC = next(p for p in RUNS if p.name == "alloc-0.5cpu-gmp8")


def test_tables_are_built_once_and_shared(monkeypatch):
    run = gmp.load_run(ALLOC)
    import gmpanalysis.analysis as an

    calls = []
    real = an.build_periods
    monkeypatch.setattr(an, "build_periods", lambda r, g, **kw: calls.append(1) or real(r, g, **kw))
    a = analyze(run)
    assert analyze(run) is a
    per = gmp.df_periods(run)
    gmp.compare_runs([run])
    gmp.df_checks(run)
    gmp.df_stw_periods(run)
    gmp.df_period_offsets(run)
    assert len(calls) == 1  # one build for the table, the comparison, the checks, the STW and offset views
    assert a.period_ns == period_ns(run.meta) == run.meta["period_us"] * 1000 == a.grid.period_ns
    # the free function hands out a copy: changing it does not change the memoised table
    per["usage_us"] = 0.0
    assert (analyze(run).periods["usage_us"] > 0).any()


def test_new_inputs_give_a_new_analysis():
    run = gmp.load_run(ALLOC)
    full = gmp.df_periods(run)
    cut = copy.copy(run)  # shares the memoised analysis while its inputs are the same objects
    assert analyze(cut) is analyze(run)
    t = run.samples.t_ns
    cut.samples = run.samples[t < t.iloc[0] + 2_000_000_000].reset_index(drop=True)
    part = gmp.df_periods(cut)
    assert analyze(cut) is not analyze(run) and len(part) < len(full)
    assert len(gmp.df_periods(run)) == len(full)  # the original keeps its own
    # a copy with a trace of its own (e.g. a cut one) is analysed with that trace
    other = copy.copy(run)
    tr = copy.copy(run.trace)
    tr.meta = dict(tr.meta, last_ns=int(full["end_ns"].iloc[10]))
    other._trace = tr
    per = gmp.df_periods(other)
    assert per["go_running_us"].notna().sum() < full["go_running_us"].notna().sum()


def test_stw_periods_from_a_filtered_table_place_pauses_in_their_own_periods():
    """A filtered period table (here: every other period) must not shift pauses into
    neighbouring rows."""
    run = gmp.load_run(ALLOC)
    per = gmp.df_periods(run)
    whole = gmp.df_stw_periods(run)
    sub = per.iloc[::2]
    assert (~whole["period"].isin(sub["period"])).sum() > 0  # some pauses fall in the left-out rows
    part = gmp.df_stw_periods(run, per=sub)
    assert set(part["period"]) <= set(sub["period"])
    expect = whole[whole["period"].isin(sub["period"])].reset_index(drop=True)
    assert np.array_equal(part["start_ns"].to_numpy(), expect["start_ns"].to_numpy())
    assert np.array_equal(part["period"].to_numpy(), expect["period"].to_numpy())


def test_compare_runs_refuses_tables_that_do_not_pair_with_the_runs():
    run = gmp.load_run(ALLOC)
    with pytest.raises(gmp.MissingDataError, match="one per run"):
        gmp.compare_runs([run, run], periods=[gmp.df_periods(run)])


def test_gomaxprocs_when_the_collector_could_not_record_it():
    """A Kubernetes bundle has no gomaxprocs_effective: the trace's first value tells, else
    a literal GOMAXPROCS in the environment."""
    run = gmp.load_run(ALLOC)
    assert analyze(run).gomaxprocs == run.meta["gomaxprocs_effective"] == 8
    kube = copy.copy(run)
    kube.meta = dict(run.meta, gomaxprocs_effective=None, gomaxprocs_env=None)
    assert analyze(kube).gomaxprocs == int(run.trace.gomaxprocs["procs"].iloc[0]) == 8
    assert gmp.compare_runs([kube])["gomaxprocs"].iloc[0] == 8
    bare = copy.copy(run)
    bare.meta = dict(run.meta, gomaxprocs_effective=None, gomaxprocs_env="3")
    bare.trace_path, bare._trace = None, None
    assert analyze(bare).gomaxprocs == 3
    bare.meta = dict(bare.meta, gomaxprocs_env=None)
    assert analyze(bare).gomaxprocs is None


def test_in_place_edits_rebuild_and_handed_out_frames_are_copies():
    run = gmp.load_run(ALLOC)
    full = gmp.df_periods(run)
    # samples edited in place: the throttle counter zeroed
    assert full["throttled"].any()
    run.samples["nr_throttled"] = 0
    assert not gmp.df_periods(run)["throttled"].any()
    # meta edited in place
    run.meta["quota_us"] = 25_000
    assert (gmp.df_periods(run)["quota_us"] == 25_000).all()
    run.meta["quota_us"] = None
    with pytest.raises(gmp.MissingDataError, match="no CPU limit"):
        gmp.df_periods(run)
    # every df_* hands out a copy: damaging it changes nothing for the next caller
    run = gmp.load_run(ALLOC)
    for get in (gmp.df_stw_periods, gmp.df_checks, gmp.df_period_offsets, gmp.df_periods):
        a = get(run)
        before = a.copy()
        a.iloc[:, 0] = -1
        assert get(run).equals(before), get.__name__


def test_limits_edited_or_replaced_rebuild_the_tables():
    """limits.csv's quotas place a limit resized in place: an edit of run.limits in place,
    or a new frame there, is seen by the next table as the samples' are."""
    run = gmp.load_run("fixtures/runs/resize-0.5to2cpu-default")
    before = gmp.df_periods(run)["quota_us"].dropna()
    assert before.nunique() == 2
    run.limits["quota_us"] = run.limits["quota_us"].iloc[0]  # in place: the resize undone
    assert gmp.df_periods(run)["quota_us"].dropna().nunique() == 1
    run.limits = None  # replaced: meta.json's quota alone
    assert gmp.df_periods(run)["quota_us"].dropna().nunique() == 1


def test_in_place_edits_of_a_two_level_bundle_reach_each_levels_table():
    """The container's and the pod's samples in one frame: zeroing the throttle counters
    in place is seen by every level's table (each level's rows were kept from before)."""
    run = gmp.load_run("fixtures/runs/nested-0.5cpu-pod0.5-gmp2")
    assert gmp.df_periods(run)["throttled"].any()
    run.samples["nr_throttled"] = 0
    run.samples["throttled_us"] = 0.0
    assert not gmp.df_periods(run)["throttled"].any()


def test_a_held_call_fingerprints_each_run_once_and_edits_between_calls_are_seen(monkeypatch):
    import gmpanalysis.analysis as an

    run = gmp.load_run(ALLOC)
    looks = []
    real = an._contents
    monkeypatch.setattr(an, "_contents", lambda r: looks.append(r) or real(r))
    gmp.advise(run, limits=[0.5, 1.0], gomaxprocs=[2, 8])
    inside = [r for r in looks if r is run]
    assert len(inside) == 1  # the advice asks for the run's analysis many times, looked at once
    looks.clear()
    for _ in range(3):
        analyze(run)
    assert len(looks) == 3  # outside a held call every look checks the contents
    # an in-place edit between two held calls is seen by the second
    before = gmp.what_if(run, gomaxprocs=8)
    run.samples["nr_throttled"] = 0
    run.samples["usage_us"] = run.samples["usage_us"] * 0.5
    after = gmp.what_if(run, gomaxprocs=8)
    assert after["usage_us"].sum() < before["usage_us"].sum()


def test_the_heatmap_cap_never_comes_from_the_analysts_machine():
    run = copy.copy(gmp.load_run(ALLOC))
    run.meta = dict(run.meta, ncpu=None, gomaxprocs_effective=None, gomaxprocs_env=None)
    run.trace_path, run._trace = None, None
    off = gmp.df_period_offsets(run)
    assert np.isnan(off.attrs["cpus_max"])  # unknown, not os.cpu_count()
    run.meta = dict(run.meta, gomaxprocs_env="1")
    off = gmp.df_period_offsets(run)
    assert off.attrs["cpus_max"] == 1 and off["cpus"].max() <= 1 + 1e-9
    assert (gmp.df_periods(run)["gomaxprocs"] == 1).all()  # the per-period column agrees


def test_requests_after_the_samples_end_are_not_counted():
    """A sampler that died early leaves requests in periods nobody measured: throughput and
    latency count only those begun inside the sampled span, and the rest are counted apart."""
    run = gmp.load_run(next(p for p in RUNS if p.name == "cpu-0.5cpu-gmp2"))
    before = gmp.compare_runs([run]).iloc[0]
    assert before["requests_unsampled"] == 0  # a whole run: the sampler outlived the load
    t = run.samples["t_ns"]
    cut = int(t.quantile(0.5))
    r = run.requests
    after = int((r["start_ns"] > cut).sum())
    run.samples = run.samples[t <= cut].reset_index(drop=True)
    row = gmp.compare_runs([run]).iloc[0]
    assert row["requests_unsampled"] == after > 0
    ok = r[(r["start_ns"] <= cut) & (r["start_ns"] >= t.min()) & (r["status"] // 100 == 2)]
    span = (ok["end_ns"].max() - ok["start_ns"].min()) / 1e9
    assert abs(row["throughput_rps"] - len(ok) / span) < 0.05 * row["throughput_rps"]
