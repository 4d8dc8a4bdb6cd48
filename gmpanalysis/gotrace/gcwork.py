"""GC work on Ps: mark assists while their goroutine is on a P, GC workers, GC CPU share.

A mark-assist range (``GoTrace.assist``) runs from GCMarkAssistBegin to GCMarkAssistEnd of
one goroutine. The runtime emits those at the start and end of ``gcAssistAlloc``; in between
the assisting goroutine can park (it waits on the assist queue when there is no background
credit to steal and no work), be preempted, or block, and the range stays open all that
time. Only the stretches where the goroutine also RUNS on a P cost a P; Go's own mutator
utilisation (internal/trace/gc.go) counts assists the same way: a P is busy with an assist
only while the assisting goroutine is executing.

GC worker goroutines (``gcBgMarkWorker``) are separate goroutines that only ever do GC work.
The runtime labels a worker's interval ("GC (dedicated)", "GC (fractional)", "GC (idle)")
only when the scheduler starts it in a worker mode (the GoLabel follows that GoStart). A
worker that reaches the end of marking clears its mode and then, in ``gcMarkDone``, may
yield, get rescheduled and run mark termination (including its stop-the-world) with NO
label: on a throttled run those unlabelled stretches reached 180 ms each. So a goroutine
labelled as a worker anywhere in the trace is a worker for all of its intervals (Go's MMU,
from the first label on); its unlabelled intervals get the kind ``UNLABELLED_WORKER``. Assists run on
user goroutines inside ``mallocgc``; :func:`df_assist_on_p` leaves worker goroutines out
anyway, so a worker's time and an assist can never be counted twice.

Everything here is vectorised over intervals (a busy trace has millions).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .reader import GoTrace

WORKER_PREFIX = "GC ("  # running.label of GC worker goroutines
IDLE_WORKER = "GC (idle)"  # runs only on a P that had nothing else to run
UNLABELLED_WORKER = "GC (no mode)"  # a worker goroutine running outside a worker mode
ASSIST = "assist"


def _kinds(tr: GoTrace) -> tuple[np.ndarray, np.ndarray]:
    """(names, index): the worker kind of running row i is names[index[i]]; names[0] is ""."""
    r = tr.running
    lab = r.label if isinstance(r.label.dtype, pd.CategoricalDtype) else r.label.astype(str).astype("category")
    cats = [str(c) for c in lab.cat.categories]
    codes = lab.cat.codes.to_numpy()
    names = np.array(["", UNLABELLED_WORKER, *cats], dtype=object)
    is_w = np.array([c.startswith(WORKER_PREFIX) for c in cats] + [False], dtype=bool)
    labelled = is_w[codes]  # code -1 (missing) maps to the trailing False
    g = r.g.to_numpy()
    worker_g = np.isin(g, np.unique(g[labelled]))
    index = np.where(labelled, codes + 2, np.where(worker_g, 1, 0))
    return names, index


def worker_kind(tr: GoTrace) -> np.ndarray:
    """For every ``tr.running`` row: its GC worker kind ("GC (dedicated)", "GC (fractional)",
    "GC (idle)", or ``UNLABELLED_WORKER`` for an unlabelled interval of a goroutine that is
    labelled a worker elsewhere in the trace), or "" for any other goroutine. Object array."""
    names, index = _kinds(tr)
    return names[index]


def is_gc_worker(tr: GoTrace) -> np.ndarray:
    """Boolean mask over ``tr.running`` rows: the rows of GC worker goroutines (see
    :func:`worker_kind`); all of that time is GC work."""
    return _kinds(tr)[1] != 0


def intersect_by_g(
    ag: np.ndarray,
    a_start: np.ndarray,
    a_end: np.ndarray,
    rg: np.ndarray,
    r_start: np.ndarray,
    r_end: np.ndarray,
    rp: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per goroutine, where the union of its ranges ``a`` meets the union of its intervals
    ``r``; each piece carries the P of the ``r`` interval it lies in. Returns (g, p, start,
    end) sorted by g then start; contiguous pieces on the same P are merged."""
    empty = np.zeros(0, dtype=np.int64)
    if len(ag) == 0 or len(rg) == 0:
        return empty, empty, empty, empty
    keep = np.isin(rg, ag)  # only goroutines that ever assisted
    rg, r_start, r_end, rp = rg[keep], r_start[keep], r_end[keep], rp[keep]
    na, nr = len(ag), len(rg)
    # a sweep over boundary events, per goroutine: depth of open a-ranges and r-intervals
    g = np.concatenate([ag, ag, rg, rg]).astype(np.int64)
    t = np.concatenate([a_start, a_end, r_start, r_end]).astype(np.int64)
    da = np.concatenate([np.ones(na, np.int64), -np.ones(na, np.int64), np.zeros(2 * nr, np.int64)])
    dr = np.concatenate([np.zeros(2 * na, np.int64), np.ones(nr, np.int64), -np.ones(nr, np.int64)])
    is_rstart = np.concatenate([np.zeros(2 * na, bool), np.ones(nr, bool), np.zeros(nr, bool)])
    pv = np.concatenate([np.full(2 * na, -1, np.int64), rp.astype(np.int64), np.full(nr, -1, np.int64)])
    order = np.lexsort((t, g))
    g, t, is_rstart, pv = g[order], t[order], is_rstart[order], pv[order]
    # every interval adds +1 and -1 inside its own goroutine's events, so the running sums
    # return to 0 at each goroutine's last event: no reset needed between goroutines
    depth_a = np.cumsum(da[order])
    depth_r = np.cumsum(dr[order])
    last_start = np.maximum.accumulate(np.where(is_rstart, np.arange(len(t)), -1))
    p_now = pv[np.maximum(last_start, 0)]
    # the state after event i holds until event i+1 (ties at one time give empty pieces)
    both = (depth_a[:-1] > 0) & (depth_r[:-1] > 0) & (g[1:] == g[:-1]) & (t[1:] > t[:-1])
    i = np.flatnonzero(both)
    sg, sp, ss, se = g[i], p_now[i], t[i], t[i + 1]
    if len(i) == 0:
        return empty, empty, empty, empty
    new = np.r_[True, (sg[1:] != sg[:-1]) | (sp[1:] != sp[:-1]) | (ss[1:] != se[:-1])]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(i) - 1]
    return sg[first], sp[first], ss[first], se[last]


