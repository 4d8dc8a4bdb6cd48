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

import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from . import cfskernel
from .errors import UsageError
from .kernelfacts import DEFAULT_HZ

# sched_cfs_bandwidth_slice_us: the runtime a CPU takes from the pool at a time (the
# kernel's default; a bundle may record its own as meta["cfs_slice_us"])
SLICE_US = 5000.0
# the scheduler tick where a bundle records no CONFIG_HZ (kernelfacts): a CPU's runtime is
# checked when the tick charges it, so a CPU out of runtime runs on up to one tick
HZ = DEFAULT_HZ


# the loop's tolerances (cfskernel): "at the same time" and "no runtime left", ns
_EPS = cfskernel.EPS
THROTTLED_AT_BOUNDARY = True


class PerPeriod(NamedTuple):
    """A quota period by period as arrays: the period numbers ``k`` (int64, ascending) and
    the quota in each (``us``, µs; NaN: no limit then). An hour of 100 ms periods is 36,000
    of each, which a replay of many settings would otherwise rebuild from a dict each time."""

    k: np.ndarray
    us: np.ndarray

    @classmethod
    def of(cls, by_k: dict[int, float]) -> PerPeriod:
        """From a dict of period number -> quota (µs), in period order."""
        keys = np.fromiter(by_k.keys(), dtype=np.int64, count=len(by_k))
        vals = np.fromiter(by_k.values(), dtype=np.float64, count=len(keys))
        o = np.argsort(keys, kind="stable")
        return cls(keys[o], vals[o])


Quota = float | dict[int, float] | PerPeriod | None


def _us(ns: float) -> float:
    return math.nan if math.isinf(ns) else ns / 1000


def _level(quota_us: Quota, period_ns: int, phase_ns: int, burst_us: float, origin: int) -> dict:
    """One cgroup level as the loop starts it: its first boundary after the origin and that
    period's number on the level's own grid, its quota by period number (ns; inf: no limit;
    one value, or one per period, a period past the last known keeping the last), whether
    any is a limit, and its burst (ns). Its pool starts full."""
    k = (origin - phase_ns) // period_ns
    if isinstance(quota_us, dict):
        quota_us = PerPeriod.of(quota_us)
    if isinstance(quota_us, PerPeriod):  # one per period: an hour's 36,000 on arrays, not one by one
        qk = np.asarray(quota_us.k, dtype=np.int64)
        qv = np.where(np.isnan(quota_us.us), math.inf, np.asarray(quota_us.us, dtype=np.float64) * 1000.0)
    else:
        qk = np.array([k], dtype=np.int64)
        qv = np.array([math.inf if quota_us is None else float(quota_us) * 1000.0])
    quota = float(qv[max(int(np.searchsorted(qk, k, side="right")) - 1, 0)])
    return {
        "lv": [
            float(period_ns),
            float(phase_ns + (k + 1) * period_ns - origin),
            float(phase_ns + k * period_ns - origin),
            quota,
            quota,
            burst_us * 1000.0,
            0.0,  # SHORT: no draw has found the pool short yet
        ],
        "k": k,
        "qk": qk,
        "qv": qv,
        "limited": bool(np.isfinite(qv).any()),
    }


# the periods room is made for at first (more where a replay needs them): 56 MB of rows (7 float64 columns)
MAX_ROOM = 1 << 20


def _cpus(levels: list[dict], G: int, C: int, conc: int | None, least: bool) -> float:
    """The CPUs the work runs on at most: its threads' (a closed loop's clients too), held to
    each level's quota over its period: ``least``, its least quota; else its most, with its
    burst (how fast a replay may go)."""
    rate = float(min(G, C) if conc is None else max(min(G, C, conc), 1))
    for lv in levels:
        qv = np.asarray(lv["qv"], dtype=np.float64)
        finite = qv[np.isfinite(qv)]
        if len(finite):
            q = float(finite.min()) if least else float(finite.max()) + lv["lv"][cfskernel.BURST]
            rate = min(rate, max(q, 1.0) / lv["lv"][cfskernel.PERIOD])
    return rate


def _room(arr: np.ndarray, cost: np.ndarray, levels: list[dict], G: int, C: int, conc: int | None = None) -> int:
    """Periods of the own level the replay likely spans: the arrivals' span plus the work
    at the slowest rate any level allows (its least quota; a closed loop's clients), with
    some to spare."""
    span = float(arr[-1]) + float(np.sum(cost)) / _cpus(levels, G, C, conc, least=True)
    return min(int(span / levels[0]["lv"][cfskernel.PERIOD] * 1.25) + 16, MAX_ROOM)


