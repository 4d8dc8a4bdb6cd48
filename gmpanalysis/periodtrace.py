"""The Go trace's columns of the per-period table (STW, GC, assists, running time, GOMAXPROCS)
and the stop-the-world pauses placed on the period grid. Trace intervals are spread over
periods through their cumulative coverage (:func:`gmpanalysis.intervals.coverage`); a big
trace is summed one generation at a time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .bundle import Run, streams_trace
from .errors import MissingDataError
from .gomaxprocs import effective as effective_gomaxprocs
from .gotrace.gcwork import df_assist_on_p, is_gc_worker
from .intervals import coverage, known_true


def across_boundary(stw_end_ns: np.ndarray, period_end_ns: np.ndarray, throttled: Any) -> np.ndarray:
    """The one test of a stop-the-world pause across a frozen boundary: still running when a
    period whose quota ran out ended (throttling known true), so the pause stretched over the
    time the group stood frozen."""
    return known_true(throttled) & (np.asarray(stw_end_ns) > np.asarray(period_end_ns))


def add_trace(df: pd.DataFrame, run: Run) -> None:
    """The trace columns, over the whole table at once (periods of several segments need
    not be contiguous)."""
    n = len(df)
    nan = np.full(n, np.nan)
    cols = {
        c: nan.copy()
        for c in ("stw_us", "stw_max_us", "stw_count", "gc_mark_us", "gc_worker_us", "assist_us", "go_running_us")
    }
    cols["stw_spans_boundary"] = np.zeros(n, dtype=bool)
    # outside the trace window (or without a trace): GOMAXPROCS at the start
    g = effective_gomaxprocs(run)
    cols["gomaxprocs"] = np.full(n, np.nan if g is None else float(g))
    streamed = streams_trace(run)
    if streamed:
        tr = run.read_trace(("stw", "gc", "gomaxprocs", "assist", "labels"))
    else:
        tr = run.trace if run.trace_path is not None else None
    if tr is not None and tr.meta["events"]:
        start, end = df["start_ns"].to_numpy(), df["end_ns"].to_numpy()
        inside = (start >= tr.meta["first_ns"]) & (end <= tr.meta["last_ns"])
        edges = np.r_[start, end]

        def spread(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
            return per_period(coverage(s0, s1, edges))

        def per_period(c: np.ndarray) -> np.ndarray:
            return np.where(inside, (c[n:] - c[:n]) / 1e3, np.nan)

        stw, gc = tr.stw, tr.gc
        cols["stw_us"] = spread(stw.start_ns.to_numpy(), stw.end_ns.to_numpy())
        cols["gc_mark_us"] = spread(gc.start_ns.to_numpy(), gc.end_ns.to_numpy())
        # GC CPU is counted only while on a P: a worker goroutine's every interval, and an
        # assist range only where its goroutine ran (it may park inside the range)
        if streamed:
            c_worker, c_assist, c_run = _running_coverage(run, tr, edges)
            cols["gc_worker_us"], cols["assist_us"], cols["go_running_us"] = (
                per_period(c_worker),
                per_period(c_assist),
                per_period(c_run),
            )
        else:
            r = tr.running
            worker = is_gc_worker(tr)
            cols["gc_worker_us"] = spread(r.start_ns.to_numpy()[worker], r.end_ns.to_numpy()[worker])
            a = df_assist_on_p(tr)
            cols["assist_us"] = spread(a.start_ns.to_numpy(), a.end_ns.to_numpy())
            cols["go_running_us"] = spread(r.start_ns.to_numpy(), r.end_ns.to_numpy())
        # STWs by the period they start in
        s0, s1 = stw.start_ns.to_numpy(), stw.end_ns.to_numpy()
        which = np.searchsorted(start, s0, side="right") - 1
        ok = (which >= 0) & (s0 < end[np.maximum(which, 0)])
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
            # the latest end of the pauses begun before each boundary (where any has begun)
            latest = run_max_end[np.maximum(last, 0)]
            # the boundary must lie in the trace window; its period may start before the trace
            seen = (end >= tr.meta["first_ns"]) & (end <= tr.meta["last_ns"])
            cols["stw_spans_boundary"] = across_boundary(latest, end, df["throttled"]) & (last >= 0) & seen
        gm = tr.gomaxprocs
        if len(gm):
            idx = np.searchsorted(gm.t_ns.to_numpy(), start, side="right") - 1
            v = gm.procs.to_numpy().astype(np.float64)
            cols["gomaxprocs"] = np.where(idx >= 0, v[np.maximum(idx, 0)], cols["gomaxprocs"])
    for c, v in cols.items():
        df[c] = v


def _running_coverage(run: Run, tr: Any, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cumulative coverage (see :func:`coverage`) at ``edges`` of the GC workers' running
    intervals, of the mark assists while on a P, and of all running intervals, from the
    trace's generations one at a time: coverage adds up over any split of the intervals, so
    the full running table is never in memory. ``tr`` holds the run's assists and goroutine
    labels (read first): a goroutine labelled a GC worker anywhere in the trace is one in
    every generation, as :func:`gmpanalysis.gotrace.gcwork.is_gc_worker` has it."""
    from .gotrace import iter_generations
    from .gotrace.gcwork import WORKER_PREFIX, intersect_by_g

    lab = tr.labels
    workers = np.unique(lab.g.to_numpy()[lab.label.astype(str).str.startswith(WORKER_PREFIX).to_numpy()])
    a = tr.assist
    ag, a0, a1 = a.g.to_numpy(), a.start_ns.to_numpy(), a.end_ns.to_numpy()
    c_worker, c_assist, c_run = (np.zeros(len(edges)) for _ in range(3))
    for part in iter_generations(run.trace_path, tables=("running",)):
        r = part.running
        g, s0, s1 = r.g.to_numpy(), r.start_ns.to_numpy(), r.end_ns.to_numpy()
        c_run += coverage(s0, s1, edges)
        worker = np.isin(g, workers)
        c_worker += coverage(s0[worker], s1[worker], edges)
        user = ~worker
        # every assist that overlaps this generation's intervals, whichever generation it
        # ended in
        if not len(g):
            continue
        near = (a0 < s1.max()) & (a1 > s0.min())
        _, _, i0, i1 = intersect_by_g(ag[near], a0[near], a1[near], g[user], s0[user], s1[user], r.p.to_numpy()[user])
        c_assist += coverage(i0, i1, edges)
    return c_worker, c_assist, c_run


