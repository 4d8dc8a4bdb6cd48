"""The cgroup v2 bundles recorded in VMs of Debian's 6.1 and 6.12 (fixtures/runs-v2, made by
fixtures/make-vm-runs.sh): the contract holds on real v2 files from kernels other than this
machine's, at both levels, with the kernel's own signals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
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


LOCAL_RUNS = [p for p in RUNS_V2 if kernel_version(gmp.load_run(p).meta["kernel"]) >= (6, 6)]
ANCESTOR = FIXTURES / "runs-v2" / "v2-6.12-ancestor-pod0.5-ctr4-default"


@pytest.mark.parametrize("path", LOCAL_RUNS, ids=[p.name for p in LOCAL_RUNS])
def test_the_kernels_local_throttled_time_agrees_with_the_freezes_found(path):
    """cpu.stat.local (6.6+) is the kernel's own "was I frozen, by any level": in every period
    where the credit can be told, it rose exactly where the levels' cpu.stat found a freeze."""
    c = gmp.df_local_checks(gmp.load_run(path))
    known = c["agree"].dropna()
    assert len(known) >= 0.6 * len(c) and known.sum() >= 5
    assert c.attrs["agreement"] == 1.0, c.attrs["disagree"]
    # ... and frozen periods among those told: the agreement is not only about quiet periods
    assert (c["agree"].notna() & c["kernel_frozen"]).sum() >= 3


def test_an_ancestor_quota_freezes_a_container_whose_own_cpu_stat_sees_nothing():
    run = gmp.load_run(ANCESTOR)
    per = gmp.df_periods(run)
    assert per["nr_throttled"].sum() == 0 and per["throttled_rq_us"].sum() == 0
    frozen = per["frozen_by"].fillna("").str.len() > 0
    assert frozen.sum() >= 10 and set(per.loc[frozen, "frozen_by"]) == {"pod"}
    # cpu.stat.local counts the run queues' throttled time at their unthrottling, the pod's
    # boundary: a pod's freeze that began before the container's boundary is credited in the
    # container's next period
    local = per["local_throttled_us"].to_numpy()
    credited = local > 0
    credited[:-1] |= frozen.to_numpy()[1:] & (local[1:] > 0)
    assert credited[frozen.to_numpy()].all()
    c = gmp.df_local_checks(run)
    assert c.attrs["agreement"] == 1.0
    # without the pod's freezes the container's own counters would say it never froze, and
    # the kernel disagrees in every period it froze: the check can fail
    from gmpanalysis.analysis import analyze
    from gmpanalysis.checks import local_checks

    fz = analyze(run).freezes()
    alone = local_checks(per, fz[fz["level"] == "container"])
    assert alone.attrs["agreement"] < 0.5 and len(alone.attrs["disagree"]) >= 10


def test_go_reads_only_its_own_cgroup_and_the_table_says_so():
    """golang/go#81180 on a real v2 kernel: the runtime's default follows the container's
    cpu.max (4 CPUs on 4 vCPUs: 4 Ps), not the pod's 0.5, and df_gomaxprocs names it."""
    run = gmp.load_run(ANCESTOR)
    g = gmp.df_gomaxprocs(run)
    assert run.meta["ncpu"] == 4 and set(g["gomaxprocs"].dropna()) == {4}
    assert (g["limit_cpus"] == 4).all() and (g["ancestor_limit_cpus"] == 0.5).all()
    assert g["drift"].str.contains("golang/go#81180").all()
    assert g["followed"].str.contains("go1.25 default").all()


def test_df_local_checks_on_v1_says_why_not():
    from conftest import RUNS

    with pytest.raises(gmp.MissingDataError, match="cpu.stat.local"):
        gmp.df_local_checks(gmp.load_run(RUNS[0]))


