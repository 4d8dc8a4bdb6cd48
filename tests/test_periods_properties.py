"""Property tests: random holes, drops and counter resets cut into the real shipped runs.
Whatever the damage, the per-period table conserves every counter and its brackets hold
the clean table's values. Checked against quantities computed here from the raw reads."""

from __future__ import annotations

import copy
import functools

import numpy as np
import pandas as pd
import pytest
from conftest import RUNS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gmpanalysis as gmp
from gmpanalysis import degrade as D
from gmpanalysis.compare import frozen_ms_per_s, stall_ms_per_s
from gmpanalysis.levels import level_run
from gmpanalysis.periods import df_period_groups


@functools.cache
def loaded(name: str) -> gmp.Run:
    """One cgroup level at a time (the damage below is to one sampler's rows of one cgroup);
    read when first asked, not when the tests are collected."""
    return level_run(gmp.load_run(next(p for p in RUNS if p.name == name)))


@functools.cache
def clean_periods(name: str) -> pd.DataFrame:
    return gmp.df_periods(loaded(name))


EDGE_NS = 300_000_000  # damage stays this far from both ends, so the table's edges are clean

damage = st.fixed_dictionaries(
    {
        "run": st.sampled_from(sorted(p.name for p in RUNS)),
        "drop": st.sampled_from([0.0, 0.0, 0.05, 0.1, 0.3, 0.5]),
        "holes": st.lists(
            st.tuples(st.floats(0.0, 1.0), st.sampled_from([3, 10, 34, 80, 150, 230, 350, 700])), max_size=4
        ),
        "reset": st.one_of(st.none(), st.floats(0.1, 0.9)),
        "seed": st.integers(0, 2**16),
    }
)


def damaged(d: dict) -> tuple[gmp.Run, pd.DataFrame]:
    run = copy.copy(loaded(d["run"]))
    s = run.samples
    t0, t1 = int(s.t_ns.iloc[0]) + EDGE_NS, int(s.t_ns.iloc[-1]) - EDGE_NS
    rng = np.random.default_rng(d["seed"])
    inner = (s.t_ns > t0) & (s.t_ns < t1)
    if d["drop"]:
        drop = inner.to_numpy() & (rng.random(len(s)) < d["drop"])
        s = s[~drop].reset_index(drop=True)
    for pos, ms in d["holes"]:
        at = int(t0 + pos * (t1 - t0 - ms * 1_000_000))
        s = D.hole(s, at, ms * 1_000_000)
    if d["reset"] is not None:
        s = D.counter_reset(s, int(t0 + d["reset"] * (t1 - t0)))
    run.samples = s
    return run, s


def sum_unresolved(per: pd.DataFrame) -> int:
    """The throttled periods that ambiguous groups hold, which no row says."""
    g = df_period_groups(per)
    if not len(g) or "nr_throttled_resolved" not in g:
        return 0
    return int(g.loc[~g["nr_throttled_resolved"].astype(bool), "nr_throttled"].sum())


def table_delta(per: pd.DataFrame, s: pd.DataFrame, col: str, seg: int) -> float:
    """The counter's increase credited to the boundaries that end the segment's rows,
    straight from the reads: from just after the first boundary's credit to just after the
    last one's (credits surface at most a read or two late)."""
    rows = per[per["segment"] == seg]
    g = per.attrs["grid"].segments[seg]
    ss = s.iloc[g.first_row : g.last_row + 1]
    t, v = ss["t_ns"].to_numpy(), ss[col].to_numpy()
    a = np.searchsorted(t, rows["start_ns"].iloc[0] + 3_000_000)
    b = min(np.searchsorted(t, rows["end_ns"].iloc[-1] + 3_000_000), len(t) - 1)
    return float(v[b] - v[a])


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(damage)
def test_counts_are_conserved_and_brackets_hold_the_truth(d):
    run, s = damaged(d)
    per = gmp.df_periods(run)
    clean = clean_periods(d["run"])
    groups = df_period_groups(per)
    for seg in sorted(set(per["segment"])):
        rows = per[per["segment"] == seg]
        g = groups[groups["segment"] == seg]
        unresolved = ~g["nr_throttled_resolved"].astype(bool) if "nr_throttled_resolved" in g else slice(None)
        # Σ throttle counts over rows (+ what ambiguous groups hold) = Δnr_throttled
        n_thr = int(rows["nr_throttled"].sum()) + int(g.loc[unresolved, "nr_throttled"].sum())
        assert n_thr == table_delta(per, s, "nr_throttled", seg)
        unresolved_us = ~g["throttled_us_resolved"].astype(bool) if "throttled_us_resolved" in g else slice(None)
        thr_us = float(np.nansum(rows["throttled_rq_us"])) + float(g.loc[unresolved_us, "throttled_us"].sum())
        assert thr_us == pytest.approx(table_delta(per, s, "throttled_us", seg), abs=1e-3)
        # a row that is not in a group and not NA is exactly the clean row
    m = per.merge(clean, on="period", suffixes=("", "_c"))
    near_reset = np.zeros(len(m), dtype=bool)
    if d["reset"] is not None:  # the reads around a reset lose one increment: that period differs
        near_reset = m["segment"].diff().fillna(0).to_numpy() != 0
        near_reset |= np.r_[near_reset[1:], False]
    known = m["throttled"].notna().to_numpy() & ~near_reset
    assert (m.loc[known, "throttled"].astype(bool) == m.loc[known, "throttled_c"].astype(bool)).all()
    # exhaustion brackets hold the clean estimate
    both = (m["throttled"].fillna(False) & m["throttled_c"].fillna(False)).to_numpy(bool) & ~near_reset
    x = m[both]
    assert (
        (x["exhausted_at_us_c"] >= x["exhausted_lo_us"] - 1e-6)
        & (x["exhausted_at_us_c"] <= x["exhausted_hi_us"] + 1e-6)
    ).all()
    # a point value is given only inside its own narrow bracket; the stall follows from it
    pt = x[x["exhausted_at_us"].notna()]
    assert ((pt["exhausted_at_us"] >= pt["exhausted_lo_us"]) & (pt["exhausted_at_us"] <= pt["exhausted_hi_us"])).all()
    assert (pt["exhausted_hi_us"] - pt["exhausted_lo_us"] <= 6_000 + 1e-6).all()
    P_us = float((per["end_ns"] - per["start_ns"]).iloc[0]) / 1e3
    assert np.allclose(pt["stall_us"], P_us - pt["exhausted_at_us"])
    assert x.loc[x["exhausted_at_us"].isna(), ["stall_us", "cpus_throttled"]].isna().all().all()
    u = m[~near_reset]
    assert ((u["usage_us_c"] >= u["usage_lo_us"] - 1e-6) & (u["usage_us_c"] <= u["usage_hi_us"] + 1e-6)).all()
    # on one level the frozen rate is the stall: a freeze the reads leave open is filled
    # within what its period's reads allow, as the stall's is
    frozen, stall = frozen_ms_per_s(per), stall_ms_per_s(per)
    assert (np.isnan(frozen) and np.isnan(stall)) or frozen == pytest.approx(stall, rel=1e-9, abs=1e-9)
    # a hole never turns a frozen time into a silent 0, and what some level froze is at
    # least what the own counters (group sums included) call throttled
    assert per.loc[per["throttled"].isna(), "frozen_us"].isna().all()
    assert (per["frozen_us"].dropna() >= 0).all()
    summ = gmp.compare_runs([run]).iloc[0]
    assert summ["frozen_periods"] >= (per["throttled"].fillna(False).sum() + sum_unresolved(per)), summ
