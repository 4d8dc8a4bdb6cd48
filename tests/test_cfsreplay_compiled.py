"""The replay's event loop (gmpanalysis.cfskernel) compiled by numba and in plain Python: the
same tables on the shipped runs and on generated demand, and the invariants of a replay."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gmpanalysis as gmp
from gmpanalysis import cfskernel
from gmpanalysis import cfsreplay as R
from gmpanalysis import whatif as W

RUNS = (
    "runs/cpu-0.5cpu-gmp8",
    "runs/nested-0.5cpu-pod0.5-gmp2",
    "runs/resize-0.5to2cpu-default",
    "whatif/unlimited-cpu-gmp2",
)
SETTINGS = (
    {},
    {"quota_us": 150_000, "gomaxprocs": 4, "cpus": 16},
    {"quota_us": 25_000, "burst_us": 25_000, "tick_phase_ns": 2_000_000},
    {"period_us": 50_000, "gomaxprocs": 1},
    {"unlimited": True},
)
compiled_only = pytest.mark.skipif(
    not cfskernel.AVAILABLE, reason="numba is not installed here (the [fast] extra): only the Python loop can run"
)


def _both(monkeypatch, fn):
    """fn() with the compiled loop, then with the plain-Python one."""
    out = []
    for enabled in (True, False):
        monkeypatch.setattr(cfskernel, "ENABLED", enabled)
        out.append(fn())
    return out


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """The same table bit for bit: columns, dtypes, values (NaN in the same places), the
    latencies and the throughput."""
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert np.array_equal(a.attrs["latency_ms"], b.attrs["latency_ms"], equal_nan=True)
    ta, tb = a.attrs["throughput_rps"], b.attrs["throughput_rps"]
    assert ta == tb or (math.isnan(ta) and math.isnan(tb))


@pytest.fixture(scope="module")
def runs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {n: gmp.load_run(f"fixtures/{n}") for n in RUNS}


@compiled_only
@pytest.mark.parametrize("name", RUNS)
def test_compiled_and_python_loops_give_the_same_what_if(monkeypatch, runs, name):
    run = runs[name]
    extra = [{"outer": []}] if W.settings(run)["outer"] else []
    for s in (*SETTINGS, *extra):
        fast, slow = _both(monkeypatch, lambda s=s: W.what_if(run, **s))
        _same(fast, slow)


def test_the_python_loop_runs_without_numba():
    """GMP_NO_NUMBA=1 (as where numba is not installed): the replay never imports numba and
    gives the same table."""
    code = (
        "import sys, warnings; warnings.simplefilter('ignore'); import gmpanalysis as gmp\n"
        "from gmpanalysis import whatif as W\n"
        "per = W.what_if(gmp.load_run('fixtures/runs/cpu-0.5cpu-gmp8'), quota_us=75_000)\n"
        "assert 'numba' not in sys.modules\n"
        "print(repr(per['usage_us'].sum()), repr(float(per['stall_us'].sum())), int(per['throttled'].sum()))\n"
    )
    env = {**os.environ, "GMP_NO_NUMBA": "1"}
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per = W.what_if(gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp8"), quota_us=75_000)
    assert got.split() == [
        repr(per["usage_us"].sum()),
        repr(float(per["stall_us"].sum())),
        str(int(per["throttled"].sum())),
    ]


def test_more_periods_than_first_made_room_for(monkeypatch):
    """Where the replay runs past the periods it made room for, it makes more and replays
    again: the same table."""
    sched = np.arange(0, 400_000_000, 7_000_000)
    args = (sched, 9e6, None, 30_000, 100_000_000, 0, 0, 4, 4, 5000, 250, [(60_000.0, 50_000_000, 7_000, 0.0)])
    want = R.replay(*args)
    monkeypatch.setattr(R, "_room", lambda *a: 1)
    _same(R.replay(*args), want)


def _quota(draw, period_us: int, k0: int):
    kind = draw(st.sampled_from(["none", "one", "by period"]))
    if kind == "none":
        return None
    if kind == "one":
        return draw(st.floats(1000, 3.0 * period_us))
    keys = draw(st.lists(st.integers(k0 - 2, k0 + 8), min_size=1, max_size=4, unique=True))
    return {k: draw(st.one_of(st.just(math.nan), st.floats(1000, 3.0 * period_us))) for k in keys}


@st.composite
def demands(draw):
    """Small replays: a few requests (open or closed loop), their CPU, a quota (none, one,
    or period by period), up to two levels above, GOMAXPROCS, CPUs, HZ and the tick phase."""
    n = draw(st.integers(1, 10))
    base = draw(st.integers(0, 10**12))
    sched = base + np.sort(np.array(draw(st.lists(st.integers(0, 300_000_000), min_size=n, max_size=n))))
    cost = draw(st.one_of(st.floats(1e5, 8e7), st.lists(st.floats(1e5, 8e7), min_size=n, max_size=n).map(np.array)))
    period_us = draw(st.sampled_from([10_000, 33_333, 50_000, 100_000]))
    phase = draw(st.integers(0, period_us * 1000 - 1))
    k0 = (int(sched[0]) - phase) // (period_us * 1000)
    outer = []
    for _ in range(draw(st.integers(0, 2))):
        p_us = draw(st.sampled_from([20_000, 100_000]))
        ph = draw(st.integers(0, p_us * 1000 - 1))
        q = _quota(draw, p_us, (int(sched[0]) - ph) // (p_us * 1000))
        outer.append((q, p_us * 1000, ph, draw(st.sampled_from([0.0, 5000.0]))))
    conc = draw(st.one_of(st.none(), st.integers(1, 4)))
    # a closed loop's clients sending for a time: the requests again, in turn, until then
    until = draw(st.one_of(st.none(), st.integers(0, 400_000_000))) if conc else None
    return {
        "sched": sched,
        "cost_ns": cost,
        "conc": conc,
        "stop_ns": None if until is None else int(sched[0]) + until,
        "quota_us": _quota(draw, period_us, k0),
        "period_ns": period_us * 1000,
        "phase_ns": phase,
        "burst_us": draw(st.sampled_from([0.0, 2000.0, float(period_us)])),
        "G": draw(st.one_of(st.integers(1, 6), st.just(16))),  # 16: threads stacked after a stall
        "C": draw(st.one_of(st.integers(1, 6), st.just(16))),
        "slice_us": draw(st.sampled_from([5000.0, 1000.0])),
        "hz": draw(st.sampled_from([100, 250, 1000])),
        "outer": outer,
        "tick_phase_ns": draw(st.one_of(st.none(), st.integers(0, 10_000_000))),
    }


def _invariants(per: pd.DataFrame, d: dict) -> None:
    """Usage per period within min(G, C) CPUs; all the work replayed (each request answered
    within the loop's tolerance of its CPU); CPUs throttled within min(G, C); exhaustion
    within the period."""
    cpus = min(d["G"], d["C"])
    P = d["period_ns"] / 1000
    assert (per["usage_us"] <= cpus * P * (1 + 1e-12) + 1e-6).all()
    cost = np.broadcast_to(np.asarray(d["cost_ns"], dtype=np.float64), (len(d["sched"]),))
    sent = len(per.attrs["latency_ms"])
    if d.get("stop_ns") is None:
        assert sent == len(cost)
    else:  # every request of the run, and the same again in turn while the clients send
        assert sent >= len(cost)
        cost = np.resize(cost, sent)
    tol = 1e-6 * float(np.mean(cost)) * len(cost)
    assert per["usage_us"].sum() * 1000 == pytest.approx(cost.sum(), rel=1e-9, abs=tol + 1e-3)
    assert not np.isnan(per.attrs["latency_ms"]).any()
    c = per["cpus_throttled"].dropna()
    assert (c >= 0).all() and (c <= cpus + 1e-9).all()
    ex = per["exhausted_at_us"].dropna()
    assert (ex >= -1e-9).all() and (ex <= P + 1e-9).all()
    assert per["exhausted_at_us"].notna().eq(per["throttled"]).all()


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(d=demands())
def test_compiled_and_python_loops_agree_and_hold_the_invariants(d):
    outs = []
    for enabled in (True, False) if cfskernel.AVAILABLE else (False,):
        cfskernel.ENABLED = enabled
        try:
            outs.append(R.replay(**d))
        finally:
            cfskernel.ENABLED = True
    for per in outs[1:]:
        _same(outs[0], per)
    _invariants(outs[-1], d)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    groups=st.integers(1, 8),
    x=st.lists(st.one_of(st.just(math.nan), st.floats(0, 1e4), st.integers(0, 4).map(float)), min_size=1, max_size=40),
    data=st.data(),
)
def test_latency_quantiles_are_pandas_groupby_quantiles(groups, x, data):
    which = np.array(data.draw(st.lists(st.integers(0, groups - 1), min_size=len(x), max_size=len(x))))
    x = np.array(x)
    q = pd.Series(x).groupby(which).quantile([0.5, 0.99]).unstack()
    for i, level in enumerate((0.5, 0.99)):
        want = np.full(groups, np.nan)
        want[q.index] = q[level].to_numpy()
        got = R.group_quantiles(which, x, groups, (0.5, 0.99))[i]
        assert np.array_equal(got, want, equal_nan=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    costs=st.lists(st.integers(1, 50), min_size=1, max_size=300).map(lambda c: np.array(c, dtype=np.float64) * 1e5),
    cpus=st.integers(1, 8),
    compiled=st.booleans(),
)
def test_requests_sharing_the_cpus_finish_as_processor_sharing_says(costs, cpus, compiled):
    """All requests at once, no limit: each of the m still in service gets min(m, CPUs) / m of
    a CPU, so the one needing least finishes first, then the next after its extra CPU at the
    shared rate. The times from that arithmetic, whatever the order the requests came in (the
    loop keeps them in a heap by when each is served)."""
    order = np.sort(costs)
    t, prev, want = 0.0, 0.0, {}
    for i, c in enumerate(order):
        m = len(order) - i
        t += (c - prev) * m / min(m, cpus)
        prev = c
        want.setdefault(c, t)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cfskernel, "ENABLED", compiled and cfskernel.AVAILABLE)
        per = R.replay(np.zeros(len(costs), dtype=np.int64), costs, None, None, 100_000_000, 0, 0.0, cpus, cpus)
    got = per.attrs["latency_ms"] * 1e6
    assert got == pytest.approx([want[c] for c in costs], rel=1e-9, abs=1e-3)


def _scaled(q, f: float):
    """A quota f times as large (None, and a period without a limit, stay so)."""
    if q is None:
        return None
    if isinstance(q, dict):
        return {k: (v if math.isnan(v) else v * f) for k, v in q.items()}
    return q * f


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(d=demands(), f=st.floats(1.0, 4.0), more_burst=st.sampled_from([0.0, 1000.0]))
def test_a_replay_no_quota_held_back_is_the_replay_of_every_larger_quota(d, f, more_burst):
    """quota_bound False (no level's pool ever fell short of a draw): with every level's quota
    and burst as large or larger, the replay takes the same steps, its table the same but for
    the quota (what lets the advisor answer larger limits without replaying them). A
    throttled period needs a short draw, so it says quota_bound."""
    per = R.replay(**d)
    if per["throttled"].any():
        assert per.attrs["quota_bound"]
    if per.attrs["quota_bound"]:
        return
    big = {
        **d,
        "quota_us": _scaled(d["quota_us"], f),
        "burst_us": d["burst_us"] + more_burst,
        "outer": [(_scaled(q, f), p, ph, b + more_burst) for q, p, ph, b in d["outer"]],
    }
    got = R.replay(**big)
    assert not got.attrs["quota_bound"]
    cols = [c for c in per.columns if c != "quota_us"]
    pd.testing.assert_frame_equal(got[cols], per[cols], check_exact=True)
    assert np.array_equal(got.attrs["latency_ms"], per.attrs["latency_ms"], equal_nan=True)
    assert got.attrs["throughput_rps"] == per.attrs["throughput_rps"] or math.isnan(per.attrs["throughput_rps"])


def test_a_quota_that_throttles_says_it_bound():
    """Two CPUs' worth of work under half a CPU: throttled, and quota_bound; unlimited: not."""
    sched = np.arange(0, 300_000_000, 10_000_000)
    tight = R.replay(sched, 20e6, None, 50_000, 100_000_000, 0, 0.0, 2, 2)
    assert tight["throttled"].any() and tight.attrs["quota_bound"]
    free = R.replay(sched, 20e6, None, None, 100_000_000, 0, 0.0, 2, 2)
    assert not free["throttled"].any() and not free.attrs["quota_bound"]
