"""Which CPU limit, GOMAXPROCS and burst to run: settings ranked by the what-if replay.

Every candidate setting is replayed over each run's demand (:func:`~.whatif.what_if`) and
the predictions are averaged over the runs. Objectives:

- ``throttle``: the fewest throttled periods (then the least stall, then the cheapest);
- ``p99``: the lowest p99 latency, and among settings within 5 % of it the cheapest (at one
  cost, one without a burst); the others after them by p99;
- ``cost``: the cheapest limit whose p99 is within 25 % of the best any candidate reaches
  and that throttles at most 10 % of periods (without requests: the cheapest that
  throttles at most 10 %).

Cost is the CPU reserved: the limit in CPUs (a burst is not reserved). Every figure is the
model's one estimator (:func:`~.whatif.estimate`: tick phase unknown), and its error bars
are the held-out errors the validation measured in the recommended setting's regime
(:mod:`gmpanalysis.modelerror`); outside the regimes it covered, the advice says so.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from . import runtimecost
from .advicecaveats import no_burst, runs_caveats, usage_caveat
from .analysis import held
from .bundle import Run
from .cgroup import MAX_CPUS, MAX_QUOTA_US, MIN_QUOTA_US
from .errors import MissingDataError, UsageError
from .gomaxprocs import rules
from .levels import quota_at_end
from .modelerror import (
    cpus_validated,
    loop_of,
    loop_validated,
    measured_range,
    model_error,
    regime,
    validated_cpus,
    validated_loops,
)
from .modelerror import load as load_validation
from .replayinputs import memo, prep_built
from .spread import Input, spread_ps, with_spread
from .spread import caveat as spread_caveat
from .whatif import demand, estimate_from_prep, settings

OBJECTIVES = ("throttle", "p99", "cost")
# GOMAXPROCS tried by default (with the CPUs and the run's own; what each rule gives at the
# recommended limit is in the baselines): the replay's answer moves little between
# neighbours this far apart
G_STEPS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
# the limits tried first (CPUs); the finer steps between the best of them and its neighbours next
COARSE_LIMITS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


def _candidates(max_limit: float, own: float | None, least: float) -> list[float]:
    """The default limits up to max_limit, none below ``least`` (the kernel's least quota at
    the run's period: 1 CPU at a 1 ms period)."""
    if max_limit < least - 1e-9:
        raise UsageError(
            f"advise(max_limit={max_limit:g}): below the least quota the kernel accepts at the run's period "
            f"({least:g} CPU): raise max_limit, or advise a run of a longer period"
        )
    steps = [x / 4 for x in range(1, 8)] + [float(x) for x in range(2, 65)]
    out = sorted(
        {x for x in steps if least - 1e-9 <= x <= max_limit + 1e-9} | ({own} if own and own <= max_limit else set())
    )
    return out or [max_limit]


def _g_candidates(ncpu: int, own_g: int | None) -> list[int]:
    return sorted({g for g in G_STEPS if g <= ncpu} | {ncpu} | ({own_g} if own_g and own_g <= ncpu else set()))


def _check_candidates(limits: list[float], gs: list[int], bursts: list[float], period_us: int) -> None:
    """A :class:`UsageError` naming advise's own arguments where a candidate cannot be set:
    none given, a quota below the kernel's least (MIN_QUOTA_US) at the run's period, a burst
    above the quota (the kernel refuses both)."""
    for name, xs in (("limits", limits), ("gomaxprocs", gs), ("bursts", bursts)):
        if not xs:
            raise UsageError(f"advise({name}=[]): give at least one candidate, or leave it out for the defaults")

    def real(x: object) -> bool:  # numpy's numbers too; a bool is no number of CPUs
        return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))

    low = [x for x in limits if not (real(x) and x * period_us >= MIN_QUOTA_US)]
    if low:
        raise UsageError(
            f"advise(limits={limits!r}): {low} CPU is below the least quota the kernel accepts "
            f"({MIN_QUOTA_US} µs per {period_us} µs period: {MIN_QUOTA_US / period_us:g} CPU)"
        )
    high = [x for x in limits if not x * period_us <= MAX_QUOTA_US]
    if high:
        raise UsageError(
            f"advise(limits={limits!r}): {high} CPU is above the largest quota the kernel accepts "
            f"({MAX_QUOTA_US} µs per {period_us} µs period)"
        )
    bad_g = [g for g in gs if not (isinstance(g, numbers.Integral) and not isinstance(g, bool) and g >= 1)]
    if bad_g:
        raise UsageError(f"advise(gomaxprocs={gs!r}): {bad_g}: GOMAXPROCS is a whole number of at least 1")
    bad_b = [b for b in bursts if not (real(b) and 0 <= b <= 1)]
    if bad_b:
        raise UsageError(
            f"advise(bursts={bursts!r}): {bad_b}: a burst is a share of the quota from 0 to 1 (the kernel refuses "
            "a cpu.max.burst above the quota)"
        )


