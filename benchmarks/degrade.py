"""How much the per-period table still knows when the samples are damaged the ways
production damages them.

For every shipped run: build the table from the clean samples, then from damaged copies
(random drops, a sampler replaying the in-pod SCHED_OTHER lateness measured on a real
cluster, holes, a sampler restart, a counter reset) and compare each metric with the clean
table, period by period:

- conservation: rows + ambiguous groups + credits outside the table = counter delta, for
  every counter and segment (must be exact);
- phase: |phase - clean phase| against the stated uncertainties (both);
- exhaustion: |error| p50/max over periods throttled in both where the damaged table gives
  a point value (it gives none where its bracket is wider than 6 ms), the lowest share of
  such periods, the share of clean values inside the damaged bracket, the median width;
- usage: |error| p50/max, the share of clean values inside the damaged bracket;
- throttled periods: recovered exactly / left unknown (NA, in a group) / wrong.

    .venv/bin/python benchmarks/degrade.py [--seeds 5] [--markdown [PATH]]

``--markdown`` prints the summary as the table of the documentation's period-table page;
``--markdown docs/benchmarks/results/degrade.md`` rewrites the file that page shows.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import gmpanalysis as gmp
from gmpanalysis import degrade as D
from gmpanalysis.periods import df_conservation, df_period_groups

REPO = Path(__file__).resolve().parents[1]
RUNS = sorted(p for p in (REPO / "fixtures" / "runs").iterdir() if (p / "meta.json").exists())
LATENESS = REPO / "fixtures" / "sampling" / "inpod-lateness.csv"


def inpod_lateness_ns() -> np.ndarray:
    """The per-deadline lateness of the in-pod sampler, missed deadlines included as the
    lateness that skipped them (see fixtures/README.md)."""
    from gmpanalysis.sampling import read_lateness

    return read_lateness(LATENESS)["lateness_us"].to_numpy(dtype=np.int64) * 1000


def damages(s: pd.DataFrame, interval_ns: int, rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    t0, t1 = int(s.t_ns.iloc[0]), int(s.t_ns.iloc[-1])
    at = int(t0 + rng.uniform(0.3, 0.6) * (t1 - t0))  # a random place in the middle
    out = {
        "drop 10 %": D.drop_random(s, 0.10, rng),
        "drop 30 %": D.drop_random(s, 0.30, rng),
    }
    if LATENESS.exists():
        out["in-pod lateness"] = D.thin_lateness(s, inpod_lateness_ns(), interval_ns, rng)
        out["in-pod + drop 10 %"] = D.drop_random(out["in-pod lateness"], 0.10, rng)
    for ms in (10, 34, 150, 350):
        out[f"hole {ms} ms"] = D.hole(s, at, ms * 1_000_000)
    out["sampler restart"] = D.sampler_restart(s, at)
    out["counter reset"] = D.counter_reset(s, at)
    return out


def compare(clean: pd.DataFrame, bad: pd.DataFrame, P: int) -> dict[str, float]:
    c = df_conservation(bad)
    cons = float(((c["rows"] + c["groups"] + c["outside"] - c["delta"]).abs() / c["delta"].abs().clip(lower=1)).max())
    gc, gb = clean.attrs["grid"], bad.attrs["grid"]
    worst_phase = 0.0
    for seg in gb.segments:
        d = abs((seg.phase_ns - gc.phase_ns + P // 2) % P - P // 2)
        worst_phase = max(worst_phase, d / max(seg.uncertainty_ns + gc.uncertainty_ns, 1))
    m = clean.merge(bad, on="period", suffixes=("_c", "_b"))
    thr_c = m["throttled_c"].fillna(False).to_numpy(bool)
    known_b = m["throttled_b"].notna().to_numpy()
    thr_b = m["throttled_b"].fillna(False).to_numpy(bool)
    both = thr_c & thr_b
    ex_c, ex_b = m["exhausted_at_us_c"].to_numpy()[both], m["exhausted_at_us_b"].to_numpy()[both]
    lo, hi = m["exhausted_lo_us_b"].to_numpy()[both], m["exhausted_hi_us_b"].to_numpy()[both]
    point = ~np.isnan(ex_b)  # the damaged table gives a point value only where its bracket is narrow
    err = np.abs(ex_b - ex_c)[point] / 1e3
    ue = np.abs(m["usage_us_b"] - m["usage_us_c"]).to_numpy() / 1e3
    ucov = ((m["usage_us_c"] >= m["usage_lo_us_b"] - 1e-6) & (m["usage_us_c"] <= m["usage_hi_us_b"] + 1e-6)).mean()
    return {
        "conservation_rel_err": cons,
        "phase_err_per_unc": worst_phase,
        "ex_err_p50_ms": float(np.median(err)) if len(err) else np.nan,
        "ex_err_max_ms": float(err.max()) if len(err) else np.nan,
        "ex_point_share": float(point.mean()) if len(point) else np.nan,
        "ex_coverage": float(((ex_c >= lo - 1e-6) & (ex_c <= hi + 1e-6)).mean()) if len(ex_c) else np.nan,
        "ex_width_p50_ms": float(np.median(hi - lo) / 1e3) if len(ex_c) else np.nan,
        "usage_err_p50_ms": float(np.median(ue)),
        "usage_err_max_ms": float(ue.max()),
        "usage_coverage": float(ucov),
        "thr_recovered": float((thr_c & thr_b).sum() / max(thr_c.sum(), 1)),
        "thr_unknown": int((thr_c & ~known_b).sum()),
        "thr_wrong": int((known_b & (thr_b != thr_c)).sum()),
        "groups": len(df_period_groups(bad)),
    }


def markdown(agg: pd.DataFrame, seeds: int) -> str:
    """The summary as the documentation shows it: one row per damage."""

    def g(v: float) -> str:
        return f"{v:.2g}" if abs(v) < 10 else f"{v:.0f}"

    def pct(v: float) -> str:
        return f"{100 * v:.0f} %"

    lines = [
        f"<!-- rewritten by: .venv/bin/python benchmarks/degrade.py --seeds {seeds} --markdown PATH -->",
        f"<!-- the {len(RUNS)} runs of fixtures/runs x {seeds} seeds -->",
        "",
        "| damage | conservation (rel. error) | phase error / stated uncertainty (max) "
        "| exhaustion error p50 / max (ms) | periods with a point value (min) "
        "| clean value inside the bracket (min) | bracket width p50 (ms) | usage error p50 / max (ms) "
        "| throttled periods recovered (min) / unknown (max) / wrong |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, r in agg.iterrows():
        cells = [
            f"{r.conservation:.1g}",
            g(r.phase_err_per_unc_max),
            f"{g(r.ex_err_p50_ms)} / {g(r.ex_err_max_ms)}",
            pct(r.ex_point_min),
            pct(r.ex_coverage_min),
            g(r.ex_width_p50_ms),
            f"{g(r.usage_err_p50_ms)} / {g(r.usage_err_max_ms)}",
            f"{pct(r.thr_recovered_min)} / {r.thr_unknown_max:.0f} / {r.thr_wrong_max:.0f}",
        ]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="random damages per run and kind (default 5)")
    ap.add_argument(
        "--markdown",
        nargs="?",
        const="-",
        metavar="PATH",
        help="the summary as a Markdown table, printed or written to PATH (docs/benchmarks/results/degrade.md)",
    )
    a = ap.parse_args(argv)
    rows = []
    for path in RUNS:
        run = gmp.load_run(path)
        P = run.meta["period_us"] * 1000
        interval = int(run.meta.get("sampler", {}).get("interval_ns") or 997_000)
        clean = gmp.df_periods(run)
        for seed in range(a.seeds):
            rng = np.random.default_rng([seed, len(rows)])
            for kind, s in damages(run.samples, interval, rng).items():
                r = copy.copy(run)
                r.samples = s
                bad = gmp.df_periods(r)
                rows.append({"run": path.name, "damage": kind, "seed": seed, **compare(clean, bad, P)})
    df = pd.DataFrame(rows)
    order = list(dict.fromkeys(df["damage"]))
    agg = (
        df.groupby("damage", sort=False)
        .agg(
            conservation=("conservation_rel_err", "max"),
            phase_err_per_unc_max=("phase_err_per_unc", "max"),
            ex_err_p50_ms=("ex_err_p50_ms", "median"),
            ex_err_max_ms=("ex_err_max_ms", "max"),
            ex_point_min=("ex_point_share", "min"),
            ex_coverage_min=("ex_coverage", "min"),
            ex_width_p50_ms=("ex_width_p50_ms", "median"),
            usage_err_p50_ms=("usage_err_p50_ms", "median"),
            usage_err_max_ms=("usage_err_max_ms", "max"),
            usage_coverage_min=("usage_coverage", "min"),
            thr_recovered_min=("thr_recovered", "min"),
            thr_unknown_max=("thr_unknown", "max"),
            thr_wrong_max=("thr_wrong", "max"),
        )
        .loc[order]
    )
    if a.markdown == "-":
        print(markdown(agg, a.seeds))
    elif a.markdown:
        Path(a.markdown).write_text(markdown(agg, a.seeds))
        print(f"wrote {a.markdown}")
    else:
        with pd.option_context("display.width", 250, "display.max_columns", 30):
            print(agg)
    print(
        f"\n{len(RUNS)} runs x {a.seeds} seeds x {len(order)} damages; "
        "ex_coverage_min is the lowest share over all runs and seeds"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
