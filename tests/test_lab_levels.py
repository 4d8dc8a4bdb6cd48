"""Two real bandwidth timers: the app's cgroup inside a pod-like parent with its own quota,
each freeze laid on the level that caused it, checked against an independent truth.

The truth is gmp-spinner inside the app's cgroup: two threads spin on CLOCK_MONOTONIC and log
every gap in their own progress. The group stood frozen where BOTH threads were stopped; the
freeze ended at the boundary of the level whose timer unthrottled it. Periods are random per
cgroup: when the two timers fire too close together to tell apart, the cgroups are made anew.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from spinner_truth import ATTEMPTS, MIN_APART_MS, check_against_truth

import gmpanalysis as gmp
from gmpanalysis.bundle import load_run, to_meta
from gmpanalysis.lab.levels import Levels
from gmpanalysis.schema import new_meta

pytestmark = pytest.mark.lab

SECONDS = 5.0


def record(bins: dict[str, Path], out: Path, quota_us: int, pod_quota_us: int, resize: int | None = None) -> Path:
    """One real run: nested cgroups, the sampler on both levels, the spinner inside."""
    lv = Levels("/sys/fs/cgroup", "", with_pod=True)
    lv.create(quota_us, pod_quota_us, 100_000, 0)
    sampler = spinner = None
    try:
        meta = new_meta("lab", out.name, quota_us=quota_us, levels=lv.meta(), ncpu=os.cpu_count())
        out.mkdir()
        sampler = subprocess.Popen(
            [
                str(bins["gmp-sampler"]),
                *lv.sampler_args(),
                "--limits-out",
                str(out / "limits.csv"),
                "--out",
                str(out / "cpu_stat.csv"),
                "--fifo",
                "--duration",
                f"{SECONDS + 1.0}s",
            ],
            stderr=subprocess.DEVNULL,
        )
        meta["mono_start_ns"] = time.monotonic_ns()
        time.sleep(0.3)
        with open(out / "spinner.jsonl", "wb") as f:
            spinner = subprocess.Popen(
                [str(bins["gmp-spinner"]), "--threads", "2", "--duration", f"{SECONDS}s"],
                stdout=f,
                preexec_fn=lv.app.join_in_child,
            )
            if resize is not None:
                time.sleep(SECONDS / 2)
                meta["resizes"] = lv.resize(resize)
            spinner.wait(SECONDS + 10)
        sampler.wait(10)
        meta["mono_end_ns"] = time.monotonic_ns()
        meta["complete"] = True
        to_meta(out / "meta.json", meta)
        return out
    finally:
        for p in (spinner, sampler):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        lv.remove()


def apart(run: gmp.Run) -> float:
    lv = gmp.df_levels(run)
    if lv["quota_us"].isna().any():
        return 100.0  # one timer: nothing to tell apart
    off = float(lv["offset_ms"].iloc[1])
    return min(off, 100.0 - off)


def recorded(bins, tmp_path, **kw) -> gmp.Run:
    offsets = []
    for attempt in range(ATTEMPTS):
        run = load_run(record(bins, tmp_path / f"try{attempt}", **kw))
        offsets.append(round(apart(run), 1))
        if offsets[-1] >= MIN_APART_MS:
            return run
    pytest.fail(
        f"{ATTEMPTS} pairs of cgroups in a row had timers closer than {MIN_APART_MS} ms ({offsets}): "
        "the phases are not random"
    )


def test_a_tighter_pod_quota_freezes_it_and_is_named(bins, tmp_path):
    """A container without a limit in a pod with one (Kubernetes' pod-level resources; cgroup v1
    refuses a child quota above its parent's): every freeze is the pod's, and the table is on
    the pod's grid, the nearest level with a timer."""
    run = recorded(bins, tmp_path, quota_us=None, pod_quota_us=30_000)
    assert gmp.df_periods(run).attrs["level"] == "pod"
    ended = check_against_truth(run)["ended"]
    assert set(ended) == {"pod"}
    assert "The pod's quota froze it" in " ".join(gmp.levels.describe(gmp.analyze(run)))


def test_equal_quotas_each_freeze_matches_the_spinners_gaps(bins, tmp_path):
    """The kubelet's case: the pod's quota is the sum of its containers' limits, here the one
    container's. Both timers freeze the group; which one lets it run again depends on the
    phases (and the history: equal quotas have many steady states), so the table must match
    the truth whichever it is."""
    run = recorded(bins, tmp_path, quota_us=50_000, pod_quota_us=50_000)
    ended = check_against_truth(run)["ended"]
    assert sum(ended.values()) >= 20
    pp = gmp.df_periods(run, level="pod")
    assert pp["throttled"].fillna(False).mean() > 0.8  # the pod's timer throttled too, every period


def test_a_quota_written_mid_run_keeps_the_grid_and_lands_in_its_period(bins, tmp_path):
    run = recorded(bins, tmp_path, quota_us=50_000, pod_quota_us=50_000, resize=150_000)
    lim = run.limits
    writes = {}
    for level in ("container", "pod"):
        rows = lim[(lim["cgroup"] == level) & lim["prev_ns"].notna()]
        assert len(rows) == 1 and rows["quota_us"].iloc[0] == 150_000
        # the sampler saw the change between two reads 10 ms apart that bracket the write
        w = next(w for w in run.meta["resizes"] if w["level"] == level)
        assert rows["prev_ns"].iloc[0] < w["t_hi_ns"] and w["t_lo_ns"] <= rows["t_ns"].iloc[0]
        assert rows["t_ns"].iloc[0] - rows["prev_ns"].iloc[0] <= 25_000_000
        # when the write took effect, as narrowly as the writer's clock reads and the sampler's
        # reads together pin it
        lo, hi = max(w["t_lo_ns"], int(rows["prev_ns"].iloc[0])), min(w["t_hi_ns"], int(rows["t_ns"].iloc[0]))
        writes[level] = (lo + hi) // 2
    per = gmp.df_periods(run)
    k = np.flatnonzero((per["start_ns"] <= writes["container"]) & (per["end_ns"] > writes["container"]))[0]
    assert per["quota_us"].iloc[k - 1] == 50_000 and per["quota_us"].iloc[k + 2] == 150_000
    # the period of the write names it; when the read interval straddles the boundary the next
    # period's quota is unknown (NA), never the wrong one
    assert "quota 50000 µs -> 150000 µs" in per["reason"].iloc[k]
    assert pd.isna(per["quota_us"].iloc[k + 1]) or per["quota_us"].iloc[k + 1] == 150_000
    # the grid fitted across the write: the kernel kept the timer's phase, so one grid holds and
    # the phase stays as sharp as before
    assert per.attrs["grid"].uncertainty_ns < 300_000
    # after: 1.5 CPUs of quota (both levels) against 2 spinning threads: frozen every period,
    # by one level or the other
    done = [json.loads(x) for x in (run.path / "spinner.jsonl").read_text().splitlines() if '"done"' in x]
    after = per.iloc[k + 2 :]
    after = after[after["end_ns"] <= done[0]["done"]["end_ns"] - 100_000_000]
    # (frozen_by: which level froze a period; its frozen_us is NaN where the reads leave the
    # freeze's start open, as a loaded machine's late reads do: unknown how long, not unfrozen)
    frozen = after["frozen_by"].fillna("").str.len() > 0
    assert len(after) >= 15 and frozen.mean() > 0.9
    assert (after.loc[frozen, "frozen_us"].dropna() > 0).all()