def df_assist_on_p(tr: GoTrace) -> pd.DataFrame:
    """Mark assists while the assisting goroutine runs on a P.

    The intersection, per goroutine, of its mark-assist ranges (``tr.assist``) with its
    running intervals (``tr.running``; GC worker goroutines left out, :func:`is_gc_worker`). The parts of an assist
    range where the goroutine was parked, blocked, runnable or in a syscall are dropped.

    Columns: ``g`` (goroutine id); ``p`` (the P it ran on, int64; -1 if unknown);
    ``start_ns``, ``end_ns`` (int64 CLOCK_MONOTONIC ns, half-open). Rows are sorted by g then
    start_ns; pieces that touch on the same P are merged, so within a goroutine rows never
    overlap. Like ``running``, the time includes any stretch the thread stood frozen by a
    CPU quota or descheduled by the OS: the runtime cannot see either.
    """
    a, r = tr.assist, tr.running
    user = ~is_gc_worker(tr)
    g, p, s, e = intersect_by_g(
        a.g.to_numpy(),
        a.start_ns.to_numpy(),
        a.end_ns.to_numpy(),
        r.g.to_numpy()[user],
        r.start_ns.to_numpy()[user],
        r.end_ns.to_numpy()[user],
        r.p.to_numpy()[user],
    )
    return pd.DataFrame({"g": g, "p": p, "start_ns": s, "end_ns": e}).astype("int64")


