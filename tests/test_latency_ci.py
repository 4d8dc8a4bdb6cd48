"""The p99's distribution-free confidence interval (compare.latency_ci): its order
statistics' ranks against the binomial's definition, their coverage, and what it lets the
report say of two real runs."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gmpanalysis as gmp
from gmpanalysis.compare import _order_ranks, latency_ci

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "16cpu-v2"


def _ranks_by_definition(n: int, q: float, tail: float) -> tuple[int, int]:
    """r the largest with P(B < r) <= tail, s the least with P(B >= s) <= tail, B ~ Bin(n, q),
    from math.comb's exact terms (0 and n + 1 where none)."""
    pmf = [math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(n + 1)]
    below = [sum(pmf[:k]) for k in range(n + 2)]
    r = max((k for k in range(1, n + 1) if below[k] <= tail), default=0)
    s = min((k for k in range(1, n + 1) if 1 - below[k] <= tail), default=n + 1)
    return r, s


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 700), st.sampled_from([0.5, 0.9, 0.99]), st.sampled_from([0.025, 0.05]))
def test_ranks_are_the_binomials(n, q, tail):
    r, s = _order_ranks(n, q, tail)
    rr, ss = _ranks_by_definition(n, q, tail)
    assert r == rr
    # the window's sums and math.comb's may round apart at the edge of the tail
    assert (
        s == ss
        or abs(s - ss) == 1
        and abs(1 - sum(math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(min(s, ss))) - tail) < 1e-9
    )


def test_the_upper_bound_needs_368_requests_at_p99():
    """The largest of n is a 97.5 % upper bound of the p99 once 0.99^n <= 0.025: n >= 368."""
    assert _order_ranks(367, 0.99, 0.025)[1] == 368
    assert _order_ranks(368, 0.99, 0.025)[1] == 368
    assert 0.99**367 > 0.025 >= 0.99**368


def test_coverage():
    """Over 2,000 samples of n exponential latencies each, the interval holds the true p99
    in at least 94 % (95 % asked; the binomial makes it conservative)."""
    rng = np.random.default_rng(7)
    true = -math.log(0.01)
    for n in (368, 1000):
        r, s = _order_ranks(n, 0.99, 0.025)
        x = np.sort(rng.exponential(size=(2000, n)), axis=1)
        hit = (x[:, r - 1] <= true) & (true <= x[:, s - 1])
        assert hit.mean() >= 0.94, (n, hit.mean())


def _requests(lat_ms: np.ndarray) -> pd.DataFrame:
    start = np.arange(len(lat_ms), dtype=np.int64) * 1_000_000 + 10**9
    return pd.DataFrame(
        {"sched_ns": start, "start_ns": start, "end_ns": start + (lat_ms * 1e6).astype(np.int64), "status": 200,
         "cpu_ns": 0}
    )  # fmt: skip


def test_the_interval_is_of_the_requests_order_statistics():
    lat = np.arange(1, 410, dtype=float)  # 409 requests, 1..409 ms
    ci = latency_ci(_requests(lat))
    r, s = _order_ranks(409, 0.99, 0.025)
    assert (ci["latency_p99_lo_ms"], ci["latency_p99_hi_ms"]) == (float(r), float(s))
    assert math.isnan(latency_ci(_requests(lat[:300]))["latency_p99_hi_ms"])
    with pytest.raises(gmp.UsageError):
        latency_ci(_requests(lat), level=1.0)


@pytest.mark.skipif(
    not (SHARED / "light-250m-gmp1").is_dir(), reason="../shared/data/16cpu-v2 is not beside this checkout"
)
def test_two_real_runs_are_told_apart():
    """250m, 100 clients on 16 CPUs: GOMAXPROCS 1 (409 requests) against 16 (236): the p99s'
    intervals do not overlap, so the comparison ranks them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [gmp.load_run(SHARED / n) for n in ("light-250m-gmp1", "light-250m-numcpu")]
        t = gmp.compare_runs(runs)
    one, all_ = t.iloc[0], t.iloc[1]
    assert np.isfinite(one["latency_p99_hi_ms"]) and one["latency_p99_hi_ms"] < all_["latency_p99_lo_ms"]
    from gmpanalysis.report import findings

    said = findings(t)[-1]
    assert "their 95 % confidence intervals do not overlap" in said
    # the closed loop's clients were answered 45 % less often at 16 Ps: the findings say so
    assert "Requests answered per second: 33.1 with GOMAXPROCS 1" in said and "18.3 with GOMAXPROCS 16" in said
