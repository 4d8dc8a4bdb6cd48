"""What the what-if replay reads from a run: its own settings, its demand, the levels above
with quotas of their own, its GC pauses; each built once per run and kept with its
:class:`~gmpanalysis.analysis.Analysis` (a replay of many settings reads them many times).
The model is described in :mod:`gmpanalysis.whatif`."""

from __future__ import annotations

import copy
import math
import numbers
from typing import Any

import numpy as np
import pandas as pd

from .analysis import analyze
from .bundle import Run
from .cfsreplay import SLICE_US
from .cgroup import bundle_cpus, bundle_period_us
from .errors import BundleError, GmpError, MissingDataError, UsageError
from .grid import restart_ns
from .kernelfacts import tick_ns
from .levels import ever_limited, level_names
from .modelerror import loop_of
from .served import answered, latency_ms, sampled, succeeded


def memo(run: Run, key: str, build: Any) -> Any:
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
    return 0 if no_quota(run) else analyze(run).grid.phase_ns


def _no_quota_built(run: Run) -> bool:
    """No level of the run ever had a quota (meta.json, its levels, limits.csv)."""
    return not any(ever_limited(run, name) for name in level_names(run))


def run_periods(run: Run) -> pd.DataFrame:
    """The run's periods (df_periods), or for a run without a quota the same columns where
    they can be told (start_ns, end_ns, usage_us from the samples; never throttled) on a
    100 ms grid of phase 0 over the samples."""
    if not no_quota(run):
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
    per = run_periods(run)
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
        if no_quota(lr):
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
    burst, quota = m.get("burst_us") or 0, own[0] if own else m.get("quota_us")
    if quota is not None and burst > quota:
        # tg_set_cfs_bandwidth refuses a burst above the quota: no kernel ran this
        raise BundleError(
            f"{run.path / 'meta.json'}: burst_us {burst} is above quota_us {quota}; the kernel refuses a "
            "burst above the quota, so the file is corrupt: correct burst_us (the cgroup's cpu.max.burst or "
            "cpu.cfs_burst_us)"
        )
    return {
        "quota_us": quota,
        "period_us": a.period_ns // 1000,
        "burst_us": burst,
        "gomaxprocs": a.gomaxprocs or bundle_cpus(m),
        "cpus": bundle_cpus(m),
        "slice_us": float(m.get("cfs_slice_us") or SLICE_US),
        "hz": 1_000_000_000 // tick_ns(m),
        "outer": outer,
        # where the scheduler ticks fell relative to the boundaries (ticks at multiples of
        # 1/HZ on CLOCK_MONOTONIC); None for a run without a grid
        "tick_phase_ns": None if no_quota(run) else a.grid.phase_ns % tick_ns(m),
    }


# Without requests, each period's measured CPU is replayed as work items of this size
# arriving evenly over the period (independent: they run side by side up to the CPUs the
# setting allows)
USAGE_ITEM_NS = 10_000_000


def demand_built(run: Run) -> dict[str, Any]:
    """:func:`demand`, built."""
    per = run_periods(run)
    r = run.requests
    unsampled = 0
    if r is not None and len(r):
        # only the requests whose CPU the counters measured: the group's CPU is shared out
        # over them (one begun after the sampler died would get a share of nothing)
        inside = sampled(r, run.samples, restart_ns(run.meta))
        unsampled = int((~inside).sum())
        r = r[inside]
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
            "unsampled": unsampled,
        }
    r = r.sort_values("sched_ns", kind="stable")
    sched = r["sched_ns"].to_numpy(dtype=np.int64)
    t0, t1 = int(sched[0]), int(r["end_ns"].max())
    inside = (per["end_ns"] > t0) & (per["start_ns"] < t1)
    used_us = float(per.loc[inside, "usage_us"].sum())
    conc = _clients(run)
    cost, own = request_costs(r, used_us * 1000)
    # the stretches between the table's segments (a counter reset: the cgroup recreated) had
    # no reads: the table has no periods there, nor the demand requests
    seg = per["segment"].to_numpy() if "segment" in per else np.zeros(len(per))  # no quota: no periods
    cut = np.flatnonzero(seg[1:] != seg[:-1])
    gaps = list(zip(per["end_ns"].to_numpy()[cut].tolist(), per["start_ns"].to_numpy()[cut + 1].tolist(), strict=True))
    return {
        "gaps_ns": gaps,
        "latency_shape": latency_shape(r) if conc else None,
        "sched_ns": sched,
        "cost_ns": cost,
        "concurrency": int(conc) if conc else None,
        # a closed loop's clients sent until their last request: a replay keeps them sending
        # that long, whatever the setting (the generator ran for a time, not a count)
        "stop_ns": int(sched[-1]) if conc else None,
        "used_us": used_us,
        "span_ns": (t0, t1),
        "source": "requests",
        "cost_source": own,
        "unsampled": unsampled,
    }


