"""What if the limit, the period, the burst, GOMAXPROCS or the CPUs were different?

A replay of the run's measured CPU demand through the kernel's CFS bandwidth mechanics:

* **Demand.** Each request of the run arrives when the load generator scheduled it
  (``sched_ns``) and needs ``cost`` of CPU, the run's CPU use over the requests' span
  divided by their number (the demo service's handlers are uniform; the per-request spread
  is not in the bundle, so it is not modelled). An open-loop generator sends each one on
  time whatever is in flight (vegeta adds workers); a closed-loop one (``load.mode`` =
  "closed") has ``load.concurrency`` clients, each sending its next request when the last
  one is answered, and latency counts from the sending.
* **The Go scheduler.** The requests in the service share the CPUs it can use, as the Go
  scheduler's 10 ms preemption shares them: ``min(requests, GOMAXPROCS, CPUs)`` CPUs, each
  request getting its share (processor sharing).
* **The bandwidth controller.** A quota of ``quota_us`` of runtime per ``period_us``, refilled
  at each boundary of the run's own period grid (same phase); with ``burst_us``, runtime
  left unused carries over, up to ``quota + burst`` (Linux 5.14+). When the runtime runs out
  every CPU of the group stops until the next boundary (the period is *throttled*, it was
  *exhausted at* that offset, the time to the boundary is its *stall*, and the CPUs that
  were running are its *CPUs throttled*). Work that could not run waits: nothing is lost.

Left out, and why (each shifts single periods, not averages): the kernel hands runtime to
each CPU in ``sched_cfs_bandwidth_slice_us`` slices (5 ms) and checks it at ticks, so one
period's usage can pass the quota by up to a slice per CPU and the next one's falls short
(measured here: 44-58 ms used for a 50 ms quota); the pod level's own quota and phase;
the runtime's own CPU (GC workers, spinning threads) beyond its share in the mean cost;
and a stop-the-world stretched to the next boundary (it is in the latency, through the
stall, but not as a pause of its own).
"""

from __future__ import annotations

import collections
import math
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


