"""Two bandwidth timers: a container's quota inside its pod's, each with its own phase.

The samples are made by a small replay of the kernel's bandwidth mechanics (quota refilled
at each period boundary of each level, the group runs only while both levels have runtime
left, nr_throttled credited at the boundary that ends a throttle, throttled time summed over
the CPUs that stood throttled), read every 997 µs as gmp-sampler would. The real-kernel
version of this test runs in the lab (tests/test_lab_levels.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gmpanalysis as gmp
from gmpanalysis.bundle import Run, parse_limits
from gmpanalysis.schema import new_meta

P = 100_000_000  # ns
DT = 100_000  # replay step, ns
CPUS = 2


def replay(phase_c: int, phase_p: int, quota_c_us: int, quota_p_us: int, seconds: float, quota_c_after=None, at=None):
    """The cumulative counters of both levels at every replay step, and the true freezes
    [(level, start_ns, end_ns)]."""
    t0 = 10 * P
    n = int(seconds * 1e9 / DT)
    rem = {"container": quota_c_us * 1000, "pod": quota_p_us * 1000}
    quota = {"container": quota_c_us * 1000, "pod": quota_p_us * 1000}
    phase = {"container": phase_c, "pod": phase_p}
    c = {lv: dict(usage=0.0, nr_periods=0, nr_throttled=0, throttled=0.0) for lv in rem}
    since = {lv: None for lv in rem}
    rows = {lv: [] for lv in rem}
    truth = []
    for i in range(n):
        t = t0 + i * DT
        if at is not None and t == at:
            quota["container"] = quota_c_after * 1000
            rem["container"] = quota["container"]  # a quota write refills the runtime
        for lv in rem:
            if (t - phase[lv]) % P == 0:  # this level's boundary: refill, credit a throttle
                c[lv]["nr_periods"] += 1
                if since[lv] is not None:
                    c[lv]["nr_throttled"] += 1
                    c[lv]["throttled"] += (t - since[lv]) * CPUS / 1000
                    truth.append((lv, since[lv], t))
                    since[lv] = None
                rem[lv] = quota[lv]
        runs = all(since[lv] is None for lv in rem)
        if runs:
            use = min(CPUS * DT, *(rem[lv] for lv in rem))
            for lv in rem:
                rem[lv] -= use
                c[lv]["usage"] += use / 1000
                if rem[lv] <= 0 and since[lv] is None:
                    since[lv] = t + DT
        for lv in rem:
            rows[lv].append((t, c[lv]["usage"], c[lv]["nr_periods"], c[lv]["nr_throttled"], c[lv]["throttled"]))
    return rows, truth


def bundle(tmp: Path, rows, every_ns=997_000, limits_csv: str | None = None) -> Run:
    frames = []
    for lv, r in rows.items():
        a = np.array(r)
        t = a[:, 0].astype(np.int64)
        reads = np.arange(t[0] + 50_000, t[-1], every_ns)
        idx = np.searchsorted(t, reads, side="right") - 1
        frames.append(
            pd.DataFrame(
                {
                    "t_ns": reads,
                    "read_ns": 5000,
                    "usage_us": a[idx, 1],
                    "nr_periods": a[idx, 2].astype(np.int64),
                    "nr_throttled": a[idx, 3].astype(np.int64),
                    "throttled_us": a[idx, 4],
                    "nr_bursts": 0,
                    "burst_us": 0.0,
                    "cgroup": lv,
                }
            )
        )
    s = pd.concat(frames).sort_values("t_ns", kind="stable").reset_index(drop=True)
    meta = new_meta(
        "lab",
        "levels",
        quota_us=50_000,
        ncpu=CPUS,
        levels=[
            {"level": "container", "cgroup": "x/app", "period_us": 100_000, "quota_us": 50_000, "burst_us": 0},
            {"level": "pod", "cgroup": "x", "period_us": 100_000, "quota_us": 50_000, "burst_us": 0},
        ],
    )
    lim = None if limits_csv is None else parse_limits(limits_csv.encode())
    return Run(path=tmp, meta=meta, samples=s, trace_path=None, requests=None, limits=lim)


@pytest.mark.parametrize("phase_p_ms", [51.2, 23.0, 80.0])
def test_each_freeze_is_laid_on_the_level_that_caused_it(tmp_path, phase_p_ms):
    rows, truth = replay(7_300_000, 7_300_000 + int(phase_p_ms * 1e6), 50_000, 50_000, 4.0)
    run = bundle(tmp_path, rows)
    lv = gmp.df_levels(run)
    assert list(lv["level"]) == ["container", "pod"] and lv["own"].tolist() == [True, False]
    assert lv["offset_ms"].iloc[1] == pytest.approx(phase_p_ms, abs=0.5)
    per = gmp.df_periods(run)
    assert per.attrs["level"] == "container"
    # each level's counters stay that level's: conservation per level
    for name in ("container", "pod"):
        c = gmp.df_conservation(gmp.df_periods(run, level=name))
        assert np.allclose(c["rows"] + c["groups"] + c["outside"], c["delta"], rtol=1e-9, atol=1e-6)
    fz = gmp.df_freezes(run)
    span = {name: gmp.df_periods(run, level=name)[["start_ns", "end_ns"]] for name in ("container", "pod")}
    for level, a, b in truth:
        if a < span[level]["start_ns"].iloc[0] or b > span[level]["end_ns"].iloc[-1]:
            continue
        got = fz[(fz["level"] == level) & (fz["end_ns"] - b).abs().lt(1_000_000)]
        assert len(got) == 1, (level, a, b)
        # the start is where usage stopped rising: within a read (~1 ms) and the grid's uncertainty
        assert abs(int(got["start_ns"].iloc[0]) - a) <= 1_500_000
    # a period frozen by the pod says so, and counts the pod's freeze the container's cpu.stat misses
    t = pd.DataFrame(truth, columns=["level", "a", "b"])
    pod0, pod1 = span["pod"]["start_ns"].iloc[0], span["pod"]["end_ns"].iloc[-1]
    edge = (per["start_ns"] < pod0) | (per["end_ns"] > pod1)
    # the pod's table does not reach there: unknown, but for the container's own freezes
    thr = per["throttled"].fillna(False)
    assert per.loc[edge & ~thr, "frozen_by"].isna().all()
    assert (per.loc[edge & thr, "frozen_by"].str.split(",").map(lambda x: "container" in x)).all()
    assert per.loc[edge, "reason"].str.contains("the pod's reads do not cover this period").all()
    for r in per[~edge].itertuples(index=False):
        want = set()
        for x in t.itertuples(index=False):
            overlap = min(x.b, r.end_ns) - max(x.a, r.start_ns)
            if overlap >= 1_500_000:
                want.add(x.level)
        got = set(filter(None, str(r.frozen_by).split(",")))
        assert want <= got, (r.period, want, got)
    inner = per[~edge]
    pod_frozen = inner["frozen_other_us"].sum() / 1e3
    lo, hi = inner["start_ns"].iloc[0], inner["end_ns"].iloc[-1]
    truth_pod = sum(max(0, min(b, hi) - max(a, lo)) for lv_, a, b in truth if lv_ == "pod")
    assert pod_frozen == pytest.approx(truth_pod / 1e6, rel=0.1)


def test_a_quota_written_mid_run_lands_in_its_period(tmp_path):
    at = 10 * P + 2 * P + 37_000_000 + 7_300_000  # 37 ms into a container period
    rows, _ = replay(7_300_000, 58_500_000, 50_000, 50_000, 4.0, quota_c_after=150_000, at=at)
    # as gmp-sampler --limits-out writes it: a row at the first read, one at the change
    limits = (
        "t_ns,prev_ns,cgroup,period_us,quota_us,burst_us\n"
        f"{10 * P},,container,100000,50000,0\n{10 * P},,pod,100000,50000,0\n"
        f"{at + 4_000_000},{at - 6_000_000},container,100000,150000,0\n"
    )
    run = bundle(tmp_path, rows, limits_csv=limits)
    per = gmp.df_periods(run)
    k = per.index[(per["start_ns"] <= at) & (per["end_ns"] > at)][0]
    assert per.loc[k - 1, "quota_us"] == 50_000 and per.loc[k + 1, "quota_us"] == 150_000
    assert "quota 50000 µs -> 150000 µs" in per.loc[k, "reason"]
    # the pod's quota still binds: after the resize the pod alone freezes the group
    after = per.loc[k + 2 :]
    assert (after["frozen_by"] == "pod").mean() > 0.8
    g = gmp.df_gomaxprocs(run)
    assert list(g["event"]) == ["start", "limit container", "end"] and g["limit_cpus"].tolist() == [0.5, 1.5, 1.5]


def test_limits_csv_errors_name_the_line():
    good = "t_ns,prev_ns,cgroup,period_us,quota_us,burst_us\n5,,container,100000,,0\n"
    df = parse_limits(good.encode())
    assert df["quota_us"].isna().all()
    with pytest.raises(gmp.BundleError, match="line 3: quota_us"):
        parse_limits((good + "9,5,container,100000,12,0\n").encode())
    with pytest.raises(gmp.BundleError, match="missing column"):
        parse_limits(b"t_ns,cgroup,period_us,burst_us\n1,a,100000,0\n")
    # the kernel refuses a burst above the quota (tg_set_cfs_bandwidth); none above no limit
    with pytest.raises(gmp.BundleError, match="line 3: burst_us above quota_us"):
        parse_limits((good + "9,5,container,100000,50000,90000\n").encode())
    assert len(parse_limits((good + "9,5,container,100000,50000,50000\n").encode())) == 2


def test_a_container_limited_late_under_a_pod_limited_throughout(tmp_path):
    """A pod with a limit from the start, its container given one in place near the end (a
    stand-in made from the shipped two-level run: its container's limit moved to 1 s before
    the end): the table stays on the pod's grid, its quota in every period, and the pod's
    throttling is replayed; the container's own table starts where its limit did."""
    import json
    import shutil

    from conftest import RUNS

    from gmpanalysis.levels import table_level

    d = tmp_path / "late"
    shutil.copytree(RUNS[0].parent / "nested-0.5cpu-pod0.5-gmp2", d)
    m = json.loads((d / "meta.json").read_text())
    m["quota_us"] = m["levels"][0]["quota_us"] = None
    (d / "meta.json").write_text(json.dumps(m))
    s = pd.read_csv(d / "cpu_stat.csv")
    late = int(s["t_ns"].iloc[-1]) - 1_000_000_000
    lim = (d / "limits.csv").read_text().splitlines()
    assert lim[1].split(",")[2] == "container"
    lim[1] = lim[1].replace(",100000,50000,", ",100000,,")
    lim.append(f"{late},{late - 10_000_000},container,100000,50000,0")
    (d / "limits.csv").write_text("\n".join(lim) + "\n")
    run = gmp.load_run(d)
    assert table_level(run) == "pod"
    per = gmp.df_periods(run)
    assert per["quota_us"].notna().all() and per["throttled"].fillna(False).sum() > 20
    assert gmp.what_if(run)["throttled"].fillna(False).sum() > 20
    own = gmp.df_periods(run, level="container")
    assert own["quota_us"].notna().sum() <= 11 and (own["quota_us"].dropna() == 50_000).all()


