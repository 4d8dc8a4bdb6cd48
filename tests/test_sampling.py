"""The sampler's own quality: host_stat.csv (the host's /proc/stat), per-deadline lateness,
holes in the reads, and the shipped in-pod lateness fixture."""

from __future__ import annotations

import dataclasses
import math
import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, RUNS

import gmpanalysis as gmp
from gmpanalysis.bundle import HOST_STAT_COLUMNS, TruncatedLineWarning, read_host_stat
from gmpanalysis.levels import level_run
from gmpanalysis.sampling import df_lateness, df_sampling_holes, read_lateness, sampling_summary

HEADER = ",".join(HOST_STAT_COLUMNS)
# three real rows of this VM's /proc/stat as gmp-sampler --host-stat wrote them (USER_HZ 100)
ROWS = """427298913921,22673,320980000,0,84360000,437760000,4560000,0,1050000,390000,849100000,2
428298881278,23405,322590000,0,84730000,437780000,4570000,0,1050000,390000,851110000,2
429298869021,23745,324140000,0,85150000,437800000,4570000,0,1050000,400000,853110000,2
"""


def test_read_host_stat_columns_and_units(tmp_path):
    p = tmp_path / "host_stat.csv"
    p.write_text(HEADER + "\n" + ROWS)
    hs = read_host_stat(p)
    assert list(hs.columns) == list(HOST_STAT_COLUMNS)
    assert all(hs[c].dtype == np.int64 for c in HOST_STAT_COLUMNS)
    assert hs["steal_us"].tolist() == [390000, 390000, 400000]  # one 10 ms USER_HZ tick of steal
    sums = hs[[c for c in HOST_STAT_COLUMNS if c.endswith("_us") and c != "cpu_total_us"]].sum(axis=1)
    assert (sums == hs["cpu_total_us"]).all()
    assert hs.attrs["truncated_last_line"] is False


def test_read_host_stat_truncated_last_line(tmp_path):
    p = tmp_path / "host_stat.csv"
    p.write_text(HEADER + "\n" + ROWS + "430298869021,2374")  # sampler killed mid-line
    with pytest.warns(TruncatedLineWarning, match="host_stat.csv: last line was incomplete"):
        hs = read_host_stat(p)
    assert len(hs) == 3 and hs.attrs["truncated_last_line"]


@pytest.mark.parametrize(
    "bad, line",
    [
        ("428298881278,23405,322590000,0,84730000,437780000,x,0,1050000,390000,851110000,2", 3),
        ("428298881278,23405,322590000,0,84730000,437780000", 3),
    ],
)
def test_read_host_stat_bad_line_names_file_and_line(tmp_path, bad, line):
    lines = ROWS.splitlines()
    lines[1] = bad
    p = tmp_path / "host_stat.csv"
    p.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    with pytest.raises(gmp.BundleError, match=rf"host_stat.csv line {line}: "):
        read_host_stat(p)


def test_read_host_stat_missing_column(tmp_path):
    p = tmp_path / "host_stat.csv"
    p.write_text("t_ns,read_ns,user_us\n1,2,3\n")
    with pytest.raises(gmp.BundleError, match=r"host_stat.csv line 1: missing column\(s\) nice_us"):
        read_host_stat(p)


def test_shipped_runs_have_no_host_stat_and_a_bundle_with_one_loads_it(tmp_path):
    # the first runs were recorded before the sampler read /proc/stat; later ones carry it
    for r in RUNS:
        hs = gmp.load_run(r).host_stat
        assert (hs is None) == (not (r / "host_stat.csv").exists()) and (hs is None or len(hs) >= 2)
    d = tmp_path / "b"
    shutil.copytree(next(r for r in RUNS if not (r / "host_stat.csv").exists()), d)
    t0 = int(gmp.load_run(d).samples["t_ns"].iloc[0])
    rows = "".join(
        f"{t0 + i * 1_000_000_000},20000,{1000 + i},0,0,0,0,0,0,{10 * i},{1000 + 11 * i},2\n" for i in range(3)
    )
    (d / "host_stat.csv").write_text(HEADER + "\n" + rows)
    run = gmp.load_run(d)
    assert len(run.host_stat) == 3 and run.notes == []


