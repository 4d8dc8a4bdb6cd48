"""The host's load beside the group (gmpanalysis.hostload), on real runs and on their
host_stat.csv changed by the spec of /proc/stat's fields."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

import gmpanalysis as gmp
from gmpanalysis import hostload
from gmpanalysis.report import data_quality

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "16cpu-v2"
CLOSED = sorted((FIXTURES / "closed-loop").iterdir())
QUIET = [p for p in sorted(SHARED.iterdir()) if (p / "host_stat.csv").exists()] if SHARED.is_dir() else []


def _load(p: Path) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(p)


def _with_host(run: gmp.Run, h: pd.DataFrame) -> gmp.Run:
    return dataclasses.replace(run, host_stat=h)


@pytest.mark.parametrize("path", CLOSED, ids=lambda p: p.name)
def test_the_closed_loops_ran_on_a_saturated_shared_host(path):
    """The 2-CPU closed loops ran with their load generator on the same 2 CPUs: /proc/stat
    counts both CPUs busy nearly throughout, others beside the group using 0.5-1.1 of them."""
    run = _load(path)
    load = hostload.host_load(run)
    assert load["ncpu"] == 2
    assert load["saturated_share"] >= hostload.SATURATED_SPAN
    assert 0.25 <= load["others_cpus"] <= 2 - load["group_cpus"] + 0.05
    # the group's CPU (cgroup counter, ns) within the host's busy time (ticks of 10 ms)
    assert load["group_cpus"] <= load["busy_cpus"] + 0.02
    said = hostload.contention_sentence(run)
    assert said.startswith("The host's CPUs were busy") and f"of {load['ncpu']} CPUs" in said
    assert said in data_quality(run, gmp.df_periods(run))


@pytest.mark.skipif(not QUIET, reason="../shared/data/16cpu-v2 is not beside this checkout")
@pytest.mark.parametrize("path", QUIET, ids=lambda p: p.name)
def test_the_16cpu_runs_had_the_host_to_themselves(path):
    run = _load(path)
    load = hostload.host_load(run)
    assert load["ncpu"] == 16 and load["saturated_share"] == 0
    assert 0 < load["group_cpus"] <= load["busy_cpus"] + 0.02
    assert hostload.contention_sentence(run) == ""


def test_saturation_by_the_group_alone_is_no_contention():
    """A host busy throughout, all of it the group's: nobody to share with. The group's
    counter scaled to fill 98 % of the 2 CPUs, and /proc/stat's busy time made the same."""
    run = _load(CLOSED[-1])
    s = run.samples.copy()
    k = 0.98 * 2 / hostload.host_load(run)["group_cpus"]
    s["usage_us"] = s["usage_us"] * k
    run = dataclasses.replace(run, samples=s)
    group = hostload.host_load(run)["group_cpus"]
    assert group == pytest.approx(1.96)
    h = run.host_stat.copy()
    t = h["t_ns"].to_numpy(np.int64)
    h[list(hostload.BUSY)] = h[list(hostload.BUSY)].iloc[0].to_numpy()
    h["user_us"] += np.round(group * (t - t[0]) / 1e3).astype(np.int64)
    # the CPU time /proc/stat counts: 2 CPUs' worth of the time, the rest idle
    h["cpu_total_us"] = h["cpu_total_us"].iloc[0] + (2 * (t - t[0]) / 1e3).astype(np.int64)
    h["idle_us"] = h["cpu_total_us"] - h[list(hostload.BUSY)].sum(axis=1) - h["iowait_us"] - h["steal_us"]
    alone = hostload.host_load(_with_host(run, h))
    assert alone["saturated_share"] >= hostload.SATURATED_SPAN
    assert alone["busy_cpus"] == pytest.approx(group, abs=0.01)
    assert alone["others_cpus"] < 0.02
    assert not hostload.contended(alone)


