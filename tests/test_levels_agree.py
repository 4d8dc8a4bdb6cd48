"""The summary, the report's sentences and df_levels say the same about each level: its
limit (after a resize in place too) and how often its quota froze the process."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest

import gmpanalysis as gmp
from gmpanalysis.levels import describe, quota_words

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = sorted(
    p for d in ("fixtures/runs", "fixtures/runs-v2") for p in (ROOT / d).iterdir() if (p / "meta.json").exists()
)


def _load(p: Path) -> gmp.Run:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gmp.load_run(p)


def test_a_resized_limit_is_told_with_its_new_value():
    run = _load(ROOT / "fixtures/runs/resize-0.5to2cpu-default")
    # limits.csv of that run: 50 ms per 100 ms, raised in place to 200 ms
    lim = run.limits
    first, last = int(lim["quota_us"].iloc[0]), int(lim["quota_us"].iloc[-1])
    assert (first, last) == (50000, 200000)
    lv = gmp.df_levels(run).iloc[0]
    assert lv["quota_us"] == first and lv["quota_last_us"] == last and lv["quota_changes"] == 1
    row = gmp.compare_runs([run]).iloc[0]
    assert row["quota_last_us"] == last and row["cpu_limit"] == "500m → 2"
    assert quota_words(first, last, 100000) == "50 ms per 100 ms, then 200 ms"


def test_a_limit_lifted_in_place_is_a_change(tmp_path):
    """cpu.max set to "max" mid-run (limits.csv's quota left empty): one change, as a new
    value would be."""
    d = tmp_path / "lifted"
    shutil.copytree(ROOT / "fixtures/runs/resize-0.5to2cpu-default", d)
    lines = (d / "limits.csv").read_text().splitlines()
    head, first, second = lines
    cells = second.split(",")
    cells[4] = ""  # quota_us: no limit from then on
    (d / "limits.csv").write_text("\n".join([head, first, ",".join(cells)]) + "\n")
    lv = gmp.df_levels(_load(d)).iloc[0]
    assert lv["quota_us"] == 50000 and pd.isna(lv["quota_last_us"]) and lv["quota_changes"] == 1


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.name)
def test_the_report_counts_each_levels_freezes_as_df_levels_does(path):
    run = _load(path)
    a = gmp.analyze(run)
    if len(a.levels) < 2:
        return  # one level: no sentences
    lv = gmp.df_levels(run).set_index("level")
    counted = set()
    for line in describe(a):
        m = re.match(r"(Its own quota|The (\w+)'s quota) froze it in (\d+) of its (\d+) periods", line)
        if m:
            name = m.group(2) or lv.index[0]
            counted.add(name)
            assert (int(m.group(3)), int(m.group(4))) == (lv.loc[name, "throttled"], lv.loc[name, "periods"]), line
    # the sentences are there to compare: a level that throttled is counted in words
    assert counted or not (lv["throttled"] > 0).any(), describe(a)
    for r in lv.itertuples():
        assert quota_words(r.quota_us, r.quota_last_us, r.period_us) in describe(a)[0]


def test_the_ledger_is_handed_out_as_copies():
    """The period table's ledger is shared by the tables derived from it (not deep-copied
    by pandas into every column): what df_conservation and df_period_groups return must
    still be the caller's to change."""
    run = _load(ROOT / "fixtures/runs/cpu-0.5cpu-gmp8")
    before = gmp.df_conservation(gmp.df_periods(run))["delta"].tolist()
    c = gmp.df_conservation(gmp.df_periods(run))
    c["delta"] = -1
    g = gmp.df_period_groups(gmp.df_periods(run))
    g["group"] = -1
    assert gmp.df_conservation(gmp.df_periods(run))["delta"].tolist() == before
    assert (gmp.df_period_groups(gmp.df_periods(run))["group"] != -1).all()


def test_a_limit_removed_in_place_is_told_as_no_limit(tmp_path):
    # the real resize run, its last limits.csv row rewritten to no quota (a limit removed in
    # place: cpu.max "max"), as a resize to no limit would record it
    b = tmp_path / "removed"
    shutil.copytree(ROOT / "fixtures/runs/resize-0.5to2cpu-default", b)
    lines = (b / "limits.csv").read_text().splitlines()
    head = lines[0].split(",")
    last = lines[-1].split(",")
    last[head.index("quota_us")] = ""
    lines[-1] = ",".join(last)
    (b / "limits.csv").write_text("\n".join(lines) + "\n")
    run = _load(b)
    row = gmp.compare_runs([run]).iloc[0]
    assert row["cpu_limit"] == "500m → none" and row["quota_last_us"] is None
    assert gmp.df_levels(run).iloc[0]["quota_last_us"] is pd.NA
    assert "quota 50 ms per 100 ms, then no limit" in gmp.to_report(run, tmp_path / "r.html").read_text()


def test_the_quota_at_the_end_has_one_source(tmp_path):
    """A resize that limits.csv records after the last whole period: the sweep's table, the
    levels' table and the report give the one quota at the end (levels.quota_at_end)."""
    b = tmp_path / "late"
    shutil.copytree(ROOT / "fixtures/runs/resize-0.5to2cpu-default", b)
    t_last = int((b / "cpu_stat.csv").read_text().splitlines()[-1].split(",")[0])
    with (b / "limits.csv").open("a") as f:
        f.write(f"{t_last - 1000},{t_last - 2000},container,100000,300000,0\n")
    run = _load(b)
    assert gmp.df_periods(run)["quota_us"].iloc[-1] != 300000  # no whole period under it
    assert gmp.compare_runs([run]).iloc[0]["quota_last_us"] == 300000
    assert gmp.df_levels(run).iloc[0]["quota_last_us"] == 300000
    assert "then 300 ms" in gmp.to_report(run, tmp_path / "r.html").read_text()
