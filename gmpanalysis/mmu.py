"""Minimum mutator utilisation: how much of the Ps the Go runtime's GC left to the program.

The mutator utilisation u(t) is the share of the Ps not busy with GC at time t. It is
piecewise constant, so its integral U is piecewise linear and the mean over a window,
(U(s + w) - U(s)) / w, is piecewise linear in the window start s with kinks only where s or
s + w meets a change of u. The minimum over all windows is therefore reached with s or s + w
at a change (or at an end of the trace), and evaluating exactly there gives the exact MMU.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .bundle import Run
from .errors import MissingDataError
from .gotrace import GoTrace
from .gotrace.gcwork import df_gc_on_p

MMU_WINDOWS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


def _gc_stw(tr: GoTrace) -> tuple[np.ndarray, np.ndarray]:
    """The GC stop-the-worlds (sweep and mark termination): Go's MMU leaves out the others
    (GOMAXPROCS changes, ReadMemStats, trace start), which stop the program but not for GC."""
    st = tr.stw
    gc = st.kind.astype(str).str.contains("GC", regex=False).to_numpy()
    return st.start_ns.to_numpy()[gc].astype(np.int64), st.end_ns.to_numpy()[gc].astype(np.int64)


def _depth(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """How many [start, end) intervals contain each x."""
    return np.searchsorted(np.sort(starts), x, side="right") - np.searchsorted(np.sort(ends), x, side="right")


def df_mutator_util(tr: GoTrace, default_procs: int | None = None) -> pd.DataFrame:
    """The mutator utilisation function of a trace, as constant pieces over the trace window
    (meta ``first_ns`` .. ``last_ns``).

    u = 1 - gc_ps / gomaxprocs, clipped to [0, 1], where gc_ps counts, at each instant, the
    GC worker goroutines running (idle workers left out, see below) plus the mark assists
    whose goroutine runs on a P (:func:`gmpanalysis.gotrace.gcwork.df_assist_on_p`); during
    a GC stop-the-world u = 0. GOMAXPROCS is the value in force (``tr.gomaxprocs``; before
    its first row, the first value; ``default_procs`` or 1 if the trace has none).

    Columns: ``start_ns``, ``end_ns`` (int64 CLOCK_MONOTONIC ns, consecutive pieces);
    ``util`` (0-1); ``gc_ps`` (Ps busy with GC, all of them during a stop-the-world);
    ``gomaxprocs``; ``stw`` (bool, a GC stop-the-world is under way).
    """
    t0, t1 = int(tr.meta["first_ns"]), int(tr.meta["last_ns"])
    gcw = df_gc_on_p(tr, idle_workers=False)
    bs, be = gcw.start_ns.to_numpy(), gcw.end_ns.to_numpy()
    ss, se = _gc_stw(tr)
    gm = tr.gomaxprocs
    pt, pv = gm.t_ns.to_numpy().astype(np.int64), gm.procs.to_numpy().astype(np.int64)
    if len(pv) == 0:
        pt, pv = np.array([t0], np.int64), np.array([max(int(default_procs or 1), 1)], np.int64)
    inner = np.concatenate([bs, be, ss, se, pt])
    b = np.unique(np.concatenate([[t0, t1], inner[(inner > t0) & (inner < t1)]]))
    x = b[:-1]  # each piece starts at a change and holds until the next
    busy = _depth(bs, be, x)
    stw = _depth(ss, se, x) > 0
    procs = pv[np.maximum(np.searchsorted(pt, x, side="right") - 1, 0)]
    util = np.where(stw, 0.0, np.clip(1.0 - busy / np.maximum(procs, 1), 0.0, 1.0))
    return pd.DataFrame(
        {
            "start_ns": x,
            "end_ns": b[1:],
            "util": util,
            "gc_ps": np.where(stw, procs, busy).astype(np.int64),
            "gomaxprocs": procs,
            "stw": stw,
        }
    )


def min_window_mean(start_ns: np.ndarray, end_ns: np.ndarray, util: np.ndarray, window_ns: int) -> tuple[float, int]:
    """The exact minimum, over every window [s, s + window_ns] inside [start_ns[0],
    end_ns[-1]], of the mean of a piecewise constant function (``util`` on consecutive
    pieces [start_ns[i], end_ns[i])). Returns (minimum, s of a window reaching it); (NaN, -1)
    if the window is longer than the span.
    """
    b = np.r_[np.asarray(start_ns, np.int64), np.asarray(end_ns, np.int64)[-1:]]
    t0, t1, w = int(b[0]), int(b[-1]), int(window_ns)
    if w <= 0 or w > t1 - t0:
        return float("nan"), -1
    rel = (b - t0).astype(np.float64)  # relative times keep float64 exact for long traces
    cum = np.r_[0.0, np.cumsum(np.asarray(util, np.float64) * np.diff(rel))]
    # the window mean is linear between the starts where s or s + w meets a change
    s = np.concatenate([b, b - w])
    s = np.unique(s[(s >= t0) & (s <= t1 - w)])

    def integral(x: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(b, x, side="right") - 1, 0, len(b) - 2)
        return cum[k] + np.asarray(util, np.float64)[k] * ((x - t0).astype(np.float64) - rel[k])

    mean = (integral(s + w) - integral(s)) / w
    i = int(np.argmin(mean))
    return float(min(max(mean[i], 0.0), 1.0)), int(s[i])


def df_mmu_trace(
    tr: GoTrace, windows_ms: tuple[float, ...] = MMU_WINDOWS_MS, default_procs: int | None = None
) -> pd.DataFrame:
    """:func:`df_mmu` of a GoTrace (same columns); ``default_procs`` stands for GOMAXPROCS
    if the trace has no GOMAXPROCS event."""
    u = df_mutator_util(tr, default_procs)
    rows = []
    for w_ms in windows_ms:  # a handful of window lengths: the work inside is vectorised
        if len(u) == 0:
            break
        mmu, s = min_window_mean(u.start_ns.to_numpy(), u.end_ns.to_numpy(), u.util.to_numpy(), round(w_ms * 1e6))
        if s < 0:
            break
        k = max(int(np.searchsorted(u.start_ns.to_numpy(), s, side="right")) - 1, 0)
        rows.append({"window_ms": float(w_ms), "mmu": mmu, "gomaxprocs": int(u.gomaxprocs.iat[k])})
    return pd.DataFrame(rows, columns=["window_ms", "mmu", "gomaxprocs"])


def df_mmu(run: Run, windows_ms: tuple[float, ...] = MMU_WINDOWS_MS) -> pd.DataFrame:
    """Minimum mutator utilisation over the trace window, as the Go runtime sees it.

    GC takes a share of the Ps: every running GC worker goroutine and every mark assist
    whose goroutine runs on a P takes one P, and a GC stop-the-world takes all of them
    (:func:`df_mutator_util`). For each window length w, the MMU is the lowest mean
    utilisation over every window [s, s + w] inside the trace window (meta first_ns ..
    last_ns), computed exactly (1 = GC never in the way). Window lengths longer than the
    trace are left out.

    The runtime cannot see CFS throttling: a stop-the-world stretched across a frozen CFS
    period counts in full, which is exactly what the program experienced; likewise a worker
    or an assisting goroutine whose thread stands frozen still holds its P.

    Where ours differs from Go's (internal/trace MutatorUtilizationV2 with STW, background
    and assist, as `go tool trace` draws it): we use the trace's raw timestamps (Go's reader
    nudges them to keep order), the value of GOMAXPROCS in force from the trace's own
    ProcsChange events, a goroutine labelled a GC worker anywhere in the trace is a worker
    for all its intervals (Go: from its first label on), and we count busy intervals rather
    than busy Ps (the same thing, as a P runs one goroutine at a time). Like Go, idle GC workers, non-GC
    stop-the-worlds and sweeping are not counted; Go's curve is not forced monotone and
    neither is ours: the exact MMU can drop for a longer window (it only satisfies
    MMU(k*w) >= MMU(w) for whole k).

    Columns: ``window_ms``; ``mmu`` (0-1); ``gomaxprocs`` in force at the start of the
    worst window (the run's meta ``gomaxprocs_effective`` if the trace has no value).
    """
    tr = run.trace
    if tr is None:
        raise MissingDataError(f"{run.path}: no trace.out in the bundle: mutator utilisation comes from the Go trace")
    return df_mmu_trace(tr, windows_ms, run.meta.get("gomaxprocs_effective"))
