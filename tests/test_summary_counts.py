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
