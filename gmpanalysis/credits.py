"""Cumulative cpu.stat counters credited to the CFS period boundaries that produced them.

``nr_periods``, ``nr_throttled`` and the throttled time only move when the bandwidth timer
fires, at a boundary: ``nr_periods`` and ``nr_throttled`` gain the timer's overrun (one per
boundary unless the timer was over a period late), the throttled time gains what the
run queues unthrottled at that boundary (a sum over CPUs). So an increment seen between two
reads belongs to one of the boundaries between them. One boundary between two reads: the
credit is exact, however long the reads are apart. None: the increment is a late credit of
the last boundary before the read (the kernel unthrottles CPUs one by one; 1-4 % of the
throttled-time increments surface one ~1 ms read later here). Several boundaries in one
stretch without reads: the counters prove only the sum over those boundaries, and the
periods form an explicit *ambiguous group* carrying the sums — unless the sum itself
decides every period (0 throttles means none was throttled; as many throttles as
boundaries means each was). Throttled time can also rise mid-period, when the slack timer
unthrottles run queues with runtime other CPUs returned: such a rise, seen more than 5 ms
after the last boundary, belongs to the period in progress.

Conservation holds by construction and is checked: for each counter and segment,
Σ exact rows + Σ unresolved group sums + credits outside the table = last read − first read.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

CREDITED = ("nr_periods", "nr_throttled", "throttled_us")
# Late credits of a boundary surface within a read or two (1-4 % of the throttled-time
# increments, ~1 ms late, here); throttled time rising later than this is mid-period.
LATE_CREDIT_NS = 5_000_000
GROUP_FIELDS = ("group", "first_row", "last_row", "boundaries", "hole_start_ns", "hole_end_ns")
EMPTY_GROUPS = pd.DataFrame(
    {
        **{c: np.zeros(0, dtype=np.int64) for c in GROUP_FIELDS},
        **{c: np.zeros(0) for c in CREDITED},
        **{f"{c}_resolved": np.zeros(0, dtype=bool) for c in CREDITED},
    }
)


@dataclasses.dataclass
class Credits:
    """Counter credits for the n periods of one segment (row r ends at boundary r + 1)."""

    values: dict[str, np.ndarray]  # per counter, float64 per row; NaN where unknown (unresolved group)
    group: np.ndarray  # int64 per row: group number inside this segment, -1 outside any group
    groups: pd.DataFrame  # one row per group (columns as periods.df_period_groups, rows not periods)
    outside: dict[str, float]  # per counter: credits of boundaries outside the table


def _moved_reads(
    Bm: np.ndarray, t: np.ndarray, counters: dict[str, np.ndarray], margin_ns: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The read pairs across which a counter moved (``at``: the first read of each), the
    boundaries each could belong to (``lo``..``hi`` on B extended by one at each end), those
    that open a hole of several boundaries (``multi_at``, positions in ``at``), the
    increments there, and the exact credits of the rest per boundary slot."""
    # Only reads after which a counter moved carry a credit (the counters move at
    # boundaries, a few reads in a hundred at 1 ms sampling); the rest add nothing, so the
    # work below runs on those reads alone. Within a segment the counters never fall.
    moved = np.zeros(max(len(t) - 1, 0), dtype=bool)
    for c in CREDITED:
        v = counters[c]
        moved |= v[1:] > v[:-1]
    at = np.flatnonzero(moved)  # read pairs (at, at + 1)
    t0, t1 = t[at], t[at + 1]
    inc = {c: (v[at + 1] - v[at]).astype(np.float64) for c, v in counters.items()}
    hi = np.searchsorted(Bm, t1, side="right") - 1  # last boundary the read has seen
    lo = np.searchsorted(Bm, t0, side="right")  # first boundary the previous read had not
    none_between = lo > hi
    lo = np.minimum(lo, hi)  # none in between: a late credit of the last boundary
    multi_at = np.flatnonzero(lo < hi)

    # exact credits: one candidate boundary (index shifted by one so that "before B[0]" = 0)
    single = lo >= hi
    slot = np.clip(hi + 1, 0, n + 2)
    # throttled time that rises with no boundary in sight -- the previous read was already
    # LATE_CREDIT_NS past the last boundary -- was not a late credit of that boundary: the
    # slack timer handed back runtime and unthrottled run queues mid-period, crediting the
    # throttled time of the period in progress (the one that ends at the next boundary)
    since = t0 - (Bm[np.clip(hi, 0, n + 1)] + margin_ns)
    mid = none_between & (hi >= 0) & (since > LATE_CREDIT_NS)
    slot_us = np.where(mid, np.clip(hi + 2, 0, n + 2), slot)
    per_slot = {
        c: np.bincount(
            (slot_us if c == "throttled_us" else slot)[single], weights=inc[c][single], minlength=n + 3
        ).astype(np.float64)
        for c in CREDITED
    }
    return at, lo, hi, multi_at, inc, per_slot


