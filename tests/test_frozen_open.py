"""Freezes whose start the reads leave open (sparse or late sampling): the period still
names the level that froze it, its frozen time is NaN rather than the bracket's lower bound,
and the run's stall and frozen rates do not lean towards the unthrottled periods (which
always tell theirs) but stay near what dense reads of the same run measure, or say NaN."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pytest

import gmpanalysis as gmp
from gmpanalysis.levels import table_level

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "16cpu-v2"
BUNDLES = sorted(
    p
    for d in (ROOT / "fixtures" / "runs", ROOT / "fixtures" / "runs-v2", SHARED)
    if d.is_dir()
    for p in d.iterdir()
    if (p / "meta.json").exists()
)


def _load(p: Path) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(p)


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_throttled_period_names_its_own_level(path):
    run = _load(path)
    per = gmp.df_periods(run)
    own = table_level(run)
    thr = per["throttled"].fillna(False).to_numpy(dtype=bool) & per["frozen_by"].notna().to_numpy()
    by = per["frozen_by"].to_numpy(dtype=object)[thr]
    missing = [i for i, b in zip(np.flatnonzero(thr).tolist(), by, strict=True) if own not in str(b).split(",")]
    assert not missing, per.iloc[missing][["period", "throttled", "exhausted_at_us", "frozen_by", "frozen_us"]]
    # an open freeze is not a number: where the own level's moment of exhaustion is open,
    # so is the frozen time
    open_own = per["throttled"].fillna(False).to_numpy(dtype=bool) & per["exhausted_at_us"].isna().to_numpy()
    assert per["frozen_us"][open_own].isna().all()


def _thinned(run: gmp.Run, every: int) -> gmp.Run:
    """The run read every ``every``-th time only: what a sampler at that interval writes."""
    out = copy.copy(run)
    out.samples = run.samples.iloc[::every].reset_index(drop=True)
    out.meta = copy.deepcopy(run.meta)
    sampler = out.meta.get("sampler") or {}
    if sampler.get("interval_ns"):
        sampler["interval_ns"] = int(sampler["interval_ns"]) * every
    return out


@pytest.mark.parametrize("name", ["cpu-0.5cpu-gmp8", "alloc-0.5cpu-gmp8", "cpu-0.5cpu-gmp1"])
def test_sparse_reads_do_not_pull_the_rates_to_zero(name):
    run = _load(ROOT / "fixtures" / "runs" / name)
    dense = gmp.period_summary(gmp.df_periods(run))
    assert dense["stall_ms_per_s"] > 100  # a throttled run: the rate is worth keeping
    seen_nan = False
    for every in (2, 4, 10):
        sparse = gmp.period_summary(gmp.df_periods(_thinned(run, every)))
        for k in ("stall_ms_per_s", "frozen_ms_per_s"):
            got = sparse[k]
            if np.isnan(got):  # no throttled period tells it: said, not guessed
                seen_nan = True
                continue
            # the bracket's lower bound (the old value) fell to half or less at 4x
            assert got == pytest.approx(dense[k], rel=0.2), (every, k, got, dense[k])
    # reads 10x sparser than the tick never date an exhaustion on these runs
    assert seen_nan


def test_findings_never_print_nan():
    run = _thinned(_load(ROOT / "fixtures" / "runs" / "cpu-0.5cpu-gmp8"), 10)
    from gmpanalysis.report import findings

    text = " ".join(findings(gmp.compare_runs([run])))
    assert "nan" not in text.lower() and "reads leave open" in text, text


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_never_more_cpus_throttled_than_exist(path):
    """cpus_throttled (throttled run-queue time over the stall) overshoots where run queues
    ran out of their slices before the group's usage went flat: 2.04 on 2 CPUs, 55.9 on 16
    in the shipped runs. It is held to the CPUs the machine has, on every level."""
    run = _load(path)
    ncpu = run.meta["ncpu"]
    for level in gmp.df_levels(run)["level"]:
        c = gmp.df_periods(run, level=level)["cpus_throttled"].to_numpy(dtype=float)
        assert not (c > ncpu).any(), (level, np.nanmax(c), ncpu)
