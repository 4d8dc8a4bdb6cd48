"""df_periods on one hour of 997 µs cpu.stat samples (≈3.6 M reads).

    .venv/bin/python benchmarks/bench_periods.py [HOURS] [REPEATS]

The hour is a real fixture repeated: each copy shifted by a whole number of CFS periods (so
the kernel's phase holds) and its counters offset so they stay cumulative. Every timed build
is cold: a fresh copy of the run, so nothing memoised on it is reused (df_periods keeps its
table on the run; timing the same run twice would time the cache). The first build of the
process is reported apart: it also pays for the pages it touches first. Prints samples per
second (median and spread) and the peak memory of the build. Not a test.
"""

from __future__ import annotations

import dataclasses
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
from machine import describe

import gmpanalysis as gmp

ROOT = Path(__file__).resolve().parents[1]


def synth_hours(hours: float, source: str = "cpu-0.5cpu-gmp8") -> gmp.Run:
    """A shipped run (fixtures/runs/SOURCE) tiled to ``hours``: each copy shifted by a whole
    number of CFS periods, its counters offset so they stay cumulative (per level where the
    run samples several: the ``cgroup`` column). Without its requests and trace."""
    run = gmp.load_run(ROOT / "fixtures" / "runs" / source)
    s = run.samples
    P = run.meta["period_us"] * 1000
    span = int(s.t_ns.iloc[-1] - s.t_ns.iloc[0])
    shift = (span // P + 1) * P
    reps = int(np.ceil(hours * 3600e9 / shift))
    parts = [s[s["cgroup"] == lv] for lv in pd.unique(s["cgroup"])] if "cgroup" in s else [s]
    frames = []
    for part in parts:
        r = np.repeat(np.arange(reps), len(part))
        cols = {
            "t_ns": np.tile(part.t_ns.to_numpy(), reps) + r * shift,
            "read_ns": np.tile(part.read_ns.to_numpy(), reps),
        }
        for c in ("usage_us", "nr_periods", "nr_throttled", "throttled_us", "nr_bursts", "burst_us"):
            v = part[c].to_numpy()
            # the last step again, at least 1 µs for the float counters: adding r * step in
            # float64 must never make a copy start below where the one before ended (a fall
            # reads as a counter reset, a new cgroup segment)
            step = v[-1] - v[0] + max(v[-1] - v[-2], 1)
            cols[c] = np.tile(v, reps) + r * step
        if "cgroup" in part:
            cols["cgroup"] = np.tile(part["cgroup"].to_numpy(), reps)
        frames.append(pd.DataFrame(cols))
    samples = pd.concat(frames, ignore_index=True).sort_values("t_ns", kind="stable", ignore_index=True)
    samples.attrs.update(s.attrs)
    return dataclasses.replace(run, samples=samples, trace_path=None, requests=None, _trace=None)


def main() -> int:
    hours = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    run = synth_hours(hours)
    n = len(run.samples)
    print(describe())
    times, user, system, faults = [], [], [], []
    for _ in range(reps + 1):
        fresh = dataclasses.replace(run, samples=run.samples.copy())
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        per = gmp.df_periods(fresh)
        times.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        user.append(r1.ru_utime - r0.ru_utime)
        system.append(r1.ru_stime - r0.ru_stime)
        faults.append(r1.ru_minflt - r0.ru_minflt)
        del fresh
    first, times = times[0], times[1:]
    # numpy reports its buffers to tracemalloc: the peak of what the build allocated
    tracemalloc.start()
    gmp.df_periods(dataclasses.replace(run, samples=run.samples.copy()))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    med = statistics.median(times)
    print(
        f"{n:,} samples ({n * 997e-6 / 3600:.2f} h at 997 µs) -> {len(per):,} periods, "
        f"{per['throttled'].sum():,} throttled"
    )
    print(
        f"df_periods, cold (a fresh run each time): {med:.2f} s median (min {min(times):.2f}, max {max(times):.2f}) "
        f"= {n / med / 1e6:.1f} M samples/s; the process's first build: {first:.2f} s "
        f"= {n / first / 1e6:.1f} M samples/s"
    )
    # the kernel's share: pages the build touches first (faults, zeroing, huge pages made)
    print(
        f"  of a cold build: user CPU {statistics.median(user[1:]):.2f} s, "
        f"system {statistics.median(system[1:]):.2f} s "
        f"(max {max(system[1:]):.2f}), {statistics.median(faults[1:]):,.0f} page faults (median)"
    )
    print(
        f"peak memory of the build: {peak / 2**20:.0f} MiB allocated at once "
        f"(the samples themselves: {run.samples.memory_usage().sum() / 2**20:.0f} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
