"""What if the limit, the period, the burst, GOMAXPROCS or the CPUs were different?

A replay of the run's measured CPU demand through the kernel's CFS bandwidth mechanics:

* **Demand.** Each request of the run arrives when the load generator scheduled it
  (``sched_ns``) and needs its share of the run's CPU use over the requests' span: in
  proportion to the CPU the service reported for it (requests.csv ``cpu_ns``, the handler's
  own thread CPU), or, without that, the same for every request. An open-loop generator
  sends each one on time whatever is in flight (vegeta adds workers); a closed-loop one (``load.mode`` =
  "closed") has ``load.concurrency`` clients, each sending its next request when the last
  one is answered, and latency counts from the sending.
* **The Go scheduler.** The requests in the service share the CPUs it can use, as the Go
  scheduler's 10 ms preemption shares them: ``min(requests, GOMAXPROCS, CPUs)`` CPUs, each
  request getting its share (processor sharing).
* **The bandwidth controller**, per CPU as the kernel keeps it (a cfs_rq each): runtime is
  drawn from the group's pool a ``sched_cfs_bandwidth_slice_us`` slice (5 ms) at a time, at
  a tick (CONFIG_HZ), when the CPU holds none, and the draw also pays what it ran past zero
  since the last tick; when the pool cannot cover it the CPU is throttled (a CPU that wakes
  to run the group's work with nothing and an empty pool is throttled at once); an idle CPU
  hands back what it holds beyond 1 ms. At each boundary of the run's own grid the pool is
  refilled with the quota in force then (the run's own, period by period, resized or not,
  unless one is given; with ``burst_us``, unused runtime carries over up to quota + burst,
  Linux 5.14+), and a throttled CPU's overrun is paid first: one whose overrun the pool
  cannot cover stays throttled. A period is *throttled* when its timer finds a CPU
  throttled (nr_throttled's rule); it was *exhausted at* the moment every CPU the work was
  on had been throttled for the rest of the period (usage goes flat; the period's end where
  one CPU ran on to it), its *stall* is the time from then to the boundary, and its *CPUs
  throttled* the CPUs' frozen time over the stall. A throttled CPU keeps its threads (they
  are dequeued there, not moved). Work that could not run waits: nothing is lost.
* **Levels.** Every level above with a quota of its own (a pod's: bundles that sample it)
  is replayed beside the table's, each with its own pool, per-CPU runtime and period timer
  at its own phase (``settings(run)["outer"]``); a CPU any level throttles stops, and each
  level counts only its own throttling, as its cpu.stat does. Changing the container's
  quota moves its pod's by as much (Kubernetes sets a pod's to the sum of its containers').
* **The tick** comes at multiples of 1/HZ on CLOCK_MONOTONIC where the kernel aligns it
  (this machine's 6.x kernels, ``skew_tick=0``: all CPUs tick together), so where it falls
  relative to the boundaries is a fact of the run, and moves the exhaustion by up to a tick
  per level: the replay of a run keeps its own; a prediction for a setting not yet run
  (:func:`predict`) averages over tick phases, since its timer starts wherever its limit is set.
* **Stop-the-world.** With a trace, GC pauses are expected at the run's rate per CPU-second,
  and one that begins within its own length of the exhaustion is expected to last to the
  boundary (the ``stw_stretched`` column): the world stays stopped while the group is frozen.

Left out, and why: the runtime's own CPU (GC workers, spinning threads) is in each
request's share, not a demand of its own, so a GOMAXPROCS that changes how much of it the
GC takes (dedicated workers are a quarter of the Ps) is not seen; the GC's pauses, which
keep an allocation-heavy handler's requests from running side by side (it would need the
trace's runnable goroutines as the demand); the slack timer that hands runtime an idle CPU
returned to a throttled one before the boundary; where the run held work back (a bundle without
requests replays what ran, a lower bound); a level's pool at the replay's start is full.
The validation sweep (benchmarks/validate_whatif.py, README) measures what these cost.
"""

from __future__ import annotations

import bisect
import collections
import copy
import math
import numbers
from typing import Any

import numpy as np
import pandas as pd

from .analysis import analyze
from .bundle import Run
from .cgroup import bundle_period_us
from .errors import GmpError, MissingDataError, UsageError
from .kernelfacts import DEFAULT_HZ, tick_ns

# sched_cfs_bandwidth_slice_us: the runtime a CPU takes from the pool at a time (the
# kernel's default; a bundle may record its own as meta["cfs_slice_us"])
SLICE_US = 5000.0
# the scheduler tick where a bundle records no CONFIG_HZ (kernelfacts): a CPU's runtime is
# checked when the tick charges it, so a CPU out of runtime runs on up to one tick
HZ = DEFAULT_HZ


def _us(ns: float) -> float:
    return math.nan if math.isinf(ns) else ns / 1000