def test_trickles_after_another_levels_freeze_are_not_a_resume():
    """A real v2 run (fixtures/runs-v2, a container under a pod, equal quotas): in its period
    122 both quotas ran out at 25.8 ms; the pod's timer refilled the pod at 62.7 ms, and the
    container, still out of quota, only trickled (82 µs, then 609 µs 18 ms later) until its
    own boundary. Its freeze starts where its usage stopped, and the period's frozen time
    covers its stall. With a real resume cut in (both levels' usage rising at 2 CPUs for
    3 ms from the pod's refill) its freeze starts after that run."""
    path = Path("fixtures/runs-v2/v2-6.12-resize-0.5to2cpu-default")
    run = gmp.load_run(path)
    per = gmp.df_periods(run)
    row = per[per["period"] == 122].iloc[0]
    fz = gmp.df_freezes(run)
    c = fz[(fz["level"] == "container") & (fz["ref_period"] == 122)].iloc[0]
    pod = fz[(fz["level"] == "pod") & (fz["ref_period"] == 122)].iloc[0]
    assert c["from_ms"] == pytest.approx(row["exhausted_at_us"] / 1e3)
    assert pod["to_ms"] < 70 and c["from_ms"] < pod["to_ms"]
    assert row["frozen_us"] >= row["stall_us"]
    both = per["frozen_us"].notna() & per["stall_us"].notna()
    assert (per.loc[both, "frozen_us"] >= per.loc[both, "stall_us"] - 1e-3).all()

    resumed = gmp.load_run(path)
    s = resumed.samples.copy()
    t0 = int(pod["end_ns"])
    t = s["t_ns"].to_numpy()
    ran = np.clip((t - t0) / 1e3, 0, 3_000) * 2  # µs of CPU at 2 CPUs, for 3 ms
    s["usage_us"] = s["usage_us"] + ran
    resumed.samples = s
    fz2 = gmp.df_freezes(resumed)
    c2 = fz2[(fz2["level"] == "container") & (fz2["period"] == c["period"])].iloc[0]
    assert t0 + 2_000_000 <= c2["start_ns"] <= t0 + 5_000_000