def _cut(run: gmp.Run, spans_ms: list[tuple[float, float]]) -> gmp.Run:
    """The run with every read inside [a, b) ms after its first read removed."""
    s = run.samples
    rel = (s["t_ns"] - s["t_ns"].iloc[0]) / 1e6
    keep = np.ones(len(s), bool)
    for a, b in spans_ms:
        keep &= ~((rel >= a) & (rel < b)).to_numpy()
    return dataclasses.replace(run, samples=s[keep].reset_index(drop=True))


def test_holes_on_a_real_run_with_reads_cut_out():
    run = gmp.load_run(FIXTURES / "runs" / "cpu-0.5cpu-gmp1")  # SCHED_FIFO: no hole of its own
    assert len(df_sampling_holes(run)) == 0
    t = run.samples["t_ns"].to_numpy()
    cut = _cut(run, [(1000, 1050), (3000, 3004)])
    h = df_sampling_holes(cut)
    assert list(h.columns) == [
        "start_ns",
        "end_ns",
        "gap_ms",
        "missed_ms",
        "missed_ticks",
        "steal_ms",
        "steal_bracket_ms",
    ]
    assert len(h) == 2
    # each hole runs from the last kept read before the cut to the first one after it
    for (a, b), row in zip([(1000, 1050), (3000, 3004)], h.itertuples(), strict=True):
        before = t[(t - t[0]) / 1e6 < a][-1]
        after = t[(t - t[0]) / 1e6 >= b][0]
        assert (row.start_ns, row.end_ns) == (before, after)
        assert row.missed_ms == pytest.approx((after - before) / 1e6 - 0.997)
        assert abs(row.missed_ticks - (b - a) / 0.997) <= 1.5
    assert h["steal_ms"].isna().all() and h["steal_bracket_ms"].isna().all()
    # a 4 ms cut is below a 10 ms threshold
    assert len(df_sampling_holes(cut, min_gap_ms=10)) == 1

    s = sampling_summary(cut)
    assert s["holes"] == 2
    assert s["missed_ms"] == pytest.approx(h["missed_ms"].sum())
    assert s["longest_hole_ms"] == pytest.approx(h["gap_ms"].max())
    assert 50 <= s["missed_ticks"] <= 56
    assert math.isnan(s["host_steal_ms"]) and math.isnan(s["host_steal_share"])


def test_holes_get_the_hosts_steal_when_host_stat_exists():
    run = gmp.load_run(FIXTURES / "runs" / "cpu-0.5cpu-gmp1")
    t = run.samples["t_ns"].to_numpy()
    # host rows once a second from the first read; steal grows 100 ms per second (5 % of
    # 2 CPUs), 200 ms of CPU per second in total
    ht = t[0] + np.arange(0, 8) * 1_000_000_000
    i = np.arange(len(ht))
    hs = pd.DataFrame({c: np.zeros(len(ht), np.int64) for c in HOST_STAT_COLUMNS})
    hs["t_ns"], hs["read_ns"], hs["ncpu"] = ht, 20_000, 2
    hs["steal_us"] = 100_000 * i
    hs["cpu_total_us"] = 2_000_000 * i
    # (the sampler reads /proc/stat right after a tick, so no host row lies inside a hole)
    cut = dataclasses.replace(_cut(run, [(1200, 1250)]), host_stat=hs)
    h = df_sampling_holes(cut)
    assert len(h) == 1
    # prorated: 0.1 ms of steal per ms of wall time over the gap
    assert h["steal_ms"].iloc[0] == pytest.approx(h["gap_ms"].iloc[0] * 0.1)
    # the host rows enclosing the hole (1 s .. 2 s after the first read): 100 ms
    assert h["steal_bracket_ms"].iloc[0] == pytest.approx(100.0)
    s = sampling_summary(cut)
    span = (t[-1] - t[0]) / 1e6
    assert s["host_steal_ms"] == pytest.approx(span * 0.1)
    assert s["host_steal_share"] == pytest.approx(0.05)
    assert s["host_ncpu"] == 2


