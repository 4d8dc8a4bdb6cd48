"""Cross-checks between the two independent sources: cpu.stat and the Go trace."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .bundle import Run
from .credits import LATE_CREDIT_NS
from .errors import MissingDataError
from .intervals import union

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


# cpu.stat.local's throttled_usec (6.6+) grows when a run queue of the group is unthrottled,
# by the time it stood throttled by its own quota or an ancestor's; the period table credits
# that rise as it credits cpu.stat's throttled time (gmpanalysis.credits). A freeze that ends
# this close to where that rule switches periods may be credited on either side.
LOCAL_AMBIGUOUS_NS = 2_000_000


def local_checks(per: pd.DataFrame, freezes: pd.DataFrame) -> pd.DataFrame:
    """:func:`df_local_checks` over a given period table and its freezes."""
    from .freezes import MIN_FREEZE_US

    if "local_throttled_us" not in per or per["local_throttled_us"].isna().all():
        why = (per.attrs.get("missing") or {}).get("local_throttled_us", "the table has no local_throttled_us")
        raise MissingDataError(f"no cpu.stat.local to check the freezes against: {why}")
    ends = per["end_ns"].to_numpy(np.int64)
    n = len(per)

    starts = per["start_ns"].to_numpy(np.int64)
    last = max(n - 1, 0)

    def slot(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The period credited with a rise at ``u``, as credit_boundaries credits it: to the
        period that ended at the last own boundary when that is at most LATE_CREDIT_NS
        before it, else to the period in progress; and whether that period is in the table
        (a rise in a gap between segments, or late after one, is outside it)."""
        j = np.searchsorted(starts, u, side="right") - 1
        jc = np.clip(j, 0, last)
        in_j = (j >= 0) & (u < ends[jc])
        late = u - starts[jc] <= LATE_CREDIT_NS
        # inside period j: late credits go to the period that ended at its start, if the
        # table has it (contiguous); past period j's end (a gap, or the table's end): to j
        # while still late, else nowhere in the table
        prev_ok = (jc >= 1) & (ends[np.clip(jc - 1, 0, last)] == starts[jc])
        k = np.where(in_j, np.where(late, jc - 1, jc), jc)
        ok = (j >= 0) & np.where(in_j, ~late | prev_ok, u - ends[jc] <= LATE_CREDIT_NS)
        return np.clip(k, 0, last), ok

    def ambiguous(u: np.ndarray) -> np.ndarray:
        """Rises this close to where the rule above switches periods may be read on its
        other side."""
        j = np.clip(np.searchsorted(starts, u, side="right") - 1, 0, last)
        since = u - starts[j]
        return (np.abs(since - LATE_CREDIT_NS) < LOCAL_AMBIGUOUS_NS) | (
            (ends[j] > u) & (ends[j] - u < LOCAL_AMBIGUOUS_NS)
        )

    dur_us = freezes["dur_ms"].to_numpy(float) * 1e3
    real = dur_us >= MIN_FREEZE_US
    # a run queue throttled by its own quota and an ancestor's at once is unthrottled, and
    # its throttled time added, when the last of them lifts: overlapping freezes are one rise
    s, e = union(freezes["start_ns"].to_numpy(np.int64)[real], freezes["end_ns"].to_numpy(np.int64)[real])
    k, inside = slot(e)
    count = np.bincount(k[inside], minlength=n)
    near = k[inside & ambiguous(e)]
    # a freeze shorter than MIN_FREEZE_US still adds its time over every CPU it froze (more
    # than MIN_FREEZE_US on several), and one whose start the reads leave open may have
    # lasted up to its whole bracket: either leaves the period it is credited to unknown
    ko, io = slot(freezes["end_ns"].to_numpy(np.int64)[~real])
    unsure = np.zeros(n, dtype=bool)
    for d in (-1, 0, 1):  # the period a near rise was credited to, and either neighbour
        unsure[np.clip(near + d, 0, last)] = True
    unsure[ko[io]] = True
    levels = np.full(n, "", dtype=object)
    for lv in pd.unique(freezes["level"]) if len(freezes) else ():
        sel = real & (freezes["level"].to_numpy() == lv)
        if not sel.any():
            continue
        # a level's freeze belongs to the rise of the union it is part of
        ku = np.searchsorted(s, freezes["start_ns"].to_numpy(np.int64)[sel], side="right") - 1
        kl, il = slot(e[ku])
        hit = np.bincount(kl[il], minlength=n) > 0
        levels[hit] = np.where(levels[hit] == "", lv, levels[hit] + "," + lv)
    local = per["local_throttled_us"].to_numpy(float)
    kernel = local >= MIN_FREEZE_US
    found = count > 0
    unknown = np.isnan(local) | unsure | per["frozen_by"].isna().to_numpy()
    out = pd.DataFrame(
        {
            "period": per["period"].to_numpy(),
            "end_ns": ends,
            "local_throttled_us": local,
            "freezes": count,
            "levels": pd.array(levels, dtype="string"),
            "kernel_frozen": kernel,
            "found_frozen": found,
            "agree": pd.array(np.where(unknown, None, kernel == found), dtype="boolean"),
        }
    )
    known = out["agree"].dropna()
    out.attrs["agreement"] = float(known.mean()) if len(known) else np.nan
    out.attrs["disagree"] = out.loc[out["agree"].eq(False).fillna(False), "period"].tolist()
    return out