def test_a_quota_write_refills_at_once_and_keeps_the_timers_phase():
    """tg_set_cfs_bandwidth refills the runtime when cpu.max is written, and restarts the
    period timer only if it is not running: measured on 6.12 (VM), the period of the write
    used more than its old quota, and the grid fitted before and after the write has one phase."""
    run = gmp.load_run(FIXTURES / "runs-v2" / "v2-6.12-resize-0.5to2cpu-default")
    s = run.samples[run.samples["cgroup"] == "container"]
    t = min(r["t_ns"] for r in run.meta["resizes"])
    P = run.meta["period_us"] * 1000
    a = gmp.fit_period_grid(s[s["t_ns"] < t])
    b = gmp.fit_period_grid(s[s["t_ns"] > t + P])
    d = abs((a.phase_ns - b.phase_ns + P / 2) % P - P / 2)
    assert d <= 3 * max(a.uncertainty_ns, b.uncertainty_ns), (a, b)
    per = gmp.df_periods(run)
    k = per[(per["start_ns"] <= t) & (per["end_ns"] > t)].iloc[0]
    assert k["quota_us"] == 50_000 and k["usage_us"] > 1.2 * k["quota_us"]


def _table(starts_ms, local_us):
    import pandas as pd

    s = np.array(starts_ms, dtype=np.int64) * 1_000_000
    return pd.DataFrame(
        {
            "period": np.arange(len(s)),
            "start_ns": s,
            "end_ns": s + 100_000_000,
            "local_throttled_us": np.array(local_us, dtype=float),
            "frozen_by": pd.array(["x"] * len(s), dtype="string"),
        }
    )


def _freeze(start_ms, end_ms, exact=True):
    import pandas as pd

    return pd.DataFrame(
        {
            "level": ["pod"],
            "start_ns": [int(start_ms * 1e6)],
            "end_ns": [int(end_ms * 1e6)],
            "dur_ms": [end_ms - start_ms],
            "exact": [exact],
        }
    )


def test_local_checks_edges_are_unknown_not_disagreements():
    """Where the kernel's rise could have been credited to either side (near the late-credit
    cutoff), in a gap between segments, or from a freeze too short or too open to count,
    the check says unknown; a plain miss is a disagreement."""
    from gmpanalysis.checks import local_checks

    # a pod freeze ending 5.5 ms into period 2: credited to 2 by the rule, to 1 if the read
    # that saw it came within 5 ms; the kernel's rise sits in 1: unknown there, not False
    c = local_checks(_table([0, 100, 200, 300], [0, 40_000, 0, 0]), _freeze(150, 205.5))
    assert c["agree"].isna()[[1, 2]].all() and c.attrs["disagree"] == []
    # a freeze ending in a gap between two segments is no period's: where the kernel rose
    # nowhere, everything agrees
    c = local_checks(_table([0, 100, 400], [0, 0, 0]), _freeze(150, 320))
    assert c.attrs["agreement"] == 1.0
    # too short to count as found, yet several CPUs' worth on the kernel's side: unknown
    c = local_checks(_table([0, 100, 200], [0, 800, 0]), _freeze(199.8, 200))
    assert c["agree"].isna()[1]
    # a real freeze the kernel never saw: a disagreement
    c = local_checks(_table([0, 100, 200], [0, 0, 0]), _freeze(150, 200))
    assert c.attrs["disagree"] == [1]


def test_the_headline_counts_what_froze_the_process_at_any_level():
    """A container frozen only by its pod's quota: its own cpu.stat never throttled, so the
    classic figures say 0 %; the summary and the report's findings count the pod's freezes
    and say whose they were, from the same per-period table."""
    from gmpanalysis.report import findings

    run = gmp.load_run(ANCESTOR)
    per = gmp.df_periods(run)
    row = gmp.compare_runs([run]).iloc[0]
    assert row["throttled_pct_wall"] == 0 and row["throttled_periods"] == 0
    frozen = int((per["frozen_by"].fillna("").str.len() > 0).sum())
    assert row["frozen_periods"] == frozen >= 10 and row["frozen_by"] == f"pod {frozen}"
    assert row["frozen_pct_wall"] == pytest.approx(100 * frozen / len(per))
    # the pod's freezes are the only ones: the rate is the pod's own stall rate, read from
    # the pod's own table. The TCG guest's late reads leave 19 of its 30 exhaustions open;
    # those count the mean of the others in both, which the pod's table also holds inside
    # each one's bracket (the container's table does not have the pod's brackets): within
    # 10 %, and inside the pod's bounds
    pod = gmp.period_summary(gmp.df_periods(run, level="pod"))
    assert row["frozen_ms_per_s"] == pytest.approx(pod["stall_ms_per_s"], rel=0.10)
    assert pod["stall_ms_per_s_lo"] <= row["frozen_ms_per_s"] <= pod["stall_ms_per_s_hi"]
    (said,) = findings(gmp.compare_runs([run]))
    assert f"frozen in {row['frozen_pct_wall']:.0f} % of periods" in said and "pod" in said
    assert "another level's quota froze it" in said


