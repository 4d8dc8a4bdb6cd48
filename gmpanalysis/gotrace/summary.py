"""Small summaries of a GoTrace (what `gmpanalysis trace FILE` prints)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .reader import GoTrace


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
    the trace span). Time a goroutine "ran" includes time its thread stood frozen by a CPU
    quota: the runtime cannot see throttling."""
    r = tr.running
    span_ms = (tr.meta["last_ns"] - tr.meta["first_ns"]) / 1e6 or np.nan
    tot = ((r.end_ns - r.start_ns) / 1e6).groupby(r.p).sum()
    return pd.DataFrame(
        {"p": tot.index.astype("int64"), "running_ms": tot.to_numpy(), "busy_pct": 100 * tot.to_numpy() / span_ms}
    )