def _kernel_args(arr: np.ndarray, levels: list[dict], C: int, room: int) -> tuple:
    """The loop's state, as cfskernel lays it out: (levels, state, gates, reqs, runnable,
    rows), fresh."""
    n, L = len(arr), len(levels)
    q_at = np.cumsum([0] + [len(lv["qk"]) for lv in levels]).astype(np.int64)
    lev = (
        np.array([lv["lv"] for lv in levels], dtype=np.float64),
        np.array([lv["k"] for lv in levels], dtype=np.int64),
        np.concatenate([lv["qk"] for lv in levels]).astype(np.int64, copy=False),
        np.concatenate([lv["qv"] for lv in levels]).astype(np.float64, copy=False),
        q_at,
        np.array([lv["limited"] for lv in levels], dtype=np.bool_),
    )
    state = (np.zeros((L, C)), np.zeros((L, C), dtype=np.bool_), np.full((L, C), np.nan))
    gates = np.array([x for x, lv in enumerate(levels) if lv["limited"]], dtype=np.int64)
    reqs = (np.zeros(n, dtype=np.int64), np.zeros(n), np.zeros(n, dtype=np.int64), np.full(n, np.nan), arr.copy())
    rows = np.zeros((room, cfskernel.ROW_COLUMNS))
    rows[:, cfskernel.EXHAUSTED] = np.nan
    return lev, state, gates, reqs, np.zeros(C, dtype=np.bool_), rows


def _lists(x: object) -> object:
    """numpy arrays (in tuples) as Python lists, for the loop in plain Python."""
    if isinstance(x, tuple):
        return tuple(_lists(y) for y in x)
    return x.tolist() if isinstance(x, np.ndarray) else x


def _requests_until(arr: np.ndarray, cost: np.ndarray, levels: list[dict], G: int, C: int, conc: int,
                    stop: float) -> int:  # fmt: skip
    """How many requests a closed loop's clients likely send before ``stop``: at the rate
    :func:`_room` takes (its CPUs over the mean cost), a quarter more, and a client's worth;
    never fewer than the run's own."""
    rate = _cpus(levels, G, C, conc, least=False)
    mean = float(np.mean(cost)) if len(cost) else 0.0
    want = (stop - float(arr[0])) * rate / mean * 1.25 + conc if mean > 0 else len(arr)
    return max(len(arr), min(int(want), len(arr) * MAX_TILES))


# a closed loop's requests are sent again at most this many times over (a setting that runs
# a run's clients this much faster: 16 CPUs for a run held to a sixteenth of one)
MAX_TILES = 256


