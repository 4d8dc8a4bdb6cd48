"""The per-period table: cpu.stat samples and the Go trace on the kernel's period grid.

Built with array operations only: boundaries come from the fitted grid, counters are
attributed to boundaries with searchsorted, usage is interpolated at boundaries, and trace
intervals are spread over periods through their cumulative coverage function.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pandas as pd

from .bundle import Run
from .cgroup import bundle_cpus
from .credits import CREDITED, Credits, credit_boundaries
from .errors import MissingDataError
from .freezes import add_frozen_columns, freezes_of, place, refine
from .grid import PeriodGrid, restart_ns
from .kernelfacts import LOCAL_STAT, PSI_CGROUP_FULL, tick_ns
from .levels import ever_limited, level_names, level_run, period_changes, quota_per_period, table_level
from .periodtrace import add_trace
from .reads import exhaustion, hole_ms_per_period, interp_at, read_percentiles, usage_at_boundaries
from .served import latency_ms, succeeded

# An exhaustion bracket wider than a scheduler tick plus this (a read either side) leaves the
# moment open: the row gives the bracket and no point value (6 ms at HZ=250).
OPEN_BRACKET_SLACK_US = 2_000.0

PERIOD_COLUMNS = [
    "period",
    "segment",
    "start_ns",
    "end_ns",
    "gap",
    "hole_ms",
    "group",
    "reason",
    "active",
    "nr_periods",
    "nr_throttled",
    "quota_us",
    "usage_us",
    "usage_lo_us",
    "usage_hi_us",
    "throttled",
    "throttled_rq_us",
    "exhausted_at_us",
    "exhausted_lo_us",
    "exhausted_hi_us",
    "stall_us",
    "cpus_throttled",
    "frozen_by",
    "frozen_us",
    "frozen_lo_us",
    "frozen_hi_us",
    "frozen_other_us",
    "psi_some_us",
    "psi_full_us",
    "local_throttled_us",
    "gomaxprocs",
    "stw_us",
    "stw_max_us",
    "stw_count",
    "stw_spans_boundary",
    "gc_mark_us",
    "gc_worker_us",
    "assist_us",
    "go_running_us",
    "requests",
    "requests_ok",
    "requests_failed",
    "latency_p50_ms",
    "latency_p99_ms",
]


def _cpus_throttled(thr_us: np.ndarray, stall: np.ndarray, measurable: np.ndarray, ncpu: object) -> np.ndarray:
    """Throttled run-queue time over the stall: how many CPUs stood throttled. Each CPU's run
    queue is throttled when its own slice runs out, some before the group's usage goes flat
    at the exhaustion read, so the ratio overshoots (2.04 on 2 CPUs); no more run queues
    than CPUs its threads may use (:func:`gmpanalysis.cgroup.bundle_cpus`) can stand throttled."""
    cpus = np.where(measurable, thr_us / np.where(measurable, stall, 1), np.nan)
    if isinstance(ncpu, int) and ncpu > 0:
        cpus = np.minimum(cpus, float(ncpu))
    return cpus


def _segment_table(run: Run, grid: PeriodGrid, seg_no: int, s: pd.DataFrame) -> tuple[pd.DataFrame, Credits]:
    seg = grid.segments[seg_no]
    P = grid.period_ns
    tick = tick_ns(run.meta)
    t = s["t_ns"].to_numpy()
    u = s["usage_us"].to_numpy(dtype=np.float64)  # no copy where it is float64 already
    B = seg.boundaries(P)
    if len(B) < 2:
        return pd.DataFrame(columns=PERIOD_COLUMNS), None
    start, end = B[:-1], B[1:]
    k = (start - seg.phase_ns) // P
    margin = max(seg.uncertainty_ns, 50_000)
    n = len(start)

    usage, usage_lo, usage_hi, u_at = usage_at_boundaries(t, u, B, seg.uncertainty_ns)
    dt = np.diff(t)
    q10, med_dt = read_percentiles(dt, (10, 50)) if len(dt) else (float(P), float(P))
    hole_ms = hole_ms_per_period(t, dt, max(med_dt, 1.0), start, end)
    gap = hole_ms > 0

    cr = credit_boundaries(B, t, {c: s[c].to_numpy() for c in CREDITED}, margin, P)
    d_periods, d_thr, d_thr_us = (cr.values[c] for c in CREDITED)
    known = ~np.isnan(d_thr)
    throttled = known & (d_thr > 0)

    exhausted = np.full(n, np.nan)
    ex_lo = np.full(n, np.nan)
    ex_hi = np.full(n, np.nan)
    ti = np.flatnonzero(throttled)
    ncpu = bundle_cpus(run.meta)
    if len(ti):
        exhausted[ti], ex_lo[ti], ex_hi[ti] = exhaustion(
            t, u, start[ti], end[ti], P, seg.uncertainty_ns, tick, dt, q10, med_dt,
            thr_us=d_thr_us[ti], cpus=ncpu or 0, u_end=u_at[1:][ti],
        )  # fmt: skip
    # the reads leave the moment of exhaustion open wider than a tick (a hole around it):
    # the bracket stays, a point value (and the stall and CPU count that follow) would be made up
    open_ex = throttled & ((ex_hi - ex_lo) > tick / 1e3 + OPEN_BRACKET_SLACK_US)
    exhausted[open_ex] = np.nan
    stall = np.where(throttled, P / 1e3 - exhausted, np.where(known, 0.0, np.nan))
    # usage moves in tick steps, so a stall shorter than a tick cannot be measured
    measurable = throttled & (stall >= tick / 1e3) & ~np.isnan(d_thr_us)
    cpus = _cpus_throttled(d_thr_us, stall, measurable, ncpu)

    quota, changes = quota_per_period(run, start, end)
    reason = _reasons(n, changes, hole_ms, gap, usage, ncpu, P, tick, open_ex, ex_lo, ex_hi, cr)

    v2 = _v2_signals(s, t, B, margin, P)

    def nullable_bool(v: np.ndarray) -> pd.arrays.BooleanArray:
        return pd.arrays.BooleanArray(np.nan_to_num(v) > 0, np.isnan(v))

    def nullable_int(v: np.ndarray) -> pd.arrays.IntegerArray:
        return pd.arrays.IntegerArray(np.nan_to_num(v).astype(np.int64), np.isnan(v))

    df = pd.DataFrame(
        {
            "period": k.astype(np.int64),
            "segment": seg_no,
            "start_ns": start,
            "end_ns": end,
            "gap": gap,
            "hole_ms": hole_ms,
            "group": pd.arrays.IntegerArray(np.maximum(cr.group, 0), cr.group < 0),
            "reason": pd.array(np.where(reason == "", None, reason), dtype="string"),
            "active": nullable_bool(d_periods),
            "nr_periods": nullable_int(d_periods),
            "nr_throttled": nullable_int(d_thr),
            "quota_us": nullable_int(quota),
            "usage_us": usage,
            "usage_lo_us": usage_lo,
            "usage_hi_us": usage_hi,
            "throttled": nullable_bool(d_thr),
            "throttled_rq_us": d_thr_us,
            "exhausted_at_us": exhausted,
            "exhausted_lo_us": ex_lo,
            "exhausted_hi_us": ex_hi,
            "stall_us": stall,
            "cpus_throttled": cpus,
            **v2,
        }
    )
    return df, cr


def _reasons(
    n: int,
    changes: list[tuple[int, str]],
    hole_ms: np.ndarray,
    gap: np.ndarray,
    usage: np.ndarray,
    ncpu: int | None,
    P: int,
    tick: int,
    open_ex: np.ndarray,
    ex_lo: np.ndarray,
    ex_hi: np.ndarray,
    cr: Credits,
) -> np.ndarray:
    """The ``reason`` of each period: why its values are interpolated, unknown or out of the
    ordinary ("" where none applies)."""
    reason = np.full(n, "", dtype=object)

    def add(r: int, what: str) -> None:
        reason[r] = what if not reason[r] else reason[r] + "; " + what

    for r, what in changes:
        add(r, what)
    for r in np.flatnonzero(gap).tolist():
        add(r, f"usage interpolated across a {hole_ms[r]:.0f} ms hole in the samples")
    if ncpu:
        # the counter is charged at ticks and context switches, a running CPU's time up to a
        # tick late: a period can show more than its CPUs could run (short periods above all)
        for r in np.flatnonzero(usage > ncpu * P / 1e3 + 1.0).tolist():
            said = f"the usage counter rose {usage[r] / 1e3:.2f} ms, more than {ncpu} CPUs can run in its "
            said += f"{P / 1e6:g} ms"
            if usage[r] <= ncpu * (P + tick) / 1e3 + 1.0:
                said += (
                    f": it is charged at ticks and context switches, a running CPU's time up to a tick "
                    f"({tick / 1e6:g} ms) late"
                )
            else:  # more than a tick late on every CPU: no charging explains it
                said += ", even each a tick late: a jump the kernel does not make (check cpu_stat.csv there)"
            add(r, said)
    for r in np.flatnonzero(open_ex).tolist():
        add(r, f"quota ran out between {ex_lo[r] / 1e3:.1f} and {ex_hi[r] / 1e3:.1f} ms (the reads leave it open)")
    for g in cr.groups.itertuples(index=False) if len(cr.groups) else ():
        hole = (g.hole_end_ns - g.hole_start_ns) / 1e6
        what = (
            f"{int(g.nr_throttled)} of {g.boundaries} period ends in one {hole:.0f} ms hole were throttled "
            f"({g.throttled_us / 1e3:.1f} ms throttled time between them; group {g.group})"
        )
        sel = cr.group == g.group
        reason[sel] = np.where(reason[sel] == "", what, reason[sel] + "; " + what)
    return reason


V2_SIGNALS = ("psi_some_us", "psi_full_us", "local_throttled_us")
# why the v2 columns are NaN for a whole bundle (df.attrs["missing"])
V2_MISSING = (
    "the samples have no {col} column: cgroup v1 has neither cpu.pressure nor cpu.stat.local, and a v2 "
    "kernel before 6.6 no cpu.stat.local (or the bundle was sampled by an older gmp-sampler)"
)
V2_EMPTY = "level {level!r} has no {file} ({why}): the sampler left {col} empty"
V2_FILES = {
    "psi_some_us": ("cpu.pressure", "PSI turned off: psi=0 on the kernel command line"),
    "psi_full_us": ("cpu.pressure's full line", "a kernel before {}.{}, or PSI turned off".format(*PSI_CGROUP_FULL)),
    "local_throttled_us": ("cpu.stat.local", "a kernel before {}.{}".format(*LOCAL_STAT)),
}


def _v2_missing(run: Run, level: str) -> dict[str, str]:
    """Why each cgroup v2 column of the level's table is NaN throughout (none: it is not)."""
    s = level_run(run, level).samples if "cgroup" in run.samples else run.samples
    out = {}
    for c in V2_SIGNALS:
        if c not in s:
            out[c] = V2_MISSING.format(col=c)
        elif s[c].isna().all():
            file, why = V2_FILES[c]
            out[c] = V2_EMPTY.format(level=level, file=file, why=why, col=c)
    return out