def _clients(run: Run) -> int | None:
    """A closed loop's clients (meta.json ``load``: ``mode`` "closed", ``concurrency``), None
    for an open loop; where the bundle does not say how its load was sent, an open loop,
    and a note that says so (a closed loop's run replayed so sends its requests on their
    schedule, not as answers come)."""
    load = run.meta.get("load")
    mode = loop_of(run.meta)
    where = run.path / "meta.json"
    if mode == "closed":
        c = load.get("concurrency")
        if isinstance(c, bool) or not isinstance(c, numbers.Real) or not (c >= 1 and float(c).is_integer()):
            raise BundleError(
                f'{where}: load.concurrency is {c!r}, but a closed loop (load.mode "closed") needs its number '
                "of clients, a whole number of 1 or more: set it to the load generator's concurrency"
            )
        return int(c)
    if mode is None:
        said = repr(load.get("mode")) if isinstance(load, dict) and load.get("mode") is not None else "not given"
        note = (
            f"{where}: load.mode is {said}: the requests are replayed as an open loop, each sent at its "
            "sched_ns whatever is in flight; for clients that each wait for their answer, set load.mode to "
            '"closed" and load.concurrency to their number'
        )
        if note not in run.notes:
            run.notes.append(note)
    return None


def latency_shape(r: pd.DataFrame) -> np.ndarray | None:
    """The run's measured latencies (the requests that succeeded) over their mean, sorted:
    the spread a closed loop's replay carries over (see :mod:`gmpanalysis.whatif`). None
    without a latency to tell."""
    lat = latency_ms(r)[succeeded(r)]
    lat = lat[np.isfinite(lat)]
    if not len(lat) or not lat.mean() > 0:
        return None
    return np.sort(lat / lat.mean())


# requests.csv's cpu_ns is taken as the spread of the cost when at least this share of the
# requests the service answered carry it (one it never answered, a client's timeout,
# carries none)
MIN_CPU_NS_SHARE = 0.5


