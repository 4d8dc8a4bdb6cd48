"""The what-if estimator against real runs, held out: every run predicted from every run of
the *other* configurations of its workload (leave one configuration out), beside what it
measured; the errors per regime go to gmpanalysis/whatif-validation.json, which the
advice and the report read their error bars from.

    .venv/bin/python benchmarks/validate_whatif.py [DIR ...] [--csv OUT.csv] [--no-write] [--markdown PATH]

Each DIR holds bundles (default: fixtures/runs, fixtures/runs-v2, fixtures/closed-loop, the 16-CPU v2 runs in
../shared/data/16cpu-v2, and where present benchmarks/data/sweep and
benchmarks/data/16cpu-v2-1500m: docs/validation.md says how each was made). A workload is the
bundles of one directory whose names agree but for the GOMAXPROCS part (gmpN, default,
numcpu) and a repeat suffix (-rN); a configuration is (limit, GOMAXPROCS). Prints, per
regime (:func:`gmpanalysis.modelerror.regime`: the CPUs, GOMAXPROCS over the limit) and
figure, the held-out error's median and p90, and how often each goal holds (``--markdown``
writes the same per regime as the table of docs/validation.md):

- throttled share of the periods within 5 points;
- exhaustion p50 within 3 ms or 15 %;
- CPUs frozen p50 within 10 % of the CPUs;
- p99 latency within 30 %;
- throughput within 15 %;
- never more CPUs frozen than the setting can run on (min(CPUs, GOMAXPROCS)).

A prediction whose source or target ran on a host others kept saturated (its host_stat.csv:
:func:`gmpanalysis.host_load`) is marked in ``shared_host``: the replay gives the group every
CPU.

A run whose limit was resized mid-run is a source only (it has no one setting to be
predicted under); runs made in a TCG guest are left out unless --with-tcg. Not a test;
numbers move with the machine and the runs given.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

import gmpanalysis as gmp
from gmpanalysis import modelerror as ME
from gmpanalysis import runtimecost as RC
from gmpanalysis import whatif as W
from gmpanalysis.hostload import contended, host_load

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIRS = [
    ROOT / "fixtures" / "runs",
    ROOT / "fixtures" / "runs-v2",
    ROOT / "fixtures" / "closed-loop",
    ROOT.parent / "shared" / "data" / "16cpu-v2",
    ROOT / "benchmarks" / "data" / "sweep",
    ROOT / "benchmarks" / "data" / "16cpu-v2-1500m",
]
VARIANT = re.compile(r"-(gmp\d+|default|numcpu|automaxprocs|pinned)(?=-r\d+$|$)")
REPEAT = re.compile(r"-r\d+$")


def workload(name: str) -> str | None:
    """The name without its GOMAXPROCS part and repeat (None: the name has no such part)."""
    base = REPEAT.sub("", name)
    return VARIANT.sub("", base) if VARIANT.search(base) else None


def bundles(dirs: list[Path], with_tcg: bool = False) -> Iterator[tuple[Path, Path, gmp.Run]]:
    """(directory, bundle, run) of every bundle in ``dirs`` (DEFAULT_DIRS where present when
    none is given), loaded with the library's warnings silenced; runs made in a TCG guest
    are left out unless ``with_tcg`` (its CPU is not a machine's: docs/lab.md)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in dirs or [x for x in DEFAULT_DIRS if x.is_dir()]:
            for b in sorted(p for p in d.iterdir() if (p / "meta.json").exists()):
                run = gmp.load_run(b)
                if run.meta.get("virtualization") != "tcg" or with_tcg:
                    yield d, b, run


def goals(e: dict[str, float], pred: dict[str, float], truth: dict[str, float], cpus: float) -> dict[str, bool]:
    nan = math.isnan
    ex = e["exhausted_p50_ms"]
    return {
        "throttled ±5 points": not nan(e["throttled_pct"]) and e["throttled_pct"] <= ME.THROTTLED_GOAL_POINTS,
        "exhaustion ±3 ms or ±15 %": not nan(ex) and (ex <= 3 or ex <= 0.15 * truth["exhausted_p50_ms"]),
        "CPUs frozen ±10 % of CPUs": not nan(e["cpus_frozen_p50"]) and e["cpus_frozen_p50"] <= 0.1 * cpus,
        "p99 ±30 %": not nan(e["p99_pct"]) and e["p99_pct"] <= 30,
        "throughput ±15 %": not nan(e["throughput_pct"]) and e["throughput_pct"] <= 15,
    }


# the goals of the per-regime table, each with the figure it is about
GOAL_FIGURES = {
    "throttled ±5 points": "throttled_pct",
    "exhaustion ±3 ms or ±15 %": "exhausted_p50_ms",
    "CPUs frozen ±10 % of CPUs": "cpus_frozen_p50",
    "p99 ±30 %": "p99_pct",
    "throughput ±15 %": "throughput_pct",
}


def growth_point(run: gmp.Run) -> tuple[int, float, float]:
    """The run as :func:`gmpanalysis.runtimecost.fit` takes it: (Ps, CPU per request in ms,
    GC stop-the-world pauses per CPU-second; 0 without a trace)."""
    m = W.what_if(run).attrs["model"]  # under its own settings: the CPU per request as measured
    st = W.settings(run)
    return RC.ps(st["gomaxprocs"] or 1, st["cpus"] or 1), m["cost_ms"], (m["stw"] or {}).get("per_cpu_s", 0.0)


def predictions(where: str, w: str, runs: list[gmp.Run]) -> list[dict]:
    """Each run of one workload predicted from every run of its other configurations."""
    rows = []
    conf = {id(r): (W.settings(r)["quota_us"], W.settings(r)["gomaxprocs"]) for r in runs}
    for tgt in runs:
        sources = [s for s in runs if conf[id(s)] != conf[id(tgt)]]
        # a run whose limit changed mid-run has no one setting to predict it under
        if not sources or W.resized(tgt) is not None:
            continue
        truth = W.measured(tgt)
        st = W.target_setting(tgt)
        cpus = float(st["cpus"])
        limit = None if st["quota_us"] is None else st["quota_us"] / st["period_us"]
        reg = ME.regime(cpus, limit, float(st["gomaxprocs"]), int(st["period_us"]))
        for src in sources:
            pred = W.predict(src, tgt)
            # the replay gives the group every CPU; a host others kept busy did not
            shared = [k for k, r in (("source", src), ("target", tgt)) if contended(host_load(r))]
            e = ME.errors_of(pred, truth)
            bound = min(cpus, float(st["gomaxprocs"]))
            rows.append(
                {"dir": where, "workload": w, "target": tgt.meta.get("name"), "source": src.meta.get("name"),
                 "regime": reg, "loop": ME.loop_of(tgt.meta), "cpus": cpus, "shared_host": "+".join(shared),
                 **{f"pred_{k}": v for k, v in pred.items()},
                 **{f"meas_{k}": v for k, v in truth.items()}, **e,
                 **goals(e, pred, truth, cpus),
                 "frozen within CPUs": math.isnan(pred["cpus_frozen_p50"]) or pred["cpus_frozen_p50"] <= bound}
            )  # fmt: skip
    return rows


def markdown(df: pd.DataFrame, summary: dict) -> str:
    """Per regime: the predictions, the held-out |error|'s median / p90 per figure and the
    share within each goal ("–": no prediction with that figure, e.g. no period throttled)."""

    def num(v: float) -> str:
        return f"{v:.0f}" if abs(v) >= 11 else f"{v:.1f}".removesuffix(".0")

    figs = ["throttled_pct", "exhausted_p50_ms", "cpus_frozen_p50", "p99_pct", "throughput_pct"]
    lines = [
        "<!-- rewritten by: .venv/bin/python benchmarks/validate_whatif.py --markdown PATH -->",
        f"<!-- {datetime.date.today().isoformat()}, {len(df)} held-out predictions -->",
        "",
        "| regime | n | throttled share, points | exhaustion p50, ms | CPUs frozen p50 | p99, % | throughput, % "
        "| within goals (throttled ±5 / exhaustion ±3 ms or 15 % / CPUs ±10 % of CPUs / p99 ±30 % / req/s ±15 %) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cpus_order = ("≤2 CPUs", "3-8 CPUs", "≥9 CPUs")
    tier_order = ("GOMAXPROCS ≤ limit", "GOMAXPROCS ≤ 4× limit", "GOMAXPROCS > 4× limit", "no limit")
    regs = sorted(
        df["regime"].unique(),
        key=lambda r: tuple(next((i for i, x in enumerate(o) if x in r), 9) for o in (cpus_order, tier_order)),
    )
    for reg in regs:
        sub = df[df["regime"] == reg]
        have = summary.get(reg, {})
        cells = [f"{num(have[k]['median'])} / {num(have[k]['p90'])}" if k in have else "–" for k in figs]
        goals_ = [f"{100 * sub[g].mean():.0f}" if f in have else "–" for g, f in GOAL_FIGURES.items()]
        lines.append(f"| {reg} | {len(sub)} | " + " | ".join(cells) + " | " + " / ".join(goals_) + " % |")
    return "\n".join(lines) + "\n"


README = ROOT / "README.md"
README_MARKS = (
    "<!-- whatif-regimes: rewritten by benchmarks/validate_whatif.py --markdown -->",
    "<!-- /whatif-regimes -->",
)


def readme_body(table: str) -> str:
    """What the README shows of the table: it without its comment lines."""
    return "\n".join(x for x in table.splitlines() if not x.startswith("<!--")).strip()


def into_readme(table: str) -> bool:
    """The README's copy of the table, between its marks, rewritten (False: no marks there)."""
    text = README.read_text()
    start, end = README_MARKS
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    README.write_text(f"{head}{start}\n{readme_body(table)}\n{end}{rest.split(end, 1)[1]}")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--csv", default=None, help="write every prediction here")
    ap.add_argument("--no-write", action="store_true", help=f"do not rewrite {ME.VALIDATION_FILE.name}")
    ap.add_argument(
        "--markdown",
        metavar="PATH",
        help="write the per-regime table the documentation shows (docs/benchmarks/results/whatif-regimes.md)",
    )
    ap.add_argument(
        "--with-tcg",
        action="store_true",
        help="keep runs made in a TCG guest (the VM lab): its CPU is not a machine's (docs/lab.md), so by default "
        "they are left out",
    )
    a = ap.parse_args()
    groups: dict[tuple[str, str], list[gmp.Run]] = {}
    for d, b, run in bundles(a.dirs, a.with_tcg):
        w = workload(b.name)
        if w and run.requests is not None and len(run.requests):
            groups.setdefault((d.name, w), []).append(run)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        points = {key: [growth_point(r) for r in runs] for key, runs in groups.items()}
        held: dict[str, float] = {}
        in_sample: list[str] = []  # workloads the shipped constant was fitted on, none held out
        for (where, w), runs in sorted(groups.items()):
            # the runtime's growth per P, fitted without this workload: held out like the rest
            k = RC.fit(p for key, p in points.items() if key != (where, w))
            if k is None:
                k = RC.PER_P_PER_STW
                if RC.fit([points[(where, w)]]) is not None:
                    in_sample.append(f"{where}/{w}")
            held[f"{where}/{w}"] = k
            with RC.held_out(k):
                rows += predictions(where, w, runs)
    if not rows:
        print("no workload with two configurations among the bundles given", file=sys.stderr)
        return 2
    df = pd.DataFrame(rows)
    if a.csv:
        df.to_csv(a.csv, index=False)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print(f"{df['target'].nunique()} runs in {len(groups)} workloads; {len(df)} held-out predictions")
    print(
        "the runtime's growth per P, fitted without each workload: "
        + ", ".join(f"{w} {k:.5f}" for w, k in held.items() if abs(k - RC.PER_P_PER_STW) > 5e-6)
        + f" (the others: the shipped {RC.PER_P_PER_STW})"
    )
    if in_sample:
        print(
            f"NOT held out for {', '.join(in_sample)}: no other workload given fits the growth, so they were "
            "predicted with the shipped constant, which was fitted on them (give the other 16-CPU workload's runs)"
        )
    print()
    show = ["target", "source", "regime", "shared_host"] + [
        c for k in ("throttled_pct", "exhausted_p50_ms", "cpus_frozen_p50", "p99_ms", "throughput_rps")
        for c in (f"meas_{k}", f"pred_{k}")
    ]  # fmt: skip
    print(df[show].round(1).to_string(index=False))
    n_shared = int((df["shared_host"] != "").sum())
    if n_shared:
        print(
            f"shared_host: {n_shared} predictions have a source or target whose host was saturated and shared "
            "(gmpanalysis.hostload), which the replay does not model"
        )
    summary = ME.summarise(rows)
    print("\nheld-out |error| per regime (median / p90, n):")
    for reg, figs in summary.items():
        cells = ", ".join(f"{k} {v['median']:g}/{v['p90']:g} ({v['n']})" for k, v in figs.items() if k in ME.UNITS)
        print(f"  {reg} ({' and '.join(figs.get('loops') or ['?'])} loop): {cells}")
    gcols = [*goals({k: 0.0 for k in ME.UNITS}, {}, {"exhausted_p50_ms": 1.0}, 1.0), "frozen within CPUs"]
    print("\nshare of held-out predictions within each goal, per regime (%):")
    print((df.groupby("regime")[gcols].mean() * 100).round(0).to_string())
    if a.markdown:
        table = markdown(df, summary)
        Path(a.markdown).write_text(table)
        print(f"\nwrote {a.markdown}")
        if into_readme(table):
            print(f"rewrote the table in {README.name}")
    if not a.no_write:
        out = {
            "date": datetime.date.today().isoformat(),
            "estimator": f"whatif.estimate, {W.TICK_PHASES} tick phases",
            "method": "each run predicted from every run of the other configurations of its workload, the "
            "runtime's growth per P (runtimecost.fit) fitted without that workload"
            + (f" (not held out for {', '.join(in_sample)}: no other workload fits it)" if in_sample else "")
            + ("" if a.with_tcg else "; runs in TCG guests left out"),
            "runs": sorted(f"{where}/{r.meta.get('name')}" for (where, _), rs in groups.items() for r in rs),
            "predictions": len(df),
            "growth_per_p": {"used": held, "not_held_out": in_sample},
            "regimes": summary,
        }
        ME.VALIDATION_FILE.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
        print(f"\nwrote {ME.VALIDATION_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
