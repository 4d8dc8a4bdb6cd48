"""A level's freezes, and laying every level's freezes on one period table.

A freeze of a level is the stretch of one of its throttled periods after the quota ran out
(``exhausted_at_us``) up to its period end, where the kernel's period timer refills the
quota and unthrottles the group (:func:`gmpanalysis.df_freezes`). Another level's freeze is
invisible in a level's own cpu.stat (usage simply stops rising), so the freezes of all
levels are placed on the chosen table's grid to give its ``frozen_*`` columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .intervals import coverage, union

# A level overlapping a period by less than this (µs) does not count as having frozen it:
# the boundaries of two grids are each known only to their fit's uncertainty (~0.1 ms).
MIN_FREEZE_US = 500.0

FREEZE_COLUMNS = [
    "level",
    "period",
    "start_ns",
    "end_ns",
    "start_lo_ns",
    "start_hi_ns",
    "dur_ms",
    "exact",
    "throttled_rq_us",
    "cpus_throttled",
    "ref_period",
    "from_ms",
    "to_ms",
]


def freezes_of(per: pd.DataFrame, level: str) -> pd.DataFrame:
    """The freezes in one level's own period table: one per throttled period, from the
    moment its quota ran out (the bracket's upper end where the reads leave it open: the
    freeze is at least that long) to the period end."""
    thr = per["throttled"].fillna(False).to_numpy(dtype=bool)
    p = per[thr]
    s0 = p["start_ns"].to_numpy()
    ex = p["exhausted_at_us"].to_numpy()
    lo, hi = p["exhausted_lo_us"].to_numpy(), p["exhausted_hi_us"].to_numpy()
    exact = ~np.isnan(ex)
    at = np.where(exact, ex, hi)
    ok = ~np.isnan(at)
    start = s0 + np.nan_to_num(at) * 1e3
    end = p["end_ns"].to_numpy()
    return pd.DataFrame(
        {
            "level": level,
            "period": p["period"].to_numpy(),
            "start_ns": start.astype(np.int64),
            "end_ns": end,
            "start_lo_ns": (s0 + np.nan_to_num(lo) * 1e3).astype(np.int64),
            "start_hi_ns": (s0 + np.nan_to_num(hi) * 1e3).astype(np.int64),
            "dur_ms": (end - start) / 1e6,
            "exact": exact,
            "throttled_rq_us": p["throttled_rq_us"].to_numpy(),
            "cpus_throttled": p["cpus_throttled"].to_numpy(),
        }
    )[ok]


# After a quota runs out, threads still trickle the leftover of their slice (36-520 µs steps
# seen here) and tasks in the kernel run on to their return to user space; a frozen group
# also shows lone steps of that size every few ms (up to 609 µs seen on a 16-CPU v2 host).
# When another level lets the group run again and this level's quota has not run out, its
# queued threads run at once: more than RESUME_US within RESUME_NS (0.4 CPU over a tick at
# HZ=250), in reads that each rose at RUNNING_CPUS or more (a running thread's pace, not a
# trickle's: 400 µs in a 1 ms read is 0.4 CPU). A level left with less than
# RESUME_US of quota is taken as frozen from the other level's freeze: off by under 1.5 ms.
RESUME_US = 1500.0
RESUME_NS = 4_000_000
RUNNING_CPUS = 0.7


def refine(freezes: pd.DataFrame, samples: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Split what one level's table cannot tell apart: a period of level A in which another
    level B froze the group first, let it run again at B's boundary, and only then A's quota
    ran out. A's own usage is flat through B's freeze, so A's table dates its exhaustion to
    B's; when A's usage rose as running threads do right after B's freeze ended
    (:data:`RESUME_US`), A's freeze starts at the last read of that run (bracket: the read
    before it)."""
    if freezes["level"].nunique() < 2:
        return freezes
    f = freezes.reset_index(drop=True).copy()
    lv = f["level"].to_numpy()
    st, en = f["start_ns"].to_numpy(np.int64).copy(), f["end_ns"].to_numpy(np.int64)
    lo, hi = f["start_lo_ns"].to_numpy(np.int64).copy(), f["start_hi_ns"].to_numpy(np.int64).copy()
    for a_lv in pd.unique(lv):
        if a_lv not in samples:
            continue
        ia = np.flatnonzero(lv == a_lv)
        # the latest end of another level's freeze that began with (or before) this one and
        # ended before it: the moment the group could run again
        b_end = np.full(len(ia), -1, dtype=np.int64)
        for b_lv in pd.unique(lv[lv != a_lv]):
            ib = np.flatnonzero(lv == b_lv)
            ib = ib[np.argsort(st[ib], kind="stable")]
            k = np.searchsorted(st[ib], st[ia] + 1_500_000, side="right") - 1
            ok = k >= 0
            e = np.where(ok, en[ib][np.maximum(k, 0)], -1)
            ok &= (e > st[ia]) & (e < en[ia] - 1_000_000)
            b_end = np.where(ok, np.maximum(b_end, e), b_end)
        cand = b_end >= 0
        if not cand.any():
            continue
        s = samples[a_lv]
        t = s["t_ns"].to_numpy(np.int64)
        u = s["usage_us"].to_numpy(np.float64)
        i0 = np.searchsorted(t, b_end[cand], side="left")
        i1 = np.searchsorted(t, en[ia][cand], side="left")
        # the first read RESUME_NS after the group could run again (or the next read)
        iw = np.minimum(np.maximum(np.searchsorted(t, b_end[cand] + RESUME_NS, side="left"), i0), i1 - 1)
        ok = (i1 > i0) & (i0 > 0)
        rose = np.zeros(len(i0), dtype=bool)
        rose[ok] = u[iw[ok]] - u[i0[ok] - 1] > RESUME_US
        for c, j0, jw, j1 in zip(
            np.flatnonzero(cand)[rose].tolist(), i0[rose].tolist(), iw[rose].tolist(), i1[rose].tolist(), strict=True
        ):
            j = _end_of_run(t, u, j0, jw, j1)
            if j is not None:
                i = ia[c]
                st[i], lo[i], hi[i] = t[j], t[j - 1], t[j]
    f["start_ns"], f["start_lo_ns"], f["start_hi_ns"] = st, lo, hi
    f["dur_ms"] = (en - st) / 1e6
    return f


