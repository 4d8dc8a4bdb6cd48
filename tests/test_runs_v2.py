"""The cgroup v2 bundles recorded in VMs of Debian's 6.1 and 6.12 (fixtures/runs-v2, made by
fixtures/make-vm-runs.sh): the contract holds on real v2 files from kernels other than this
machine's, at both levels, with the kernel's own signals."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES

import gmpanalysis as gmp
from gmpanalysis.kernelfacts import kernel_version

RUNS_V2 = sorted(p for p in (FIXTURES / "runs-v2").iterdir() if (p / "meta.json").exists())


def test_there_are_runs_of_both_kernels():
    series = {kernel_version(gmp.load_run(p).meta["kernel"]) for p in RUNS_V2}
    assert {(6, 1), (6, 12)} <= series


@pytest.mark.parametrize("path", RUNS_V2, ids=[p.name for p in RUNS_V2])
def test_v2_bundle_conserves_and_carries_the_kernels_signals(path):
    run = gmp.load_run(path)
    m = run.meta
    assert m["cgroup_version"] == 2 and m["virtualization"] == "tcg" and m["complete"]
    s = run.samples
    local = kernel_version(m["kernel"]) >= (6, 6)
    for level in ("container", "pod"):
        per = gmp.df_periods(run, level=level)
        for r in gmp.df_conservation(per).itertuples(index=False):
            assert r.rows + r.groups + r.outside == pytest.approx(r.delta, abs=1e-6 * max(1.0, abs(r.delta)))
        x = s[s["cgroup"] == level]
        # PSI is wall time: never more than the period (plus the reads' interpolation, a read
        # interval at each end), and "full" (every task stalled) never more than "some"
        # (one task stalled), up to the µs the kernel rounds each total to
        width_us = (per["end_ns"] - per["start_ns"]) / 1e3
        read_us = 2 * float(np.median(np.diff(x["t_ns"].to_numpy()))) / 1e3
        for c in ("psi_some_us", "psi_full_us"):
            assert per[c].notna().all()
            assert (per[c] >= -1e-6).all() and (per[c] <= width_us + read_us).all(), c
        assert (per["psi_full_us"] <= per["psi_some_us"] + 2).all()
        if local:
            assert per["local_throttled_us"].notna().all()
            # cpu.stat.local counts every level's freezes of the group, its own quota's too
            total_local = float(x["local_throttled_us"].iloc[-1] - x["local_throttled_us"].iloc[0])
            total_own = float(x["throttled_us"].iloc[-1] - x["throttled_us"].iloc[0])
            assert total_local >= total_own - 1e-6
        else:
            assert x["local_throttled_us"].isna().all()
            assert "before 6.6" in per.attrs["missing"]["local_throttled_us"]  # there, empty, and why
        assert "psi_full_us" not in per.attrs["missing"]


@pytest.mark.parametrize("path", RUNS_V2, ids=[p.name for p in RUNS_V2])
def test_the_timer_phase_is_the_kernels(path):
    """Before 6.4 every group's period timer expires on multiples of the period (measured:
    both levels within 0.2 ms of 0 on 6.1); from 6.4 each group's phase is random."""
    run = gmp.load_run(path)
    P = run.meta["period_us"] * 1000
    phases = {}
    for level in ("container", "pod"):
        g = gmp.df_periods(run, level=level).attrs["grid"]
        phases[level] = g.segments[0].phase_ns % P / 1e6
    table = gmp.df_kernel(run).set_index("behaviour")
    near0 = [min(p, P / 1e6 - p) < 0.5 for p in phases.values()]
    if kernel_version(run.meta["kernel"]) < (6, 4):
        assert all(near0), phases
        assert "all on multiples of the period" in table.loc["period timer phase", "seen"]
    else:
        assert not all(near0), phases  # two random phases both within 0.5 ms of 0: p = 1e-4
        assert np.isfinite(list(phases.values())).all()


def test_v1_bundle_has_the_columns_nan_and_says_why():
    from conftest import RUNS

    per = gmp.df_periods(gmp.load_run(RUNS[0]))
    for c in ("psi_some_us", "psi_full_us", "local_throttled_us"):
        assert per[c].isna().all()
        assert "cgroup v1 has neither" in per.attrs["missing"][c]
