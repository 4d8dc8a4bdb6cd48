"""Small summaries of a GoTrace (what `gmpanalysis trace FILE` prints)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .gcwork import gc_cpu
from .reader import GoTrace

RUNNING_NOTE = (
    "running = wall time from a goroutine's start event to its stop event on the P: it includes time its\n"
    "OS thread was descheduled by the kernel or frozen by a CPU quota (CFS throttling), which the runtime\n"
    "cannot see; so busy_pct can reach 100 while the container got far less CPU."
)


def df_stw_by_kind(tr: GoTrace) -> pd.DataFrame:
    """STW pauses per kind. Columns: ``kind``; ``count``; ``p50_us``, ``p99_us``, ``max_us``
    (µs, pause length from STWBegin to STWEnd, i.e. including the time to stop)."""
    d = tr.stw.assign(dur_us=(tr.stw.end_ns - tr.stw.start_ns) / 1e3)
    rows = [
        {
            "kind": k,
            "count": len(g),
            "p50_us": float(np.percentile(g.dur_us, 50)),
            "p99_us": float(np.percentile(g.dur_us, 99)),
            "max_us": float(g.dur_us.max()),
        }
        for k, g in d.groupby("kind", sort=True)
    ]
    return pd.DataFrame(rows, columns=["kind", "count", "p50_us", "p99_us", "max_us"])


def df_running_by_p(tr: GoTrace) -> pd.DataFrame:
    """Goroutine running time per P. Columns: ``p``; ``running_ms`` (ms); ``busy_pct`` (% of
    the trace span). Time a goroutine "ran" is wall time between its start and stop events:
    it includes time its thread stood frozen by a CPU quota (CFS throttling) or was
    descheduled by the kernel; the runtime sees neither (see ``RUNNING_NOTE``)."""
    r = tr.running
    span_ms = (tr.meta["last_ns"] - tr.meta["first_ns"]) / 1e6 or np.nan
    tot = ((r.end_ns - r.start_ns) / 1e6).groupby(r.p).sum()
    return pd.DataFrame(
        {"p": tot.index.astype("int64"), "running_ms": tot.to_numpy(), "busy_pct": 100 * tot.to_numpy() / span_ms}
    )


def gc_cpu_text(tr: GoTrace) -> str:
    """Two lines on GC's share of goroutine running time (:func:`gcwork.gc_cpu`)."""
    d = gc_cpu(tr)
    if not d["running_ns"]:
        return "GC CPU: no goroutine ran"
    ms = {k: v / 1e6 for k, v in d.items() if k.endswith("_ns")}
    return (
        f"GC CPU: {d['gc_cpu_pct']:.1f} % of goroutine running time = (GC workers {ms['worker_ns']:.1f} ms"
        f" + mark assists on a P {ms['assist_on_p_ns']:.1f} ms) / running {ms['running_ns']:.1f} ms\n"
        f"  workers include idle {ms['worker_idle_ns']:.1f} ms and unlabelled {ms['worker_unlabelled_ns']:.1f} ms"
        f" (mark termination); assist ranges {ms['assist_ranges_ns']:.1f} ms in full, parked time included"
    )