def _end_of_run(t: np.ndarray, u: np.ndarray, j0: int, jw: int, j1: int) -> int | None:
    """The last read of the run that starts by read ``jw`` (reads ``j0``..``j1`` - 1): reads
    whose usage rose at :data:`RUNNING_CPUS` or more (within the window, or by
    :data:`RESUME_US`), one read that saw nothing allowed between two that did (a read taken
    between two slices); None where no read of the window ran (a rise made of trickles)."""
    du = np.diff(u[j0 - 1 : j1])
    dt = np.diff(t[j0 - 1 : j1]) / 1e3
    running = (du > 50.0) & (du >= RUNNING_CPUS * dt)
    # a read of the window far apart from the last holds the run and the wait after it:
    # RESUME_US is enough there (after it, reads that far apart sum trickles)
    running[: jw - j0 + 1] |= du[: jw - j0 + 1] >= RESUME_US
    running = np.flatnonzero(running)
    if not len(running) or running[0] > jw - j0:
        return None
    breaks = np.flatnonzero(np.diff(running) > 2)
    return j0 + int(running[breaks[0]] if len(breaks) else running[-1])


def place(freezes: pd.DataFrame, per: pd.DataFrame) -> pd.DataFrame:
    """Freezes with the reference grid's period they begin in and their offsets there."""
    f = freezes.copy()
    start = per["start_ns"].to_numpy()
    k = np.searchsorted(start, f["start_ns"].to_numpy(), side="right") - 1
    inside = (k >= 0) & (f["start_ns"].to_numpy() < per["end_ns"].to_numpy()[np.maximum(k, 0)])
    kk = np.maximum(k, 0)
    f["ref_period"] = pd.arrays.IntegerArray(per["period"].to_numpy(np.int64)[kk], ~inside)
    s0 = start[kk]
    f["from_ms"] = np.where(inside, (f["start_ns"].to_numpy() - s0) / 1e6, np.nan)
    f["to_ms"] = np.where(inside, (f["end_ns"].to_numpy() - s0) / 1e6, np.nan)
    return f[FREEZE_COLUMNS]


