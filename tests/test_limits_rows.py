"""limits.csv rows that say more than their values: a restarted sampler's first row (no
prev_ns) that changes a limit, and rows of a level the samples never name. Real bundles,
changed in a copy."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import gmpanalysis as gmp

ROOT = Path(__file__).resolve().parents[1]
RESIZE = ROOT / "fixtures" / "runs" / "resize-0.5to2cpu-default"


def _load(d: Path) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(d)


def test_a_restarted_samplers_first_row_that_changes_the_quota_is_a_change(tmp_path):
    """The sampler is down for 1.1 s and its restart finds the quota raised: the change lies
    between the old sampler's last reads and the new one's first, the periods that start
    there have no quota and say why, and the level counts the change."""
    d = tmp_path / "resize"
    shutil.copytree(RESIZE, d)
    s = pd.read_csv(d / "cpu_stat.csv")
    t = s["t_ns"]
    t_old = int(pd.read_csv(d / "limits.csv")["t_ns"].iloc[1])  # the real change: the sampler is down then
    down = (t > t_old - 800_000_000) & (t < t_old + 300_000_000)
    s[~down].to_csv(d / "cpu_stat.csv", index=False)
    first = int(t[t >= t_old + 300_000_000].iloc[0])
    first_row = pd.read_csv(RESIZE / "limits.csv").iloc[0]
    (d / "limits.csv").write_text(
        "t_ns,prev_ns,cgroup,period_us,quota_us,burst_us\n"
        f"{first_row.t_ns},,container,100000,50000,0\n{first + 5000},,container,100000,200000,0\n"
    )
    run = _load(d)
    note = next(n for n in run.notes if "no prev_ns after its first" in n)
    assert f"{d / 'limits.csv'} line 3" in note and "quota 50000 µs -> 200000 µs" in note
    per = gmp.df_periods(run)
    last_old = int(t[t <= t_old - 800_000_000].iloc[-1])
    inside = ((per["start_ns"] > last_old) & (per["start_ns"] < first + 5000)).to_numpy()
    assert inside.sum() >= 10
    assert per.loc[inside, "quota_us"].isna().all()
    assert per.loc[inside, "reason"].str.contains("which quota held at its start is not known", regex=False).all()
    before, after = per[per["end_ns"] < last_old - 10_000_000], per[per["start_ns"] > first + 5000]
    assert (before["quota_us"] == 50_000).all() and (after["quota_us"] == 200_000).all()
    lv = gmp.df_levels(run)
    assert (int(lv["quota_changes"].iloc[0]), int(lv["quota_last_us"].iloc[0])) == (1, 200_000)
    c = gmp.df_conservation(per)
    assert np.allclose(c["rows"] + c["groups"] + c["outside"], c["delta"], rtol=1e-9, atol=1e-6)


def test_a_restarted_samplers_first_row_that_changes_nothing_is_no_change(tmp_path):
    d = tmp_path / "resize"
    shutil.copytree(RESIZE, d)
    lim = pd.read_csv(d / "limits.csv", dtype={"prev_ns": "Int64"})
    again = lim.iloc[[1]].assign(t_ns=int(lim["t_ns"].iloc[1]) + 2_000_000_000, prev_ns=pd.NA)
    pd.concat([lim, again]).to_csv(d / "limits.csv", index=False)
    run = _load(d)
    assert not any("prev_ns" in n for n in run.notes)
    assert int(gmp.df_levels(run)["quota_changes"].iloc[0]) == 1


def test_a_level_no_sample_names_does_not_block_a_bundle_of_one_level(tmp_path):
    """A bundle of one level (no cgroup column) whose limits.csv also holds a level it never
    samples, whose period changed: the load names the stray level, and the table of the
    sampled level is built from its own limits."""
    d = tmp_path / "one"
    shutil.copytree(ROOT / "fixtures" / "runs" / "cpu-0.5cpu-gmp8", d)
    t = pd.read_csv(d / "cpu_stat.csv")["t_ns"]
    t0, mid = int(t.iloc[0]), int(t.iloc[len(t) // 2])
    (d / "limits.csv").write_text(
        "t_ns,prev_ns,cgroup,period_us,quota_us,burst_us\n"
        f"{t0},,container,100000,50000,0\n{t0 + 7000},,pod,100000,50000,0\n{mid},{mid - 10_000_000},pod,50000,50000,0\n"
    )
    run = _load(d)
    said = [n for n in run.notes if "in no row of cpu_stat.csv" in n]
    assert said and f"{d / 'limits.csv'}: level(s) 'pod'" in said[0] and "(it samples 'container')" in said[0]
    per = gmp.df_periods(run)
    clean = gmp.df_periods(_load(ROOT / "fixtures" / "runs" / "cpu-0.5cpu-gmp8"))
    assert per["throttled"].equals(clean["throttled"]) and (per["quota_us"] == 50_000).all()
    # limits.csv of one level only is the samples' level, whatever it calls it
    (d / "limits.csv").write_text(f"t_ns,prev_ns,cgroup,period_us,quota_us,burst_us\n{t0},,app,100000,50000,0\n")
    assert not [n for n in _load(d).notes if "in no row of cpu_stat.csv" in n]
