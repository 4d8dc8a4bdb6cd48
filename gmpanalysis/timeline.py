"""The per-period table: cpu.stat samples and the Go trace on the kernel's period grid.

Built with array operations only: boundaries come from the fitted grid, counters are
attributed to boundaries with searchsorted, usage is interpolated at boundaries, and trace
intervals are spread over periods through their cumulative coverage function.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .bundle import Run
from .errors import MissingDataError
from .periods import PeriodGrid, fit_period_grid

# The group counts as running while its usage rises by at least RUNNING_CPUS over a window
# of about one scheduler tick. cpuacct.usage moves in tick-sized steps (4 ms at HZ=250), so
# shorter windows look flat even for a busy CPU; after the quota runs out, threads still
# trickle leftover slice (36-520 µs steps seen here), far below a quarter CPU per tick.
TICK_WINDOW_NS = 4_000_000
RUNNING_CPUS = 0.25

PERIOD_COLUMNS = [
    "period",
    "segment",
    "start_ns",
    "end_ns",
    "gap",
    "active",
    "quota_us",
    "usage_us",
    "throttled",
    "throttled_rq_us",
    "exhausted_at_us",
    "stall_us",
    "cpus_throttled",
    "gomaxprocs",
    "stw_us",
    "stw_max_us",
    "stw_count",
    "stw_spans_boundary",
    "gc_mark_us",
    "gc_worker_us",
    "assist_us",
    "go_running_us",
    "requests",
    "latency_p50_ms",
    "latency_p99_ms",
]


def coverage(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """C(x) = total length of [start, end) intervals before x, for every x (intervals may
    overlap; each counts). The overlap with [a, b) is C(b) - C(a)."""
    s = np.sort(starts.astype(np.int64))
    e = np.sort(ends.astype(np.int64))
    cs = np.r_[0, np.cumsum(s, dtype=np.float64)]
    ce = np.r_[0, np.cumsum(e, dtype=np.float64)]
    ns = np.searchsorted(s, x, side="right")
    ne = np.searchsorted(e, x, side="right")
    xf = x.astype(np.float64)
    return (ns * xf - cs[ns]) - (ne * xf - ce[ne])


def _attribute(boundaries: np.ndarray, t: np.ndarray, values: np.ndarray, margin_ns: int) -> np.ndarray:
    """Sum increments of a counter onto the boundaries that produced them.

    An increment seen between reads i-1 and i was made at the last boundary at or before
    read i (a boundary's credit can surface a read later: it still belongs to that boundary).
    ``margin_ns`` widens each boundary by the grid's uncertainty. Returns one sum per
    boundary; increments before the first boundary are dropped.
    """
    inc = np.diff(values.astype(np.float64))
    idx = np.flatnonzero(inc > 0)
    out = np.zeros(len(boundaries), dtype=np.float64)
    if len(idx) == 0:
        return out
    b = np.searchsorted(boundaries - margin_ns, t[idx + 1], side="right") - 1
    ok = b >= 0
    np.add.at(out, b[ok], inc[idx[ok]])
    return out


def _segment_table(run: Run, grid: PeriodGrid, seg_no: int, s: pd.DataFrame) -> pd.DataFrame:
    seg = grid.segments[seg_no]
    P = grid.period_ns
    t = s["t_ns"].to_numpy()
    u = s["usage_us"].to_numpy()
    B = seg.boundaries(P)
    if len(B) < 2:
        return pd.DataFrame(columns=PERIOD_COLUMNS)
    start, end = B[:-1], B[1:]
    k = (start - seg.phase_ns) // P
    margin = max(seg.uncertainty_ns, 50_000)
    n = len(start)

    # usage at the boundaries, interpolated between the bracketing reads; periods with a
    # hole in the samples (a gap longer than a few reads) are unknown, not zero
    u_at = np.interp(B.astype(np.float64), t.astype(np.float64), u)
    usage = np.diff(u_at)
    gap = np.zeros(n, dtype=bool)
    dt = np.diff(t)
    long_gaps = np.flatnonzero(dt > 10 * max(int(np.median(dt)), 1))
    for a in long_gaps.tolist():  # holes are rare: a loop over them, not over periods
        gap |= (end > t[a]) & (start < t[a + 1])
    usage[gap] = np.nan

    # counters credited at the boundary that ENDS a period belong to that period
    ends_credit = lambda col: _attribute(B, t, s[col].to_numpy(), margin)[1:]  # noqa: E731
    d_periods = ends_credit("nr_periods")
    d_thr = ends_credit("nr_throttled")
    d_thr_us = ends_credit("throttled_us")
    # across a hole, several boundaries' credits arrive in one read: they cannot be split
    # between periods, so those periods' counters are unknown
    d_thr_us[gap] = np.nan
    throttled = (d_thr > 0) & ~gap

    # exhaustion: the last read before the end boundary at which usage was still rising at
    # a running CPU's pace (>= RUNNING_CPUS over about one tick); after it, only trickles
    exhausted = np.full(n, np.nan)
    ti = np.flatnonzero(throttled)
    if len(ti):
        med_dt = float(np.median(np.diff(t))) if len(t) > 1 else float(P)
        k_reads = max(1, int(round(TICK_WINDOW_NS / max(med_dt, 1.0))))
        rise = np.zeros(len(u))
        win = np.zeros(len(u))
        rise[k_reads:] = u[k_reads:] - u[:-k_reads]
        win[k_reads:] = (t[k_reads:] - t[:-k_reads]) / 1e3
        # ... and the read itself carries a running-pace step (a window ending at a read
        # can still hold an older step)
        step = np.r_[0.0, np.diff(u)]
        step_win = np.r_[0.0, np.diff(t) / 1e3]
        running = (rise >= RUNNING_CPUS * win) & (step >= RUNNING_CPUS * step_win)
        last_running = np.maximum.accumulate(np.where(running, np.arange(len(u)), -1))
        last_read = np.searchsorted(t, end[ti], side="left") - 1
        j = last_running[np.maximum(last_read, 0)]
        tx = np.where(j >= 0, t[np.maximum(j, 0)], start[ti])
        exhausted[ti] = np.clip(tx - start[ti], 0, P) / 1e3
    stall = np.where(throttled, P / 1e3 - exhausted, np.where(gap, np.nan, 0.0))
    # usage moves in tick steps, so a stall shorter than a tick cannot be measured
    measurable = throttled & (stall >= TICK_WINDOW_NS / 1e3)
    cpus = np.where(measurable, d_thr_us / np.where(measurable, stall, 1), np.nan)

    df = pd.DataFrame(
        {
            "period": k.astype(np.int64),
            "segment": seg_no,
            "start_ns": start,
            "end_ns": end,
            "gap": gap,
            "active": (d_periods > 0) & ~gap,
            "quota_us": run.meta.get("quota_us"),
            "usage_us": usage,
            "throttled": throttled,
            "throttled_rq_us": d_thr_us,
            "exhausted_at_us": exhausted,
            "stall_us": stall,
            "cpus_throttled": cpus,
        }
    )
    _add_trace(df, run, B)
    _add_requests(df, run)
    return df[PERIOD_COLUMNS]


def _add_trace(df: pd.DataFrame, run: Run, B: np.ndarray) -> None:
    n = len(df)
    nan = np.full(n, np.nan)
    cols = {
        c: nan.copy()
        for c in ("stw_us", "stw_max_us", "stw_count", "gc_mark_us", "gc_worker_us", "assist_us", "go_running_us")
    }
    cols["stw_spans_boundary"] = np.zeros(n, dtype=bool)
    g = run.meta.get("gomaxprocs_effective")
    cols["gomaxprocs"] = np.full(n, np.nan if g is None else float(g))
    tr = run.trace if run.trace_path is not None else None
    if tr is not None and tr.meta["events"]:
        start, end = B[:-1], B[1:]
        inside = (start >= tr.meta["first_ns"]) & (end <= tr.meta["last_ns"])

        def spread(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
            c = coverage(s0, s1, B)
            return np.where(inside, np.diff(c) / 1e3, np.nan)

        stw, gc, r, a = tr.stw, tr.gc, tr.running, tr.assist
        cols["stw_us"] = spread(stw.start_ns.to_numpy(), stw.end_ns.to_numpy())
        cols["gc_mark_us"] = spread(gc.start_ns.to_numpy(), gc.end_ns.to_numpy())
        worker = r.label.astype(str).str.startswith("GC (").to_numpy()
        cols["gc_worker_us"] = spread(r.start_ns.to_numpy()[worker], r.end_ns.to_numpy()[worker])
        cols["assist_us"] = spread(a.start_ns.to_numpy(), a.end_ns.to_numpy())
        cols["go_running_us"] = spread(r.start_ns.to_numpy(), r.end_ns.to_numpy())
        # STWs by the period they start in
        s0, s1 = stw.start_ns.to_numpy(), stw.end_ns.to_numpy()
        which = np.searchsorted(B, s0, side="right") - 1
        ok = (which >= 0) & (which < n)
        cnt = np.bincount(which[ok], minlength=n).astype(np.float64)
        mx = np.zeros(n)
        np.maximum.at(mx, which[ok], (s1 - s0)[ok] / 1e3)
        cols["stw_count"] = np.where(inside, cnt, np.nan)
        cols["stw_max_us"] = np.where(inside, np.where(cnt > 0, mx, 0.0), np.nan)
        # an STW still open when a throttled period ends: stretched across the frozen time
        if len(s0):
            order = np.argsort(s0)
            s0o, s1o = s0[order], s1[order]
            run_max_end = np.maximum.accumulate(s1o)
            last = np.searchsorted(s0o, end, side="left") - 1
            spans = (last >= 0) & (run_max_end[np.maximum(last, 0)] > end)
            cols["stw_spans_boundary"] = spans & df["throttled"].to_numpy() & inside
        gm = tr.gomaxprocs
        if len(gm):
            idx = np.searchsorted(gm.t_ns.to_numpy(), start, side="right") - 1
            v = gm.procs.to_numpy().astype(np.float64)
            cols["gomaxprocs"] = np.where(idx >= 0, v[np.maximum(idx, 0)], cols["gomaxprocs"])
    for c, v in cols.items():
        df[c] = v


def _add_requests(df: pd.DataFrame, run: Run) -> None:
    n = len(df)
    df["requests"] = np.zeros(n, dtype=np.int64)
    df["latency_p50_ms"] = np.nan
    df["latency_p99_ms"] = np.nan
    r = run.requests
    if r is None or not len(r):
        return
    B = np.r_[df["start_ns"].to_numpy(), df["end_ns"].to_numpy()[-1]]
    # a request belongs to the period it arrived in (its scheduled time)
    which = np.searchsorted(B, r["sched_ns"].to_numpy(), side="right") - 1
    ok = (which >= 0) & (which < n) & (r["status"].to_numpy() // 100 == 2)
    lat = (r["end_ns"].to_numpy() - r["sched_ns"].to_numpy()) / 1e6
    g = pd.Series(lat[ok]).groupby(which[ok])
    df["requests"] = np.bincount(which[ok], minlength=n)
    q = g.quantile([0.5, 0.99]).unstack()
    df.loc[q.index, "latency_p50_ms"] = q[0.5].to_numpy()
    df.loc[q.index, "latency_p99_ms"] = q[0.99].to_numpy()


def df_periods(run: Run, grid: PeriodGrid | None = None) -> pd.DataFrame:
    """One row per CFS period of the reconstructed grid over the sampled span.

    Columns: ``period`` int k (boundary = phase + k·period); ``segment`` cgroup lifetime
    (counters reset between segments); ``start_ns``, ``end_ns`` boundaries (CLOCK_MONOTONIC);
    ``gap`` bool, samples are missing over part of the period (a hole of more than 10
    reads): its usage and throttling counters are unknown (NaN, throttled/active False);
    ``active`` bool, the period timer ran (nr_periods rose at its end); ``quota_us`` µs;
    ``usage_us`` µs of CPU in the period, interpolated at the boundaries (NaN over a hole in
    the samples); ``throttled`` bool, nr_throttled rose at its end; ``throttled_rq_us`` µs of
    throttled time credited at its end, a SUM over CPUs' run queues; ``exhausted_at_us`` µs
    from the start to the last read at which usage still rose at a running CPU's pace (NaN if
    not throttled; tick-level accounting makes it up to ~4 ms late); ``stall_us`` µs of wall
    time frozen (period - exhaustion); ``cpus_throttled`` ≈ throttled_rq_us / stall_us, the
    number of CPUs' run queues that stood throttled (NaN when the stall is shorter than a
    4 ms tick);
    ``gomaxprocs`` in force at the start; ``stw_us`` µs of stop-the-world inside the period;
    ``stw_max_us`` µs, longest STW starting in it; ``stw_count``; ``stw_spans_boundary`` bool,
    an STW still open when a throttled period ended; ``gc_mark_us`` µs of GC mark phase;
    ``gc_worker_us`` µs GC worker goroutines ran; ``assist_us`` µs of mark assists;
    ``go_running_us`` µs goroutines ran (summed over Ps); ``requests`` arrivals in the period;
    ``latency_p50_ms``, ``latency_p99_ms`` of those (from the scheduled start).
    Trace columns are NaN for periods outside the trace window.
    """
    s = run.samples
    if "cgroup" in s and s["cgroup"].nunique() > 1:
        raise MissingDataError("the bundle samples several cgroups; select one with run.samples[...] first")
    P = int(run.meta.get("period_us") or 100_000) * 1000
    if run.meta.get("quota_us") is None:
        raise MissingDataError(f"{run.path}: no CPU limit (quota_us is null): there are no CFS periods to align to")
    grid = grid or fit_period_grid(s, P)
    parts = []
    for i, seg in enumerate(grid.segments):
        part = _segment_table(run, grid, i, s.iloc[seg.first_row : seg.last_row + 1])
        if len(part):
            parts.append(part)
    if not parts:
        return pd.DataFrame(columns=PERIOD_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    out.attrs["grid"] = grid
    return out


def df_period_offsets(run: Run, bucket_ms: float = 5.0, per: pd.DataFrame | None = None) -> pd.DataFrame:
    """What happens inside each period: usage in fixed buckets of the offset from the
    period's start (FlameScope's sub-second offset view, on the CFS grid).

    Columns: ``period``; ``offset_ms`` bucket start (ms from the period start);
    ``cpus`` CPUs busy on average in the bucket (Δusage / bucket length; usage moves in
    scheduler-tick steps, so buckets shorter than ~5 ms are noisy); ``frozen`` bool, the
    bucket lies after quota exhaustion in a throttled period.
    """
    per = df_periods(run) if per is None else per
    per = per[~per["gap"]]
    s = run.samples
    P = int(per["end_ns"].iloc[0] - per["start_ns"].iloc[0]) if len(per) else 100_000_000
    b_ns = int(bucket_ms * 1e6)
    nb = max(1, P // b_ns)
    edges = per["start_ns"].to_numpy()[:, None] + np.arange(nb + 1, dtype=np.int64)[None, :] * b_ns
    u = np.interp(
        edges.ravel().astype(np.float64), s["t_ns"].to_numpy().astype(np.float64), s["usage_us"].to_numpy()
    ).reshape(edges.shape)
    cpus = np.diff(u, axis=1) / (b_ns / 1e3)
    off = np.arange(nb) * bucket_ms
    ex = per["exhausted_at_us"].to_numpy() / 1e3
    frozen = per["throttled"].to_numpy()[:, None] & (off[None, :] >= np.nan_to_num(ex, nan=np.inf)[:, None])
    return pd.DataFrame(
        {
            "period": np.repeat(per["period"].to_numpy(), nb),
            "offset_ms": np.tile(off, len(per)),
            "cpus": cpus.ravel(),
            "frozen": frozen.ravel(),
        }
    )


def df_stw_periods(run: Run, per: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every stop-the-world pause placed on the period grid.

    Columns: ``start_ns``; ``dur_ms`` pause length (ms); ``kind``; ``period`` the period it
    began in; ``offset_ms`` its start inside that period (ms); ``throttled`` bool, that period
    ended throttled; ``exhausted_ms`` when that period's quota ran out (ms, NaN if it did
    not); ``spans_boundary`` bool, still running when a throttled period ended.
    """
    tr = run.trace
    if tr is None:
        raise MissingDataError(f"{run.path}: no trace.out in the bundle: STW pauses come from the Go trace")
    per = df_periods(run) if per is None else per
    stw = tr.stw
    B = per["start_ns"].to_numpy()
    k = np.searchsorted(B, stw["start_ns"].to_numpy(), side="right") - 1
    ok = (k >= 0) & (stw["start_ns"].to_numpy() < per["end_ns"].to_numpy()[-1])
    st, kk = stw[ok], k[ok]
    row = per.iloc[kk]
    end = row["end_ns"].to_numpy()
    return pd.DataFrame(
        {
            "start_ns": st["start_ns"].to_numpy(),
            "dur_ms": (st["end_ns"] - st["start_ns"]).to_numpy() / 1e6,
            "kind": st["kind"].to_numpy(),
            "period": row["period"].to_numpy(),
            "offset_ms": (st["start_ns"].to_numpy() - row["start_ns"].to_numpy()) / 1e6,
            "throttled": row["throttled"].to_numpy(),
            "exhausted_ms": row["exhausted_at_us"].to_numpy() / 1e3,
            "spans_boundary": row["throttled"].to_numpy() & (st["end_ns"].to_numpy() > end),
        }
    )
