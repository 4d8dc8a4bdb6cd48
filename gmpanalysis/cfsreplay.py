"""The kernel's CFS bandwidth control, replayed event by event (:func:`gmpanalysis.what_if`
builds its inputs from a run and reads its table).

* **The bandwidth controller**, per CPU as the kernel keeps it (a cfs_rq each): runtime is
  drawn from the group's pool a ``sched_cfs_bandwidth_slice_us`` slice (5 ms) at a time, at
  a tick (CONFIG_HZ), when the CPU holds none, and the draw also pays what it ran past zero
  since the last tick; when the pool cannot cover it the CPU is throttled (a CPU that wakes
  to run the group's work with nothing and an empty pool is throttled at once); an idle CPU
  hands back what it holds beyond 1 ms. At each boundary the pool is refilled with the quota
  in force then (with ``burst_us``, unused runtime carries over up to quota + burst, Linux
  5.14+), and a throttled CPU's overrun is paid first: one whose overrun the pool cannot
  cover stays throttled. A period is *throttled* when its timer finds a CPU throttled
  (nr_throttled's rule); it was *exhausted at* the moment every CPU the work was on had been
  throttled for the rest of the period, its *stall* is the time from then to the boundary,
  and its *CPUs throttled* the CPUs' frozen time over the stall, each CPU counted for the
  stall at most. A throttled CPU keeps its threads. Work that could not run waits.
* **Levels**: every level above with a quota of its own is replayed beside the table's,
  each with its own pool, per-CPU runtime and period timer at its own phase; a CPU any
  level throttles stops, and each level counts only its own throttling.
* **The tick** comes at multiples of 1/HZ on CLOCK_MONOTONIC (all CPUs together,
  ``skew_tick=0``): where it falls relative to the boundaries moves the exhaustion by up to
  a tick per level.
"""

from __future__ import annotations

import bisect
import collections
import math

import numpy as np
import pandas as pd

from .kernelfacts import DEFAULT_HZ

# sched_cfs_bandwidth_slice_us: the runtime a CPU takes from the pool at a time (the
# kernel's default; a bundle may record its own as meta["cfs_slice_us"])
SLICE_US = 5000.0
# the scheduler tick where a bundle records no CONFIG_HZ (kernelfacts): a CPU's runtime is
# checked when the tick charges it, so a CPU out of runtime runs on up to one tick
HZ = DEFAULT_HZ


def _us(ns: float) -> float:
    return math.nan if math.isinf(ns) else ns / 1000


def _us(ns: float) -> float:
    return math.nan if math.isinf(ns) else ns / 1000


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
