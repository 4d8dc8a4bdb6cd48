"""What the run's summary counts where the reads leave rows open: the throttles of an
ambiguous group (a hole in the reads) are the own level's, so the count per level says them
as the count of frozen periods does. Real bundles, damaged in a copy."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest

import gmpanalysis as gmp
from gmpanalysis.compare import frozen_by_levels
from gmpanalysis.report import findings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "16cpu-v2"


def _shared(tmp_path: Path, name: str) -> Path:
    if not (SHARED / name).is_dir():
        pytest.skip(f"{SHARED / name} is not beside this checkout (the shared 16-CPU runs)")
    d = tmp_path / name
    shutil.copytree(SHARED / name, d)
    return d


def _load(d: Path) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(d)


def test_the_throttles_of_a_hole_count_for_the_own_level(tmp_path):
    d = _shared(tmp_path, "v2-cpu-gmp8")
    s = pd.read_csv(d / "cpu_stat.csv")
    s.drop(index=range(2500, 5500)).to_csv(d / "cpu_stat.csv", index=False)  # 3 s without reads
    run = _load(d)
    per = gmp.df_periods(run)
    groups = gmp.df_period_groups(per)
    held = int(groups.loc[~groups["nr_throttled_resolved"].astype(bool), "nr_throttled"].sum())
    assert held > 0  # the hole holds throttles no row says
    row = gmp.compare_runs([run]).iloc[0]
    own = per.attrs["level"]
    assert row.frozen_periods == row.throttled_periods == frozen_by_levels(per)[own] + held
    assert row.frozen_by == f"{own} {row.frozen_periods}"


def test_a_quota_not_known_is_not_counted_as_no_limit(tmp_path):
    """Periods that start inside a quota change's bracket have quota_us NA for not being
    known (50 ms or 200 ms), not for having no limit: the summary counts them apart and the
    findings do not say they had no limit."""
    d = tmp_path / "resize"
    shutil.copytree(ROOT / "fixtures" / "runs" / "resize-0.5to2cpu-default", d)
    lim = pd.read_csv(d / "limits.csv", dtype={"prev_ns": "Int64"})
    lim.loc[1, "prev_ns"] = int(lim.loc[1, "t_ns"]) - 450_000_000  # two reads 450 ms apart
    lim.to_csv(d / "limits.csv", index=False)
    run = _load(d)
    per = gmp.df_periods(run)
    na = per[per["quota_us"].isna()]
    assert len(na) >= 4
    assert na["reason"].str.contains("limit changed (quota 50000 µs -> 200000 µs)", regex=False).all()
    assert na["reason"].str.contains("which quota held at its start is not known", regex=False).all()
    cmp = gmp.compare_runs([run])
    row = cmp.iloc[0]
    assert (row.unlimited_periods, row.unknown_quota_periods) == (0, len(na))
    said = " ".join(findings(cmp))
    assert "had no limit" not in said
    assert f"{len(na)} began while the limit was being changed (their quota is not known)" in said


def test_periods_before_a_limit_was_set_had_none():
    """A limit set in place where there was none: the periods before it had no limit; one
    that starts inside the change's bracket, if any, is the only one not known."""
    run = _load(ROOT / "fixtures" / "levels" / "late-none-to-0.5cpu-go124")
    per = gmp.df_periods(run)
    row = gmp.compare_runs([run]).iloc[0]
    t_set = int(run.limits["t_ns"].iloc[-1])
    before = per[per["end_ns"] <= t_set]
    assert row.unlimited_periods >= len(before) > 0 and before["quota_us"].isna().all()
    assert row.unlimited_periods + row.unknown_quota_periods == int(per["quota_us"].isna().sum())


def test_outside_another_levels_reads_the_own_levels_freezes_stay(tmp_path):
    """A nested bundle whose pod reads start late: in the periods they do not cover the
    pod's freezes are not known, but the container's own counters still tell its own; what
    is NA says why in the reason, and the summary counts every own throttle for its level."""
    d = tmp_path / "nested"
    shutil.copytree(ROOT / "fixtures" / "runs" / "nested-0.5cpu-pod0.5-gmp2", d)
    s = pd.read_csv(d / "cpu_stat.csv")
    pod = s.index[s["cgroup"] == "pod"]
    s.drop(index=pod[: len(pod) // 3]).to_csv(d / "cpu_stat.csv", index=False)  # the pod read from a third on
    run = _load(d)
    per = gmp.df_periods(run)
    own = per.attrs["level"]
    first_pod = int(s.loc[pod[len(pod) // 3], "t_ns"])
    blind = (per["start_ns"] < first_pod).to_numpy()
    thr = per["throttled"].fillna(False).to_numpy(dtype=bool)
    assert (blind & thr).sum() >= 5  # the container's quota froze it before the pod's reads began
    by = per["frozen_by"].to_numpy(dtype=object, na_value=None)
    assert all(b is not None and own in b.split(",") for b in by[thr])
    said = "the pod's reads do not cover this period: whether its quota froze the group is not known"
    assert per.loc[blind, "reason"].str.contains(said, regex=False).all()
    for col in ("frozen_by", "frozen_us", "frozen_other_us"):
        na = per[col].isna().to_numpy()
        assert na[blind & ~thr].all() if col == "frozen_by" else na[blind].all()
        assert per.loc[na, "reason"].notna().all(), per.loc[na & per["reason"].isna().to_numpy(), ["period", col]]
    row = gmp.compare_runs([run]).iloc[0]
    assert frozen_by_levels(per)[own] == row.throttled_periods
    assert f"{own} {row.throttled_periods}" in row.frozen_by