def _v2_signals(s: pd.DataFrame, t: np.ndarray, B: np.ndarray, margin: int, P: int) -> dict[str, np.ndarray]:
    """cgroup v2's own per-period signals (NaN where the samples lack them): the PSI
    totals, which the kernel keeps current at every read (the stall in progress included),
    interpolated at the boundaries like usage; cpu.stat.local's throttled time, which the
    kernel adds when a run queue is unthrottled, like cpu.stat's: credited the same way
    (:func:`gmpanalysis.credits.credit_boundaries`: at the boundary that ends the freeze, or
    mid-period where another level's boundary ended it; NaN inside an unresolved hole)."""
    out = {}
    n = len(B) - 1
    for c in V2_SIGNALS:
        if c not in s:  # cgroup v1, or a kernel without the file
            out[c] = np.full(n, np.nan)
            continue
        v = s[c].to_numpy(dtype=np.float64, na_value=np.nan)
        have = ~np.isnan(v)
        if have.sum() < 2:
            out[c] = np.full(n, np.nan)
            continue
        # cells left empty (a file the sampler could not read at some reads, a damaged CSV):
        # the reads that have the value serve, and only periods they leave open are NaN
        tv, v = t[have], v[have]
        if c.startswith("psi_"):
            vals = np.diff(np.interp(B.astype(np.float64), tv.astype(np.float64), v))
        else:
            counters = {k: s[k].to_numpy()[have] for k in CREDITED if k != "throttled_us"}
            vals = credit_boundaries(B, tv, {**counters, "throttled_us": v}, margin, P).values["throttled_us"]
        if not have.all():
            vals = np.where(_left_open(t, have, B), np.nan, vals)
        out[c] = vals
    return out


