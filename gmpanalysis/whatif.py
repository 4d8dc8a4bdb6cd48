"""What if the limit, the period, the burst, GOMAXPROCS or the CPUs were different?

A replay of the run's measured CPU demand through the kernel's CFS bandwidth mechanics:

* **Demand.** Each request of the run arrives when the load generator scheduled it
  (``sched_ns``) and needs its share of the run's CPU use over the requests' span: in
  proportion to the CPU the service reported for it (requests.csv ``cpu_ns``, the handler's
  own thread CPU), or, without that, the same for every request; where the group got less
  than the requests would cost at the reported rates (clients gave up on some), the
  reported costs, more than the group got (:func:`~.replayinputs.request_costs`). An open-loop generator
  sends each one on time whatever is in flight (vegeta adds workers); a closed-loop one (``load.mode`` =
  "closed") has ``load.concurrency`` clients, each sending its next request when the last
  one is answered, and latency counts from the sending; they send every request of the
  run, and until the run's last one was sent they keep sending (the same again, in turn),
  since a generator runs for a time: a faster setting answers more, over the same span.
  Under another run's load (``load=``, and :func:`predict`'s target), that run's arrivals
  or clients, each request needing the CPU the run's own requests needed (at their mean)
  (:func:`~.replayinputs.under_load`): the CPU per request is the service's, the load the
  load's.
* **The Go scheduler.** The requests in the service share the CPUs it can use, as the Go
  scheduler's 10 ms preemption shares them: ``min(requests, GOMAXPROCS, CPUs)`` threads,
  each request getting its share (processor sharing). When a boundary frees work that stood
  still, those threads start again where the freeze left them, on the CPUs that many balls
  thrown at random into the CPUs fill (:func:`gmpanalysis.cfskernel.cpus_taken`: 10 of 16
  for 16 threads; on 1 or 2 CPUs, one each), until a period passes without a freeze or the
  work drains.
* **The kernel** (:mod:`gmpanalysis.cfsreplay`): per-CPU runtime drawn in slices at ticks
  from each level's pool, refilled at the boundaries of the run's own grid with the quota
  in force then (the run's own, period by period, resized or not, unless one is given).
  Every level above with a quota of its own (a pod's) is replayed beside the table's at its
  own phase (``settings(run)["outer"]``); changing the container's quota moves its pod's by
  as much (Kubernetes sets a pod's to the sum of its containers'). The replay of a run keeps
  its own tick phase; a setting not yet run (:func:`estimate`) averages over tick phases.
* **Stop-the-world.** With a trace, GC pauses are expected at the run's rate per CPU-second,
  and one that begins within its own length of the exhaustion is expected to last to the
  boundary (the ``stw_stretched`` column): the world stays stopped while the group is frozen.
* **The runtime's own CPU** (:mod:`gmpanalysis.runtimecost`): where the run's trace shows
  its GC stopping the world, a request's CPU grows with the Ps that can run at once
  (min(GOMAXPROCS, CPUs)), by a growth per P and per pause fitted on real sweeps; so more
  Ps answer fewer requests per second under the same limit.
* **A closed loop's spread**: the replay's processor sharing gives a closed loop's requests
  nearly one latency; their mean is kept (Little's law ties it to the throughput) and the
  run's measured spread around it is carried over, rank by rank. The spread changes with
  the Ps, so the advice gives each setting the spread of the runs nearest it in Ps
  (:mod:`gmpanalysis.spread`, which holds the measurements) and says where it had none.

Left out, and why: how many Ps are busy is taken as ``min(requests, GOMAXPROCS)``, not the
trace's runnable goroutines (an open loop's few requests at GOMAXPROCS 8 on 16 CPUs used
1.6 CPUs (median of its periods) before the quota ran out, where the replay runs 2, and froze
2.8); the spread of a closed loop is
the source's at every setting (measured 2.5-4.3× the mean at p99 across GOMAXPROCS 1-16);
the GC's pauses, which keep an allocation-heavy handler's requests from running side by
side; the CPU a process runs beside its Ps (system calls after a handoff, sysmon:
1-3 % on the 16-CPU runs), which a P busy a whole period under a limit equal to its Ps
pushes past the quota (replayed so, it over-throttled that very case: docs/validation.md);
the slack timer that hands runtime an idle CPU returned to a throttled one before the
boundary; where the run held work back (a bundle without requests replays what ran, a lower
bound); a level's pool at the replay's start is full; a closed loop's time off the CPU
(the network, I/O: its clients send again as soon as the CPU has served them, and send the
run's requests at most 256 times over); CPUs others kept busy: the group is given every CPU
it may run on, where a saturated host shares them by CPU weight (a run whose host was, per
its host_stat.csv, gets a caveat in the advice and the report: :mod:`gmpanalysis.hostload`). The validation
(benchmarks/validate_whatif.py, gmpanalysis/modelerror.py) measures what these cost.
"""

