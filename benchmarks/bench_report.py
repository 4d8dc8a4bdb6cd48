"""An hour of samples through the library's whole path, cold: df_periods, advise and the
HTML report, on one level (fixtures/runs/cpu-0.5cpu-gmp8) and on two (the container and its
pod, both limited: fixtures/runs/nested-0.5cpu-pod0.5-gmp2), each tiled to an hour as
bench_periods.py tiles it (without requests or trace: the advisor replays the usage).

    .venv/bin/python benchmarks/bench_report.py [HOURS] [REPEATS]

Each step is timed on a fresh copy of the run (nothing memoised is reused; the report
builds its own tables), REPEATS times; prints the median and the spread with the machine.
Not a test.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from bench_periods import synth_hours
from machine import describe

import gmpanalysis as gmp

STEPS = {
    "df_periods": lambda run, out: gmp.df_periods(run),
    "advise": lambda run, out: gmp.advise(run),
    "to_report": lambda run, out: gmp.to_report(run, out / "report.html"),
}


def main() -> int:
    hours = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print(describe())
    warnings.simplefilter("ignore")  # the tiled runs' notes (no trace, no requests)
    for label, source in (("one level", "cpu-0.5cpu-gmp8"), ("two levels", "nested-0.5cpu-pod0.5-gmp2")):
        run = synth_hours(hours, source)
        gmp.df_periods(dataclasses.replace(run, samples=run.samples.copy()))  # imports, compiles
        print(f"{label} ({source}): {len(run.samples):,} samples, {hours:g} h")
        with tempfile.TemporaryDirectory() as d:
            for step, fn in STEPS.items():
                times = []
                for _ in range(reps):
                    fresh = dataclasses.replace(run, samples=run.samples.copy())
                    t0 = time.perf_counter()
                    fn(fresh, Path(d))
                    times.append(time.perf_counter() - t0)
                print(f"  {step}: {statistics.median(times):.2f} s median (min {min(times):.2f}, max {max(times):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