def test_idle_iowait_and_steal_are_not_busy():
    """/proc/stat's idle, iowait and steal are time the host ran nothing of its own: moved
    there from user, the same host is quiet."""
    run = _load(CLOSED[0])
    h = run.host_stat.copy()
    for col in ("idle_us", "iowait_us", "steal_us"):
        q = h.copy()
        q[col] = q[col] + q["user_us"] - q["user_us"].iloc[0]
        q["user_us"] = q["user_us"].iloc[0]
        load = hostload.host_load(_with_host(run, q))
        assert load["saturated_share"] == 0, col
        assert not hostload.contended(load), col


def test_an_interval_whose_counters_went_back_tells_nothing():
    run = _load(CLOSED[0])
    whole = hostload.host_load(run)
    h = run.host_stat.copy()
    h.loc[h.index[-1], ["user_us", "system_us"]] = 0  # another boot's, or another host's, last read
    cut = hostload.host_load(_with_host(run, h))
    assert cut["span_s"] < whole["span_s"]
    assert cut["saturated_share"] >= hostload.SATURATED_SPAN
    h.loc[:, ["user_us", "system_us"]] = h[["user_us", "system_us"]].to_numpy()[::-1]
    assert hostload.host_load(_with_host(run, h)) is None


def test_no_host_stat_no_figures():
    run = _load(FIXTURES / "runs" / "cpu-0.5cpu-gmp8")
    assert run.host_stat is None and hostload.host_load(run) is None
    assert hostload.contention_sentence(run) == ""


def test_the_advice_says_the_host_was_shared():
    """At its own setting the 1.5-CPU, 2-P closed loop throttled in 65 % of its periods; the
    replay of its own demand, every CPU the group's, says ~98 %: the advice says why."""
    run = _load(FIXTURES / "closed-loop" / "closed-1.5cpu-gmp2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adv = gmp.advise(run, limits=[1.5], gomaxprocs=[2], bursts=[0.0])
    said = adv.attrs["recommendation"]
    assert hostload.contention_sentence(run, replay=True) in said
    assert "may predict more throttling" in said
    assert float(adv.iloc[0]["throttled_pct"]) > float(gmp.whatif.measured(run)["throttled_pct"]) + 20


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3_000),  # ms between reads (0: two reads at one time)
            st.lists(st.integers(-50_000, 400_000), min_size=8, max_size=8),  # each field's step, µs
        ),
        min_size=1,
        max_size=12,
    )
)
def test_figures_stay_within_the_host_on_any_counters(steps):
    """Whatever the reads (steps back, reads at one time, fields past their total), the
    figures are of the host: busy within its CPUs, a share within 0..1, others not below 0;
    or None where no interval is whole."""
    run = _load(CLOSED[0])
    fields = ["user_us", "nice_us", "system_us", "idle_us", "iowait_us", "irq_us", "softirq_us", "steal_us"]
    rows, t, cur = [], int(run.samples["t_ns"].iloc[0]), [10**9] * 8
    rows.append([t, *cur])
    for dt_ms, d in steps:
        t += dt_ms * 1_000_000
        cur = [c + x for c, x in zip(cur, d, strict=True)]
        rows.append([t, *cur])
    h = pd.DataFrame(rows, columns=["t_ns", *fields])
    h["read_ns"] = 1000
    h["cpu_total_us"] = h[fields].sum(axis=1)
    h["ncpu"] = 2
    load = hostload.host_load(_with_host(run, h))
    if load is None:
        return
    assert 0 <= load["busy_cpus"] <= 2 + 1e-9
    assert 0 <= load["saturated_share"] <= 1
    assert not load["others_cpus"] < 0 and load["span_s"] > 0  # NaN: no group read in the span


def test_the_load_follows_an_edit_of_host_stat_in_place():
    """host_load is kept with the run, and an in-place edit of host_stat.csv's frame is seen."""
    run = _load(CLOSED[0])
    before = hostload.host_load(run)
    assert hostload.host_load(run) is before  # kept
    run.host_stat["idle_us"] += run.host_stat["user_us"] - run.host_stat["user_us"].iloc[0]
    run.host_stat["user_us"] = run.host_stat["user_us"].iloc[0]
    after = hostload.host_load(run)
    assert after["saturated_share"] == 0 < before["saturated_share"]