def _cpus_of(runs: list[Run], lim0: dict, cpus: int | None, max_limit: float | None) -> int:
    """The CPUs the advice is for: ``cpus``, else the runs' own (which must agree, and be
    recorded); the runs must agree on their period too (one answer for all)."""
    if len(runs) > 1:
        each = [settings(r) for r in runs]
        for key, arg in (("cpus", "cpus=N (--cpus N)"), ("period_us", None)):
            seen = {s[key] for s in each}
            if len(seen) > 1 and (arg is None or cpus is None):
                told = ", ".join(f"{r.name}: {s[key]}" for r, s in zip(runs, each, strict=True))
                how = f"give {arg} for all of them" if arg else "advise them apart"
                raise UsageError(f"advise: the runs differ in {key} ({told}): {how}")
    if cpus is not None and (
        isinstance(cpus, (bool, np.bool_)) or not isinstance(cpus, numbers.Real) or not (1 <= cpus <= MAX_CPUS)
        or not float(cpus).is_integer()
    ):  # fmt: skip
        raise UsageError(
            f"advise(cpus={cpus!r}): give the CPUs the service may run on, a whole number of 1 to {MAX_CPUS:,} "
            "(the kernel's most)"
        )
    if cpus is None and lim0["cpus"] is None:
        raise MissingDataError(
            f"{runs[0].path}: meta.json records no ncpu: give advise(..., cpus=N) (gmpanalysis advise --cpus N)"
        )
    ncpu = int(lim0["cpus"] if cpus is None else cpus)
    if ncpu < 1 or (
        max_limit is not None
        and not (isinstance(max_limit, numbers.Real) and math.isfinite(max_limit) and max_limit > 0)
    ):
        raise UsageError(f"advise: cpus={cpus}, max_limit={max_limit}: give positive (finite) numbers")
    return ncpu