def request_costs(r: pd.DataFrame, used_ns: float) -> tuple[float | np.ndarray, str]:
    """The CPU each request (rows in ``r``'s order) needs in the replay, adding up to
    ``used_ns``, the group's CPU over the requests' span: where the service reported each
    request's own CPU (``cpu_ns``), in proportion to it, so the runtime's CPU beside the
    handlers (GC workers, the network) is spread over the requests as they cost, those
    without it at the others' mean; otherwise one mean for all. The group's CPU is at least
    the handlers', so where it is less than the requests would cost at those rates, the
    ones without cpu_ns were not all served (clients gave up on a service the quota held
    back): the costs stay as reported, the others' at the mean, and add up to more than the
    group got, the demand it could not serve. Returns the costs and which it was ("cpu_ns"
    or "mean")."""
    n = len(r)
    if "cpu_ns" in r:
        own = r["cpu_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
        known = ~np.isnan(own)
        ans = answered(r)
        if ans.any() and known[ans].mean() >= MIN_CPU_NS_SHARE and own[known].sum() > 0:
            fill = np.where(known, own, own[known].mean())
            scale = used_ns / fill.sum()
            return fill * (scale if known.all() else max(scale, 1.0)), "cpu_ns"
    return used_ns / n, "mean"


# the per-run inputs of a replay, each built once per run (``memo``)
def _grid_phase(run: Run) -> int:
    return memo(run, "grid_phase", _grid_phase_built)


def no_quota(run: Run) -> bool:
    """No level of the run ever had a quota: no CFS periods, never throttled (memoised)."""
    return memo(run, "no_quota", _no_quota_built)


def _own_quota(run: Run) -> dict[int, float]:
    return memo(run, "own_quota", _own_quota_built)


def _outer_levels(run: Run) -> list[dict[str, Any]]:
    return memo(run, "outer_levels", _outer_levels_built)


def _stw_model(run: Run) -> dict[str, float] | None:
    return memo(run, "stw_model", _stw_model_built)


def prep_built(run: Run) -> dict[str, Any]:
    """Everything a replay reads from the run, in one memo (one Analysis lookup per replay)."""
    unlimited = no_quota(run)
    return {
        "settings": memo(run, "settings", _settings_built),
        "demand": memo(run, "demand", demand_built),
        "phase": _grid_phase(run),
        "no_quota": unlimited,
        "own_quota": _own_quota(run),
        "outer_levels": _outer_levels(run),
        "stw": _stw_model(run),
        "own_period_ns": None if unlimited else analyze(run).period_ns,
    }


def settings(run: Run) -> dict[str, Any]:
    """The run's own settings as the replay takes them: ``quota_us`` (the first known; None:
    no limit), ``period_us``, ``burst_us``, ``gomaxprocs``, ``cpus`` (None if not recorded),
    ``slice_us`` and ``hz`` (recorded, else the kernel's defaults), ``tick_phase_ns`` (how long
    after a scheduler tick the boundaries came), and ``outer``: the levels above with a quota
    of their own (a pod's), each a dict of ``level``, ``quota_us``, ``period_us``,
    ``burst_us`` and ``offset_ns`` (how long after the table level's boundary its own comes)."""
    return copy.deepcopy(memo(run, "settings", _settings_built))


def demand(run: Run) -> dict[str, Any]:
    """The run's CPU demand as the replay takes it: arrivals (``sched_ns``, int64 ns) and the
    CPU each needs (``cost_ns``: one mean for requests, one value per item otherwise), the
    generator's in-flight cap (``concurrency``: the clients of a closed loop; None for an
    open one), the measured CPU over the span, the requests left out as begun outside the
    sampled span (``unsampled``: their CPU was not measured), and where the demand came from
    (``source``: "requests", with ``cost_source`` "cpu_ns" or "mean": :func:`request_costs`;
    or "usage" for a bundle without requests: each period's measured
    CPU as work arriving in it, a lower bound where the run was throttled, since work the
    quota held back shows up later or never; latency is then unknown)."""
    return copy.deepcopy(memo(run, "demand", demand_built))


def offered_load(run: Run) -> dict[str, Any] | None:
    """The load the run was offered, as times after its first request was sent (int64 ns):
    ``sched_ns`` (when each was sent; an open loop's schedule, a closed loop's sends),
    ``concurrency`` (a closed loop's clients; None for an open loop), ``stop_ns`` (when a
    closed loop's clients stopped sending), ``gaps_ns`` (stretches the counters missed),
    ``name`` (meta.json's, else the directory's). None for a bundle without requests: its
    load is not known, only what ran."""
    return copy.deepcopy(memo(run, "offered_load", _offered_load_built))


def _offered_load_built(run: Run) -> dict[str, Any] | None:
    d = memo(run, "demand", demand_built)
    if d["source"] != "requests":
        return None
    t0 = int(d["sched_ns"][0])
    return {
        "sched_ns": d["sched_ns"] - t0,
        "concurrency": d["concurrency"],
        "stop_ns": None if d["stop_ns"] is None else d["stop_ns"] - t0,
        "gaps_ns": [(a - t0, b - t0) for a, b in d["gaps_ns"]],
        "span_ns": (0, d["span_ns"][1] - t0),
        "name": str(run.meta.get("name") or run.path.name),
    }


def under_load(d: dict[str, Any], load: dict[str, Any]) -> dict[str, Any]:
    """A service's demand (``d``: :func:`demand`'s, of requests) under another run's offered
    load (:func:`offered_load`): that run's arrivals, or its clients sending for its time,
    each request needing the CPU the service's requests needed, in their order and again
    in turn where the load has more, scaled to their mean where the load has fewer or not a
    whole number of turns (a handler's CPU per request is the service's; how many requests
    come and when is the load's). The load starts at the service's first request,
    so the replay keeps the service run's period grid and tick phase. A closed loop keeps
    the service's latency spread where the service's run was a closed loop too."""
    t0 = int(d["sched_ns"][0])
    n = len(load["sched_ns"])
    cost = d["cost_ns"]
    if np.ndim(cost):
        full = np.asarray(cost, dtype=np.float64)
        cost = full[np.arange(n) % len(full)]
        # the first n of a trend (a warming cache) or of a few costly ones would move the
        # service's CPU per request; its mean is the service's
        if cost.sum() > 0:
            cost = cost * (full.mean() / cost.mean())
    closed = load["concurrency"] is not None
    return {
        **d,
        "gaps_ns": [(a + t0, b + t0) for a, b in load["gaps_ns"]],
        "latency_shape": d.get("latency_shape") if closed else None,
        "sched_ns": load["sched_ns"] + t0,
        "cost_ns": cost,
        "concurrency": load["concurrency"],
        "stop_ns": None if load["stop_ns"] is None else load["stop_ns"] + t0,
        "span_ns": (t0, t0 + load["span_ns"][1]),
        "load": load["name"],
    }


def prep_under_load(run: Run, load: Any, caller: str = "what_if") -> dict[str, Any]:
    """The run's replay inputs (:func:`prep_built`, memoised) with ``load``'s offered load
    in place of its own (:func:`under_load`); its own where ``load`` is None or itself, or
    where either has no requests to tell a load or a CPU per request by (the demand's
    ``load`` then says whose load it is). A ``load`` that is not a run is a
    :class:`UsageError` naming ``caller``."""
    if load is not None and not isinstance(load, Run):
        raise UsageError(f"{caller}(load={load!r}): give a run (gmp.load_run) whose offered load to replay under")
    prep = memo(run, "prep", prep_built)
    if load is None or load is run:
        return prep
    offered = memo(load, "offered_load", _offered_load_built)
    if offered is None or prep["demand"]["source"] != "requests":
        who = "no requests within the samples in " + str(load.path if offered is None else run.path)
        return {**prep, "demand": {**prep["demand"], "load": f"{run.meta.get('name') or run.path.name}'s own ({who})"},
                "spread_quantiles": {}}  # fmt: skip
    return {**prep, "demand": under_load(prep["demand"], offered), "spread_quantiles": {}}


def _stw_model_built(run: Run) -> dict[str, float] | None:
    """The run's GC stop-the-world pauses as the replay takes them (None without a trace
    holding any, or without a quota: no period grid to place them on): how many began per
    CPU-second the group used over the trace window
    (``per_cpu_s``), and how long the ones that did not run into a boundary lasted
    (``mean_ms``), with ``count`` and ``stretched`` as measured."""
    if run.trace_path is None or no_quota(run):
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
