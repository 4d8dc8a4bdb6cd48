"""Minimum mutator utilisation: how much of the Ps the Go runtime's GC left to the program."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .bundle import Run
from .errors import MissingDataError
from .timeline import coverage

MMU_WINDOWS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


def df_mmu(run: Run, windows_ms: tuple[float, ...] = MMU_WINDOWS_MS) -> pd.DataFrame:
    """Minimum mutator utilisation over the trace window, as the Go runtime sees it.

    GC takes a share of the Ps: every running GC worker goroutine and every mark assist
    takes one P, and a stop-the-world takes all of them. For each window length, the worst
    window's share of P-time left to the program is its MMU (1 = GC never in the way).
    The runtime cannot see CFS throttling: a stop-the-world stretched across a frozen period
    counts in full, which is exactly what the program experienced.

    Columns: ``window_ms``; ``mmu`` (0-1); ``gomaxprocs`` used for the P count (the most
    frequent value in the trace).
    """
    tr = run.trace
    if tr is None:
        raise MissingDataError(f"{run.path}: no trace.out in the bundle: mutator utilisation comes from the Go trace")
    gm = tr.gomaxprocs
    procs = int(gm.procs.mode().iloc[0]) if len(gm) else int(run.meta.get("gomaxprocs_effective") or 1)
    r = tr.running
    worker = r.label.astype(str).str.startswith("GC (").to_numpy()
    t0, t1 = tr.meta["first_ns"], tr.meta["last_ns"]
    rows = []
    for w_ms in windows_ms:  # a handful of window lengths: the work inside is vectorised
        w = int(w_ms * 1e6)
        if w > t1 - t0:
            break
        step = max(w // 20, 100_000)
        s = np.arange(t0, t1 - w + 1, step, dtype=np.int64)
        x = np.r_[s, s + w]

        def gc_time(starts: np.ndarray, ends: np.ndarray, x: np.ndarray = x, n: int = len(s)) -> np.ndarray:
            c = coverage(starts, ends, x)
            return c[n:] - c[:n]

        busy = (
            gc_time(r.start_ns.to_numpy()[worker], r.end_ns.to_numpy()[worker])
            + gc_time(tr.assist.start_ns.to_numpy(), tr.assist.end_ns.to_numpy())
            + procs * gc_time(tr.stw.start_ns.to_numpy(), tr.stw.end_ns.to_numpy())
        )
        util = 1.0 - np.minimum(busy, procs * w) / (procs * w)
        rows.append({"window_ms": float(w_ms), "mmu": float(util.min()), "gomaxprocs": procs})
    return pd.DataFrame(rows, columns=["window_ms", "mmu", "gomaxprocs"])
