"""Predictions across limits and loads: each run predicted from every run of the same service
at another limit, under the source's load (what ``predict`` replayed before 2026-12-07) and
under the target's (what it replays now), beside what the target measured.

    .venv/bin/python benchmarks/validate_loads.py [DIR ...] [--csv OUT.csv]

Each DIR holds bundles (default: fixtures/whatif and, where beside the checkout,
../shared/data/16cpu-v2). A service is the bundles of one directory with one handler
(meta.json ``workload``: kind, work_ms, alloc_kb, live_mb), one kind of loop and one number
of CPUs; a run whose limit was resized mid-run is a source only, and runs made in a TCG
guest are left out, as in benchmarks/validate_whatif.py, whose goals these are. Prints, for
either load, the median / p90 of the absolute error per figure and how often each goal
holds. The runtime's growth per P is the shipped constant (fitted on the 16-CPU
allocation-heavy closed loops; the CPU-bound runs do not stop the world, so it moves nothing
there). Not a test; numbers move with the machine and the runs.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import warnings
from pathlib import Path

import pandas as pd
from validate_whatif import bundles, goals

import gmpanalysis as gmp
from gmpanalysis import modelerror as ME
from gmpanalysis import whatif as W

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIRS = [ROOT / "fixtures" / "whatif", ROOT.parent / "shared" / "data" / "16cpu-v2"]
FIGURES = ("throttled_pct", "exhausted_p50_ms", "p99_pct", "throughput_pct", "stall_ms_per_s")
# validate_whatif's goals but CPUs frozen: a run at another limit freezes other CPUs
GOALS = ("throttled ±5 points", "exhaustion ±3 ms or ±15 %", "p99 ±30 %", "throughput ±15 %")


def service(run: gmp.Run) -> tuple | None:
    """The handler, the loop and the CPUs (None: a bundle that does not say its handler)."""
    w = run.meta.get("workload")
    if not isinstance(w, dict):
        return None
    return (w.get("kind"), w.get("work_ms"), w.get("alloc_kb"), w.get("live_mb"), ME.loop_of(run.meta),
            W.settings(run)["cpus"])  # fmt: skip


def limit_of(run: gmp.Run) -> float | None:
    st = W.settings(run)
    return None if st["quota_us"] is None else st["quota_us"] / st["period_us"]


def rows_of(runs: list[gmp.Run]) -> list[dict]:
    rows = []
    for src, tgt in itertools.permutations(runs, 2):
        if W.resized(tgt) is not None or limit_of(tgt) is None or limit_of(src) == limit_of(tgt):
            continue
        truth = W.measured(tgt)
        cpus = float(W.settings(tgt)["cpus"])
        for load, pred in (
            ("source's", W.estimate(src, **W.target_setting(tgt))),
            ("target's", W.predict(src, tgt)),
        ):
            e = ME.errors_of(pred, truth)
            met = goals(e, pred, truth, cpus)
            rows.append({"load": load, "source": src.meta.get("name"), "target": tgt.meta.get("name"), **e,
                         **{g: met[g] for g in GOALS}})  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--csv", default=None, help="write every prediction here")
    a = ap.parse_args()
    groups: dict[tuple, list[gmp.Run]] = {}
    for d, _, run in bundles(a.dirs or [x for x in DEFAULT_DIRS if x.is_dir()]):
        key = service(run)
        if key is not None and W.demand(run)["source"] == "requests":
            groups.setdefault((str(d), *key), []).append(run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = [r for runs in groups.values() for r in rows_of(runs)]
    if not rows:
        print("no service with runs at two limits among the bundles given", file=sys.stderr)
        return 1
    df = pd.DataFrame(rows)
    if a.csv:
        df.to_csv(a.csv, index=False)
    for load, d in df.groupby("load", sort=False):
        errs = ", ".join(f"{k} {d[k].median():.3g}/{d[k].quantile(0.9):.3g}" for k in FIGURES)
        print(f"under the {load} load, {len(d)} predictions; |error| median/p90: {errs}")
        print("   within goals: " + ", ".join(f"{g} {100 * d[g].mean():.0f} %" for g in GOALS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