from __future__ import annotations

import copy
import math
import numbers
from typing import Any

import numpy as np
import pandas as pd

from . import runtimecost
from .analysis import held
from .bundle import Run
from .cfsreplay import PerPeriod, Quota, group_quantiles, replay_columns
from .cgroup import MAX_PERIOD_US, MAX_QUOTA_US, MIN_PERIOD_US, MIN_QUOTA_US
from .compare import column, frozen_ms_per_s, frozen_periods, stall_ms_per_s
from .errors import UsageError
from .grid import restart_ns
from .levels import resized
from .replayinputs import (
    demand,
    demand_built,
    memo,
    prep_built,
    prep_under_load,
    run_periods,
    settings,
)
from .served import answered, latency_ms, sampled, succeeded
from .whatifchecks import num as _num
from .whatifchecks import resolved


@held
def what_if(
    run: Run,
    quota_us: float | None = None,
    period_us: int | None = None,
    burst_us: float | None = None,
    gomaxprocs: int | None = None,
    cpus: int | None = None,
    *,
    unlimited: bool = False,
    outer: list[dict[str, Any]] | None = None,
    tick_phase_ns: int | None = None,
    load: Run | None = None,
) -> pd.DataFrame:
    """The periods this run would have had under other settings (the run's own where not
    given: its quota period by period, as resized in place if it was; ``unlimited=True``:
    no quota at any level). See the module docstring for the model.

    ``outer``: the levels above with a quota of their own, as :func:`settings` lists them
    (``quota_us``, ``period_us``, ``burst_us``, ``offset_ns`` after this level's boundary);
    ``[]`` for none. By default the run's own (a pod's quota, its own timer phase), each
    quota moved by as much as ``quota_us`` moves this level's: Kubernetes gives a pod the
    sum of its containers' limits. ``tick_phase_ns``: how long after a scheduler tick this
    level's boundaries come (by default as in the run; the tick decides when a CPU out of
    runtime is caught, so exhaustion moves with it by up to a tick per level). ``load``:
    another run whose offered load (its open loop's arrivals, or its closed loop's clients
    sending for its time) this run's service is replayed under, each request needing the
    CPU this run's requests needed (:func:`~gmpanalysis.replayinputs.under_load`); by
    default the run's own.

    Columns: ``period`` (index on the grid), ``start_ns``, ``end_ns`` (the boundaries, int64
    ns, same phase as the run's grid), ``quota_us``, ``usage_us`` (CPU used in the period),
    ``throttled`` (the runtime ran out), ``exhausted_at_us`` (offset into the period, NaN if
    not throttled), ``stall_us`` (wall time frozen to the boundary), ``frozen_us`` (wall time
    the work stood still throttled by any level: the stall and what the levels above alone
    held) and ``frozen_other_us`` (the time it stood still with a level above throttling it,
    the own level too or not), as df_periods' columns of those names, ``cpus_throttled`` (CPUs
    running when it ran out), ``requests`` (scheduled in the period), ``latency_p50_ms`` and
    ``latency_p99_ms`` (scheduled start to end, of the requests scheduled in the period);
    with a trace, ``stw`` (GC stop-the-world pauses expected to begin in the period, at the
    run's rate per CPU-second) and ``stw_stretched`` (of those, how many are expected to
    run into the exhaustion and last to the boundary; NaN without a trace or for a run
    without a quota). They are estimates beside the table: they do not change its stall,
    usage or latency.
    ``.attrs["model"]`` holds the settings and the demand used (cost per request, whose
    load, ...);
    ``.attrs["quota_bound"]``: some level's quota held a CPU back from a whole slice at
    least once (False: a larger quota would have replayed the same).
    """
    cols, attrs = _what_if(
        prep_under_load(run, load), run.path, quota_us, period_us, burst_us, gomaxprocs, cpus,
        unlimited=unlimited, outer=outer, tick_phase_ns=tick_phase_ns,
    )  # fmt: skip
    out = pd.DataFrame(cols)
    out.attrs = attrs
    return out