def stw_periods(run: Run, per: pd.DataFrame) -> pd.DataFrame:
    """:func:`df_stw_periods` over a given period table (any subset of rows: a pause is
    placed only in a row that holds its start)."""
    tr = run.trace
    if tr is None:
        raise MissingDataError(f"{run.path}: no trace.out in the bundle: STW pauses come from the Go trace")
    stw = tr.stw
    per = per.sort_values("start_ns")
    start, end_all = per["start_ns"].to_numpy(), per["end_ns"].to_numpy()
    s0 = stw["start_ns"].to_numpy()
    k = np.searchsorted(start, s0, side="right") - 1
    ok = (k >= 0) & (s0 < end_all[np.maximum(k, 0)])
    st, kk = stw[ok], k[ok]
    row = per.iloc[kk]
    end = row["end_ns"].to_numpy()
    out = pd.DataFrame(
        {
            "start_ns": st["start_ns"].to_numpy(),
            "dur_ms": (st["end_ns"] - st["start_ns"]).to_numpy() / 1e6,
            "kind": st["kind"].to_numpy(),
            "period": row["period"].to_numpy(),
            "offset_ms": (st["start_ns"].to_numpy() - row["start_ns"].to_numpy()) / 1e6,
            "throttled": known_true(row["throttled"]),
            "exhausted_ms": row["exhausted_at_us"].to_numpy() / 1e3,
            "spans_boundary": across_boundary(st["end_ns"].to_numpy(), end, row["throttled"]),
        }
    )
    # where the quota ran out in the run's throttled periods (all of them, not only those
    # holding an STW): the band the pauses are read against
    ex = per.loc[known_true(per["throttled"]), "exhausted_at_us"].dropna().to_numpy() / 1e3
    out.attrs["period_ms"] = float((per["end_ns"] - per["start_ns"]).iloc[0]) / 1e6 if len(per) else np.nan
    out.attrs["exhausted_p10_ms"] = float(np.percentile(ex, 10)) if len(ex) else np.nan
    out.attrs["exhausted_p90_ms"] = float(np.percentile(ex, 90)) if len(ex) else np.nan
    return out