def credit_boundaries(
    B: np.ndarray, t: np.ndarray, counters: dict[str, np.ndarray], margin_ns: int, period_ns: int
) -> Credits:
    """Attribute every increment of the cumulative ``counters`` (sampled at reads ``t``) to
    the boundaries ``B`` (B[0] starts the first row, B[-1] ends the last one).

    A boundary within ``margin_ns`` (the grid's uncertainty) before a read counts as seen by
    it. Increments at or before B[0] and at the boundary after B[-1] are credits of periods
    outside the table (``outside``).
    """
    n = len(B) - 1
    # B_ext[b], b = 0..n+1; b = 0 ends the period before the table, n+1 the one after it
    Bm = np.r_[B, B[-1] + period_ns] - margin_ns
    at, lo, hi, multi_at, inc, per_slot = _moved_reads(Bm, t, counters, margin_ns, n)
    multi = at[multi_at]  # the reads that open a hole holding several boundaries

    # ambiguous groups: the boundaries a multi-boundary increment could belong to (holes
    # never overlap: consecutive reads' candidate ranges only touch through late credits)
    g_lo, g_hi = lo[multi_at], hi[multi_at]
    slot_group = np.full(n + 3, -1, dtype=np.int64)
    for g, (a, b) in enumerate(zip(g_lo.tolist(), g_hi.tolist(), strict=True)):  # holes are rare
        slot_group[max(a, -1) + 1 : b + 2] = g
    ng = len(multi)
    totals = {c: np.zeros(ng) for c in CREDITED}
    in_group = slot_group >= 0
    for c in CREDITED:
        np.add.at(totals[c], np.arange(ng), inc[c][multi_at])
        np.add.at(totals[c], slot_group[in_group], per_slot[c][in_group])  # late credits inside a group
    nb = (g_hi - g_lo + 1).astype(np.int64)  # boundaries in each group (outside ones included)

    values = {c: per_slot[c].copy() for c in CREDITED}
    resolved = {}
    sg = slot_group[in_group]
    for c in CREDITED:
        # what the sums decide: no credit at any boundary, or (counts) one at every boundary
        zero = totals[c] == 0
        every = (totals[c] == nb) if c != "throttled_us" else np.zeros(ng, dtype=bool)
        resolved[c] = zero | every
        values[c][in_group] = np.where(resolved[c][sg], np.where(zero[sg], 0.0, 1.0), np.nan)

    rows = slice(2, n + 2)
    group_rows = slot_group[rows]
    first_row = np.full(ng, -1, dtype=np.int64)
    last_row = np.full(ng, -1, dtype=np.int64)
    r = np.flatnonzero(group_rows >= 0)
    np.maximum.at(last_row, group_rows[r], r)
    first_row[np.unique(group_rows[r])] = r[np.unique(group_rows[r], return_index=True)[1]]
    # credits outside the table: of the boundaries before and after it, and the sums of
    # groups that lie wholly outside it
    outside = {}
    for c in CREDITED:
        out = float(np.nansum(values[c][[0, 1, n + 2]]))
        out += float(totals[c][(first_row < 0) & ~resolved[c]].sum())
        outside[c] = out
    if ng == 0:  # the usual case: no hole holds two period ends
        return Credits(
            values={c: values[c][rows] for c in CREDITED}, group=group_rows, groups=EMPTY_GROUPS, outside=outside
        )
    keep = first_row >= 0
    groups = pd.DataFrame(
        {
            "group": np.arange(ng, dtype=np.int64),
            "first_row": first_row,
            "last_row": last_row,
            "boundaries": nb,
            "hole_start_ns": t[multi],
            "hole_end_ns": t[multi + 1],
            **{c: totals[c] for c in CREDITED},
            **{f"{c}_resolved": resolved[c] for c in CREDITED},
        }
    )[keep]
    # renumber the groups that have rows 0..k-1
    renum = np.full(ng, -1, dtype=np.int64)
    renum[keep] = np.arange(int(keep.sum()))
    groups["group"] = renum[keep]
    group_rows = np.where(group_rows >= 0, renum[np.maximum(group_rows, 0)], -1)
    return Credits(
        values={c: values[c][rows] for c in CREDITED},
        group=group_rows,
        groups=groups.reset_index(drop=True),
        outside=outside,
    )