@held
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
    GOMAXPROCS :data:`G_STEPS` up to ``cpus``, ``cpus`` itself and the run's own; what each
    rule gives at the recommended limit is in ``baselines``); ``bursts``: burst as a share
    of the quota (default 0 and 1).

    Columns: ``rank``, ``limit_cpu``, ``quota_us``, ``period_us``, ``burst_us``,
    ``gomaxprocs``, ``throttled_pct`` (% of periods), ``stall_ms_per_s`` (frozen wall time per
    second), ``frozen_pct`` and ``frozen_ms_per_s`` (the same by any level's quota: a pod's
    too; the throttle and cost objectives rank by them), ``p99_ms`` (NaN without requests),
    ``exhausted_p50_ms``, ``cost_cpu`` (CPUs reserved), ``throughput_rps`` (requests answered per second). ``.attrs``:
    ``recommendation`` (one sentence), ``baselines`` (what the run's own setting, Go >=
    1.25's default, automaxprocs and the downward API would give at the recommended limit,
    and how much worse each is), ``regime`` (the recommended setting's:
    :func:`gmpanalysis.modelerror.regime`), ``model_error`` (figure -> (median, p90, unit)
    of the held-out errors there; empty: not validated there), ``validated`` (the
    validation's date). Without ``limits``, the limits are searched coarse to fine: 0.25,
    0.5, 1, 2, 4, ... CPUs (:data:`COARSE_LIMITS`, the run's own and the largest), then the
    default steps between the best of those and its neighbours.
    """
    runs = [runs] if isinstance(runs, Run) else list(runs)
    if not runs:
        raise UsageError("advise: give at least one run")
    if objective not in OBJECTIVES:
        raise UsageError(f"advise(objective={objective!r}): choose one of {list(OBJECTIVES)}")
    for name, x in (("limits", limits), ("gomaxprocs", gomaxprocs), ("bursts", bursts)):
        if x is not None and (isinstance(x, (str, bytes)) or not isinstance(x, Iterable)):
            raise UsageError(f"advise({name}={x!r}): give a list of candidates, e.g. {name}=[{x!r}]")
    lim0 = settings(runs[0])
    ncpu = _cpus_of(runs, lim0, cpus, max_limit)
    top = float(max_limit or ncpu)
    period = int(lim0["period_us"])
    own = None if lim0["quota_us"] is None else lim0["quota_us"] / period
    cand_limits = sorted(set(limits)) if limits is not None else _candidates(top, own, MIN_QUOTA_US / period)
    over = [x for x in cand_limits if max_limit is not None and isinstance(x, numbers.Real) and x > max_limit]
    if over:
        raise UsageError(f"advise(limits={cand_limits!r}, max_limit={max_limit:g}): {over} above max_limit")
    own_g = int(lim0["gomaxprocs"]) if lim0["gomaxprocs"] else None
    if gomaxprocs is not None:
        cand_g = sorted(set(gomaxprocs))
    else:
        cand_g = _g_candidates(ncpu, own_g)
    with_requests = all(demand(r)["source"] == "requests" for r in runs)
    burst_set = sorted(set(bursts))
    _check_candidates(cand_limits, cand_g, burst_set, period)

    # each run's replay inputs looked up once for every setting (a lookup checks the run's
    # contents), with the Ps a closed loop's latency spread was measured at
    inputs: list[Input] = [(memo(r, "prep", prep_built), r.path, spread_ps(r)) for r in runs]
    variants: dict[tuple[int, ...], list[Input]] = {}
    # the limits in ascending order: a replay no quota held back answers for the larger ones
    reuse: dict[int, dict] = {}

    def at(lims: list[float]) -> list[dict[str, float]]:
        return [
            _predict(with_spread(inputs, min(g, ncpu), variants), x, period, b * x * period, g, ncpu, reuse=reuse)
            for x in sorted(lims)
            for g in cand_g
            for b in burst_set
        ]

    rows = at(cand_limits) if limits is not None else _coarse_to_fine(at, cand_limits, own, objective, with_requests)
    table = _rank(pd.DataFrame(rows), objective, with_requests)
    best = table.iloc[0]
    validation = load_validation()
    reg = regime(ncpu, float(best.limit_cpu), float(best.gomaxprocs), period)
    loops = {loop_of(r.meta) for r in runs}
    # the latency figures only where every run's loop was validated; none on CPUs the regime's runs lacked
    err = model_error(reg, validation, loops, ncpu)
    table.attrs["regime"] = reg
    table.attrs["model_error"] = err
    table.attrs["validated"] = validation.get("date")
    met = bool(_cost_ok(table, with_requests).any())
    off = _cpus_unvalidated(reg, ncpu, validation)
    said = _sentence(best, objective, with_requests, reg, err, met, _no_latency(runs), off) + no_burst(table)
    said += _reach_caveat(inputs, int(best.gomaxprocs), ncpu) + _above_caveat(table, lim0)
    if with_requests:
        shown = [best.gomaxprocs, *(g for g in rules(int(best.quota_us), period, ncpu).values() if g)]
        said += spread_caveat(inputs, [float(min(g, ncpu)) for g in shown])
        said += _loop_caveat(reg, validation, loops, err)
    else:
        said += usage_caveat(runs)
    said += runs_caveats(runs, table, ncpu, cpus is None)
    table.attrs["recommendation"] = said
    table.attrs["baselines"] = _baselines(inputs, variants, best, ncpu, runs)
    return table


def _above_caveat(table: pd.DataFrame, lim0: dict) -> str:
    """Where a level above (a pod's quota, replayed as it was) freezes the work at every
    limit tried, up to the largest, and the container's own quota there does not: it is that
    level's limit that binds, which no container setting changes ("" otherwise)."""
    if not lim0.get("outer") or not len(table):
        return ""
    top = table[table["limit_cpu"] == table["limit_cpu"].max()]
    above = float((top["frozen_pct"] - top["throttled_pct"]).min())
    if not above >= 25:
        return ""
    names = " or ".join(f"the {x['level']}'s, {x['quota_us'] / x['period_us']:g} CPU in the run" for x in lim0["outer"])
    return (
        f" At every limit tried, up to {float(top['limit_cpu'].iloc[0]):g} CPUs, a quota above this one freezes "
        f"the work in {float(top['frozen_pct'].min()):.0f} % of periods or more ({names}): "
        "that limit binds, and no setting of this level lifts it; raise it."
    )


def _cpus_unvalidated(reg: str, ncpu: int, validation: dict) -> str:
    """Where the regime's runs had other CPUs than the advice is for: what they had ("" otherwise)."""
    if cpus_validated(reg, ncpu, validation):
        return ""
    had = " or ".join(map(str, validated_cpus(reg, validation)))
    return f"on {ncpu} CPUs (in this regime, {reg}, its runs had {had})"


def _reach_caveat(inputs: list[Input], g: int, ncpu: int) -> str:
    """Where the advised setting lies beyond what the model was fitted on: the runtime's
    growth with the Ps past its fit ("" otherwise)."""
    said = ""
    if _growth_extrapolated(inputs, g, ncpu):
        said += (
            f" The runtime's CPU per request at {min(g, ncpu)} Ps is extrapolated: its growth "
            f"with the Ps was fitted up to {runtimecost.MAX_FIT_PS} Ps (and at most {runtimecost.MAX_GROWTH:g}×)."
        )
    return said


def _growth_extrapolated(inputs: list[Input], g: int, ncpu: int) -> bool:
    """Whether the runtime's growth with the Ps (:mod:`gmpanalysis.runtimecost`) at ``g``
    on ``ncpu`` leaves what its fit measured for any of the runs."""
    for prep, _, _ in inputs:
        stw, lim = prep["stw"], prep["settings"]
        if stw and runtimecost.extrapolated(
            stw["per_cpu_s"], max(runtimecost.ps(lim["gomaxprocs"] or 1, lim["cpus"] or ncpu), runtimecost.ps(g, ncpu))
        ):
            return True
    return False


def _coarse_to_fine(
    at: Callable[[list[float]], list[dict[str, float]]],
    cand: list[float],
    own: float | None,
    objective: str,
    with_requests: bool,
) -> list[dict[str, float]]:
    """The rows of the limits searched coarse to fine: limits doubling from 0.25 CPU (and
    the run's own), then every candidate between the best of those and its neighbours."""
    coarse = sorted({x for x in cand if x in COARSE_LIMITS or x == own} | {cand[0], cand[-1]})
    rows = at(coarse)
    first = _rank(pd.DataFrame(rows), objective, with_requests)
    i = coarse.index(float(first.iloc[0].limit_cpu))
    lo, hi = coarse[max(i - 1, 0)], coarse[min(i + 1, len(coarse) - 1)]
    return rows + at([x for x in cand if lo < x < hi and x not in coarse])


def _no_latency(runs: list[Run]) -> str:
    """Why a ranking by p99 has no latency to rank by."""
    if len(runs) == 1:
        return "the run has no requests"
    has = any(demand(r)["source"] == "requests" for r in runs)
    return "not every run has requests" if has else "the runs have no requests"


def _loop_caveat(reg: str, validation: dict, loops: set[str | None], err: dict) -> str:
    """Runs of both kinds of load advised together; and where the regime's latency errors
    were measured on another kind of load than the runs' (open or closed loop): why the p99
    has no error bars ("" otherwise)."""
    mixed = (
        " The runs mix open- and closed-loop load: each figure is their mean, and a p99 averaged over "
        "the two says little of either; advise them apart."
        if {"open", "closed"} <= loops
        else ""
    )
    off = sorted(x for x in loops if x and not loop_validated(reg, x, validation))
    unsaid = None in loops and not loop_validated(reg, None, validation)
    if not (off or unsaid) or not err:
        return mixed
    which = f"{' and '.join(off)}-loop" if off else ""
    if unsaid:
        which += (" and " if which else "") + "of a run whose bundle does not say how it was sent (meta.json load.mode)"
    return (
        f" The p99 and throughput have no error bars: in this regime the model was validated on "
        f"{' and '.join(validated_loops(reg, validation))}-loop load only, and the load advised here is "
        f"{which} "
        "(a closed loop's latency spread is carried over from the run, an open loop's queue is replayed): "
        "check the ranking by p99 with a run of the top settings."
    ) + mixed


def _predict(
    inputs: list[Input],
    lim: float,
    period: int,
    burst_us: float,
    g: int,
    ncpu: int,
    own: bool = False,
    reuse: dict[int, dict] | None = None,
) -> dict[str, float]:
    """The figures of one setting, averaged over the runs (a closed loop's each with the
    latency spread of the runs nearest the setting in Ps: :func:`gmpanalysis.spread.with_spread`);
    ``own``: each run's own setting as it was (quotas period by period, a limit resized in
    place too, its burst and its GOMAXPROCS; ``g`` is then only shown). ``reuse``: per replay
    inputs (by id, alive for the search), the replays no quota held back, which answer for
    larger limits (:func:`~gmpanalysis.whatif.estimate_from_prep`)."""
    setting = {} if own else {"quota_us": lim * period, "period_us": period, "burst_us": burst_us, "gomaxprocs": g}
    figs = [
        estimate_from_prep(
            prep, path, cpus=ncpu, reuse=None if reuse is None else reuse.setdefault(id(prep), {}), **setting
        )
        for prep, path, _ in inputs
    ]
    out: dict[str, float] = {
        "limit_cpu": lim,
        "quota_us": lim * period,
        "period_us": period,
        "burst_us": burst_us,
        "gomaxprocs": g,
        "cost_cpu": lim,
    }
    for k in (
        "throttled_pct",
        "stall_ms_per_s",
        "frozen_pct",
        "frozen_ms_per_s",
        "p99_ms",
        "exhausted_p50_ms",
        "throughput_rps",
    ):
        vals = [f[k] for f in figs if not math.isnan(f[k])]
        out[k] = float(np.mean(vals)) if vals else math.nan
    return out


def _cost_ok(t: pd.DataFrame, with_requests: bool) -> pd.Series:
    """The settings the cost objective may choose among: at most 10 % of periods frozen (by
    any level's quota) and, with requests, p99 within 25 % of the best."""
    ok = t["frozen_pct"] <= 10.0
    if with_requests:
        ok &= t["p99_ms"] <= 1.25 * t["p99_ms"].min()
    return ok


def _rank(t: pd.DataFrame, objective: str, with_requests: bool) -> pd.DataFrame:
    if objective == "p99" and not with_requests:
        objective = "throttle"  # no latency to rank by
    if objective == "throttle":
        # frozen by any level first (a pod's quota too); without levels above, the same as
        # the own level's throttling and stall
        keys = ["frozen_pct", "frozen_ms_per_s", "throttled_pct", "stall_ms_per_s", "cost_cpu", "burst_us"]
        t = t.sort_values([*keys, "gomaxprocs"])
    elif objective == "p99":
        best = t["p99_ms"].min()
        far = t["p99_ms"] > 1.05 * best
        # within 5 % of the best p99 the cheapest wins, and at one cost a setting without a
        # burst (a burst is worth setting only where it buys more than that); the rest by p99
        near = t[~far].sort_values(["cost_cpu", "burst_us", "p99_ms", "gomaxprocs"])
        t = pd.concat([near, t[far].sort_values(["p99_ms", "cost_cpu", "burst_us", "gomaxprocs"])])
    else:
        t = t.assign(_bad=~_cost_ok(t, with_requests))
        t = t.sort_values(["_bad", "cost_cpu", "p99_ms", "throttled_pct", "burst_us", "gomaxprocs"])
        t = t.drop(columns="_bad")
    t = t.reset_index(drop=True)
    t.insert(0, "rank", np.arange(1, len(t) + 1))
    return t


def _sentence(
    best: pd.Series,
    objective: str,
    with_requests: bool,
    reg: str,
    err: dict[str, tuple[float, float, str]],
    met: bool = True,
    no_latency: str = "the run has no requests",
    cpus_off: str = "",
) -> str:
    burst = f", a burst of {best.burst_us / 1000:.0f} ms (Linux 5.14+)" if best.burst_us > 0 else ""

    def pm(key: str, unit: str) -> str:
        return f" (±{err[key][0]:g}{unit}, p90 ±{err[key][1]:g}{unit})" if key in err else ""

    def p99_range() -> str:
        # the error is a share of the measured value: a range, not ± around the prediction
        if "p99_pct" not in err:
            return ""
        spans = [measured_range(float(best.p99_ms), e) for e in err["p99_pct"][:2]]
        (a, b), (c, d) = ((lo, f"{hi:,.0f}" if math.isfinite(hi) else "∞") for lo, hi in spans)
        return f" (the measured p99 within {a:,.0f}-{b} ms at the median held-out error, {c:,.0f}-{d} ms at its p90)"

    p99 = f"p99 {best.p99_ms:.0f} ms{p99_range()}, " if with_requests else ""
    goal = objective
    if objective == "p99" and not with_requests:
        goal = f"throttle ({no_latency}, so no latency to rank by)"
    said = (
        f"For {goal}: a CPU limit of {best.limit_cpu:g} ({best.quota_us:.0f} µs per {best.period_us:.0f} µs)"
        f"{burst} with GOMAXPROCS={best.gomaxprocs:.0f}: predicted {p99}"
        f"{best.throttled_pct:.0f} % of periods throttled{pm('throttled_pct', ' points')}, "
        f"{best.stall_ms_per_s:.0f} ms frozen per second."
    )
    if best.frozen_ms_per_s > best.stall_ms_per_s + 0.5:
        # the levels above (a pod's quota) freeze the work the own counters never see
        said += (
            f" With the levels above: {best.frozen_pct:.0f} % of periods frozen by some quota, "
            f"{best.frozen_ms_per_s:.0f} ms per second."
        )
    if objective == "cost" and not met:
        said += (
            " No candidate met the cost objective's goals (at most 10 % of periods frozen by any quota"
            + (", p99 within 25 % of the best" if with_requests else "")
            + "): this is the cheapest of the rest; widen limits= or max_limit= (--max-limit)."
        )
    if not err:
        said += (
            f" The model has not been validated {cpus_off or f'in this regime ({reg})'}: no error bars; "
            "check the setting with a run (gmpanalysis lab run, or a canary)."
        )
    else:
        said += f" Error bars: the model's held-out errors on real runs in this regime ({reg})."
    return said


def _baselines(
    inputs: list[Input],
    variants: dict[tuple[int, ...], list[Input]],
    best: pd.Series,
    ncpu: int,
    runs: list[Run],
) -> pd.DataFrame:
    """At the recommended limit: the GOMAXPROCS each rule would set, its predicted figures
    and how much worse than the recommendation; and each run's own setting as it was (on
    its own CPUs, whatever ``cpus`` the advice was asked for)."""
    period = int(best.period_us)
    r = rules(int(best.quota_us), period, ncpu)
    rows = []
    for name in ("go1.25 default", "automaxprocs", "downward API"):
        g = r[name]
        if g is None:
            continue
        near = with_spread(inputs, min(g, ncpu), variants)
        p = _predict(near, float(best.limit_cpu), period, float(best.burst_us), int(g), ncpu)
        rows.append({"setting": f"{name} (GOMAXPROCS={g})", **p})
    for run, inp in zip(runs, inputs, strict=True):  # each run as it was, on its own CPUs
        lim = settings(run)
        if lim["quota_us"] is None or not lim["gomaxprocs"]:  # no limit, or its GOMAXPROCS unknown: not replayable
            continue
        g0 = int(lim["gomaxprocs"])
        # replayed with its own quotas period by period: a limit resized in place as it was;
        # its limit and cost shown as at the end
        last = quota_at_end(run)
        at_end = (lim["quota_us"] if last is None else last) / period
        own = _predict([inp], at_end, period, float(lim["burst_us"] or 0), g0, int(lim["cpus"] or ncpu), own=True)
        resized = f", {lim['quota_us'] / period:g} → {at_end:g} CPU" if at_end != lim["quota_us"] / period else ""
        who = "the run as it was" if len(runs) == 1 else f"{Path(str(run.path)).name} as it was"
        rows.append({"setting": f"{who}{resized}", **own})
    out = pd.DataFrame(rows)
    if len(out):
        out["p99_worse_pct"] = math.nan if math.isnan(best.p99_ms) else 100 * (out["p99_ms"] / best.p99_ms - 1)
        out["throttled_worse_points"] = out["throttled_pct"] - best.throttled_pct
        out["cost_worse_cpu"] = out["cost_cpu"] - best.cost_cpu
    return out
