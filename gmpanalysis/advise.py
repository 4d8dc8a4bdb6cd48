"""Which CPU limit, GOMAXPROCS and burst to run: settings ranked by the what-if replay.

Every candidate setting is replayed over each run's demand (:func:`~.whatif.what_if`) and
the predictions are averaged over the runs. Objectives:

- ``throttle``: the fewest throttled periods (then the least stall, then the cheapest);
- ``p99``: the lowest p99 latency, and among settings within 5 % of it the cheapest;
- ``cost``: the cheapest limit whose p99 is within 25 % of the best any candidate reaches
  and that throttles at most 10 % of periods (without requests: the cheapest that
  throttles at most 10 %).

Cost is the CPU reserved: the limit in CPUs (a burst is not reserved). The model's error
measured on real runs (benchmarks/validate_whatif.py) comes with the advice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from .bundle import Run
from .errors import UsageError
from .gomaxprocs import rules
from .whatif import demand, settings, summarize, what_if

OBJECTIVES = ("throttle", "p99", "cost")

# what the replay missed by on the validation sweep (benchmarks/validate_whatif.py: 72 lab
# runs, 2 workloads x 4 limits x GOMAXPROCS 1/2/4 x 3 repeats, 792 predictions, each under
# its target's repeats' settings with the tick phase unknown, this machine, 2026-11-24):
# median and 90th percentile of the absolute error
MODEL_ERROR = {
    "throttled_pct": (0.7, 3.8, "points"),
    "stall_ms_per_s": (2.4, 25.2, "ms/s"),
    "p99_pct": (10.1, 27.7, "% of p99"),
    "exhausted_p50_ms": (1.3, 12.6, "ms"),
}


def _candidates(max_limit: float, own: float | None) -> list[float]:
    steps = [x / 4 for x in range(1, 8)] + [float(x) for x in range(2, 65)]
    out = sorted({x for x in steps if x <= max_limit + 1e-9} | ({own} if own and own <= max_limit else set()))
    return out or [max_limit]


def advise(
    runs: Run | Iterable[Run],
    *,
    objective: str = "p99",
    cpus: int | None = None,
    max_limit: float | None = None,
    limits: Iterable[float] | None = None,
    gomaxprocs: Iterable[int] | None = None,
    bursts: Iterable[float] = (0.0, 1.0),
) -> pd.DataFrame:
    """Candidate settings ranked for ``objective`` (one of :data:`OBJECTIVES`).

    ``cpus``: the CPUs the service may run on (default: the run's host); ``max_limit``: the
    largest limit to consider, in CPUs (default ``cpus``); ``limits``, ``gomaxprocs``:
    the candidates (default: 0.25-CPU steps to 1.75, then whole CPUs, and the run's own;
    GOMAXPROCS 1 to ``cpus``); ``bursts``: burst as a share of the quota (default 0 and 1).

    Columns: ``rank``, ``limit_cpu``, ``quota_us``, ``period_us``, ``burst_us``,
    ``gomaxprocs``, ``throttled_pct`` (% of periods), ``stall_ms_per_s`` (frozen wall time per
    second), ``p99_ms`` (NaN without requests), ``exhausted_p50_ms``, ``cost_cpu`` (CPUs
    reserved). ``.attrs``: ``recommendation`` (one sentence), ``baselines`` (what the run's
    own setting, Go >= 1.25's default, automaxprocs and the downward API would give at the
    recommended limit, and how much worse each is), ``model_error`` (:data:`MODEL_ERROR`).
    """
    runs = [runs] if isinstance(runs, Run) else list(runs)
    if not runs:
        raise UsageError("advise: give at least one run")
    if objective not in OBJECTIVES:
        raise UsageError(f"advise(objective={objective!r}): choose one of {list(OBJECTIVES)}")
    lim0 = settings(runs[0])
    ncpu = int(cpus or lim0["cpus"] or 1)
    if ncpu < 1 or (max_limit is not None and max_limit <= 0):
        raise UsageError(f"advise: cpus={cpus}, max_limit={max_limit}: give positive numbers")
    top = float(max_limit or ncpu)
    period = int(lim0["period_us"])
    own = None if lim0["quota_us"] is None else lim0["quota_us"] / period
    cand_limits = sorted(set(limits)) if limits is not None else _candidates(top, own)
    cand_g = sorted(set(gomaxprocs)) if gomaxprocs is not None else list(range(1, ncpu + 1))
    with_requests = all(demand(r)["source"] == "requests" for r in runs)
    rows = []
    for lim in cand_limits:
        for g in cand_g:
            for b in sorted(set(bursts)):
                rows.append(_predict(runs, lim, period, b * lim * period, g, ncpu))
    table = pd.DataFrame(rows)
    table = _rank(table, objective, with_requests)
    best = table.iloc[0]
    table.attrs["recommendation"] = _sentence(best, objective, with_requests)
    table.attrs["baselines"] = _baselines(runs, best, lim0, ncpu)
    table.attrs["model_error"] = dict(MODEL_ERROR)
    return table


def _predict(runs: list[Run], lim: float, period: int, burst_us: float, g: int, ncpu: int) -> dict[str, float]:
    figs = [
        summarize(what_if(r, quota_us=lim * period, period_us=period, burst_us=burst_us, gomaxprocs=g, cpus=ncpu))
        for r in runs
    ]
    out: dict[str, float] = {
        "limit_cpu": lim,
        "quota_us": lim * period,
        "period_us": period,
        "burst_us": burst_us,
        "gomaxprocs": g,
        "cost_cpu": lim,
    }
    for k in ("throttled_pct", "stall_ms_per_s", "p99_ms", "exhausted_p50_ms"):
        vals = [f[k] for f in figs if not math.isnan(f[k])]
        out[k] = float(np.mean(vals)) if vals else math.nan
    return out


def _rank(t: pd.DataFrame, objective: str, with_requests: bool) -> pd.DataFrame:
    if objective == "p99" and not with_requests:
        objective = "throttle"  # no latency to rank by
    if objective == "throttle":
        t = t.sort_values(["throttled_pct", "stall_ms_per_s", "cost_cpu", "burst_us", "gomaxprocs"])
    elif objective == "p99":
        best = t["p99_ms"].min()
        t = t.assign(_near=t["p99_ms"] > 1.05 * best)
        t = t.sort_values(["_near", "cost_cpu", "p99_ms", "burst_us", "gomaxprocs"]).drop(columns="_near")
    else:
        ok = t["throttled_pct"] <= 10.0
        if with_requests:
            ok &= t["p99_ms"] <= 1.25 * t["p99_ms"].min()
        t = t.assign(_bad=~ok).sort_values(["_bad", "cost_cpu", "p99_ms", "throttled_pct", "burst_us", "gomaxprocs"])
        t = t.drop(columns="_bad")
    t = t.reset_index(drop=True)
    t.insert(0, "rank", np.arange(1, len(t) + 1))
    return t


def _sentence(best: pd.Series, objective: str, with_requests: bool) -> str:
    burst = f", a burst of {best.burst_us / 1000:.0f} ms (Linux 5.14+)" if best.burst_us > 0 else ""
    p99 = f"p99 {best.p99_ms:.0f} ms (±{MODEL_ERROR['p99_pct'][0]:.0f} %), " if with_requests else ""
    return (
        f"For {objective}: a CPU limit of {best.limit_cpu:g} ({best.quota_us:.0f} µs per {best.period_us:.0f} µs)"
        f"{burst} with GOMAXPROCS={best.gomaxprocs:.0f}: predicted {p99}"
        f"{best.throttled_pct:.0f} % of periods throttled (±{MODEL_ERROR['throttled_pct'][0]:g} points), "
        f"{best.stall_ms_per_s:.0f} ms frozen per second."
    )


def _baselines(runs: list[Run], best: pd.Series, lim0: dict, ncpu: int) -> pd.DataFrame:
    """At the recommended limit: the GOMAXPROCS each rule would set, its predicted figures
    and how much worse than the recommendation; and the run's own setting as it was."""
    period = int(best.period_us)
    r = rules(int(best.quota_us), period, ncpu)
    rows = []
    for name in ("go1.25 default", "automaxprocs", "downward API"):
        g = r[name]
        if g is None:
            continue
        p = _predict(runs, float(best.limit_cpu), period, float(best.burst_us), int(g), ncpu)
        rows.append({"setting": f"{name} (GOMAXPROCS={g})", **p})
    if lim0["quota_us"] is not None:
        own = _predict(
            runs, lim0["quota_us"] / period, period, float(lim0["burst_us"] or 0), int(lim0["gomaxprocs"] or ncpu), ncpu
        )
        rows.append({"setting": "the run as it was", **own})
    out = pd.DataFrame(rows)
    if len(out):
        out["p99_worse_pct"] = math.nan if math.isnan(best.p99_ms) else 100 * (out["p99_ms"] / best.p99_ms - 1)
        out["throttled_worse_points"] = out["throttled_pct"] - best.throttled_pct
        out["cost_worse_cpu"] = out["cost_cpu"] - best.cost_cpu
    return out