def _limits(run: Run) -> dict[str, Any]:
    m = run.meta
    a = analyze(run)
    return {
        "quota_us": m.get("quota_us"),
        "period_us": a.period_ns // 1000,
        "burst_us": m.get("burst_us") or 0,
        "gomaxprocs": a.gomaxprocs or m.get("ncpu"),
        "cpus": m.get("ncpu"),
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
    (``source``: "requests", or "usage" for a bundle without requests: each period's measured
    CPU as work arriving in it, a lower bound where the run was throttled, since work the
    quota held back shows up later or never; latency is then unknown)."""
    per = analyze(run).periods
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
    sched = np.sort(r["sched_ns"].to_numpy(dtype=np.int64))
    t0, t1 = int(sched[0]), int(r["end_ns"].max())
    inside = (per["end_ns"] > t0) & (per["start_ns"] < t1)
    used_us = float(per.loc[inside, "usage_us"].sum())
    load = run.meta.get("load") or {}
    conc = load.get("concurrency") if load.get("mode") == "closed" else None
    return {
        "sched_ns": sched,
        "cost_ns": used_us * 1000 / len(sched),
        "concurrency": int(conc) if conc else None,
        "used_us": used_us,
        "span_ns": (t0, t1),
        "source": "requests",
    }


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
    given; ``unlimited=True``: no quota). See the module docstring for the model.

    Columns: ``period`` (index on the grid), ``start_ns``, ``end_ns`` (the boundaries, int64
    ns, same phase as the run's grid), ``quota_us``, ``usage_us`` (CPU used in the period),
    ``throttled`` (the runtime ran out), ``exhausted_at_us`` (offset into the period, NaN if
    not throttled), ``stall_us`` (wall time frozen to the boundary), ``cpus_throttled`` (CPUs
    running when it ran out), ``requests`` (scheduled in the period), ``latency_p50_ms`` and
    ``latency_p99_ms`` (scheduled start to end, of the requests scheduled in the period).
    ``.attrs["model"]`` holds the settings and the demand used (cost per request, ...).
    """
    lim = _limits(run)
    q = None if unlimited else (lim["quota_us"] if quota_us is None else quota_us)
    P = int(lim["period_us"] if period_us is None else period_us)
    burst = float(lim["burst_us"] if burst_us is None else burst_us)
    G = int(lim["gomaxprocs"] if gomaxprocs is None else gomaxprocs)
    C = int(lim["cpus"] if cpus is None else cpus)
    if P <= 0 or G < 1 or C < 1 or (q is not None and q <= 0) or burst < 0:
        raise UsageError(
            f"what_if: period_us={P}, quota_us={q}, burst_us={burst}, gomaxprocs={G}, cpus={C}: "
            "give a positive period, quota, GOMAXPROCS and CPU count (burst >= 0)"
        )
    d = demand(run)
    phase = analyze(run).grid.phase_ns
    sched = d["sched_ns"] if d["concurrency"] is None else np.full(len(d["sched_ns"]), d["sched_ns"][0])
    out = _replay(sched, d["cost_ns"], d["concurrency"], q, P * 1000, phase, burst, G, C)
    if d["source"] == "usage":  # work items, not requests: no latency to tell
        out["requests"] = 0
        out["latency_p50_ms"] = out["latency_p99_ms"] = np.nan
        out.attrs["latency_ms"] = np.zeros(0)
    out.attrs["model"] = {
        "demand": d["source"],
        "quota_us": q,
        "period_us": P,
        "burst_us": burst,
        "gomaxprocs": G,
        "cpus": C,
        "cost_ms": float(np.mean(d["cost_ns"])) / 1e6,
        "concurrency": d["concurrency"],
        "arrivals": len(d["sched_ns"]),
    }
    return out


def _replay(
    sched: np.ndarray,
    cost_ns: float | np.ndarray,
    conc: int | None,
    quota_us: float | None,
    period_ns: int,
    phase_ns: int,
    burst_us: float,
    G: int,
    C: int,
    slice_us: float = SLICE_US,
    hz: int = HZ,
) -> pd.DataFrame:
    """Event by event: arrivals, completions, a CPU's slice running out, boundaries. Between
    two events nothing changes, so each step is exact (a handful per request and period)."""
    n = len(sched)
    cost = np.broadcast_to(np.asarray(cost_ns, dtype=np.float64), (n,)).tolist()  # per request
    tol = 1e-6 * float(np.mean(cost))
    k0 = (int(sched[0]) - phase_ns) // period_ns
    b_next = phase_ns + (k0 + 1) * period_ns
    t = float(phase_ns + k0 * period_ns)
    quota = None if quota_us is None else quota_us * 1000.0
    cap = None if quota is None else quota + burst_us * 1000.0
    slice_ns = slice_us * 1000.0
    tick = 1e9 / hz
    dying = [math.inf] * C  # a CPU out of runtime runs on to its next tick, then freezes
    pool = quota
    local = [0.0] * C  # each CPU's runtime drawn from the pool and not yet used
    frozen = [False] * C  # CPUs throttled until the next boundary
    froze_at: list[float] = []
    used_before: set[int] = set()
    rem: list[float] = []  # CPU still needed by each request in the service
    ids: list[int] = []
    waiting: collections.deque[int] = collections.deque()
    end = np.full(n, np.nan)
    sent = np.asarray(sched, dtype=np.float64).copy()  # when each request enters the service
    rows: dict[int, list[float]] = {}  # period -> [used_ns, exhausted_ns, stall_ns, cpus]
    k = k0
    i = 0
    eps = 1e-6
    while i < n or rem or waiting:
        row = rows.setdefault(k, [0.0, math.nan, 0.0, 0.0])
        # the CPUs in use: as many as there is work for, among those not frozen
        want = min(len(rem), G)
        used = [j for j in range(C) if not frozen[j]][:want]
        if quota is not None:
            for j in used_before - set(used):
                # a CPU that goes idle hands back what it holds beyond 1 ms
                # (return_cfs_rq_runtime keeps min_cfs_rq_runtime)
                if local[j] > 1e6:
                    pool += local[j] - 1e6
                    local[j] = 1e6
            for j in used:  # a CPU with nothing left draws a slice, or is throttled ...
                if dying[j] <= t + eps:
                    frozen[j] = True
                    froze_at.append(t)
                    dying[j] = math.inf
                elif local[j] <= eps and dying[j] == math.inf:
                    take = min(slice_ns, max(pool, 0.0))
                    if take > eps:
                        local[j] += take
                        pool -= take
                    else:
                        # ... at the next tick: the runtime is checked when the tick charges
                        # it; what it runs past zero is a debt the next period pays
                        dying[j] = (math.floor(t / tick) + 1) * tick
            used = [j for j in used if not frozen[j]]
            if froze_at and not used and rem and math.isnan(row[1]):
                # usage went flat: every CPU the work could use is frozen
                start_k = b_next - period_ns
                row[1] = t - start_k
                row[2] = b_next - t
                row[3] = sum(b_next - x for x in froze_at) / max(b_next - t, 1.0)
        used_before = set(used)
        running = len(used)
        steps = [b_next - t]
        if i < n:
            steps.append(max(float(sched[i]) - t, 0.0))
        if running:
            steps.append(min(rem) * len(rem) / running)
            if quota is not None:
                steps.append(min(local[j] if dying[j] == math.inf else dying[j] - t for j in used))
        dt = min(steps)
        if running and dt > 0:
            share = dt * running / len(rem)
            rem = [x - share for x in rem]
            row[0] += dt * running
            if quota is not None:
                for j in used:
                    local[j] -= dt
        t += dt
        if t >= b_next - eps:  # the boundary: the pool refills, every CPU thaws
            k += 1
            b_next += period_ns
            if quota is not None:
                pool = min(pool + quota, cap) if burst_us > 0 else quota
                for j in range(C):  # a throttled CPU's overrun is paid first
                    if local[j] < 0:
                        pool += local[j]
                        local[j] = 0.0
            frozen = [False] * C
            dying = [math.inf] * C
            froze_at = []
            continue
        done = [j for j, x in enumerate(rem) if x <= tol]
        for j in reversed(done):
            end[ids[j]] = t
            del rem[j], ids[j]
            if waiting:
                ids.append(waiting.popleft())
                rem.append(cost[ids[-1]])
                sent[ids[-1]] = t
        while i < n and sched[i] <= t + eps:
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
            "quota_us": np.nan if quota_us is None else float(quota_us),
            "usage_us": vals[:, 0] / 1000,
            "throttled": ~np.isnan(vals[:, 1]),
            "exhausted_at_us": vals[:, 1] / 1000,
            "stall_us": vals[:, 2] / 1000,
            # as measured: a stall shorter than a tick gives no CPU count (df_periods)
            "cpus_throttled": np.where(vals[:, 2] >= TICK_WINDOW_NS, vals[:, 3], np.nan),
        }
    )
    which = np.searchsorted(start, sched, side="right") - 1
    per["requests"] = np.bincount(which, minlength=len(per))
    lat = pd.Series((end - (sched if conc is None else sent)) / 1e6)
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
    thr = per["throttled"].astype("boolean").fillna(False).to_numpy(dtype=bool)
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
    per = analyze(run).periods
    d = demand(run)
    t0, t1 = d["span_ns"]
    span = per[(per["end_ns"] > t0) & (per["start_ns"] < t1)]
    r = run.requests
    lat = None if d["source"] != "requests" else ((r["end_ns"] - r["sched_ns"]) / 1e6).to_numpy()
    return summarize(span, lat if lat is not None else np.zeros(0))


def validate(runs: list[Run]) -> pd.DataFrame:
    """Each run predicted from each other one (its settings replayed over the other's
    demand) beside what it measured: one row per (source, target) and figure."""
    rows = []
    for tgt in runs:
        lim = _limits(tgt)
        truth = measured(tgt)
        for src in runs:
            pred = what_if(
                src,
                quota_us=lim["quota_us"],
                period_us=lim["period_us"],
                burst_us=lim["burst_us"],
                gomaxprocs=lim["gomaxprocs"],
                cpus=lim["cpus"],
                unlimited=lim["quota_us"] is None,
            )
            got = summarize(pred)
            for key, v in truth.items():
                rows.append({"target": tgt.meta.get("name"), "source": src.meta.get("name"), "figure": key,
                             "measured": v, "predicted": got[key], "error": got[key] - v})  # fmt: skip
    return pd.DataFrame(rows)


__all__ = ["demand", "measured", "summarize", "validate", "what_if"]
