"""What if the limit, the period, the burst, GOMAXPROCS or the CPUs were different?

A replay of the run's measured CPU demand through the kernel's CFS bandwidth mechanics:

* **Demand.** Each request of the run arrives when the load generator scheduled it
  (``sched_ns``) and needs its share of the run's CPU use over the requests' span: in
  proportion to the CPU the service reported for it (requests.csv ``cpu_ns``, the handler's
  own thread CPU), or, without that, the same for every request. An open-loop generator sends each one on
  time whatever is in flight (vegeta adds workers); a closed-loop one (``load.mode`` =
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
  cannot cover stays throttled. A period is *throttled* when a CPU is; it was *exhausted
  at* the moment every CPU the work was on had been throttled (usage goes flat), its
  *stall* is the time from then to the boundary, and its *CPUs throttled* the CPUs' frozen
  time over the stall. A throttled CPU keeps its threads (they are dequeued there, not
  moved). Work that could not run waits: nothing is lost.

Left out, and why: a second level with a quota of its own (a pod's, with its own timer
phase); the runtime's own CPU (GC workers, spinning threads) beyond its share in the mean
cost, and the GC's pauses, which keep an allocation-heavy handler's requests from running
side by side (it would need the trace's runnable goroutines as the demand); and a stop-the-world stretched to the next boundary
as a pause of its own (it is in the latency, through the stall). The validation sweep
(benchmarks/validate_whatif.py, README) measures what these cost.
"""

from __future__ import annotations

import bisect
import collections
import math
import numbers
from typing import Any

import numpy as np
import pandas as pd

from .analysis import analyze
from .bundle import Run
from .errors import MissingDataError, UsageError
from .timeline import TICK_WINDOW_NS

# sched_cfs_bandwidth_slice_us: the runtime a CPU takes from the pool at a time (the
# kernel's default; a bundle may record its own as meta["cfs_slice_us"])
SLICE_US = 5000.0
# the scheduler tick (CONFIG_HZ; 250 on Debian's kernels and here): a CPU's runtime is
# checked when the tick charges it, so a CPU out of runtime runs on up to one tick
HZ = 250


def _us(ns: float) -> float:
    return math.nan if math.isinf(ns) else ns / 1000


