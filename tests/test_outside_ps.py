"""The CPU a Go process runs outside its Ps: measured from a run's periods and trace
(outsideps), and replayed beside the Ps (cfskernel._outside)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gmpanalysis as gmp
from gmpanalysis import cfskernel
from gmpanalysis import cfsreplay as R
from gmpanalysis.errors import UsageError
from gmpanalysis.outsideps import MIN_PERIODS, outside_share
from gmpanalysis.whatif import measured, predict

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "16cpu-v2"
P = 100_000_000


def _saturating(cost_ns: float, G: int, C: int, outside: float, quota_us: float | None = 100_000) -> pd.DataFrame:
    """Forty requests a second for two seconds, each ``cost_ns`` of CPU, under a quota of
    one CPU (or none)."""
    sched = np.arange(0, 20 * P, P // 4, dtype=np.int64)
    return R.replay(sched, cost_ns, None, quota_us, P, 0, 0.0, G, C, outside_p=outside)


@pytest.mark.parametrize("compiled", [True, False] if cfskernel.AVAILABLE else [False])
def test_one_p_at_one_cpu_is_throttled_only_with_cpu_outside_it(compiled):
    """GOMAXPROCS 1 under a 1-CPU quota: one P can never use more than the quota, so the
    group is throttled only where threads outside it add CPU (a 16-CPU run did so in 17 %
    of its periods). The CPU each request costs is the same either way; the usage a period
    can reach is the P's and the share beside it."""
    cfskernel.ENABLED = compiled
    try:
        alone = _saturating(25.3e6, 1, 4, 0.0)
        beside = _saturating(25.3e6, 1, 4, 0.02)
    finally:
        cfskernel.ENABLED = True
    assert not alone["throttled"].any() and alone["usage_us"].max() <= 100_000 + 1e-6
    assert beside["throttled"].mean() > 0.2 and beside["usage_us"].max() > 100_000
    for per in (alone, beside):
        assert per["usage_us"].sum() == pytest.approx(40 * 2 * 25.3e3, rel=1e-9)
        assert per["usage_us"].max() <= 1.02 * 100_000 * (1 + 1e-12)


def test_with_no_cpu_free_the_cpu_outside_slows_the_ps():
    """Ps on every CPU: what runs outside them takes its share of those CPUs, so latency
    and usage stay as if every request ran on its P (the same CPU in all)."""
    a = _saturating(20e6, 1, 1, 0.0, quota_us=None)
    b = _saturating(20e6, 1, 1, 0.05, quota_us=None)
    assert np.allclose(a.attrs["latency_ms"], b.attrs["latency_ms"], rtol=1e-9)
    assert np.allclose(a["usage_us"], b["usage_us"], rtol=1e-9)


def test_when_the_free_cpus_are_too_few_all_share_them():
    """Three Ps on four CPUs with half as much again outside them: 4.5 CPUs wanted, 4 held;
    the periods' usage never passes the CPUs."""
    sched = np.zeros(30, dtype=np.int64)
    per = R.replay(sched, 40e6, None, None, P, 0, 0.0, 3, 4, outside_p=0.5)
    assert per["usage_us"].max() == pytest.approx(400_000, rel=1e-9)
    assert per["usage_us"].sum() == pytest.approx(30 * 40e3, rel=1e-9)


@pytest.mark.parametrize("bad", [-0.01, math.nan, math.inf])
def test_a_share_outside_that_is_no_share_is_refused(bad):
    with pytest.raises(UsageError, match="outside the Ps"):
        _saturating(20e6, 1, 2, bad)


def _table(usage: list[float], running: list[float], **cols) -> pd.DataFrame:
    n = len(usage)
    return pd.DataFrame(
        {
            "usage_us": usage,
            "go_running_us": running,
            "throttled": pd.array(cols.get("throttled", [False] * n), dtype="boolean"),
            "frozen_by": pd.array(cols.get("frozen_by", [""] * n), dtype="string"),
            "frozen_other_us": cols.get("frozen_other_us", [0.0] * n),
            "gap": cols.get("gap", [False] * n),
        }
    )


def test_the_share_is_usage_over_the_goroutines_running_time_where_nothing_froze():
    run = [50_000.0, 60_000.0, 40_000.0, 70_000.0, 30_000.0, 80_000.0]
    use = [r * 1.02 for r in run]
    got = outside_share(_table(use, run))
    assert got["share"] == pytest.approx(0.02) and got["periods"] == 6 and got["se"] < 1e-9
    # a frozen period's goroutines "ran" while their threads stood throttled: left out
    frozen = _table([*use, 50_000.0], [*run, 90_000.0], throttled=[False] * 6 + [True])
    assert outside_share(frozen)["share"] == pytest.approx(0.02)
    above = _table([*use, 50_000.0], [*run, 90_000.0], frozen_by=[""] * 6 + ["pod"])
    assert outside_share(above)["share"] == pytest.approx(0.02)
    noisy = _table([r * f for r, f in zip(run, [1.0, 1.04, 1.02, 1.01, 1.03, 1.02], strict=True)], run)
    assert 0 < outside_share(noisy)["se"] < 0.02


def test_a_held_back_host_gives_no_negative_share_and_few_periods_none():
    run = [50_000.0] * 8
    assert outside_share(_table([45_000.0] * 8, run))["share"] == 0.0
    assert outside_share(_table([51_000.0] * (MIN_PERIODS - 1), run[: MIN_PERIODS - 1])) is None
    assert outside_share(_table([51_000.0] * 8, [np.nan] * 8)) is None  # no trace over them
    assert outside_share(pd.DataFrame({"usage_us": [1.0]})) is None


def test_a_run_at_gomaxprocs_one_under_one_cpu_replays_its_throttling():
    """The 16-CPU run at GOMAXPROCS 1 under a 1-CPU limit: throttled in 17.9 % of the
    replay's periods with usage just over the quota. Replayed at its own setting without
    the CPU outside its P it gave 0 %."""
    path = SHARED / "cpu-1cpu-gmp1"
    if not path.exists():
        pytest.skip(f"{path}: the shared 16-CPU runs are not beside this checkout")
    run = gmp.load_run(path)
    share = outside_share(gmp.df_periods(run))
    assert share is not None and share["share"] > 2 * share["se"]
    got, want = predict(run, run)["throttled_pct"], measured(run)["throttled_pct"]
    assert want > 10 and got > 0.5 * want