def _num(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _memo(run: Run, key: str, build: Any) -> Any:
    """``build(run)`` kept with the run's :class:`~gmpanalysis.analysis.Analysis` (a replay
    of many settings reads the same demand, quotas and levels each time; an edited run gets
    a new Analysis, and so a new memo). Callers must not change what it returns."""
    cache = analyze(run).__dict__.setdefault("_whatif", {})
    if key not in cache:
        cache[key] = build(run)
    return cache[key]


def _grid_phase_built(run: Run) -> int:
    """The run's period grid phase; 0 for a run without a quota, whose group has no
    bandwidth timer (a limit set later gets a phase of the kernel's choosing)."""
    return 0 if _no_quota(run) else analyze(run).grid.phase_ns


def _no_quota_built(run: Run) -> bool:
    """No level of the run ever had a quota (meta.json, its levels, limits.csv)."""
    if run.meta.get("quota_us") is not None:
        return False
    if any(lv.get("quota_us") is not None for lv in run.meta.get("levels") or [] if isinstance(lv, dict)):
        return False
    lim = run.limits
    return lim is None or not len(lim) or bool(lim["quota_us"].isna().all())


def _periods(run: Run) -> pd.DataFrame:
    """The run's periods (df_periods), or for a run without a quota the same columns where
    they can be told (start_ns, end_ns, usage_us from the samples; never throttled) on a
    100 ms grid of phase 0 over the samples."""
    if not _no_quota(run):
        return analyze(run).periods
    s = run.samples
    if s.empty:
        raise MissingDataError(f"{run.path}: no samples in cpu_stat.csv: nothing to replay")
    P = bundle_period_us(run.meta) * 1000
    t = s["t_ns"].to_numpy(dtype=np.int64)
    u = s["usage_us"].to_numpy(dtype=np.float64)
    k = np.arange(t[0] // P, t[-1] // P + 1, dtype=np.int64)
    edges = np.r_[k, k[-1] + 1] * P
    cum = np.interp(edges.astype(np.float64), t.astype(np.float64), u)
    return pd.DataFrame(
        {
            "period": k,
            "start_ns": edges[:-1],
            "end_ns": edges[1:],
            "quota_us": np.nan,
            "usage_us": np.diff(cum),
            "throttled": False,
            "exhausted_at_us": np.nan,
            "stall_us": 0.0,
            "cpus_throttled": np.nan,
        }
    )


def _own_quota_built(run: Run) -> dict[int, float]:
    """The quota in force in each of the run's periods (µs, NaN: none), by period number:
    from limits.csv where the bundle has it (a limit resized in place), at the level the
    per-period table is on (a pod's quota when the container has none)."""
    per = _periods(run)
    q = per["quota_us"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    return dict(zip(per["period"].astype(np.int64).tolist(), q.tolist(), strict=True))


def _outer_levels_built(run: Run) -> list[dict[str, Any]]:
    """The levels of the run above the table's with a quota of their own (a pod's), each as
    :func:`settings` lists it, with its quota period by period (``quota_by_period``) and its
    grid's phase (``phase_ns``) for replaying the run itself."""
    from .levels import level_names, level_run, table_level

    names = level_names(run)
    table = table_level(run)
    if len(names) < 2:
        return []
    base = _grid_phase(run)
    out = []
    for name in names[names.index(table) + 1 :]:  # the levels above the table's
        lr = level_run(run, name)
        if _no_quota(lr):
            continue
        try:
            g = analyze(lr).grid
        except GmpError as e:  # its samples do not place its boundaries: it cannot be replayed
            note = f"level {name!r} left out of the what-if replay: its period boundaries cannot be placed ({e})"
            if note not in run.notes:
                run.notes.append(note)
            continue
        q = _own_quota(lr)
        known = [x for x in q.values() if not math.isnan(x)]
        out.append(
            {
                "level": name,
                "quota_us": known[0] if known else lr.meta.get("quota_us"),
                "period_us": g.period_ns // 1000,
                "burst_us": lr.meta.get("burst_us") or 0,
                "offset_ns": (g.phase_ns - base) % g.period_ns,
                "phase_ns": g.phase_ns,
                "quota_by_period": q,
            }
        )
    return out


def _settings_built(run: Run) -> dict[str, Any]:
    """:func:`settings`, built."""
    m = run.meta
    a = analyze(run)
    own = [x for x in _own_quota(run).values() if not math.isnan(x)]
    outer = [{k: v for k, v in lv.items() if k not in ("phase_ns", "quota_by_period")} for lv in _outer_levels(run)]
    return {
        "quota_us": own[0] if own else m.get("quota_us"),
        "period_us": a.period_ns // 1000,
        "burst_us": m.get("burst_us") or 0,
        "gomaxprocs": a.gomaxprocs or m.get("ncpu"),
        "cpus": m.get("ncpu"),
        "slice_us": float(m.get("cfs_slice_us") or SLICE_US),
        "hz": 1_000_000_000 // tick_ns(m),
        "outer": outer,
        # where the scheduler ticks fell relative to the boundaries (ticks at multiples of
        # 1/HZ on CLOCK_MONOTONIC); None for a run without a grid
        "tick_phase_ns": None if _no_quota(run) else a.grid.phase_ns % tick_ns(m),
    }


# Without requests, each period's measured CPU is replayed as work items of this size
# arriving evenly over the period (independent: they run side by side up to the CPUs the
# setting allows)
USAGE_ITEM_NS = 10_000_000


def _demand_built(run: Run) -> dict[str, Any]:
    """:func:`demand`, built."""
    per = _periods(run)
    r = run.requests
    if r is None or not len(r):
        u = per.dropna(subset=["usage_us"])
        u = u[u["usage_us"] > 0]
        if not len(u):
            raise MissingDataError(f"{run.path}: no requests.csv and no CPU use in cpu_stat.csv: nothing to replay")
        work = u["usage_us"].to_numpy(dtype=np.float64) * 1000
        items = np.maximum(np.ceil(work / USAGE_ITEM_NS), 1).astype(np.int64)
        first = np.repeat(u["start_ns"].to_numpy(dtype=np.int64), items)
        span = np.repeat((u["end_ns"] - u["start_ns"]).to_numpy(dtype=np.int64), items)
        k = np.arange(items.sum()) - np.repeat(np.cumsum(items) - items, items)
        sched = first + (k * span // np.repeat(items, items))
        return {
            "sched_ns": sched,
            "cost_ns": np.repeat(work / items, items),
            "concurrency": None,
            "used_us": float(work.sum() / 1000),
            "span_ns": (int(u["start_ns"].iloc[0]), int(u["end_ns"].iloc[-1])),
            "source": "usage",
        }
    r = r.sort_values("sched_ns", kind="stable")
    sched = r["sched_ns"].to_numpy(dtype=np.int64)
    t0, t1 = int(sched[0]), int(r["end_ns"].max())
    inside = (per["end_ns"] > t0) & (per["start_ns"] < t1)
    used_us = float(per.loc[inside, "usage_us"].sum())
    load = run.meta.get("load") or {}
    conc = load.get("concurrency") if load.get("mode") == "closed" else None
    cost, own = request_costs(r, used_us * 1000)
    return {
        "sched_ns": sched,
        "cost_ns": cost,
        "concurrency": int(conc) if conc else None,
        "used_us": used_us,
        "span_ns": (t0, t1),
        "source": "requests",
        "cost_source": own,
    }


# requests.csv's cpu_ns is taken as the spread of the cost when at least this share of the
# requests carry it (a timeout or a failure carries none and gets the others' mean)
MIN_CPU_NS_SHARE = 0.5


def request_costs(r: pd.DataFrame, used_ns: float) -> tuple[float | np.ndarray, str]:
    """The CPU each request (rows in ``r``'s order) needs in the replay, adding up to
    ``used_ns``, the group's CPU over the requests' span: where the service reported each
    request's own CPU (``cpu_ns``), in proportion to it, so the runtime's CPU beside the
    handlers (GC workers, the network) is spread over the requests as they cost; otherwise
    one mean for all. Returns the costs and which it was ("cpu_ns" or "mean")."""
    n = len(r)
    if "cpu_ns" in r:
        own = r["cpu_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
        known = ~np.isnan(own)
        if known.mean() >= MIN_CPU_NS_SHARE and own[known].sum() > 0:
            own = np.where(known, own, own[known].mean())
            return own * (used_ns / own.sum()), "cpu_ns"
    return used_ns / n, "mean"


# the per-run inputs of a replay, each built once per run (``_memo``)
def _grid_phase(run: Run) -> int:
    return _memo(run, "grid_phase", _grid_phase_built)


def _no_quota(run: Run) -> bool:
    return _memo(run, "no_quota", _no_quota_built)


def _own_quota(run: Run) -> dict[int, float]:
    return _memo(run, "own_quota", _own_quota_built)


def _outer_levels(run: Run) -> list[dict[str, Any]]:
    return _memo(run, "outer_levels", _outer_levels_built)


def _stw_model(run: Run) -> dict[str, float] | None:
    return _memo(run, "stw_model", _stw_model_built)


def _prep_built(run: Run) -> dict[str, Any]:
    """Everything a replay reads from the run, in one memo (one Analysis lookup per replay)."""
    no_quota = _no_quota(run)
    return {
        "settings": _memo(run, "settings", _settings_built),
        "demand": _memo(run, "demand", _demand_built),
        "phase": _grid_phase(run),
        "no_quota": no_quota,
        "own_quota": _own_quota(run),
        "outer_levels": _outer_levels(run),
        "stw": _stw_model(run),
        "own_period_ns": None if no_quota else analyze(run).period_ns,
    }


def settings(run: Run) -> dict[str, Any]:
    """The run's own settings as the replay takes them: ``quota_us`` (the first known; None:
    no limit), ``period_us``, ``burst_us``, ``gomaxprocs``, ``cpus`` (None if not recorded),
    ``slice_us`` and ``hz`` (recorded, else the kernel's defaults), ``tick_phase_ns`` (how long
    after a scheduler tick the boundaries came), and ``outer``: the levels above with a quota
    of their own (a pod's), each a dict of ``level``, ``quota_us``, ``period_us``,
    ``burst_us`` and ``offset_ns`` (how long after the table level's boundary its own comes)."""
    return copy.deepcopy(_memo(run, "settings", _settings_built))


def demand(run: Run) -> dict[str, Any]:
    """The run's CPU demand as the replay takes it: arrivals (``sched_ns``, int64 ns) and the
    CPU each needs (``cost_ns``: one mean for requests, one value per item otherwise), the
    generator's in-flight cap (``concurrency``: the clients of a closed loop; None for an
    open one), the measured CPU over the span, and where the demand came from
    (``source``: "requests", with ``cost_source`` "cpu_ns" or "mean": :func:`request_costs`;
    or "usage" for a bundle without requests: each period's measured
    CPU as work arriving in it, a lower bound where the run was throttled, since work the
    quota held back shows up later or never; latency is then unknown)."""
    return copy.deepcopy(_memo(run, "demand", _demand_built))


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
    runtime is caught, so exhaustion moves with it by up to a tick per level).

    Columns: ``period`` (index on the grid), ``start_ns``, ``end_ns`` (the boundaries, int64
    ns, same phase as the run's grid), ``quota_us``, ``usage_us`` (CPU used in the period),
    ``throttled`` (the runtime ran out), ``exhausted_at_us`` (offset into the period, NaN if
    not throttled), ``stall_us`` (wall time frozen to the boundary), ``cpus_throttled`` (CPUs
    running when it ran out), ``requests`` (scheduled in the period), ``latency_p50_ms`` and
    ``latency_p99_ms`` (scheduled start to end, of the requests scheduled in the period);
    with a trace, ``stw`` (GC stop-the-world pauses expected to begin in the period, at the
    run's rate per CPU-second) and ``stw_stretched`` (of those, how many are expected to
    run into the exhaustion and last to the boundary; NaN without a trace or for a run
    without a quota). They are estimates beside the table: they do not change its stall,
    usage or latency.
    ``.attrs["model"]`` holds the settings and the demand used (cost per request, ...).
    """
    prep = _memo(run, "prep", _prep_built)
    lim = prep["settings"]
    P = lim["period_us"] if period_us is None else period_us
    burst = lim["burst_us"] if burst_us is None else burst_us
    G = lim["gomaxprocs"] if gomaxprocs is None else gomaxprocs
    C = lim["cpus"] if cpus is None else cpus
    if C is None:
        raise MissingDataError(f"{run.path}: meta.json records no ncpu: give what_if(..., cpus=N)")
    q: float | dict[int, float] | None
    if unlimited:
        q = None
    elif quota_us is None:  # the run's own, period by period (on its own period only)
        q = prep["own_quota"] if P == lim["period_us"] else lim["quota_us"]
    else:
        q = quota_us
    bad = [
        f"{k}={v!r}"
        for k, v, ok in (
            ("period_us", P, _num(P) and P > 0 and float(P).is_integer()),
            ("quota_us", quota_us, quota_us is None or (_num(quota_us) and quota_us > 0)),
            ("burst_us", burst, _num(burst) and burst >= 0),
            ("gomaxprocs", G, _num(G) and G >= 1 and float(G).is_integer()),
            ("cpus", C, _num(C) and C >= 1 and float(C).is_integer()),
            ("tick_phase_ns", tick_phase_ns, tick_phase_ns is None or (_num(tick_phase_ns) and tick_phase_ns >= 0)),
        )
        if not ok
    ]
    if unlimited and outer:
        bad.append(f"unlimited=True with outer={outer!r}")
    if bad:
        raise UsageError(
            f"what_if({', '.join(bad)}): give a whole positive period (µs), GOMAXPROCS and CPU count "
            "(cpus= where the bundle does not record them) and a positive quota; burst >= 0, tick_phase_ns >= 0; "
            "unlimited=True takes no levels above"
        )
    P, G, C, burst = int(P), int(G), int(C), float(burst)
    d = prep["demand"]
    phase = prep["phase"]
    specs = [] if unlimited else _outer_specs(prep, outer, q, P * 1000, phase)
    sched = d["sched_ns"] if d["concurrency"] is None else np.full(len(d["sched_ns"]), d["sched_ns"][0])
    out = _replay(
        sched, d["cost_ns"], d["concurrency"], q, P * 1000, phase, burst, G, C, lim["slice_us"], lim["hz"], specs,
        tick_phase_ns,
    )  # fmt: skip
    stw = prep["stw"]
    if stw is not None:
        # a GC stop-the-world begins while the group runs, about as often per CPU-second as
        # in the run; one that begins within its own length of the exhaustion cannot finish
        # before the CPUs freeze and lasts to the boundary (the world stays stopped)
        out["stw"] = stw["per_cpu_s"] * out["usage_us"] / 1e6
        ex = out["exhausted_at_us"].to_numpy() / 1000
        with np.errstate(invalid="ignore", divide="ignore"):
            risk = np.where(out["throttled"].to_numpy() & (ex > 0), np.minimum(1.0, stw["mean_ms"] / ex), 0.0)
        out["stw_stretched"] = out["stw"] * risk
    else:
        out["stw"] = out["stw_stretched"] = np.nan
    if d["source"] == "usage":  # work items, not requests: no latency to tell
        out["requests"] = 0
        out["latency_p50_ms"] = out["latency_p99_ms"] = np.nan
        out.attrs["latency_ms"] = np.zeros(0)
        out.attrs["throughput_rps"] = math.nan
    out.attrs["model"] = {
        "demand": d["source"],
        "quota_us": q if not isinstance(q, dict) else "as the run had it, period by period",
        "period_us": P,
        "burst_us": burst,
        "gomaxprocs": G,
        "cpus": C,
        "cost_ms": float(np.mean(d["cost_ns"])) / 1e6,
        "cost_per_request": d.get("cost_source", "per period of usage"),
        "concurrency": d["concurrency"],
        "arrivals": len(d["sched_ns"]),
        "stw": None if stw is None else dict(stw),
        "outer": [
            {
                "quota_us": x[0] if not isinstance(x[0], dict) else "period by period",
                "period_us": x[1] // 1000,
                "offset_ns": (x[2] - phase) % x[1],
                "burst_us": x[3],
            }
            for x in specs
        ],
    }
    return out


def _stw_model_built(run: Run) -> dict[str, float] | None:
    """The run's GC stop-the-world pauses as the replay takes them (None without a trace
    holding any, or without a quota: no period grid to place them on): how many began per
    CPU-second the group used over the trace window
    (``per_cpu_s``), and how long the ones that did not run into a boundary lasted
    (``mean_ms``), with ``count`` and ``stretched`` as measured."""
    if run.trace_path is None or _no_quota(run):
        return None
    try:
        a = analyze(run)
        sp, per = a.stw_periods, a.periods
    except (MissingDataError, GmpError):
        return None
    seen = per["stw_count"].notna()
    # the pauses that began in the periods the trace covers whole, over those periods' CPU
    gc = sp[sp["kind"].astype(str).str.startswith("GC") & sp["period"].isin(per.loc[seen, "period"])]
    used_s = float(per.loc[seen, "usage_us"].sum()) / 1e6
    plain = gc.loc[~gc["spans_boundary"].astype(bool), "dur_ms"]
    if not len(gc) or not len(plain) or used_s <= 0:
        return None
    return {
        "per_cpu_s": len(gc) / used_s,
        "mean_ms": float(plain.mean()),
        "count": len(gc),
        "stretched": int(gc["spans_boundary"].astype(bool).sum()),
    }


# the least quota the kernel accepts (cpu.cfs_quota_us / cpu.max), µs
MIN_QUOTA_US = 1000


def _outer_specs(
    prep: dict[str, Any],
    outer: list[dict[str, Any]] | None,
    q: float | dict[int, float] | None,
    period_ns: int,
    phase: int,
) -> list[tuple[float | dict[int, float] | None, int, int, float]]:
    """The levels above as the replay takes them: (quota, period_ns, phase_ns, burst_us).
    By default the run's own, each period's quota moved by as many CPUs as this level's
    moves at that time (``q`` over ``period_ns`` against the run's own quota then)."""
    if outer is None:
        own = prep["own_quota"]
        own_p = prep["own_period_ns"] or period_ns
        base = prep["phase"]
        ks = sorted(own)

        def cpus_then(t: int) -> float:
            """This level's CPUs at time t: as replayed, minus as the run had them."""
            if q is None or isinstance(q, dict) or not ks:  # the run's own, period by period: no change
                return 0.0
            k = (t - base) // own_p
            was = own[ks[max(bisect.bisect_right(ks, k) - 1, 0)]]
            return 0.0 if math.isnan(was) else float(q) / (period_ns / 1000) - was / (own_p / 1000)

        specs: list[tuple[float | dict[int, float] | None, int, int, float]] = []
        for lv in prep["outer_levels"]:
            P = int(lv["period_us"]) * 1000
            moved = {}
            for k, v in lv["quota_by_period"].items():
                d = cpus_then(int(lv["phase_ns"]) + k * P) * lv["period_us"]
                moved[k] = v if math.isnan(v) else max(v + d, MIN_QUOTA_US)
            specs.append((moved, P, int(lv["phase_ns"]), float(lv["burst_us"])))
        return specs
    specs = []
    for i, lv in enumerate(outer):
        ok = isinstance(lv, dict) and all(
            (
                lv.get("quota_us") is None or (_num(lv["quota_us"]) and lv["quota_us"] > 0),
                _num(lv.get("period_us")) and lv["period_us"] > 0 and float(lv["period_us"]).is_integer(),
                _num(lv.get("burst_us", 0)) and lv.get("burst_us", 0) >= 0,
                _num(lv.get("offset_ns", 0)),
            )
        )
        if not ok:
            raise UsageError(
                f"what_if(outer[{i}]={lv!r}): each level above is a dict of quota_us (> 0 or None), a whole "
                "period_us > 0, burst_us >= 0 and offset_ns (its boundary after this level's), as settings() lists them"
            )
        P = int(lv["period_us"]) * 1000
        specs.append((lv.get("quota_us"), P, (phase + int(lv.get("offset_ns", 0))) % P, float(lv.get("burst_us", 0))))
    return specs


class _Level:
    """One cgroup level's bandwidth control as the kernel keeps it: the group's pool, the
    runtime each CPU's cfs_rq holds, which of them it throttled, its own period timer."""

    def __init__(self, quota_us: float | dict[int, float] | None, period_ns: int, phase_ns: int,
                 burst_us: float, origin: int, C: int) -> None:  # fmt: skip
        self.period = float(period_ns)
        # the first boundary after the origin, and that period's number on the level's grid
        k = (origin - phase_ns) // period_ns
        self.k = k
        self.b = float(phase_ns + (k + 1) * period_ns - origin)
        self.start = float(phase_ns + k * period_ns - origin)
        # the quota of each period (ns; inf: no limit): one value, or one per period number
        # (a period past the last known keeps the last)
        if isinstance(quota_us, dict):
            known = sorted(quota_us.items())
            self.qk = [x for x, _ in known]
            self.qv = [math.inf if math.isnan(v) else v * 1000.0 for _, v in known]
        else:
            self.qk, self.qv = [k], [math.inf if quota_us is None else float(quota_us) * 1000.0]
        self.limited = any(not math.isinf(v) for v in self.qv)
        self.burst = burst_us * 1000.0
        self.quota = self.quota_of(k)
        self.pool = self.quota
        self.local = [0.0] * C  # runtime each CPU holds (below 0: what it overran)
        self.frozen = [False] * C
        self.froze_at = [math.nan] * C  # when each CPU was throttled in this period

    def quota_of(self, k: int) -> float:
        return self.qv[max(bisect.bisect_right(self.qk, k) - 1, 0)]

    def draw(self, j: int, slice_ns: float) -> bool:
        """CPU j takes runtime from the pool (a slice, and what it overran); False if it
        still holds none: it is throttled."""
        got = min(slice_ns - self.local[j], max(self.pool, 0.0))
        self.local[j] += got
        self.pool -= got
        return self.local[j] > _EPS

    def throttle(self, j: int, t: float) -> None:
        self.frozen[j] = True
        self.froze_at[j] = t

    def refill(self, t: float) -> None:
        """The period timer: the next period's quota (with burst: plus what was left, up to
        quota + burst), each throttled CPU's overrun paid first, as far as it goes; a CPU
        whose overrun the pool cannot cover stays throttled."""
        self.k += 1
        self.start, self.b = self.b, self.b + self.period
        self.froze_at = [math.nan] * len(self.local)
        self.quota = self.quota_of(self.k)
        if not self.limited:
            return
        self.pool = min(self.pool + self.quota, self.quota + self.burst) if self.burst > 0 else self.quota
        for j, fz in enumerate(self.frozen):
            if fz:
                got = min(-self.local[j] + 1.0, max(self.pool, 0.0))
                self.local[j] += got
                self.pool -= got
                self.frozen[j] = self.local[j] <= 0
                if self.frozen[j]:
                    self.froze_at[j] = t


_EPS = 1e-6
THROTTLED_AT_BOUNDARY = True


def _replay(
    sched: np.ndarray,
    cost_ns: float | np.ndarray,
    conc: int | None,
    quota_us: float | dict[int, float] | None,
    period_ns: int,
    phase_ns: int,
    burst_us: float,
    G: int,
    C: int,
    slice_us: float = SLICE_US,
    hz: int = HZ,
    outer: list[tuple[float | dict[int, float] | None, int, int, float]] = (),
    tick_phase_ns: int | None = None,
) -> pd.DataFrame:
    """Event by event: arrivals, completions, ticks, boundaries. Between two events nothing
    changes, so each step is exact (times in ns from the first boundary, as floats).

    The kernel's rules, per CPU (a cfs_rq) and per level: the runtime it holds is charged
    as it runs; at a tick, one that holds none draws a slice (plus what it overran) from the
    pool and, if the pool cannot cover it, is throttled; a CPU that starts to run the
    group's work with none and an empty pool is throttled at once; one that goes idle hands
    back what it holds beyond 1 ms. At a boundary the pool refills (:meth:`_Level.refill`).
    ``outer``: the other levels above, each (quota, period_ns, phase_ns, burst_us) with its
    own timer; their runtime is charged as the group's work runs, and a CPU any level
    throttles stops. ``tick_phase_ns``: how long after a tick the first level's boundaries
    come (default: as on the run's clock). The table is on the first level's grid, and its exhaustion, stall and
    CPUs frozen are that level's own, as the level's cpu.stat counts them."""
    n = len(sched)
    cost = np.broadcast_to(np.asarray(cost_ns, dtype=np.float64), (n,)).tolist()  # per request
    tol = 1e-6 * float(np.mean(cost))
    k0 = (int(sched[0]) - phase_ns) // period_ns
    origin = phase_ns + k0 * period_ns
    arr = (np.asarray(sched, dtype=np.int64) - origin).astype(np.float64).tolist()
    own = _Level(quota_us, period_ns, phase_ns, burst_us, origin, C)
    levels = [own] + [_Level(q, p, ph, bu, origin, C) for q, p, ph, bu in outer]
    gates = [lv for lv in levels if lv.limited]
    t = 0.0
    slice_ns = slice_us * 1000.0
    tick = 1e9 / hz
    # the tick comes at multiples of its length on CLOCK_MONOTONIC (the kernel aligns it at
    # boot); the boundaries sit tick_phase_ns after one of them
    tau = origin % int(tick) if tick_phase_ns is None else int(tick_phase_ns) % int(tick)
    tick0 = float(int(tick) - tau)
    next_tick = tick0
    q_col = {k0: own.quota}
    busy: list[int] = []  # the CPUs the work is on
    runnable: list[int] = []  # of those, the ones no level has throttled
    rem: list[float] = []  # CPU still needed by each request in the service
    ids: list[int] = []
    waiting: collections.deque[int] = collections.deque()
    end = np.full(n, np.nan)
    sent = np.asarray(arr, dtype=np.float64).copy()  # when each request enters the service
    rows: dict[int, list[float]] = {}  # period -> [used_ns, exhausted_ns, stall_ns, cpus]
    i = 0
    eps = _EPS

    def free(j: int) -> bool:
        return not any(lv.frozen[j] for lv in gates)

    while i < n or rem or waiting:
        row = rows.setdefault(own.k, [0.0, math.nan, 0.0, 0.0, 0.0])
        # the CPUs the work is on: as many as there is work for; a throttled CPU keeps its
        # threads (they are dequeued there, not moved), so its share of the work waits
        now_busy = list(range(min(len(rem), G, C)))
        for lv in gates:
            for j in busy:
                if j not in now_busy and not lv.frozen[j] and lv.local[j] > 1e6:
                    # idle: it hands back what it holds beyond min_cfs_rq_runtime (1 ms)
                    lv.pool += lv.local[j] - 1e6
                    lv.local[j] = 1e6
        busy = now_busy
        for j in busy:
            if j not in runnable and free(j):
                # woken with nothing to run on: throttled at once; the enqueue goes up the
                # levels from the group's own and stops at the first that throttles
                for lv in gates:
                    if lv.local[j] <= eps and not lv.draw(j, slice_ns):
                        lv.throttle(j, t)
                        break
        runnable = [j for j in busy if free(j)]
        if gates:
            if rem and not runnable and any(own.frozen[j] for j in busy):
                if math.isnan(row[1]):  # usage goes flat: the work is frozen, by this level too
                    row[1] = t - own.start
                    row[2] = own.b - t
            elif runnable and not math.isnan(row[1]):  # it runs on (runtime left, or another level's refill)
                row[1], row[2] = math.nan, 0.0
        running = len(runnable)
        steps = [min(lv.b for lv in levels) - t]
        if i < n:
            steps.append(max(arr[i] - t, 0.0))
        if running:
            steps.append(min(rem) * len(rem) / running)
            if gates:
                # the next tick that finds a CPU out of runtime (the ones before change nothing)
                out_at = t + max(min(lv.local[j] for lv in gates for j in runnable), 0.0)
                nt = tick0 + math.ceil((out_at - tick0) / tick - 1e-9) * tick
                steps.append((nt if nt > t + eps else next_tick) - t)
        dt = max(min(steps), 0.0)
        if running and dt > 0:
            share = dt * running / len(rem)
            rem = [x - share for x in rem]
            row[0] += dt * running
            for lv in gates:
                for j in runnable:
                    lv.local[j] -= dt
        t += dt
        while next_tick <= t + eps:
            next_tick += tick
        if any(t >= lv.b - eps for lv in levels):  # a boundary
            for lv in levels[1:]:
                if t >= lv.b - eps:
                    lv.refill(t)
            if t >= own.b - eps:
                if not math.isnan(row[1]) and row[2] > 0:
                    # the CPUs frozen through the stall: a CPU throttled before the work went
                    # flat counts for the stall only, so never more than the CPUs it was on
                    row[3] = sum(min(own.b - x, row[2]) for x in own.froze_at if not math.isnan(x)) / row[2]
                # nr_throttled counts a period whose timer finds a CPU of the level throttled
                row[4] = float(any(own.frozen))
                own.refill(t)
                q_col[own.k] = own.quota
            runnable = [j for j in runnable if free(j)]
        if gates and abs(t - (next_tick - tick)) <= eps:  # a tick (at a boundary too)
            for j in runnable:
                for lv in gates:
                    if lv.local[j] <= eps and not lv.draw(j, slice_ns):
                        lv.throttle(j, t)
            runnable = [j for j in runnable if free(j)]
        done = [j for j, x in enumerate(rem) if x <= tol]
        for j in reversed(done):
            end[ids[j]] = t
            del rem[j], ids[j]
            if waiting:
                ids.append(waiting.popleft())
                rem.append(cost[ids[-1]])
                sent[ids[-1]] = t
        while i < n and arr[i] <= t + eps:
            if conc is None or len(rem) < conc:
                ids.append(i)
                rem.append(cost[i])
            else:
                waiting.append(i)
            i += 1
    ks = np.array(sorted(rows), dtype=np.int64)
    vals = np.array([rows[x] for x in ks.tolist()], dtype=np.float64).reshape(-1, 5)
    start = phase_ns + ks * period_ns
    ex = vals[:, 1]
    if THROTTLED_AT_BOUNDARY:
        # throttled as cpu.stat counts it; where the work ran on to the end on another CPU,
        # usage rose to the end (as df_periods measures it: the last read where it still rose)
        thr = (vals[:, 4] > 0) | ~np.isnan(ex)
        ex = np.where(thr & np.isnan(ex), float(period_ns), ex)
    else:
        thr = ~np.isnan(ex)
    per = pd.DataFrame(
        {
            "period": ks,
            "start_ns": start,
            "end_ns": start + period_ns,
            "quota_us": [_us(q_col.get(x, own.quota_of(x))) for x in ks.tolist()],
            "usage_us": vals[:, 0] / 1000,
            "throttled": thr,
            "exhausted_at_us": ex / 1000,
            "stall_us": vals[:, 2] / 1000,
            # as measured: a stall shorter than a tick gives no CPU count (df_periods)
            "cpus_throttled": np.where(vals[:, 2] >= 1e9 / hz, vals[:, 3], np.nan),
        }
    )
    # a request belongs to the period it entered in (an open loop's scheduled time)
    t_in = sent + origin
    which = np.searchsorted(start, t_in, side="right") - 1
    per["requests"] = np.bincount(which, minlength=len(per))
    lat = pd.Series((end - sent) / 1e6)
    q = lat.groupby(which).quantile([0.5, 0.99]).unstack()
    per["latency_p50_ms"] = np.nan
    per["latency_p99_ms"] = np.nan
    per.loc[q.index, "latency_p50_ms"] = q[0.5].to_numpy()
    per.loc[q.index, "latency_p99_ms"] = q[0.99].to_numpy()
    per.attrs["latency_ms"] = lat.to_numpy()
    # the requests answered per second, from the first one sent to the last answer
    span = float(np.nanmax(end) - np.min(sent)) if n else math.nan
    per.attrs["throughput_rps"] = n / span * 1e9 if span > 0 else math.nan
    return per


def summarize(
    per: pd.DataFrame, latency_ms: np.ndarray | None = None, throughput_rps: float | None = None
) -> dict[str, float]:
    """The figures the validation compares, from a measured df_periods table or a what_if
    one over the same span: throttled share of the periods (%), exhaustion p50 (ms), CPUs
    frozen p50 (rounded to 0.1), stall per second (ms/s), p99 latency (ms), requests
    answered per second (``per.attrs["throughput_rps"]`` of a what_if table unless given;
    NaN without requests)."""
    known = per["throttled"].notna().to_numpy()  # a hole in the samples: not a period to count
    per = per[known]
    thr = per["throttled"].astype(bool).to_numpy()
    span_s = float((per["end_ns"].iloc[-1] - per["start_ns"].iloc[0]) / 1e9) if len(per) else math.nan
    ex = per.loc[thr, "exhausted_at_us"].dropna()
    cpus = per.loc[thr, "cpus_throttled"].dropna()
    if latency_ms is None:
        latency_ms = per.attrs.get("latency_ms")
    rps = per.attrs.get("throughput_rps", math.nan) if throughput_rps is None else throughput_rps
    return {
        "throttled_pct": 100.0 * thr.mean() if len(per) else math.nan,
        "exhausted_p50_ms": float(ex.median() / 1000) if len(ex) else math.nan,
        "cpus_frozen_p50": round(float(cpus.median()), 1) if len(cpus) else math.nan,
        "stall_ms_per_s": float(per.loc[thr, "stall_us"].sum() / 1000 / span_s) if span_s else math.nan,
        "p99_ms": float(np.nanpercentile(latency_ms, 99)) if latency_ms is not None and len(latency_ms) else math.nan,
        "throughput_rps": float(rps),
    }


def measured(run: Run) -> dict[str, float]:
    """:func:`summarize` of the run itself, over the periods the replay covers."""
    per = _periods(run)
    d = _memo(run, "demand", _demand_built)
    t0, t1 = d["span_ns"]
    span = per[(per["end_ns"] > t0) & (per["start_ns"] < t1)]
    r = run.requests
    lat = None
    rps = math.nan
    if d["source"] == "requests":  # as df_periods counts them: the requests that succeeded
        ok = r["status"] // 100 == 2
        lat = ((r.loc[ok, "end_ns"] - r.loc[ok, "sched_ns"]) / 1e6).to_numpy()
        # answered (any HTTP status; 0 is a transport error or timeout), as the replay
        # answers every request
        ans = r["status"] > 0
        took = float(r.loc[ans, "end_ns"].max() - r["sched_ns"].min()) if ans.any() else math.nan
        rps = int(ans.sum()) / took * 1e9 if took > 0 else math.nan
    return summarize(span, lat if lat is not None else np.zeros(0), rps)


def replay_as(source: Run, target: Run, tick_phase_ns: int | None = None) -> pd.DataFrame:
    """:func:`what_if` of ``source``'s demand under ``target``'s settings (limit, period,
    burst, GOMAXPROCS, CPUs, the levels above): what the target would have measured,
    predicted from the source. The ticks fall as on the source's clock unless
    ``tick_phase_ns`` is given (:func:`predict` averages over them)."""
    return what_if(source, tick_phase_ns=tick_phase_ns, **target_setting(target))


# a run not yet made has no known tick phase (its bandwidth timer starts wherever the limit
# is set): predictions for one average over this many phases spread evenly over a tick (a
# tick moves the exhaustion by up to a tick per level: two phases half a tick apart bound it)
TICK_PHASES = 2


def estimate(run: Run, phases: int = TICK_PHASES, **setting: Any) -> dict[str, float]:
    """The model's one estimator: :func:`summarize` of the run's demand replayed under
    ``setting`` (:func:`what_if`'s keywords), averaged over ``phases`` tick phases spread
    evenly over a tick (NaN where none has the figure), since a setting not yet run has no
    known tick phase. :func:`predict`, :func:`gmpanalysis.advise` and the report all use
    it, and the validation (benchmarks/validate_whatif.py) measures its error."""
    tick = 1_000_000_000 // int(_memo(run, "prep", _prep_built)["settings"]["hz"])
    each = [summarize(what_if(run, tick_phase_ns=i * tick // phases, **setting)) for i in range(phases)]
    out = {}
    for k in each[0]:
        v = [x[k] for x in each if not math.isnan(x[k])]
        out[k] = float(np.mean(v)) if v else math.nan
    return out


def target_setting(target: Run) -> dict[str, Any]:
    """``target``'s settings as :func:`what_if`'s keywords (limit, period, burst,
    GOMAXPROCS, CPUs, the levels above), for replaying another run's demand under them."""
    lim = _memo(target, "prep", _prep_built)["settings"]
    return {
        "quota_us": lim["quota_us"],
        "period_us": lim["period_us"],
        "burst_us": lim["burst_us"],
        "gomaxprocs": lim["gomaxprocs"],
        "cpus": lim["cpus"],
        "unlimited": lim["quota_us"] is None and not lim["outer"],
        "outer": copy.deepcopy(lim["outer"]),
    }


def predict(source: Run, target: Run, phases: int = TICK_PHASES) -> dict[str, float]:
    """:func:`estimate` of ``source``'s demand under ``target``'s settings: what the target
    would have measured, predicted from the source, its tick phase taken as unknown."""
    return estimate(source, phases, **target_setting(target))


def validate(runs: list[Run]) -> pd.DataFrame:
    """Each run predicted from each other one (:func:`predict`: its settings replayed over
    the other's demand, its tick phase taken as unknown) beside what it measured: one row
    per (source, target) and figure."""
    rows = []
    for tgt in runs:
        truth = measured(tgt)
        for src in runs:
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
    "settings",
    "summarize",
    "target_setting",
    "validate",
    "what_if",
]