def _refined_start_ms(t_ms: np.ndarray, resume) -> float:
    """Level A's freeze start after :func:`gmpanalysis.freezes.refine`, where level B froze
    the group from 30 to 60 ms of A's period (A's table dated A's own freeze to 30 ms) and
    A's usage (1 CPU until 30 ms) rose by ``resume(ns after 60 ms)`` after B's freeze."""
    from gmpanalysis.freezes import refine

    ms = 1_000_000
    rows = [
        {"level": lv, "period": 1, "start_ns": a * ms, "end_ns": b * ms, "start_lo_ns": a * ms - ms,
         "start_hi_ns": a * ms, "dur_ms": b - a, "exact": False, "throttled_rq_us": 0.0, "cpus_throttled": 0.0}
        for lv, a, b in (("A", 30, 100), ("B", 30, 60))
    ]  # fmt: skip
    t = (np.asarray(t_ms) * ms).astype(np.int64)
    u = np.minimum(t, 30 * ms) / 1e3 + np.where(t > 60 * ms, resume(np.maximum(t - 60 * ms, 0)), 0.0)
    out = refine(pd.DataFrame(rows), {"A": pd.DataFrame({"t_ns": t, "usage_us": u})})
    return float(out[out["level"] == "A"]["start_ns"].iloc[0]) / ms


