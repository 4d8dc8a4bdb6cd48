"""A container restart the collector saw (meta.json ``restarts``): its cgroup was recreated
then, so the reads either side are two cgroups' counters, even where the new one's first read
is higher than the old one's last (a new cgroup that ran longer than the old one lived, as in
a crash loop): a new segment starts there, and nothing is credited across it. The pod's
cgroup above is not recreated by a container's restart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

import gmpanalysis as gmp

ROOT = Path(__file__).resolve().parents[1]
COUNTERS = ("usage_us", "nr_periods", "nr_throttled", "throttled_us")


def _bundle(tmp_path: Path, name: str, drop: tuple[float, float] | None, restart_at: float) -> tuple[Path, int]:
    """A copy of a shipped run whose reads from ``drop`` (fractions of the run) are gone,
    and a restart recorded at ``restart_at`` (a fraction); returns the copy and the
    restart's time."""
    d = tmp_path / name
    shutil.copytree(ROOT / "fixtures" / "runs" / name, d)
    s = pd.read_csv(d / "cpu_stat.csv", dtype={"cgroup": str})
    t0, t1 = int(s.t_ns.min()), int(s.t_ns.max())
    at = int(t0 + restart_at * (t1 - t0))
    if drop is not None:
        lo, hi = (int(t0 + f * (t1 - t0)) for f in drop)
        s = s[(s.t_ns < lo) | (s.t_ns > hi)]
        s.to_csv(d / "cpu_stat.csv", index=False, float_format="%.3f")
    meta = json.loads((d / "meta.json").read_text())
    meta["restarts"] = [{"mono_ns": at, "clock": "samples", "old": "a" * 64, "new": "b" * 64}]
    (d / "meta.json").write_text(json.dumps(meta, indent=2))
    return d, at


def _ledger(per: pd.DataFrame) -> pd.DataFrame:
    return gmp.df_conservation(per).set_index(["segment", "counter"])


def test_a_restart_without_a_fall_starts_a_segment(tmp_path):
    """2 s of reads gone around the restart, the new cgroup's first read above the old's
    last on every counter: without the restart it is a hole whose increments the ledger
    credits; with it, two segments, each holding its own reads' deltas only."""
    d, at = _bundle(tmp_path, "cpu-0.5cpu-gmp8", (0.45, 0.55), 0.5)
    run = gmp.load_run(d)
    s = run.samples
    after = int(np.searchsorted(s.t_ns.to_numpy(), at, side="right"))
    assert all(s[c].iloc[after] > s[c].iloc[after - 1] for c in COUNTERS)  # no counter fell
    grid = gmp.analyze(run).grid
    assert [(g.first_row, g.last_row) for g in grid.segments] == [(0, after - 1), (after, len(s) - 1)]
    led = _ledger(gmp.df_periods(run))
    # said, with why and what the counters did across it
    (said,) = [n for n in run.notes if "start a new segment" in n]
    assert f"t_ns {s.t_ns.iloc[after]}" in said and "the container restarted" in said and "nr_periods +" in said
    for c in ("nr_periods", "nr_throttled", "usage_us"):
        parts = [float(s[c].iloc[after - 1] - s[c].iloc[0]), float(s[c].iloc[-1] - s[c].iloc[after])]
        got = [float(led.loc[(k, c), "delta"]) for k in (0, 1)]
        assert got == parts, (c, got, parts)
    # the same reads without the restart: one segment, the jump across the hole credited
    meta = json.loads((d / "meta.json").read_text())
    meta["restarts"] = []
    (d / "meta.json").write_text(json.dumps(meta))
    plain = gmp.load_run(d)
    assert len(gmp.analyze(plain).grid.segments) == 1
    total = _ledger(gmp.df_periods(plain)).xs("nr_periods", level="counter")["delta"].sum()
    assert total == s.nr_periods.iloc[-1] - s.nr_periods.iloc[0]


def test_a_restart_cuts_the_containers_level_only(tmp_path):
    """In a nested run, the container's level gets the restart's segment; the pod's, whose
    cgroup stayed, keeps one."""
    d, _ = _bundle(tmp_path, "nested-0.5cpu-pod0.5-gmp2", None, 0.5)
    run = gmp.load_run(d)
    lv = gmp.df_levels(run).set_index("level")
    from gmpanalysis.levels import level_run

    assert len(gmp.analyze(level_run(run, lv.index[0])).grid.segments) == 2
    assert len(gmp.analyze(level_run(run, "pod")).grid.segments) == 1


def test_a_restart_at_the_old_containers_last_read_as_the_collector_writes_it(tmp_path):
    """The collector records the restart at the old container's last read (its t_ns): the
    new segment starts at the next read, and the note names the restart. An entry without
    the samples' clock (older collectors wrote their own machine's) is not used."""
    d, _ = _bundle(tmp_path, "cpu-0.5cpu-gmp8", None, 0.5)
    s = pd.read_csv(d / "cpu_stat.csv")
    last_old = int(s.t_ns.iloc[len(s) // 2])
    meta = json.loads((d / "meta.json").read_text())
    meta["restarts"][0]["mono_ns"] = last_old
    (d / "meta.json").write_text(json.dumps(meta))
    run = gmp.load_run(d)
    gmp.df_periods(run)
    assert gmp.analyze(run).grid.segments[1].first_row == len(s) // 2 + 1
    (said,) = [n for n in run.notes if "start a new segment" in n]
    assert "the container restarted" in said, said
    del meta["restarts"][0]["clock"]
    (d / "meta.json").write_text(json.dumps(meta))
    assert len(gmp.analyze(gmp.load_run(d)).grid.segments) == 1