def add_frozen_columns(
    per: pd.DataFrame, freezes: pd.DataFrame, own: str, spans: dict[str, tuple[int, int]] | None = None
) -> None:
    """``frozen_by``, ``frozen_us`` (with ``frozen_lo_us``..``frozen_hi_us``),
    ``frozen_other_us`` on a period table, from the
    freezes of every level (see :func:`gmpanalysis.df_periods`). ``spans``: the stretch each
    other level's own table covers; outside it that level's freezes are unknown, and so are
    the frozen times and ``frozen_by`` (but for the own level, in a period it throttled), as
    the period's ``reason`` says."""
    n = len(per)
    start, end = per["start_ns"].to_numpy(), per["end_ns"].to_numpy()
    edges = np.r_[start, end]

    def within(fs: pd.DataFrame) -> np.ndarray:
        s, e = union(fs["start_ns"].to_numpy(np.int64), fs["end_ns"].to_numpy(np.int64))
        c = coverage(s, e, edges)
        return (c[n:] - c[:n]) / 1e3

    by = np.full(n, "", dtype=object)
    for lv in pd.unique(freezes["level"]) if len(freezes) else ():
        sel = freezes[freezes["level"] == lv]
        # which periods a level froze: a freeze whose start the reads leave open from its
        # bracket's middle (from the bracket's end, its shortest, it often covers none of
        # the period and the level went unnamed where reads were sparse)
        exact = sel["exact"].to_numpy(dtype=bool)
        mid = (sel["start_lo_ns"].to_numpy(np.int64) + sel["start_hi_ns"].to_numpy(np.int64)) // 2
        sel = sel.assign(start_ns=np.where(exact, sel["start_ns"].to_numpy(np.int64), mid))
        hit = within(sel) >= MIN_FREEZE_US
        by[hit] = np.where(by[hit] == "", lv, by[hit] + "," + lv)
    # the kernel counted a throttled period in the own level's nr_throttled: its quota froze
    # the group then, however short the freeze or open its start (the slack above is for
    # another level's freezes, placed across two grids)
    ti = np.flatnonzero(per["throttled"].fillna(False).to_numpy(dtype=bool))
    add = ti[np.array([own not in x.split(",") for x in by[ti]], dtype=bool)] if len(ti) else ti
    by[add] = np.where(by[add] == "", own, own + "," + by[add])
    own_unknown, outside = per["throttled"].isna().to_numpy(), np.zeros(n, dtype=bool)
    for lv, (a, b) in (spans or {}).items():
        blind = (start < a) | (end > b)
        outside |= blind
        _add_reason(
            per, blind, f"the {lv}'s reads do not cover this period: whether its quota froze the group is not known"
        )
    # outside another level's reads its freezes are not known, but the own level's counters
    # still tell that its own quota froze the group in a period they call throttled
    own_thr = per["throttled"].fillna(False).to_numpy(dtype=bool)
    per["frozen_by"] = pd.array(np.where(own_unknown | (outside & ~own_thr), None, by), dtype="string")

    # a freeze whose start the reads leave open is known only to be at least as long as
    # from its bracket's end: the periods its bracket overlaps do not know their frozen time
    def opened(fs: pd.DataFrame) -> np.ndarray:
        op = fs[~fs["exact"].to_numpy(dtype=bool)]
        k0 = np.searchsorted(end, op["start_lo_ns"].to_numpy(np.int64), side="right")
        k1 = np.searchsorted(start, op["start_hi_ns"].to_numpy(np.int64), side="left")
        mark = np.zeros(n + 1, dtype=np.int64)
        np.add.at(mark, k0[k1 > k0], 1)
        np.add.at(mark, k1[k1 > k0], -1)
        return np.cumsum(mark)[:n] > 0

    others = freezes[freezes["level"] != own] if len(freezes) else freezes
    # no freeze placed is none only where the reads tell: a hole in the own samples, or a
    # period outside another level's, may have stood frozen unseen
    for col, fs, blind in (("frozen_us", freezes, own_unknown | outside), ("frozen_other_us", others, outside)):
        v = np.maximum(within(fs), 0.0) if len(fs) else np.zeros(n)  # 0, not a rounding's -0.002
        if len(fs):
            v[opened(fs)] = np.nan
        v[blind] = np.nan
        per[col] = v
    # what the freezes' brackets allow of the frozen time: every open one from its
    # bracket's end (the least) or its start (the most), a told one from where it is told
    told = per["frozen_us"].to_numpy(dtype=np.float64)
    if not len(freezes) or freezes["exact"].to_numpy(dtype=bool).all():
        # every start told: the bracket is the value (where the reads see the period)
        per["frozen_lo_us"], per["frozen_hi_us"] = told, told.copy()
    else:
        exact = freezes["exact"].to_numpy(dtype=bool)
        for col, at, keep in (("frozen_lo_us", "start_hi_ns", np.fmin), ("frozen_hi_us", "start_lo_ns", np.fmax)):
            at_ns = np.where(exact, freezes["start_ns"].to_numpy(np.int64), freezes[at].to_numpy(np.int64))
            v = np.maximum(within(freezes.assign(start_ns=at_ns)), 0.0)
            v[own_unknown | outside] = np.nan
            # the coverage sums times near 2^53 ns in floats: a ns either way of the told value
            per[col] = keep(v, told)
    for lv in pd.unique(others["level"]) if len(others) else ():
        why = f"the {lv}'s reads leave open when its quota ran out here: the frozen time is not known"
        _add_reason(per, opened(others[others["level"] == lv]), why)


def _add_reason(per: pd.DataFrame, rows: np.ndarray, what: str) -> None:
    """Append ``what`` to the ``reason`` of the periods ``rows`` (a mask)."""
    if "reason" not in per or not rows.any():
        return
    r = per["reason"].to_numpy(dtype=object, na_value="")
    r[rows] = np.where(r[rows] == "", what, r[rows] + "; " + what)
    per["reason"] = pd.array(np.where(r == "", None, r), dtype="string")


def covered_by(freezes: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """For every time in ``t``: the levels whose freeze covers it (comma-separated, "" none)."""
    out = np.full(len(t), "", dtype=object)
    for lv in pd.unique(freezes["level"]) if len(freezes) else ():
        f = freezes[freezes["level"] == lv]
        s, e = union(f["start_ns"].to_numpy(np.int64), f["end_ns"].to_numpy(np.int64))
        i = np.searchsorted(s, t, side="right") - 1
        hit = (i >= 0) & (t < e[np.maximum(i, 0)])
        out[hit] = np.where(out[hit] == "", lv, out[hit] + "," + lv)
    return out
