"""Cross-checks between the two independent sources: cpu.stat and the Go trace."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .bundle import Run
from .errors import MissingDataError

# cpuacct.usage lags the truth by up to a tick per CPU, and threads trickle leftover slice
# after exhaustion: events this soon after the estimated exhaustion do not break a silence.
SLACK_NS = 1_000_000


def _event_times(tr: object) -> np.ndarray:
    """Every time the trace saw something happen. Ranges still open at the end of the trace
    were closed there by the reader, not by an event: those ends are left out."""
    parts = [
        tr.running.start_ns,
        tr.stw.start_ns,
        tr.gc.start_ns,
        tr.sweep.start_ns,
        tr.assist.start_ns,
        tr.heap.t_ns,
        tr.logs.t_ns,
    ]
    for table in (tr.running, tr.stw, tr.gc, tr.sweep, tr.assist):
        parts.append(table.end_ns[~table.open])
    return np.unique(np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]))


def df_checks(run: Run) -> pd.DataFrame:
    """For each throttled period inside the trace window: did the trace fall silent from
    quota exhaustion to the period's end boundary, as a frozen process must?

    Columns: ``period``; ``end_ns`` (the boundary); ``exhausted_ns`` (start +
    exhausted_at_us); ``last_event_before_ns`` (last trace event before the boundary);
    ``first_event_after_us`` (µs from the boundary to the next trace event); ``silent``
    (no trace event between exhaustion + 1 ms and the boundary). ``df.attrs["silent_fraction"]``
    is the share of silent periods: near 1 when samples and trace agree on the period grid.
    """
    from .analysis import analyze

    return analyze(run).checks.copy()


def checks(run: Run, per: pd.DataFrame) -> pd.DataFrame:
    """:func:`df_checks` over a given period table."""
    tr = run.trace
    if tr is None:
        raise MissingDataError(f"{run.path}: the bundle has no trace.out; df_checks compares cpu.stat with the trace")
    inside = (per["start_ns"] >= tr.meta["first_ns"]) & (per["end_ns"] <= tr.meta["last_ns"])
    sel = per[per["throttled"].fillna(False).astype(bool) & inside & per["exhausted_at_us"].notna()]
    t = _event_times(tr)
    end = sel["end_ns"].to_numpy()
    ex = sel["start_ns"].to_numpy() + (sel["exhausted_at_us"].to_numpy() * 1e3).astype(np.int64)
    i_before = np.searchsorted(t, end, side="left") - 1
    last_before = np.where(i_before >= 0, t[np.maximum(i_before, 0)], np.iinfo(np.int64).min)
    i_after = np.searchsorted(t, end, side="left")
    first_after = np.where(i_after < len(t), t[np.minimum(i_after, len(t) - 1)], np.iinfo(np.int64).max)
    out = pd.DataFrame(
        {
            "period": sel["period"].to_numpy(),
            "end_ns": end,
            "exhausted_ns": ex,
            "last_event_before_ns": last_before,
            "first_event_after_us": (first_after - end) / 1e3,
            "silent": last_before <= ex + SLACK_NS,
        }
    )
    out.attrs["silent_fraction"] = float(out["silent"].mean()) if len(out) else np.nan
    return out