def test_a_level_that_ran_on_after_another_levels_freeze_is_frozen_from_the_end_of_that_run():
    """The shipped multi-level runs hold no period where a level ran on after another's
    freeze and its own table missed it, so the rule is checked on made-up reads (a stand-in
    for a case the lab's runs did not produce): a run of 2 CPUs for 3 ms right after the
    other level's freeze (or 3 ms late, as a late timer makes it) moves the freeze start to
    the run's last read, whatever trickles follow; a lone 609 µs step (the largest trickle
    seen on a frozen group), a slow rise and a quota left below RESUME_US move nothing."""
    ms = 1_000_000
    every_ms = np.arange(0, 100) + 0.5

    def ran(cpus: float, dur_ms: float, late_ms: float = 0.0):
        return lambda d: np.clip(d - late_ms * ms, 0, dur_ms * ms) / 1e3 * cpus

    assert _refined_start_ms(every_ms, ran(2, 3)) == pytest.approx(63.5)
    assert _refined_start_ms(np.arange(5, 100, 10), ran(2, 3)) == pytest.approx(65)  # reads 10 ms apart
    assert _refined_start_ms(every_ms, ran(2, 3, late_ms=3)) == pytest.approx(66.5)
    trickles = lambda d: ran(2, 3)(d) + np.clip((d - 3 * ms) // (2 * ms), 0, None) * 100.0  # noqa: E731
    assert _refined_start_ms(every_ms, trickles) == pytest.approx(63.5)
    half_ms = np.arange(0, 200) * 0.5 + 0.25
    assert _refined_start_ms(half_ms, trickles) == pytest.approx(63.25)
    big = lambda d: ran(2, 3)(d) + np.clip((d - 3 * ms) // (2 * ms), 0, None) * 400.0  # noqa: E731
    assert _refined_start_ms(every_ms, big) == pytest.approx(63.5)
    # reads far apart sum those trickles to more than a run's least: the run is the window's read
    assert _refined_start_ms(np.arange(5, 100, 10), big) == pytest.approx(65)
    assert _refined_start_ms(np.arange(4, 100, 8), big) == pytest.approx(68)
    lone = lambda d: np.where(d >= 2 * ms, 609.0, 0.0)  # noqa: E731
    assert _refined_start_ms(every_ms, lone) == 30
    assert _refined_start_ms(np.arange(0, 400) * 0.25, ran(0.19, 30)) == 30
    assert _refined_start_ms(every_ms, ran(1, 0.55)) == 30