@pytest.mark.parametrize("path", [FIXTURES / "runs-v2" / "v2-6.12-cpu-0.5cpu-gmp8", ANCESTOR], ids=lambda p: p.name)
def test_empty_cells_of_the_v2_signals_leave_only_the_periods_they_open_nan(path):
    """A few reads without cpu.pressure or cpu.stat.local (cells left empty): every other
    period keeps the value it had, and a period is NaN only where one of its boundaries falls
    between reads that lack it."""
    import dataclasses

    run = gmp.load_run(path)
    rng = np.random.default_rng(5)
    for level in ("container", "pod"):
        whole = gmp.df_periods(run, level=level)
        s = run.samples.copy()
        rows = np.flatnonzero((s["cgroup"] == level).to_numpy())
        # some reads anywhere, and the first read after six of the period boundaries
        t_level = s["t_ns"].to_numpy()[rows]
        at = np.searchsorted(t_level, rng.choice(whole["start_ns"].to_numpy()[2:-2], size=6, replace=False))
        blank = np.unique(np.r_[rng.choice(rows[10:-10], size=6, replace=False), rows[at]])
        for c in ("psi_some_us", "psi_full_us", "local_throttled_us"):
            s.loc[blank, c] = pd.NA
        per = gmp.df_periods(dataclasses.replace(run, samples=s), level=level)
        t = s["t_ns"].to_numpy()
        # the stretches between the reads either side of a blanked one, where a boundary is left open
        gaps = [(t[rows[np.searchsorted(rows, b) - 1]], t[rows[np.searchsorted(rows, b) + 1]]) for b in blank]
        for c in ("psi_some_us", "psi_full_us", "local_throttled_us"):
            lost = per[c].isna() & whole[c].notna()
            assert 0 < lost.sum() <= 2 * len(blank) or not whole[c].notna().any()
            kept = ~lost & whole[c].notna()
            assert np.array_equal(per.loc[kept, c].to_numpy(), whole.loc[kept, c].to_numpy(), equal_nan=True), c
            for i in np.flatnonzero(lost.to_numpy()):
                ends = (per["start_ns"].iloc[i], per["end_ns"].iloc[i])
                assert any(lo < e < hi for e in ends for lo, hi in gaps), (c, i)


def test_the_replay_runs_on_the_period_of_the_grids_level(tmp_path):
    """Where several levels are sampled, the grid takes each level's period from its own
    limits (limits.csv, the cgroup's cpu.max); a meta.json period_us that disagrees must not
    set the replay's period apart from the table's (a 1 ms replay of a 100 ms run)."""
    d = tmp_path / "run"
    shutil.copytree(next(p for p in RUNS_V2 if p.name == "v2-6.12-cpu-0.5cpu-gmp2"), d)
    meta = json.loads((d / "meta.json").read_text())
    meta["period_us"] = 1000
    (d / "meta.json").write_text(json.dumps(meta))
    run = gmp.load_run(d)
    per = gmp.df_periods(run)
    assert ((per["end_ns"] - per["start_ns"]) == 100_000_000).all()
    w = gmp.what_if(run)
    assert ((w["end_ns"] - w["start_ns"]) == 100_000_000).all()
    assert w["start_ns"].isin(per["start_ns"]).all()