def df_gc_on_p(tr: GoTrace, *, idle_workers: bool = True) -> pd.DataFrame:
    """Every interval in which GC work held a P: GC worker running intervals and mark
    assists while on a P (:func:`df_assist_on_p`). Never counted twice: workers and
    assisting goroutines are different goroutines, and a P runs one goroutine at a time.

    ``idle_workers=False`` leaves out "GC (idle)" workers: they run only on a P that would
    otherwise sit idle and yield as soon as other work appears, so they take no P from the
    program (Go's MMU leaves them out too) - though under a CPU quota they do burn quota.

    Columns: ``g``; ``p`` (int64); ``start_ns``, ``end_ns`` (int64 CLOCK_MONOTONIC ns);
    ``kind`` (:func:`worker_kind`, e.g. "GC (dedicated)", or "assist"). Sorted by start_ns.
    """
    r = tr.running
    kind = worker_kind(tr)
    w = (kind != "") & ((kind != IDLE_WORKER) | idle_workers)
    workers = pd.DataFrame(
        {
            "g": r.g.to_numpy()[w].astype(np.int64),
            "p": r.p.to_numpy()[w].astype(np.int64),
            "start_ns": r.start_ns.to_numpy()[w].astype(np.int64),
            "end_ns": r.end_ns.to_numpy()[w].astype(np.int64),
            "kind": kind[w],
        }
    )
    assists = df_assist_on_p(tr).assign(kind=ASSIST)
    out = pd.concat([workers, assists], ignore_index=True)
    return out.sort_values("start_ns", kind="stable", ignore_index=True)


def _clipped_sum(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> int:
    """Total length of the [start, end) intervals inside [lo, hi), ns."""
    d = np.minimum(end.astype(np.int64), hi) - np.maximum(start.astype(np.int64), lo)
    return int(d[d > 0].sum())


def gc_cpu(tr: GoTrace, start_ns: int | None = None, end_ns: int | None = None) -> dict[str, float]:
    """GC's share of goroutine running time over [start_ns, end_ns) (default: the trace
    window, meta first_ns .. last_ns).

    Keys (times in ns, as floats):

    - ``window_ns``: length of the window.
    - ``running_ns``: time goroutines ran on Ps (every ``running`` row, GC workers included).
    - ``worker_ns``: time GC worker goroutines ran (:func:`is_gc_worker`).
    - ``worker_idle_ns``: the part of ``worker_ns`` by "GC (idle)" workers (they soak up
      otherwise idle Ps, but under a CPU quota they still spend quota).
    - ``worker_unlabelled_ns``: the part of ``worker_ns`` without a worker label (mostly
      mark termination run by the worker that finished marking).
    - ``assist_on_p_ns``: mark assists while their goroutine ran on a P (:func:`df_assist_on_p`).
    - ``assist_ranges_ns``: the assist ranges in full (parked and blocked time included),
      for comparison only: NOT a CPU time.
    - ``gc_cpu_pct``: (worker_ns + assist_on_p_ns) / running_ns * 100 (NaN if nothing ran).

    "Running" is the runtime's view: a goroutine runs from its start event to its stop event,
    including time its OS thread was descheduled or frozen by a CPU quota (CFS throttling).
    Both parts of the ratio include such time.
    """
    lo = int(tr.meta["first_ns"] if start_ns is None else start_ns)
    hi = int(tr.meta["last_ns"] if end_ns is None else end_ns)
    r, a = tr.running, tr.assist
    rs, re_ = r.start_ns.to_numpy(), r.end_ns.to_numpy()
    kind = worker_kind(tr)
    w, idle, unl = kind != "", kind == IDLE_WORKER, kind == UNLABELLED_WORKER
    on_p = df_assist_on_p(tr)
    running = _clipped_sum(rs, re_, lo, hi)
    worker = _clipped_sum(rs[w], re_[w], lo, hi)
    assist = _clipped_sum(on_p.start_ns.to_numpy(), on_p.end_ns.to_numpy(), lo, hi)
    return {
        "window_ns": float(max(hi - lo, 0)),
        "running_ns": float(running),
        "worker_ns": float(worker),
        "worker_idle_ns": float(_clipped_sum(rs[idle], re_[idle], lo, hi)),
        "worker_unlabelled_ns": float(_clipped_sum(rs[unl], re_[unl], lo, hi)),
        "assist_on_p_ns": float(assist),
        "assist_ranges_ns": float(_clipped_sum(a.start_ns.to_numpy(), a.end_ns.to_numpy(), lo, hi)),
        "gc_cpu_pct": 100.0 * (worker + assist) / running if running > 0 else float("nan"),
    }
