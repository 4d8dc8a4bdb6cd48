"""The what-if model against real runs: every configuration predicted from every run of the
other configurations of its workload, beside what its own repeats measured.

    .venv/bin/python benchmarks/validate_whatif.py [SWEEP_DIR] [--csv OUT.csv]

SWEEP_DIR (default benchmarks/data/sweep) holds the bundles of benchmarks/make-sweep.sh,
named WORKLOAD-LIMITcpu-gmpG-rREPEAT. For each workload and configuration (limit,
GOMAXPROCS) the printout gives, per figure, what the repeats measured (mean [min-max]),
what the model predicted from each other configuration's runs (each run replayed under
every repeat's settings over four tick phases, and averaged; median [min-max]), the
median error, the goal and whether the worst prediction meets it:

- throttled share of the periods: within 5 points;
- quota exhaustion p50: within 3 ms;
- CPUs frozen p50 (rounded to 0.1): within 0.1;
- stall per second: within 15 % (of the measured mean; 15 ms/s where that is below 100);
- p99 latency: within 25 %, or inside the measured min-max of the repeats.

Not a test (tests/test_whatif.py checks the shipped runs); numbers move with the machine.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import warnings
from pathlib import Path

import pandas as pd

import gmpanalysis as gmp
from gmpanalysis import whatif as W

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"^(?P<w>[a-z]+)-(?P<lim>[0-9.]+)cpu-gmp(?P<g>\d+)-r(?P<r>\d+)$")
FIGURES = ("throttled_pct", "exhausted_p50_ms", "cpus_frozen_p50", "stall_ms_per_s", "p99_ms")


def met(fig: str, pred: float, mean: float, lo: float, hi: float) -> bool:
    if math.isnan(pred) or math.isnan(mean):
        return math.isnan(pred) and math.isnan(mean)
    err = abs(pred - mean)
    if fig == "throttled_pct":
        return err <= 5.0
    if fig == "exhausted_p50_ms":
        return err <= 3.0
    if fig == "cpus_frozen_p50":
        return err <= 0.1 + 1e-9
    if fig == "stall_ms_per_s":
        return err <= 0.15 * max(mean, 100.0)
    return err <= 0.25 * mean or lo <= pred <= hi


def _mean(v: list[float]) -> float:
    v = [x for x in v if not math.isnan(x)]
    return statistics.fmean(v) if v else math.nan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", nargs="?", default=str(ROOT / "benchmarks" / "data" / "sweep"))
    ap.add_argument("--csv", default=None, help="write every prediction here")
    a = ap.parse_args()
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in sorted(Path(a.sweep).iterdir()):
            m = NAME.match(d.name)
            if m and (d / "meta.json").exists():
                run = gmp.load_run(d)
                runs.append({"w": m["w"], "lim": float(m["lim"]), "g": int(m["g"]), "r": int(m["r"]), "run": run})
    if not runs:
        print(f"no sweep bundles in {a.sweep}: run benchmarks/make-sweep.sh first", file=sys.stderr)
        return 2
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in runs:
            x["truth"] = W.measured(x["run"])
        for w in sorted({x["w"] for x in runs}):
            mine = [x for x in runs if x["w"] == w]
            for cfg in sorted({(x["lim"], x["g"]) for x in mine}):
                reps = [x for x in mine if (x["lim"], x["g"]) == cfg]
                for src in (x for x in mine if (x["lim"], x["g"]) != cfg):
                    # under each repeat's settings (their tick phase taken as unknown:
                    # W.predict averages over it), then averaged as the measurements are
                    each = [W.predict(src["run"], r["run"]) for r in reps]
                    got = {f: _mean([e[f] for e in each]) for f in FIGURES}
                    for fig in FIGURES:
                        # a repeat without a throttled period has no exhaustion to average
                        vals = [r["truth"][fig] for r in reps if not math.isnan(r["truth"][fig])] or [math.nan]
                        rows.append(
                            {"workload": w, "limit": cfg[0], "gomaxprocs": cfg[1], "figure": fig,
                             "source": src["run"].meta["name"], "predicted": got[fig],
                             "measured_mean": statistics.fmean(vals), "measured_min": min(vals),
                             "measured_max": max(vals), "repeats": sum(not math.isnan(v) for v in vals)}
                        )  # fmt: skip
    df = pd.DataFrame(rows)
    if a.csv:
        df.to_csv(a.csv, index=False)
    df["met"] = [
        met(f, p, m, lo, hi)
        for f, p, m, lo, hi in zip(
            df.figure, df.predicted, df.measured_mean, df.measured_min, df.measured_max, strict=True
        )
    ]
    df["error"] = df.predicted - df.measured_mean
    print(f"{len(runs)} runs; {len(df) // len(FIGURES)} predictions")
    summary = []
    for (w, lim, g, fig), grp in df.groupby(["workload", "limit", "gomaxprocs", "figure"], sort=True):
        m0, m1, m2 = grp.measured_mean.iloc[0], grp.measured_min.iloc[0], grp.measured_max.iloc[0]
        summary.append(
            {"workload": w, "limit": lim, "gmp": g, "figure": fig,
             "measured": f"{m0:.1f} [{m1:.1f}-{m2:.1f}]",
             "predicted": f"{grp.predicted.median():.1f} [{grp.predicted.min():.1f}-{grp.predicted.max():.1f}]",
             "error_median": round(float(grp.error.median()), 2), "met": f"{int(grp.met.sum())}/{len(grp)}"}
        )  # fmt: skip
    s = pd.DataFrame(summary)
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.max_columns", 20):
        print(s.to_string(index=False))
        print("\nshare of predictions within the goal, per figure and workload:")
        print((df.groupby(["workload", "figure"]).met.mean() * 100).round(1).unstack().to_string())
        # advise.MODEL_ERROR's figures: absolute error over every prediction with both sides
        # known, p99 as a share of the measured p99
        ok = df.dropna(subset=["predicted", "measured_mean"])
        err = ok.error.abs().where(ok.figure != "p99_ms", 100 * ok.error.abs() / ok.measured_mean)
        q = err.groupby(ok.figure).quantile([0.5, 0.9]).unstack().round(1)
        q.columns = ["median |error|", "p90 |error|"]
        print("\nabsolute error over all predictions (p99_ms: % of the measured p99):")
        print(q.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