def _num(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _grid_phase(run: Run) -> int:
    """The run's period grid phase; 0 for a run without a quota, whose group has no
    bandwidth timer (a limit set later gets a phase of the kernel's choosing)."""
    return 0 if _no_quota(run) else analyze(run).grid.phase_ns


def _no_quota(run: Run) -> bool:
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
    P = int(run.meta.get("period_us") or 100_000) * 1000
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


def _own_quota(run: Run) -> dict[int, float]:
    """The quota in force in each of the run's periods (µs, NaN: none), by period number:
    from limits.csv where the bundle has it (a limit resized in place), at the level the
    per-period table is on (a pod's quota when the container has none)."""
    per = _periods(run)
    q = per["quota_us"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    return dict(zip(per["period"].astype(np.int64).tolist(), q.tolist(), strict=True))


def settings(run: Run) -> dict[str, Any]:
    """The run's own settings as the replay takes them: ``quota_us`` (the first known; None:
    no limit), ``period_us``, ``burst_us``, ``gomaxprocs``, ``cpus`` (None if not recorded),
    ``slice_us`` and ``hz`` (recorded, else the kernel's defaults)."""
    m = run.meta
    a = analyze(run)
    own = [x for x in _own_quota(run).values() if not math.isnan(x)]
    return {
        "quota_us": own[0] if own else m.get("quota_us"),
        "period_us": a.period_ns // 1000,
        "burst_us": m.get("burst_us") or 0,
        "gomaxprocs": a.gomaxprocs or m.get("ncpu"),
        "cpus": m.get("ncpu"),
        "slice_us": float(m.get("cfs_slice_us") or SLICE_US),
        "hz": int(m.get("hz") or HZ),
    }


# Without requests, each period's measured CPU is replayed as work items of this size
# arriving evenly over the period (independent: they run side by side up to the CPUs the
# setting allows)
USAGE_ITEM_NS = 10_000_000


def demand(run: Run) -> dict[str, Any]:
    """The run's CPU demand as the replay takes it: arrivals (``sched_ns``, int64 ns) and the
    CPU each needs (``cost_ns``: one mean for requests, one value per item otherwise), the
    generator's in-flight cap (``concurrency``: the clients of a closed loop; None for an
    open one), the measured CPU over the span, and where the demand came from
    (``source``: "requests", with ``cost_source`` "cpu_ns" or "mean": :func:`request_costs`;
    or "usage" for a bundle without requests: each period's measured
    CPU as work arriving in it, a lower bound where the run was throttled, since work the
    quota held back shows up later or never; latency is then unknown)."""
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


def what_if(
    run: Run,
    quota_us: float | None = None,
    period_us: int | None = None,
    burst_us: float | None = None,
    gomaxprocs: int | None = None,
    cpus: int | None = None,
    *,
    unlimited: bool = False,
) -> pd.DataFrame:
    """The periods this run would have had under other settings (the run's own where not
    given: its quota period by period, as resized in place if it was; ``unlimited=True``:
    no quota). See the module docstring for the model.

    Columns: ``period`` (index on the grid), ``start_ns``, ``end_ns`` (the boundaries, int64
    ns, same phase as the run's grid), ``quota_us``, ``usage_us`` (CPU used in the period),
    ``throttled`` (the runtime ran out), ``exhausted_at_us`` (offset into the period, NaN if
    not throttled), ``stall_us`` (wall time frozen to the boundary), ``cpus_throttled`` (CPUs
    running when it ran out), ``requests`` (scheduled in the period), ``latency_p50_ms`` and
    ``latency_p99_ms`` (scheduled start to end, of the requests scheduled in the period).
    ``.attrs["model"]`` holds the settings and the demand used (cost per request, ...).
    """
    lim = settings(run)
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
        q = _own_quota(run) if P == lim["period_us"] else lim["quota_us"]
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
        )
        if not ok
    ]
    if bad:
        raise UsageError(
            f"what_if({', '.join(bad)}): give a whole positive period (µs), GOMAXPROCS and CPU count "
            "(cpus= where the bundle does not record them) and a positive quota; burst >= 0"
        )
    P, G, C, burst = int(P), int(G), int(C), float(burst)
    d = demand(run)
    phase = _grid_phase(run)
    sched = d["sched_ns"] if d["concurrency"] is None else np.full(len(d["sched_ns"]), d["sched_ns"][0])
    out = _replay(sched, d["cost_ns"], d["concurrency"], q, P * 1000, phase, burst, G, C, lim["slice_us"], lim["hz"])
    if d["source"] == "usage":  # work items, not requests: no latency to tell
        out["requests"] = 0
        out["latency_p50_ms"] = out["latency_p99_ms"] = np.nan
        out.attrs["latency_ms"] = np.zeros(0)
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
    }
    return out


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
) -> pd.DataFrame:
    """Event by event: arrivals, completions, ticks, boundaries. Between two events nothing
    changes, so each step is exact (times in ns from the first boundary, as floats).

    The kernel's rules, per CPU (a cfs_rq): the runtime it holds is charged as it runs; at a
    tick, one that holds none draws a slice (plus what it overran) from the pool and, if the
    pool cannot cover it, is throttled; a CPU that starts to run the group's work with none
    and an empty pool is throttled at once; one that goes idle hands back what it holds
    beyond 1 ms. At a boundary the pool refills (with burst: plus what was left, up to
    quota + burst), each throttled CPU's overrun is paid from it first, and a CPU whose
    overrun the pool cannot cover stays throttled."""
    n = len(sched)
    cost = np.broadcast_to(np.asarray(cost_ns, dtype=np.float64), (n,)).tolist()  # per request
    tol = 1e-6 * float(np.mean(cost))
    k0 = (int(sched[0]) - phase_ns) // period_ns
    origin = phase_ns + k0 * period_ns
    arr = (np.asarray(sched, dtype=np.int64) - origin).astype(np.float64).tolist()
    P = float(period_ns)
    t, b_next = 0.0, P
    # the quota of each period (ns; inf: no limit): one value, or one per period number
    # (a period past the last known keeps the last)
    if isinstance(quota_us, dict):
        known = sorted((k, v) for k, v in quota_us.items())
        qk, qv = [k for k, _ in known], [math.inf if math.isnan(v) else v * 1000.0 for _, v in known]
    else:
        qk, qv = [k0], [math.inf if quota_us is None else float(quota_us) * 1000.0]

    def quota_of(k: int) -> float:
        at = max(bisect.bisect_right(qk, k) - 1, 0)
        return qv[at]

    quota = quota_of(k0)
    limited = any(not math.isinf(v) for v in qv)
    slice_ns = slice_us * 1000.0
    tick = 1e9 / hz
    tick0 = float((origin // int(tick) + 1) * int(tick) - origin)  # ticks on the clock's own multiples
    next_tick = tick0
    pool = quota
    q_col = {k0: quota}
    local = [0.0] * C  # runtime each CPU holds (below 0: what it overran)
    frozen = [False] * C
    froze_at = [math.nan] * C  # when each CPU was throttled in this period
    running_cpus: list[int] = []
    rem: list[float] = []  # CPU still needed by each request in the service
    ids: list[int] = []
    waiting: collections.deque[int] = collections.deque()
    end = np.full(n, np.nan)
    sent = np.asarray(arr, dtype=np.float64).copy()  # when each request enters the service
    rows: dict[int, list[float]] = {}  # period -> [used_ns, exhausted_ns, stall_ns, cpus]
    k = k0
    i = 0
    eps = 1e-6

    def draw(j: int) -> bool:
        """CPU j takes runtime from the pool (a slice, and what it overran); False if it
        still holds none: it is throttled."""
        nonlocal pool
        want = slice_ns - local[j]
        got = min(want, max(pool, 0.0))
        local[j] += got
        pool -= got
        return local[j] > eps

    def throttle(j: int) -> None:
        frozen[j] = True
        froze_at[j] = t

    while i < n or rem or waiting:
        row = rows.setdefault(k, [0.0, math.nan, 0.0, 0.0])
        # the CPUs the work is on: as many as there is work for; a throttled CPU keeps its
        # threads (they are dequeued there, not moved), so its share of the work waits
        used = list(range(min(len(rem), G, C)))
        if limited:
            for j in running_cpus:
                if j not in used and not frozen[j] and local[j] > 1e6:
                    # idle: it hands back what it holds beyond min_cfs_rq_runtime (1 ms)
                    pool += local[j] - 1e6
                    local[j] = 1e6
            for j in used:
                if not frozen[j] and j not in running_cpus and local[j] <= eps and not draw(j):
                    throttle(j)  # woken with nothing to run on: throttled at once
            used = [j for j in used if not frozen[j]]
            if rem and not used and any(frozen) and math.isnan(row[1]):
                row[1] = t - (b_next - P)  # usage goes flat: all the work could use is frozen
                row[2] = b_next - t
        running_cpus = used
        running = len(used)
        steps = [b_next - t]
        if i < n:
            steps.append(max(arr[i] - t, 0.0))
        if running:
            steps.append(min(rem) * len(rem) / running)
            if limited:
                # the next tick that finds a CPU out of runtime (the ones before change nothing)
                out_at = t + max(min(local[j] for j in used), 0.0)
                nt = tick0 + math.ceil((out_at - tick0) / tick - 1e-9) * tick
                steps.append((nt if nt > t + eps else next_tick) - t)
        dt = max(min(steps), 0.0)
        if running and dt > 0:
            share = dt * running / len(rem)
            rem = [x - share for x in rem]
            row[0] += dt * running
            if limited:
                for j in used:
                    local[j] -= dt
        t += dt
        while next_tick <= t + eps:
            next_tick += tick
        if t >= b_next - eps:  # the boundary
            if not math.isnan(row[1]) and row[2] > 0:
                row[3] = sum(b_next - x for x in froze_at if not math.isnan(x)) / row[2]
            k += 1
            b_next += P
            froze_at = [math.nan] * C
            quota = quota_of(k)
            q_col[k] = quota
            if limited:
                pool = min(pool + quota, quota + burst_us * 1000.0) if burst_us > 0 else quota
                for j in range(C):  # a throttled CPU's overrun is paid first, as far as it goes
                    if frozen[j]:
                        got = min(-local[j] + 1.0, max(pool, 0.0))
                        local[j] += got
                        pool -= got
                        frozen[j] = local[j] <= 0
                        if frozen[j]:
                            froze_at[j] = t
            continue
        if limited and abs(t - (next_tick - tick)) <= eps:  # a tick
            for j in used:
                if local[j] <= eps and not draw(j):
                    throttle(j)
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
    vals = np.array([rows[x] for x in ks.tolist()], dtype=np.float64).reshape(-1, 4)
    start = phase_ns + ks * period_ns
    per = pd.DataFrame(
        {
            "period": ks,
            "start_ns": start,
            "end_ns": start + period_ns,
            "quota_us": [_us(q_col.get(x, quota_of(x))) for x in ks.tolist()],
            "usage_us": vals[:, 0] / 1000,
            "throttled": ~np.isnan(vals[:, 1]),
            "exhausted_at_us": vals[:, 1] / 1000,
            "stall_us": vals[:, 2] / 1000,
            # as measured: a stall shorter than a tick gives no CPU count (df_periods)
            "cpus_throttled": np.where(vals[:, 2] >= TICK_WINDOW_NS, vals[:, 3], np.nan),
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
    return per


def summarize(per: pd.DataFrame, latency_ms: np.ndarray | None = None) -> dict[str, float]:
    """The figures the validation compares, from a measured df_periods table or a what_if
    one over the same span: throttled share of the periods (%), exhaustion p50 (ms), CPUs
    frozen p50 (rounded to 0.1), stall per second (ms/s), p99 latency (ms)."""
    known = per["throttled"].notna().to_numpy()  # a hole in the samples: not a period to count
    per = per[known]
    thr = per["throttled"].astype(bool).to_numpy()
    span_s = float((per["end_ns"].iloc[-1] - per["start_ns"].iloc[0]) / 1e9) if len(per) else math.nan
    ex = per.loc[thr, "exhausted_at_us"].dropna()
    cpus = per.loc[thr, "cpus_throttled"].dropna()
    if latency_ms is None:
        latency_ms = per.attrs.get("latency_ms")
    return {
        "throttled_pct": 100.0 * thr.mean() if len(per) else math.nan,
        "exhausted_p50_ms": float(ex.median() / 1000) if len(ex) else math.nan,
        "cpus_frozen_p50": round(float(cpus.median()), 1) if len(cpus) else math.nan,
        "stall_ms_per_s": float(per.loc[thr, "stall_us"].sum() / 1000 / span_s) if span_s else math.nan,
        "p99_ms": float(np.nanpercentile(latency_ms, 99)) if latency_ms is not None and len(latency_ms) else math.nan,
    }


def measured(run: Run) -> dict[str, float]:
    """:func:`summarize` of the run itself, over the periods the replay covers."""
    per = _periods(run)
    d = demand(run)
    t0, t1 = d["span_ns"]
    span = per[(per["end_ns"] > t0) & (per["start_ns"] < t1)]
    r = run.requests
    lat = None
    if d["source"] == "requests":  # as df_periods counts them: the requests that succeeded
        ok = r["status"] // 100 == 2
        lat = ((r.loc[ok, "end_ns"] - r.loc[ok, "sched_ns"]) / 1e6).to_numpy()
    return summarize(span, lat if lat is not None else np.zeros(0))


def replay_as(source: Run, target: Run) -> pd.DataFrame:
    """:func:`what_if` of ``source``'s demand under ``target``'s settings (limit, period,
    burst, GOMAXPROCS, CPUs): what the target would have measured, predicted from the source."""
    lim = settings(target)
    return what_if(
        source,
        quota_us=lim["quota_us"],
        period_us=lim["period_us"],
        burst_us=lim["burst_us"],
        gomaxprocs=lim["gomaxprocs"],
        cpus=lim["cpus"],
        unlimited=lim["quota_us"] is None,
    )


def validate(runs: list[Run]) -> pd.DataFrame:
    """Each run predicted from each other one (its settings replayed over the other's
    demand) beside what it measured: one row per (source, target) and figure."""
    rows = []
    for tgt in runs:
        truth = measured(tgt)
        for src in runs:
            got = summarize(replay_as(src, tgt))
            for key, v in truth.items():
                rows.append({"target": tgt.meta.get("name"), "source": src.meta.get("name"), "figure": key,
                             "measured": v, "predicted": got[key], "error": got[key] - v})  # fmt: skip
    return pd.DataFrame(rows)


__all__ = ["demand", "measured", "replay_as", "settings", "summarize", "validate", "what_if"]