def _left_open(t: np.ndarray, have: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Per period between the boundaries ``B``: whether a boundary of it falls where reads
    lacking the value stand between the reads that have it (or beyond the first or last
    of them), so its value there would be made up of the reads around the gap."""
    idx = np.flatnonzero(have)
    k = np.searchsorted(t[idx], B, side="right")  # the first read with the value after B
    before = idx[np.clip(k - 1, 0, len(idx) - 1)]
    after = idx[np.clip(k, 0, len(idx) - 1)]
    # between the two reads with the value around B, a read without it; or B outside them
    # where reads without it lie beyond
    gap = (after - before > 1) | ((k == 0) & (idx[0] > 0)) | ((k == len(idx)) & (idx[-1] < len(t) - 1))
    return gap[:-1] | gap[1:]


def _add_requests(df: pd.DataFrame, run: Run) -> None:
    n = len(df)
    df["requests"] = np.zeros(n, dtype=np.int64)
    df["requests_ok"] = np.zeros(n, dtype=np.int64)
    df["requests_failed"] = np.zeros(n, dtype=np.int64)
    df["latency_p50_ms"] = np.nan
    df["latency_p99_ms"] = np.nan
    r = run.requests
    if r is None or not len(r) or not n:
        return
    start, end = df["start_ns"].to_numpy(), df["end_ns"].to_numpy()
    # a request belongs to the period it arrived in (its scheduled time)
    sched = r["sched_ns"].to_numpy()
    which = np.searchsorted(start, sched, side="right") - 1
    inside = (which >= 0) & (sched < end[np.maximum(which, 0)])
    ok = inside & succeeded(r)
    df["requests"] = np.bincount(which[inside], minlength=n)
    df["requests_ok"] = np.bincount(which[ok], minlength=n)
    df["requests_failed"] = df["requests"] - df["requests_ok"]
    if not ok.any():  # an overloaded window where nothing succeeded: no latency to show
        return
    # latency of the requests that succeeded, from the scheduled start (a timeout's
    # "latency" is the client's timeout, not the service's)
    q = pd.Series(latency_ms(r)[ok]).groupby(which[ok]).quantile([0.5, 0.99]).unstack()
    df.loc[q.index, "latency_p50_ms"] = q[0.5].to_numpy()
    df.loc[q.index, "latency_p99_ms"] = q[0.99].to_numpy()


def build_periods(
    run: Run, grid: PeriodGrid, level: str | None = None, *, level_table: Callable[[str], pd.DataFrame]
) -> pd.DataFrame:
    """The per-period table on a given grid, for one level (the process's own by default),
    with the freezes of every level laid on it (see :func:`gmpanalysis.df_periods`).
    ``level_table(name)``: another level's own table on its own grid
    (:meth:`gmpanalysis.Analysis.level_table_of`, memoised)."""
    names = level_names(run)
    ref = table_level(run) if level is None else level
    single = len(names) == 1 and "cgroup" not in run.samples
    out = build_level(run if single else level_run(run, ref), grid)
    fz = [freezes_of(out, ref)]
    spans: dict[str, tuple[int, int]] = {}
    for name in names:
        if name == ref:
            continue
        try:
            other = level_table(name)
        except MissingDataError as e:  # a level without a quota, or too short to fit a grid
            note = f"level {name!r} is not laid on the table: {e}"
            if note not in run.notes:
                run.notes.append(note)
            continue
        fz.append(freezes_of(other, name))
        spans[name] = (int(other["start_ns"].iloc[0]), int(other["end_ns"].iloc[-1]))
    freezes = pd.concat(fz, ignore_index=True)
    if len(spans):
        freezes = refine(freezes, {name: level_run(run, name).samples for name in [ref, *spans]})
    add_frozen_columns(out, freezes, ref, spans)
    out = out[PERIOD_COLUMNS]
    out.attrs["grid"] = grid
    out.attrs["level"] = ref
    out.attrs["missing"] = _v2_missing(run, ref)
    out.attrs["ledger"] = dataclasses.replace(out.attrs["ledger"], freezes=place(freezes, out))
    return out


def build_level(run: Run, grid: PeriodGrid) -> pd.DataFrame:
    """The table of a single-level run: counters, exhaustion and the trace on ``grid``."""
    s = run.samples
    if not ever_limited(run):
        raise MissingDataError(f"{run.path}: no CPU limit (quota_us is null): there are no CFS periods to align to")
    pc = period_changes(run)
    if len(pc):
        r = pc.iloc[0]
        raise MissingDataError(
            f"{run.path}: the CFS period of level {r['cgroup']!r} changed to {r['period_us']} µs at t_ns "
            f"{r['t_ns']} (limits.csv): the kernel's timer takes the new length from its next expiry, so one grid "
            "does not hold across it; analyse the parts before and after separately (filter run.samples by t_ns)"
        )
    parts, groups, cons = [], [], []
    next_group = 0
    _note_left_out(run, grid)
    for i, seg in enumerate(grid.segments):
        ss = s.iloc[seg.first_row : seg.last_row + 1]
        t = ss["t_ns"].to_numpy()
        twice = t[1:] == t[:-1]
        if twice.any():
            # one clock reading is one read: a row written twice, or reads closer than the
            # writer's clock resolves; the last of them holds every increment counted by
            # then, so the counters' deltas lose nothing (check_counters notes the unequal)
            ss = ss[np.r_[~twice, True]]
        part, cr = _segment_table(run, grid, i, ss)
        if not len(part):
            continue
        if len(cr.groups):
            part["group"] = part["group"] + next_group
            groups.append(
                cr.groups.assign(
                    group=cr.groups["group"] + next_group,
                    segment=i,
                    first_period=part["period"].to_numpy()[cr.groups["first_row"].to_numpy()],
                    last_period=part["period"].to_numpy()[cr.groups["last_row"].to_numpy()],
                )
            )
            next_group += len(cr.groups)
        cons += _conservation(i, ss, part, cr)
        parts.append(part)
    if not parts:
        raise MissingDataError(
            f"{run.path}: the samples hold no complete CFS period (no two period boundaries inside the "
            f"sampled span {(s['t_ns'].iloc[-1] - s['t_ns'].iloc[0]) / 1e6:.0f} ms); collect for longer"
        )
    out = pd.concat(parts, ignore_index=True)
    add_trace(out, run)
    _add_requests(out, run)
    out.attrs["grid"] = grid
    out.attrs["ledger"] = Ledger(
        groups=pd.concat(groups, ignore_index=True)[GROUP_COLUMNS] if groups else pd.DataFrame(columns=GROUP_COLUMNS),
        conservation=pd.DataFrame(cons),
    )
    return out


def _note_left_out(run: Run, grid: PeriodGrid) -> None:
    """A note for every hole too long to lay on the table (:data:`gmpanalysis.grid.HOLE_BOUNDARIES_MIN`):
    where it is, and what the counters say happened across it, so that no count vanishes
    unsaid."""
    s = run.samples
    src = s.attrs.get("source", "cpu_stat.csv")
    t = s["t_ns"].to_numpy()
    for before, after, boundaries in grid.left_out:
        rose = ", ".join(f"{c} {float(s[c].iloc[after] - s[c].iloc[before]):+g}" for c in CREDITED)
        note = (
            f"{src}: a {(t[after] - t[before]) / 1e9:.6g} s hole in the samples (t_ns {t[before]} to {t[after]}) "
            f"holds up to {boundaries} period boundaries, more than the file has reads: its periods are not in the "
            f"table, the reads after it start a new segment (across it: {rose}). A sampler stopped for that long, "
            "or a corrupt t_ns?"
        )
        if note not in run.notes:
            run.notes.append(note)
    # the other places a new segment starts: the stretch between two segments' reads holds
    # a boundary whose period neither grid's table has (its counts are the ledger's
    # "outside"); said, with why and what the counters did across it
    skipped = {(a, b) for a, b, _ in grid.left_out}
    restarts = restart_ns(run.meta)
    for one, two in zip(grid.segments[:-1], grid.segments[1:], strict=False):
        a, b = one.last_row, two.first_row
        if (a, b) in skipped or b != a + 1:
            continue
        fell = [c for c in ("usage_us", *CREDITED) if s[c].iloc[b] < s[c].iloc[a]]
        # a recreated cgroup restarts every counter (bundle.check_counters): usage with the others
        zero = any(all(s[c].iloc[x] == 0 for c in CREDITED) for x in (a, b))
        if any(t[a] <= r < t[b] for r in restarts):  # as split_segments cuts
            why = "the container restarted (meta.json restarts)"
        elif fell and "usage_us" in fell and (len(fell) > 1 or zero):
            why = "a counter fell (a recreated cgroup)"
        elif fell:
            why = (
                f"{', '.join(fell)} fell while the other counters did not (no sign of a restart: a note names the line)"
            )
        else:
            why = "the period timer's phase moved (the boundaries before and after fit no one grid)"
        rose = ", ".join(f"{c} {float(s[c].iloc[b] - s[c].iloc[a]):+g}" for c in CREDITED)
        level = f" (level {run.meta['level']!r})" if isinstance(run.meta.get("level"), str) else ""
        note = (
            f"{src}{level}: the reads from t_ns {t[b]} start a new segment: {why}. The period across t_ns "
            f"{t[a]}-{t[b]} "
            f"is in neither segment's table (across it: {rose}; df_conservation counts it as outside)"
        )
        if note not in run.notes:
            run.notes.append(note)


@dataclasses.dataclass(eq=False, frozen=True)  # compared by identity: pandas compares attrs when merging
class Ledger:
    """Where the counters of a period table went: see :func:`df_period_groups` and
    :func:`df_conservation`. Read-only, and shared by the tables derived from one (a
    column, a filter): pandas deep-copies ``attrs`` into every derived frame, and copying
    these tables each time cost a third of a bundle's analysis. What it holds is handed
    out as copies (:func:`df_period_groups`, :func:`df_conservation`, df_freezes)."""

    groups: pd.DataFrame
    conservation: pd.DataFrame
    freezes: pd.DataFrame | None = None  # every level's freezes on this table's grid (freezes.place)

    def __deepcopy__(self, memo: dict) -> Ledger:
        return self


def _ledger(per: pd.DataFrame) -> Ledger:
    led = per.attrs.get("ledger")
    if led is None:
        raise MissingDataError(
            "this period table carries no ledger (df.attrs['ledger']): pass the table df_periods returned, "
            "or one filtered from it (merges and concats drop the attrs)"
        )
    return led


def df_period_groups(per: pd.DataFrame) -> pd.DataFrame:
    """The ambiguous groups of a :func:`df_periods` table: periods whose ends fell inside
    one hole in the samples, so that the cumulative counters give only their sums.

    Columns: ``group`` (the rows' ``group`` value); ``segment``; ``first_period``,
    ``last_period``; ``boundaries`` period ends inside the hole (ones outside the table
    included); ``hole_start_ns``, ``hole_end_ns`` the reads around the hole; ``nr_periods``,
    ``nr_throttled`` counts and ``throttled_us`` µs (a sum over CPUs) credited in the hole;
    ``nr_periods_resolved``, ``nr_throttled_resolved``, ``throttled_us_resolved`` bool, the
    sum decided every period (0, or a count equal to ``boundaries``), so the rows hold it.
    """
    return _ledger(per).groups.copy()  # the ledger is shared, read-only


def df_conservation(per: pd.DataFrame) -> pd.DataFrame:
    """Where every counter increment of a :func:`df_periods` table went, per segment.

    Columns: ``segment``; ``counter`` (nr_periods, nr_throttled, throttled_us, usage_us);
    ``delta`` last read - first read of the segment; ``rows`` Σ over the rows that know
    their value; ``groups`` Σ of the unresolved ambiguous groups' sums; ``outside`` credits
    of the periods before and after the table (for usage: before the first and after the
    last boundary). ``rows + groups + outside == delta`` on every input, up to float
    rounding (the throttled time is a float sum of µs).
    """
    return _ledger(per).conservation.copy()  # the ledger is shared, read-only


GROUP_COLUMNS = [
    "group",
    "segment",
    "first_period",
    "last_period",
    "boundaries",
    "hole_start_ns",
    "hole_end_ns",
    *CREDITED,
    *(f"{c}_resolved" for c in CREDITED),
]


def _conservation(seg_no: int, ss: pd.DataFrame, part: pd.DataFrame, cr: Credits) -> list[dict[str, object]]:
    """Where every counter increment of a segment went: rows, groups, or periods outside."""
    out: list[dict[str, object]] = []
    has_groups = len(cr.groups) > 0
    for c in CREDITED:
        v = ss[c].to_numpy()
        unresolved = ~cr.groups[f"{c}_resolved"].to_numpy(dtype=bool) if has_groups else None
        out.append(
            {
                "segment": seg_no,
                "counter": c,
                "delta": float(v[-1] - v[0]),
                "rows": float(np.nansum(cr.values[c])),
                "groups": float(cr.groups[c].to_numpy()[unresolved].sum()) if has_groups else 0.0,
                "outside": cr.outside[c],
            }
        )
    u = ss["usage_us"].to_numpy(dtype=np.float64)
    t = ss["t_ns"].to_numpy()
    inside = interp_at(np.array([part["start_ns"].iloc[0], part["end_ns"].iloc[-1]], dtype=np.int64), t, u)
    out.append(
        {
            "segment": seg_no,
            "counter": "usage_us",
            "delta": float(u[-1] - u[0]),
            "rows": float(part["usage_us"].sum()),
            "groups": 0.0,
            "outside": float((inside[0] - u[0]) + (u[-1] - inside[1])),
        }
    )
    return out