@pytest.mark.parametrize("bundle", RUNS, ids=[r.name for r in RUNS])
def test_lateness_reconstruction_matches_the_samplers_own_count(bundle):
    """The sampler counts missed deadlines and keeps a lateness histogram in its summary
    (meta.json sampler.*); the reconstruction from cpu_stat.csv alone must agree."""
    run = gmp.load_run(bundle)
    s = run.meta["sampler"]
    # with several cgroups each tick reads them in --cgroup order: the first read is the tick's
    rows = level_run(run).samples
    d = df_lateness(rows, s["interval_ns"], s["mono_start_ns"])
    assert len(d) == s["ticks"] and int(d["missed_before"].sum()) == s["missed_ticks"]
    assert d["tick"].iloc[-1] + 1 == s["ticks"] + s["missed_ticks"]
    assert (d["lateness_ns"] >= 0).all()
    # the read starts a few µs after the sampler's own clock read that feeds its histogram
    assert 0 <= d["lateness_ns"].max() - s["lateness_max_ns"] < 20_000


def test_lateness_reconstruction_follows_the_skip_rule():
    """Hand-made reads at interval 1000 ns from start 0: a read that wakes late serves its
    own deadline (lateness > interval), and the next serves the latest deadline due when
    that read ended; the ones in between are missed."""
    # deadline 3 served 2.5 intervals late; that read ended at 5600, so deadline 4 is
    # skipped and deadline 5 is read at once
    t0 = np.array([0, 1000, 2100, 5500, 5610, 6000])
    r = np.full(len(t0), 100)
    s = pd.DataFrame({"t_ns": t0 + r // 2, "read_ns": r})
    d = df_lateness(s, 1000, 0)
    assert d["tick"].tolist() == [0, 1, 2, 3, 5, 6]
    assert d["lateness_ns"].tolist() == [0, 0, 100, 2500, 610, 0]
    assert d["missed_before"].tolist() == [0, 0, 0, 0, 1, 0]
    # a read 3.5 intervals late serves deadline 3, not 6
    t0 = np.array([0, 1000, 6500, 6610])
    s = pd.DataFrame({"t_ns": t0 + 50, "read_ns": np.full(4, 100)})
    d = df_lateness(s, 1000, 0)
    assert d["tick"].tolist() == [0, 1, 2, 6] and d["lateness_ns"].tolist() == [0, 0, 4500, 610]
    assert not d["preempted"].any()


def test_lateness_a_preemption_between_reads_does_not_shift_every_later_deadline():
    """Seen in the pod: a late wake (deadline 3 read at 5300), then the sampler is
    preempted before its next read (6160, not right after). Serving deadline 5 there would
    make every later on-grid read one interval late; deadline 6 costs one preemption."""
    t0 = np.array([0, 1000, 2000, 5300, 6160, 7030, 8025, 9020])
    s = pd.DataFrame({"t_ns": t0 + 5, "read_ns": np.full(len(t0), 10)})
    d = df_lateness(s, 1000, 0)
    assert d["tick"].tolist() == [0, 1, 2, 3, 6, 7, 8, 9]
    assert d["lateness_ns"].tolist() == [0, 0, 0, 2300, 160, 30, 25, 20]
    assert d["preempted"].tolist() == [False] * 4 + [True] + [False] * 3


LATENESS = FIXTURES / "sampling" / "inpod-lateness.csv"


@pytest.mark.skipif(not LATENESS.exists(), reason="fixtures/sampling/inpod-lateness.csv not recorded yet")
def test_shipped_inpod_lateness_fixture():
    df = read_lateness(LATENESS)
    assert list(df.columns) == ["tick", "lateness_us"]
    assert df["tick"].iloc[0] == 0 and (np.diff(df["tick"]) > 0).all()
    assert (df["lateness_us"] >= 0).all() and len(df) > 10_000
    assert LATENESS.stat().st_size < 200_000
    # SCHED_OTHER in a pod: most wake-ups on time, a heavy tail of ms, some deadlines missed
    assert df["lateness_us"].median() < 200 and df["lateness_us"].max() > 1000
    assert df["tick"].iloc[-1] + 1 > len(df)


def test_read_lateness_rejects_a_tick_going_backwards(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("tick,lateness_us\n0,5\n2,7\n1,3\n")
    with pytest.raises(gmp.BundleError, match=r"l.csv line 4: tick must"):
        read_lateness(p)