def _run(
    arr: np.ndarray,
    cost: np.ndarray,
    conc: int | None,
    levels: list[dict],
    G: int,
    C: int,
    slice_ns: float,
    tick: float,
    tick0: float,
    tol: float,
    stop: float = math.inf,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """The loop over every event (cfskernel.replay_events), with room for the periods it
    spans (more and again where the first guess fell short). A closed loop sends the run's
    requests, and until ``stop`` the same again, in turn, as long as its clients need more
    (they keep sending whatever the setting). Returns (end, sent, rows) of the requests
    sent, and whether any level's pool fell short of a draw (cfskernel.SHORT)."""
    base = cost
    if conc is not None and stop < math.inf:
        n = _requests_until(arr, cost, levels, G, C, int(conc), stop)
        arr, cost = np.full(n, arr[0]), np.resize(base, n)
    room = _room(arr, cost, levels, G, C, conc)
    scalars = (
        -1 if conc is None else int(conc),
        int(G),
        int(C),
        float(slice_ns),
        float(tick),
        float(tick0),
        float(tol),
        float(stop),
        len(base),
    )
    while True:
        inputs, fresh = (arr, cost), _kernel_args(arr, levels, C, room)
        if not cfskernel.use():
            inputs, fresh = _lists(inputs), _lists(fresh)
        got = cfskernel.replay_events(*inputs, *scalars, *fresh)
        if got == cfskernel.NO_ROOM:
            room *= 2
        elif got == cfskernel.NO_REQUESTS and len(arr) < len(base) * MAX_TILES:
            n = min(2 * len(arr), len(base) * MAX_TILES)
            arr, cost = np.full(n, arr[0]), np.resize(base, n)
            room = max(room, _room(arr, cost, levels, G, C, conc))
        elif got == cfskernel.NO_REQUESTS:  # as many as it may send: the last of them answered
            stop = math.inf
            scalars = (*scalars[:-2], stop, len(base))
        else:
            break
    lev, state, gates, reqs, runnable, rows = fresh
    end, sent = np.asarray(reqs[3], dtype=np.float64), np.asarray(reqs[4], dtype=np.float64)
    if stop < math.inf:  # those the clients never sent
        keep = ~np.isnan(end)
        end, sent = end[keep], sent[keep]
    short = any(x[cfskernel.SHORT] for x in lev[0])
    return end, sent, np.asarray(rows)[:got].reshape(-1, cfskernel.ROW_COLUMNS), bool(short)


def replay(
    sched: np.ndarray,
    cost_ns: float | np.ndarray,
    conc: int | None,
    quota_us: Quota,
    period_ns: int,
    phase_ns: int,
    burst_us: float,
    G: int,
    C: int,
    slice_us: float = SLICE_US,
    hz: int = HZ,
    outer: list[tuple[Quota, int, int, float]] = (),
    tick_phase_ns: int | None = None,
    stop_ns: int | None = None,
) -> pd.DataFrame:
    """:func:`replay_columns` as a frame, the latencies, each request's row, the
    throughput and ``quota_bound`` in its attrs."""
    cols, attrs = replay_columns(
        sched, cost_ns, conc, quota_us, period_ns, phase_ns, burst_us, G, C, slice_us, hz, outer, tick_phase_ns,
        stop_ns=stop_ns,
    )  # fmt: skip
    per = pd.DataFrame(cols)
    per.attrs.update(attrs)
    return per


def replay_columns(
    sched: np.ndarray,
    cost_ns: float | np.ndarray,
    conc: int | None,
    quota_us: Quota,
    period_ns: int,
    phase_ns: int,
    burst_us: float,
    G: int,
    C: int,
    slice_us: float = SLICE_US,
    hz: int = HZ,
    outer: list[tuple[Quota, int, int, float]] = (),
    tick_phase_ns: int | None = None,
    period_latency: bool = True,
    stop_ns: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Event by event: arrivals, completions, ticks, boundaries. Between two events nothing
    changes, so each step is exact (times in ns from the first boundary, as floats).

    The kernel's rules, per CPU (a cfs_rq) and per level: the runtime it holds is charged
    as it runs; at a tick, one that holds none draws a slice (plus what it overran) from the
    pool and, if the pool cannot cover it, is throttled; a CPU that starts to run the
    group's work with none and an empty pool is throttled at once; one that goes idle hands
    back what it holds beyond 1 ms. At a boundary the pool refills (cfskernel._refill).
    ``outer``: the other levels above, each (quota, period_ns, phase_ns, burst_us) with its
    own timer; their runtime is charged as the group's work runs, and a CPU any level
    throttles stops. ``tick_phase_ns``: how long after a tick the first level's boundaries
    come (default: as on the run's clock). The table is on the first level's grid, and its
    exhaustion, stall and CPUs frozen are that level's own, as the level's cpu.stat counts
    them. The loop itself is :mod:`gmpanalysis.cfskernel`'s (compiled where numba is).
    ``period_latency=False`` leaves out the periods' latency percentiles (a summary of many
    replays, the advice's, reads the latencies whole). ``stop_ns``: a closed loop's clients
    send each request, and until then (on sched's clock) the same again in turn where they
    need more: the load generator ran for a time, not a count, so a setting that serves
    them faster answers more in the same time; None: each request once. ``quota_bound`` (in
    the attrs): some level's pool could not give a CPU its whole slice; False: no quota
    held anything back, and a larger one (a larger burst) at every level replays the same."""
    n = len(sched)
    cost = np.ascontiguousarray(np.broadcast_to(np.asarray(cost_ns, dtype=np.float64), (n,)))  # per request
    # the loop would never end: no client to send a request, or a cost no clock reaches
    if conc is not None and not (float(conc).is_integer() and conc >= 1):
        raise UsageError(f"replay(conc={conc!r}): a closed loop needs one client or more (None: an open loop)")
    if not (np.isfinite(cost).all() and (cost >= 0).all()):
        raise UsageError("replay(cost_ns=...): every request's CPU must be a finite number of ns, 0 or more")
    tol = 1e-6 * float(np.mean(cost))
    k0 = (int(sched[0]) - phase_ns) // period_ns
    origin = phase_ns + k0 * period_ns
    arr = (np.asarray(sched, dtype=np.int64) - origin).astype(np.float64)
    levels = [_level(quota_us, period_ns, phase_ns, burst_us, origin)]
    levels += [_level(q, p, ph, bu, origin) for q, p, ph, bu in outer]
    tick = 1e9 / hz
    # the tick comes at multiples of its length on CLOCK_MONOTONIC (the kernel aligns it at
    # boot); the boundaries sit tick_phase_ns after one of them
    tau = origin % int(tick) if tick_phase_ns is None else int(tick_phase_ns) % int(tick)
    tick0 = float(int(tick) - tau)
    stop = math.inf if conc is None or stop_ns is None else float(int(stop_ns) - origin)
    end, sent, rows, short = _run(arr, cost, conc, levels, G, C, slice_us * 1000.0, tick, tick0, tol, stop)
    own = levels[0]
    per, attrs = _table(rows, k0 + np.arange(len(rows), dtype=np.int64), own["qk"], own["qv"], end, sent, origin,
                        phase_ns, period_ns, hz, period_latency)  # fmt: skip
    # no level's quota ever held a CPU back from a whole slice: under larger quotas (and
    # bursts) at every level the replay takes these very steps
    attrs["quota_bound"] = short
    return per, attrs


Columns = dict[str, np.ndarray]


def _table(vals: np.ndarray, ks: np.ndarray, qk: np.ndarray, qv: np.ndarray, end: np.ndarray, sent: np.ndarray,
           origin: int, phase_ns: int, period_ns: int, hz: int,
           period_latency: bool = True) -> tuple[Columns, dict[str, Any]]:  # fmt: skip
    """The periods' table from the loop's rows (used, exhausted at, stall, CPUs, throttled at
    the boundary), with each period's requests and latency, as its columns (arrays); and
    the latencies and the throughput apart (the frame's attrs)."""
    n = len(end)
    start = phase_ns + ks * period_ns
    ex = vals[:, 1]
    if THROTTLED_AT_BOUNDARY:
        # throttled as cpu.stat counts it; where the work ran on to the end on another CPU,
        # usage rose to the end (as df_periods measures it: the last read where it still rose)
        thr = (vals[:, 4] > 0) | ~np.isnan(ex)
        ex = np.where(thr & np.isnan(ex), float(period_ns), ex)
    else:
        thr = ~np.isnan(ex)
    quota = np.asarray(qv, dtype=np.float64)[np.maximum(np.searchsorted(qk, ks, side="right") - 1, 0)]
    # a request belongs to the period it entered in (an open loop's scheduled time)
    which = np.searchsorted(start, sent + origin, side="right") - 1
    lat = (end - sent) / 1e6
    per = {
        "period": ks,
        "start_ns": start,
        "end_ns": start + period_ns,
        "quota_us": np.where(np.isinf(quota), np.nan, quota / 1000),
        "usage_us": vals[:, 0] / 1000,
        "throttled": thr,
        "exhausted_at_us": ex / 1000,
        "stall_us": vals[:, 2] / 1000,
        # wall time the work stood still, throttled by any level (df_periods' frozen_us):
        # the own level's stall and what the levels above alone held; and by the levels
        # above, the own level's stall or not (frozen_other_us)
        "frozen_us": (vals[:, 2] + vals[:, cfskernel.FROZEN_ABOVE_ALONE]) / 1000,
        "frozen_other_us": vals[:, cfskernel.FROZEN_ABOVE] / 1000,
        # as measured: a stall shorter than a tick gives no CPU count (df_periods)
        "cpus_throttled": np.where(vals[:, 2] >= 1e9 / hz, vals[:, 3], np.nan),
        "requests": np.bincount(which, minlength=len(ks)),
    }
    if period_latency:
        per["latency_p50_ms"], per["latency_p99_ms"] = group_quantiles(which, lat, len(ks), (0.5, 0.99))
    # the requests answered per second, from the first one sent to the last answer
    span = float(np.nanmax(end) - np.min(sent)) if n else math.nan
    attrs = {
        "latency_ms": lat,
        "request_period": which,  # each request's row (what_if takes it off)
        "throughput_rps": n / span * 1e9 if span > 0 else math.nan,
    }
    return per, attrs


def group_quantiles(which: np.ndarray, x: np.ndarray, groups: int, qs: tuple[float, ...]) -> list[np.ndarray]:
    """Each group's quantiles of x, NaN left out, linear between the two nearest as pandas'
    groupby quantile takes them (``lo + (hi - lo) * frac``, ``lo`` where frac is 0); NaN for
    a group with none."""
    known = np.bincount(which, weights=~np.isnan(x), minlength=groups).astype(np.int64)
    if not known.any():
        return [np.full(groups, np.nan) for _ in qs]
    s = x[np.lexsort((x, which))]  # by group, then value (NaN last)
    first = np.concatenate(([0], np.cumsum(np.bincount(which, minlength=groups))[:-1]))
    has = known > 0
    out = []
    for q in qs:
        pos = q * (known - 1).astype(np.float64)
        frac = pos % 1
        lo = np.where(has, first + pos.astype(np.int64), 0)
        hi = np.where(has & (frac != 0), lo + 1, lo)
        v = np.where(frac == 0.0, s[lo], s[lo] + (s[hi] - s[lo]) * frac)
        out.append(np.where(has, v, np.nan))
    return out