def _what_if(
    prep: dict[str, Any],
    path: Any,
    quota_us: float | None = None,
    period_us: int | None = None,
    burst_us: float | None = None,
    gomaxprocs: int | None = None,
    cpus: int | None = None,
    *,
    unlimited: bool = False,
    outer: list[dict[str, Any]] | None = None,
    tick_phase_ns: int | None = None,
    period_latency: bool = True,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """:func:`what_if` on a run's replay inputs (``prep``: :func:`~.replayinputs.prep_built`,
    fetched once for many settings; ``path`` names the run in errors; ``period_latency``:
    :func:`~.cfsreplay.replay_columns`'): its table's columns
    (arrays: the advisor summarises hundreds of replays, and a frame costs more to build
    than a replay of a lab run), and the attrs apart."""
    q, P, burst, G, C = resolved(prep, path, quota_us, period_us, burst_us, gomaxprocs, cpus, unlimited, outer,
                                  tick_phase_ns)  # fmt: skip
    lim = prep["settings"]
    d = prep["demand"]
    phase = prep["phase"]
    specs = [] if unlimited else outer_specs(prep, outer, q, P * 1000, phase)
    sched = d["sched_ns"] if d["concurrency"] is None else np.full(len(d["sched_ns"]), d["sched_ns"][0])
    stw = prep["stw"]
    rate = stw["per_cpu_s"] if stw and lim["gomaxprocs"] and (lim["cpus"] or C) else None
    src_ps = runtimecost.ps(lim["gomaxprocs"], lim["cpus"] or C) if rate else 1
    grow = runtimecost.scale(rate, src_ps, runtimecost.ps(G, C))
    cost = np.asarray(d["cost_ns"]) * grow
    as_given = _quota_arrays(prep)[0] if q is prep["own_quota"] else q  # the run's own: its arrays
    out, attrs = replay_columns(
        sched, cost, d["concurrency"], as_given, P * 1000, phase, burst, G, C, lim["slice_us"], lim["hz"], specs,
        tick_phase_ns, period_latency, d.get("stop_ns"),
    )  # fmt: skip
    _add_stw(out, stw)
    which = attrs.pop("request_period", None)
    if d.get("latency_shape") is not None:
        kept = prep.setdefault("spread_quantiles", {})
        attrs["latency_ms"] = _closed_loop_spread(out, d["latency_shape"], attrs["latency_ms"], which, kept)
    if d["source"] == "usage":  # work items, not requests: no latency to tell
        n = len(out["period"])
        out["requests"] = np.zeros(n, dtype=np.int64)
        if "latency_p99_ms" in out:
            out["latency_p50_ms"], out["latency_p99_ms"] = np.full(n, np.nan), np.full(n, np.nan)
        attrs["latency_ms"] = np.zeros(0)
        attrs["throughput_rps"] = math.nan
    attrs["model"] = {
        "demand": d["source"],
        "load": d.get("load", "the run's own"),
        "quota_us": q if not isinstance(q, dict) else "as the run had it, period by period",
        "period_us": P,
        "burst_us": burst,
        "gomaxprocs": G,
        "cpus": C,
        "cost_ms": float(np.mean(d["cost_ns"])) * grow / 1e6,
        "runtime_cpu_growth": grow,
        "runtime_cpu_growth_extrapolated": runtimecost.extrapolated(rate, max(src_ps, runtimecost.ps(G, C))),
        "cost_per_request": d.get("cost_source", "per period of usage"),
        "concurrency": d["concurrency"],
        "arrivals": len(d["sched_ns"]),
        # a closed loop's clients send for the run's time: the run's requests, and more where faster
        "requests_sent": len(attrs["latency_ms"]) if d["source"] == "requests" else 0,
        "stw": None if stw is None else dict(stw),
        "outer": [
            {
                "quota_us": x[0] if not isinstance(x[0], (dict, PerPeriod)) else "period by period",
                "period_us": x[1] // 1000,
                "offset_ns": (x[2] - phase) % x[1],
                "burst_us": x[3],
            }
            for x in specs
        ],
    }
    return out, attrs


def _add_stw(out: dict[str, np.ndarray], stw: dict[str, float] | None) -> None:
    """The stop-the-world columns: a GC stop-the-world begins while the group runs, about
    as often per CPU-second as in the run; one that begins within its own length of the
    exhaustion cannot finish before the CPUs freeze and lasts to the boundary (the world
    stays stopped)."""
    if stw is None:
        out["stw"], out["stw_stretched"] = np.full(len(out["period"]), np.nan), np.full(len(out["period"]), np.nan)
        return
    n = stw["per_cpu_s"] * out["usage_us"] / 1e6
    ex = out["exhausted_at_us"] / 1000
    with np.errstate(invalid="ignore", divide="ignore"):
        risk = np.where(out["throttled"] & (ex > 0), np.minimum(1.0, stw["mean_ms"] / ex), 0.0)
    out["stw"], out["stw_stretched"] = n, n * risk


def _spread_quantiles(shape: np.ndarray, n: int, kept: dict[int, np.ndarray]) -> np.ndarray:
    """The measured spread's quantiles (i + 0.5) / n, i < n: the same for every setting a
    run is replayed under (its requests do not change), so kept with the run (``kept``)."""
    if n not in kept:
        kept[n] = np.quantile(shape, (np.arange(n) + 0.5) / n)
    return kept[n]


def _closed_loop_spread(
    out: dict[str, np.ndarray], shape: np.ndarray, latency_ms: np.ndarray, which: np.ndarray | None, kept: dict
) -> np.ndarray:
    """A closed loop's latencies as the replay predicts them: their mean, which Little's law
    ties to the throughput (clients / requests answered per second) and the replay predicts,
    with the spread the run measured (``shape``: its latencies over their mean, sorted).
    The replay shares the CPUs evenly among the requests in the service, so in a closed loop
    its latencies are nearly all alike; Go serves them in the order of its run queues
    (netpoll's injections, runnext, the global queue every 61st tick, GC assists parked in a
    queue), and the measured spread was 2-4× the mean at the 99th percentile. Each replayed
    request keeps its rank; the per-period p50 and p99 are taken again from the mapped
    latencies (``which``: each request's row). Returns the mapped latencies (without the
    periods' columns in ``out``: the answered ones' values, shortest first)."""
    lat = np.asarray(latency_ms, dtype=np.float64)
    ok = np.flatnonzero(np.isfinite(lat))
    if len(ok) < 2 or len(shape) < 2:
        return lat
    if "latency_p99_ms" not in out:  # no periods to place them in: the values, in rank order
        return _spread_quantiles(shape, len(ok), kept) * float(lat[ok].mean())
    mapped = lat.copy()
    # the i-th shortest of n gets the measured spread's quantile (i + 0.5) / n; requests
    # answered together (alike to the ns) keep their order of arrival, whatever the last
    # bits of the arithmetic that timed them
    rank = np.argsort(np.round(lat[ok], 6), kind="stable")
    mapped[ok[rank]] = _spread_quantiles(shape, len(ok), kept) * float(lat[ok].mean())
    if which is not None and len(which) == len(mapped) and "latency_p99_ms" in out:
        p50, p99 = group_quantiles(np.asarray(which), mapped, len(out["period"]), (0.5, 0.99))
        out["latency_p50_ms"], out["latency_p99_ms"] = p50, p99
    return mapped


def _quota_arrays(prep: dict[str, Any]) -> tuple[PerPeriod, list[PerPeriod]]:
    """The run's own quotas and each level's above, period by period, as arrays: made once
    per run's replay inputs (a replay of many settings reads them each time)."""
    if "quota_arrays" not in prep:
        mine = PerPeriod.of(prep["own_quota"])
        prep["quota_arrays"] = (mine, [PerPeriod.of(lv["quota_by_period"]) for lv in prep["outer_levels"]])
    return prep["quota_arrays"]


def outer_specs(
    prep: dict[str, Any],
    outer: list[dict[str, Any]] | None,
    q: Quota,
    period_ns: int,
    phase: int,
) -> list[tuple[Quota, int, int, float]]:
    """The levels above as the replay takes them: (quota, period_ns, phase_ns, burst_us).
    By default the run's own, each period's quota moved by as many CPUs as this level's
    moves at that time (``q`` over ``period_ns`` against the run's own quota then): a pod's
    quota is the sum of its containers' limits. A level that held fewer CPUs than this one
    then (a pod-level limit, a parent slice's quota) is no such sum and stays as it was."""
    if outer is None:
        own_p = prep["own_period_ns"] or period_ns
        (ks, was_by_k), theirs = _quota_arrays(prep)
        # the run's own, period by period: no change
        same = q is None or isinstance(q, (dict, PerPeriod)) or not len(ks)
        specs: list[tuple[Quota, int, int, float]] = []
        for lv, (kk, v) in zip(prep["outer_levels"], theirs, strict=True):
            P = int(lv["period_us"]) * 1000
            d = np.zeros(len(kk))
            if not same:
                # this level's CPUs at each of its period starts: as replayed, minus as the run had
                # them (the own level's quota in force then)
                at = (int(lv["phase_ns"]) + kk * P - prep["phase"]) // own_p
                was = was_by_k[np.maximum(np.searchsorted(ks, at, side="right") - 1, 0)]
                was_cpus = was / (own_p / 1000)
                summed = ~np.isnan(was) & ~np.isnan(v) & (v / lv["period_us"] >= was_cpus - 1e-9)
                d = np.where(summed, float(q) / (period_ns / 1000) - np.where(summed, was_cpus, 0.0), 0.0)
            moved = np.where(np.isnan(v), v, np.maximum(v + d * lv["period_us"], MIN_QUOTA_US))
            specs.append((PerPeriod(kk, moved), P, int(lv["phase_ns"]), float(lv["burst_us"])))
        return specs
    specs = []
    for i, lv in enumerate(outer):
        ok = isinstance(lv, dict) and all(
            (
                lv.get("quota_us") is None or (_num(lv["quota_us"]) and MIN_QUOTA_US <= lv["quota_us"] <= MAX_QUOTA_US),
                _num(lv.get("period_us"))
                and MIN_PERIOD_US <= lv["period_us"] <= MAX_PERIOD_US
                and float(lv["period_us"]).is_integer(),
                _num(lv.get("burst_us", 0)) and lv.get("burst_us", 0) >= 0,
                _num(lv.get("offset_ns", 0)),
            )
        )
        if not ok:
            raise UsageError(
                f"what_if(outer[{i}]={lv!r}): each level above is a dict of quota_us ({MIN_QUOTA_US:,} µs or more, "
                f"or None), a whole period_us of {MIN_PERIOD_US:,}-{MAX_PERIOD_US:,} µs (the bounds the kernel "
                "accepts), burst_us >= 0 and offset_ns (its boundary after this level's), as settings() lists them"
            )
        P = int(lv["period_us"]) * 1000
        specs.append((lv.get("quota_us"), P, (phase + int(lv.get("offset_ns", 0))) % P, float(lv.get("burst_us", 0))))
    return specs


def summarize(
    per: pd.DataFrame | dict[str, np.ndarray], latency_ms: np.ndarray | None = None, throughput_rps: float | None = None
) -> dict[str, float]:
    """The figures the validation compares, from a measured df_periods table or a what_if
    one over the same span: throttled share of the periods (%: :func:`~.compare.period_summary`'s
    ``throttled_pct_wall`` where the samples tell every period's throttling, taken over the
    periods they tell otherwise, as a replay has no holes to set against), exhaustion p50 (ms), CPUs
    frozen p50 (rounded to 0.1), stall per second (ms/s: :func:`~.compare.stall_ms_per_s`,
    period_summary's), the share of periods some level's quota froze and the ms per second
    it stood frozen by any level (``frozen_pct``, ``frozen_ms_per_s``: a pod's quota too;
    period_summary's ``frozen_pct_wall`` and ``frozen_ms_per_s``), p99 latency (ms), requests
    answered per second (``per.attrs["throughput_rps"]`` of a what_if table unless given;
    NaN without requests). ``per`` may be a replay's columns (``_what_if``'s), with the
    latencies and the throughput given."""
    if isinstance(per, pd.DataFrame):
        known = per["throttled"].notna().to_numpy()  # a hole in the samples: not a period to count
        attrs = per.attrs
    else:  # a replay's columns: every period told
        known = np.ones(len(per["throttled"]), dtype=bool)
        attrs = {}
    thr = column(per, "throttled", bool, False) & known

    def throttled(col: str) -> np.ndarray:
        """The column over the throttled periods, NaN left out."""
        v = column(per, col)[thr]
        return v[~np.isnan(v)]

    ex, cpus = throttled("exhausted_at_us"), throttled("cpus_throttled")
    if latency_ms is None:
        latency_ms = attrs.get("latency_ms")
    rps = attrs.get("throughput_rps", math.nan) if throughput_rps is None else throughput_rps
    thr_pct = 100.0 * thr[known].mean() if known.any() else math.nan
    stall = stall_ms_per_s(per)
    if isinstance(per, pd.DataFrame) or column(per, "frozen_other_us").any():
        # by any level's quota: a pod's freezes too, which the own counters do not see
        frozen_pct = 100.0 * frozen_periods(per)[known].mean() if known.any() else math.nan
        frozen = frozen_ms_per_s(per)
    else:  # a replay with no level above holding the work: its own throttling and stall
        frozen_pct, frozen = thr_pct, stall
    return {
        "throttled_pct": thr_pct,
        "exhausted_p50_ms": float(np.median(ex) / 1000) if len(ex) else math.nan,
        "cpus_frozen_p50": round(float(np.median(cpus)), 1) if len(cpus) else math.nan,
        "stall_ms_per_s": stall,
        "frozen_pct": frozen_pct,
        "frozen_ms_per_s": frozen,
        "p99_ms": float(np.nanpercentile(latency_ms, 99)) if latency_ms is not None and len(latency_ms) else math.nan,
        "throughput_rps": float(rps),
    }


def measured(run: Run) -> dict[str, float]:
    """:func:`summarize` of the run itself, over the periods the replay covers."""
    per = run_periods(run)
    d = memo(run, "demand", demand_built)
    t0, t1 = d["span_ns"]
    span = per[(per["end_ns"] > t0) & (per["start_ns"] < t1)]
    r = run.requests
    lat = None
    rps = math.nan
    if d["source"] == "requests":  # as df_periods counts them: the requests that succeeded
        r = r[sampled(r, run.samples, restart_ns(run.meta))]  # the requests the replay has
        lat = latency_ms(r)[succeeded(r)]
        # answered (any HTTP status), as the replay answers every request
        ans = answered(r)
        took = float(r.loc[ans, "end_ns"].max() - r["sched_ns"].min()) if ans.any() else math.nan
        rps = int(ans.sum()) / took * 1e9 if took > 0 else math.nan
    return summarize(span, lat if lat is not None else np.zeros(0), rps)


def replay_as(source: Run, target: Run, tick_phase_ns: int | None = None) -> pd.DataFrame:
    """:func:`what_if` of ``source``'s service under ``target``'s settings (limit, period,
    burst, GOMAXPROCS, CPUs, the levels above) and offered load (``load=target``: its
    arrivals or clients, each request needing the CPU the source's needed): what the target
    would have measured, predicted from the source. The ticks fall as on the source's clock
    unless ``tick_phase_ns`` is given (:func:`predict` averages over them)."""
    return what_if(source, tick_phase_ns=tick_phase_ns, load=target, **target_setting(target))


# a run not yet made has no known tick phase (its bandwidth timer starts wherever the limit
# is set): predictions for one average over this many phases spread evenly over a tick (a
# tick moves the exhaustion by up to a tick per level: two phases half a tick apart bound it)
TICK_PHASES = 2


@held
def estimate(run: Run, phases: int = TICK_PHASES, **setting: Any) -> dict[str, float]:
    """The model's one estimator: :func:`summarize` of the run's demand replayed under
    ``setting`` (:func:`what_if`'s keywords), averaged over ``phases`` tick phases spread
    evenly over a tick (NaN where none has the figure), since a setting not yet run has no
    known tick phase. :func:`predict`, :func:`gmpanalysis.advise` and the report all use
    it, and the validation (benchmarks/validate_whatif.py) measures its error. ``load=``
    another run replays the service under that run's offered load, as :func:`what_if`."""
    return estimate_from_prep(prep_under_load(run, setting.pop("load", None), "estimate"), run.path, phases, **setting)


def estimate_from_prep(
    prep: dict[str, Any], path: Any, phases: int = TICK_PHASES, reuse: dict | None = None, **setting: Any
) -> dict[str, float]:
    """:func:`estimate` on a run's replay inputs (see :func:`_what_if`). ``reuse``: a dict
    the caller keeps for these inputs over many settings (the advisor's search), where a
    replay that no quota held back (``quota_bound`` False) answers for every larger quota and
    burst of the same other settings without replaying them: it would take the same steps."""
    if isinstance(phases, bool) or not isinstance(phases, numbers.Integral) or phases < 1:
        raise UsageError(f"estimate(phases={phases!r}): the tick phases averaged over are a whole number of 1 or more")
    if "tick_phase_ns" in setting:
        raise UsageError(
            "estimate(tick_phase_ns=...): an estimate averages over tick phases (phases=); "
            "what_if(..., tick_phase_ns=) replays one"
        )
    tick = 1_000_000_000 // int(prep["settings"]["hz"])
    each = []
    gaps = prep["demand"].get("gaps_ns") if prep["demand"]["concurrency"] is None else None
    key = _reuse_key(setting) if reuse is not None else None
    if reuse is not None and reuse.setdefault("inputs", prep) is not prep:  # it holds its inputs alive
        raise UsageError(
            "estimate_from_prep(reuse=...): a reuse dict serves one run's replay inputs; give each its own"
        )
    checked = False
    for i in range(phases):
        at = i * tick // phases
        fig = _reused(reuse, key, at, setting) if key is not None else None
        if fig is not None:
            if not checked:  # the setting is still checked as a replay would check it
                resolved(prep, path, **setting)
                checked = True
            each.append(fig)
            continue
        per, attrs = _what_if(prep, path, tick_phase_ns=at, period_latency=False, **setting)
        if gaps:  # an open loop's replay keeps the source's clock: no figures where it measured none
            per = _without(per, gaps)
        each.append(summarize(per, attrs["latency_ms"], attrs["throughput_rps"]))
        if key is not None and not attrs["quota_bound"]:  # key: reuse was given
            reuse.setdefault((key, at), []).append((float(setting["quota_us"]), float(setting["burst_us"]), each[-1]))
    out = {}
    for k in each[0]:
        v = [x[k] for x in each if not math.isnan(x[k])]
        out[k] = float(sum(v)) / len(v) if v else math.nan  # np.mean's float for a few phases, without its overhead
    return out


def _reuse_key(setting: dict[str, Any]) -> str | None:
    """The settings other than the quota and burst, where both are given as numbers (a replay
    no quota held back answers for a larger quota and burst with these the same); None where
    a replay's quota is not one number (the run's own, none)."""
    if setting.get("unlimited") or not (_num(setting.get("quota_us")) and _num(setting.get("burst_us"))):
        return None
    return repr(sorted((k, v) for k, v in setting.items() if k not in ("quota_us", "burst_us")))


def _reused(reuse: dict | None, key: str, at: int, setting: dict[str, Any]) -> dict[str, float] | None:
    """The figures of a replay at tick phase ``at`` that no quota held back, at a quota and
    burst no larger than ``setting``'s (the pools at every level no fuller, so every draw of
    this setting's replay is whole too, and its steps the same); None if there is none."""
    q, b = float(setting["quota_us"]), float(setting["burst_us"])
    for q0, b0, fig in (reuse or {}).get((key, at), ()):
        if q0 <= q and b0 <= b:
            return fig
    return None


def _without(per: dict[str, np.ndarray], gaps: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """A replay's columns without the periods that lie within the source's unmeasured
    stretches (``gaps``: between its table's segments), which its table has no rows for."""
    start, end = per["start_ns"], per["end_ns"]
    drop = np.zeros(len(start), dtype=bool)
    for a, b in gaps:
        drop |= (start >= a) & (end <= b)
    n = len(start)
    return {k: (v[~drop] if isinstance(v, np.ndarray) and len(v) == n else v) for k, v in per.items()}


def target_setting(target: Run) -> dict[str, Any]:
    """``target``'s settings as :func:`what_if`'s keywords (limit, period, burst,
    GOMAXPROCS, CPUs, the levels above), for replaying another run's demand under them."""
    lim = memo(target, "prep", prep_built)["settings"]
    return {
        "quota_us": lim["quota_us"],
        "period_us": lim["period_us"],
        "burst_us": lim["burst_us"],
        "gomaxprocs": lim["gomaxprocs"],
        "cpus": lim["cpus"],
        "unlimited": lim["quota_us"] is None and not lim["outer"],
        "outer": copy.deepcopy(lim["outer"]),
    }


@held
def predict(source: Run, target: Run, phases: int = TICK_PHASES) -> dict[str, float]:
    """:func:`estimate` of ``source``'s service under ``target``'s settings and offered load
    (its open loop's arrivals, or its closed loop's clients sending for its time; each
    request needing the CPU the source's requests needed): what the target would have
    measured, predicted from the source, its tick phase taken as unknown. Where either run
    has no requests.csv the load is the source's own (``what_if``'s attrs say whose). A
    target whose limit was resized mid-run has no one setting: predicted from itself, it
    is replayed under its own limits period by period; from another run, a
    :class:`UsageError` says so."""
    change = resized(target)
    if change is None:
        return estimate(source, phases, load=target, **target_setting(target))
    if source is target or source.path == target.path:
        lim = memo(target, "prep", prep_built)["settings"]
        return estimate(source, phases, gomaxprocs=lim["gomaxprocs"], cpus=lim["cpus"])
    raise UsageError(
        f"predict: {target.path}: its limit was changed mid-run ({change}), so it has no one setting to predict "
        f"from {source.path}; predict runs of one setting each, or replay the source under each quota "
        "with gmp.what_if(run, quota_us=...)"
    )


def validate(runs: list[Run]) -> pd.DataFrame:
    """Each run predicted from each other one (:func:`predict`: its settings replayed over
    the other's demand, its tick phase taken as unknown) beside what it measured: one row
    per (source, target) and figure. A run resized mid-run is predicted from itself only."""
    rows = []
    for tgt in runs:
        truth = measured(tgt)
        one_setting = resized(tgt) is None
        for src in runs:
            if src is not tgt and not one_setting:
                continue  # no one setting to predict it under
            got = predict(src, tgt)
            for key, v in truth.items():
                rows.append({"target": tgt.meta.get("name"), "source": src.meta.get("name"), "figure": key,
                             "measured": v, "predicted": got[key], "error": got[key] - v})  # fmt: skip
    return pd.DataFrame(rows)


__all__ = [
    "demand",
    "estimate",
    "measured",
    "predict",
    "replay_as",
    "resized",
    "settings",
    "summarize",
    "target_setting",
    "validate",
    "what_if",
]
