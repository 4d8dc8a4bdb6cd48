"""What a level's cpu.stat reads tell inside its periods, on arrays: when the quota ran out
(the last read at which usage still rose at a running CPU's pace, before any trickle of
runtime left on CPUs after the freeze, with its bracket), the
usage at each boundary and the bracket the reads around it allow, the holes between reads,
and the read intervals' percentiles. :mod:`gmpanalysis.periods` puts them in the table.
"""

from __future__ import annotations

import numpy as np

from .kernelfacts import MIN_CFS_RQ_RUNTIME_NS

# The group counts as running while its usage rises by at least RUNNING_CPUS over a window
# of one scheduler tick (kernelfacts.tick_ns: 4 ms at HZ=250). cpuacct.usage moves in
# tick-sized steps, so shorter windows look flat even for a busy CPU; after the quota runs
# out, threads still trickle leftover slice (36-520 µs steps seen here), far below a quarter
# CPU per tick.
RUNNING_CPUS = 0.25
# The group's run on its quota ends at a running read with none in this many ticks after it
# (a freeze, or the work done); a trickle of leftover runtime after it comes in runs of a
# millisecond or less
FLAT_TICKS = 2
# a freeze stops every CPU the group runs on: the run-queue time the kernel counts after it
# is at least this share of the CPUs then running over the rest of the period (0.89 the
# least seen where the reads show the freeze, on 16 and 2 CPUs)
PACE_SHARE = 0.8
# the candidate reads stepped through in a period before the last running read is taken
MAX_RUNS_STEPPED = 64
# throttled run-queue time over the stall above this many times the CPUs cannot be (it counts
# from each CPU's own throttle to an unthrottle just after the boundary: 1.45 the most seen)
IMPOSSIBLE_SHARE = 1.5
# A stretch without reads longer than this many sampling intervals is a hole: usage is
# interpolated across it (and says so); counters stay exact unless several period
# boundaries fall inside it.
HOLE_READS = 10
# The finest sampling the exhaustion brackets assume the truth is defined at (~1 kHz reads).
RESOLUTION_NS = 1_000_000
# reads taken at a time by exhaustion(): blocks that stay in cache
_BLOCK = 1 << 16


def last_true_at(flags: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each index in ``at``, the last index <= it where ``flags`` is true (-1: none)."""
    where = np.flatnonzero(flags)
    pos = np.searchsorted(where, at, side="right") - 1
    return np.where(pos >= 0, where[np.maximum(pos, 0)] if len(where) else -1, -1)


def exhaustion(
    t: np.ndarray,
    u: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    P: int,
    unc_ns: int,
    tick: int,
    dt: np.ndarray,
    q10: float,
    med_dt: float,
    thr_us: np.ndarray | None = None,
    cpus: int = 0,
    u_end: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quota exhaustion in each period [start, end): µs from the start to the last read at
    which usage still rose at a running CPU's pace, with its bracket; given the periods'
    throttled run-queue time ``thr_us`` and the ``cpus`` the group may run on (each holding
    at most min_cfs_rq_runtime of leftover), the read that ended the run a trickle of leftover followed
    (:func:`_before_leftover`; ``u_end``: the usage interpolated at the periods' ends, where
    the caller has it).

    The group's usage is charged when a task is descheduled, so the freeze shows as the
    last running-pace step: it happened after the read before that step and at the latest
    at the read that saw it. The bracket is (previous read, that read], clipped to the
    period and widened by the grid's uncertainty; when reads are missing after it (a stretch
    longer than 1.5 sampling intervals, or than 1.5 ms for sparser sampling, across which
    usage rose by a short read's running-pace step), the group may have run on unseen, and
    the bracket reaches the read that closes that stretch. ``dt`` is ``np.diff(t)``, with
    its 10th percentile and median.
    """
    n = len(t)
    # A stretch between reads longer than the finest resolution (1.5 sampling intervals,
    # and at most 1.5 ms: sparser sampling hides running too) can hide a running-pace step
    # that reads there would have seen, if usage rose across it by at least one such step of
    # a short read (1 ms at most): the bracket reaches the read that closes the last one.
    short_dt = min(q10, RESOLUTION_NS)
    gap_ns = 1.5 * min(med_dt, RESOLUTION_NS)
    running = np.empty(n, dtype=bool)
    closes = np.zeros(n, dtype=bool)
    # read by read, in blocks that stay in cache: an hour of 1 ms reads is 3.6 M of them,
    # and whole-length temporaries cost more in fresh pages than in arithmetic
    t0 = float(t[0]) if n else 0.0
    for a in range(0, n, _BLOCK):
        b = min(a + _BLOCK, n)
        tf = t[a:b].astype(np.float64)
        # the rise over the last tick-length of time (usage interpolated there, so missing
        # reads change the window only a little)
        back = np.maximum(tf - tick, t0)
        lo = max(int(np.searchsorted(t, t[a] - tick, side="right")) - 1, 0)
        rise = u[a:b] - np.interp(back, t[lo:b].astype(np.float64), u[lo:b])
        win = (tf - back) / 1e3
        # ... and the read itself carries a running-pace step (a window ending at a read can
        # still hold an older step)
        p = max(a - 1, 0)
        step = u[p + 1 : b] - u[p : b - 1]
        step_win = dt[p : b - 1] / 1e3
        ok = rise >= RUNNING_CPUS * win
        if a == 0:  # the first read's step is 0 over 0 µs: a running pace
            ok[1:] &= step >= RUNNING_CPUS * step_win
            closes[1:b] = (dt[: b - 1] > gap_ns) & (step >= RUNNING_CPUS * short_dt / 1e3)
        else:
            ok &= step >= RUNNING_CPUS * step_win
            closes[a:b] = (dt[p : b - 1] > gap_ns) & (step >= RUNNING_CPUS * short_dt / 1e3)
        running[a:b] = ok
    last_read = np.searchsorted(t, end, side="left") - 1
    j = last_true_at(running, np.maximum(last_read, 0))
    if thr_us is not None and cpus > 0:
        # a hole after it may hide a run no trickle's: the bracket below reaches across it
        j = _before_leftover(t, u, running, start, end, j, thr_us, cpus, tick, u_end)
    has = j >= 0
    jj = np.maximum(j, 0)
    tx = np.where(has, t[jj], start)
    tprev = np.where(has & (jj > 0), t[np.maximum(jj - 1, 0)], start)
    last_close = closes  # looked up by index below
    after = np.minimum(np.maximum(last_read + 1, 0), len(t) - 1)  # the first read after the end
    r = last_true_at(last_close, after)
    # a hole across the end boundary counts only for the part of it before the boundary
    # (after it, the unthrottled group runs: that rise belongs to the next period)
    short_tail = (r == after) & (end - t[np.maximum(r - 1, 0)] <= gap_ns)
    r = np.where(short_tail, last_true_at(last_close, np.maximum(last_read, 0)), r)
    late_hole = (r > 0) & (t[np.maximum(r - 1, 0)] >= tx)
    tnext = np.where(late_hole, t[np.maximum(r, 0)], tx)
    ex = np.clip(tx - start, 0, P) / 1e3
    # ... and the period's start is known to the grid's uncertainty
    lo = np.clip(tprev - start - unc_ns, 0, P) / 1e3
    hi = np.clip(np.minimum(tnext, end) - start + unc_ns, 0, P) / 1e3
    return ex, np.minimum(lo, ex), np.maximum(hi, ex)


def _before_leftover(
    t: np.ndarray,
    u: np.ndarray,
    running: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    j: np.ndarray,
    thr_us: np.ndarray,
    cpus: int,
    tick: int,
    u_end: np.ndarray | None = None,
) -> np.ndarray:
    """The running read that ends the group's run on its quota, where what ran after it
    was runtime left on CPUs. Once the pool is dry a CPU runs only what it still holds, and
    one whose thread slept kept at most min_cfs_rq_runtime (1 ms): threads that wake on such
    CPUs later run a millisecond each at a running pace, a trickle after the freeze (many
    Ps' threads on many CPUs), and the last running read (``j``) falls in it. The earliest
    read of the period that ends a run (no running read in the FLAT_TICKS ticks after it)
    such that (1) the usage after it to the boundary is at most the ``cpus``' leftover (a
    millisecond each); (2) every run after it is a trickle's, no longer than a CPU's
    leftover runs (1 ms) and the tick that charges it, unless the stall that leaves needs
    more run queues than the CPUs hold (bursts on several CPUs in a row join into longer
    runs); and the kernel's throttled run-queue time ``thr_us`` (a sum over run queues, to
    the boundary) covers (3) one run queue throttled from it to the boundary, within a
    tick, and (4) PACE_SHARE of the CPUs then running (the pace over the two ticks before
    it, one at least), each throttled there until the boundary: a freeze stops every CPU the
    group runs on. ``j`` where no read is earlier. Where more run queues than those running
    were throttled late (Ps woken into an empty pool), a short late run can look like
    leftover, and a burst shorter than two ticks seem to run on fewer CPUs than it did: the
    counters cannot tell those apart."""
    on = np.flatnonzero(running)
    if not len(on):
        return j
    brk = t[on[1:]] - t[on[:-1]] > FLAT_TICKS * tick
    ends, begins = on[np.append(brk, True)], on[np.insert(brk, 0, True)]
    m = np.searchsorted(ends, np.maximum(j, 0), side="left")  # the run holding j
    # only a period with a run that ended before j's (inside it) has a read to take
    some = (j >= 0) & (m > 0) & np.isfinite(thr_us)
    some[some] = t[ends[m[some] - 1]] > start[some]
    if not some.any():
        return j
    out = j.copy()
    j, m, start, end = j[some], m[some], start[some], end[some]
    te = t[ends]
    short = te - t[begins] <= MIN_CFS_RQ_RUNTIME_NS + tick
    # the CPUs running over the two ticks before the end of each run a period may take
    r0 = np.searchsorted(t, start, side="right")
    lo = np.searchsorted(ends, r0, side="left")
    mark = np.zeros(len(ends) + 1, dtype=np.int64)
    np.add.at(mark, lo, 1)
    np.add.at(mark, m, -1)
    need = np.flatnonzero(np.cumsum(mark)[:-1] > 0)
    pace = np.ones(len(ends))
    # (not over the run itself: the kernel charges usage at ticks, so a run of a few reads
    # holds a tick's charges of several CPUs and would seem to run on more than it did)
    pace[need] = np.maximum((u[ends[need]] - interp_at(te[need] - 2 * tick, t, u)) / (2 * tick / 1e3), 1.0)
    thr_ns = thr_us[some] * 1e3
    # (1): usage within the CPUs' leftover of the boundary's (the counter never goes down)
    leftover_us = cpus * MIN_CFS_RQ_RUNTIME_NS / 1e3
    u_end = interp_at(end, t, u) if u_end is None else u_end[some]
    r1 = np.searchsorted(u, u_end - leftover_us, side="left")
    # (3): end - t <= thr + a tick (int64 keys: float keys would convert every read time)
    r3 = np.searchsorted(t, end - thr_ns.astype(np.int64) - tick, side="left")
    k = np.maximum(np.searchsorted(ends, np.maximum(r1, r3), side="left"), lo)

    def paced(k: np.ndarray) -> np.ndarray:
        # (4): not monotone in the read, so the candidates are stepped through (a few a period)
        for _ in range(MAX_RUNS_STEPPED):
            kk = np.minimum(k, len(ends) - 1)
            bad = (k < m) & (thr_ns < PACE_SHARE * pace[kk] * (end - te[kk]))
            if not bad.any():
                return k
            k = np.where(bad, k + 1, k)
        return np.where(bad, m, k)

    def read_of(k: np.ndarray) -> np.ndarray:
        first = ends[np.minimum(k, len(ends) - 1)]
        return np.where((k < len(ends)) & (first < j), first, j)

    loose = read_of(paced(k))
    # (2): from the last run too long for a trickle on; unless what that leaves is a stall
    # the throttled time could not fill on every CPU (IMPOSSIBLE_SHARE of them over it)
    strict = read_of(paced(np.maximum(k, last_true_at(~short, m))))
    out[some] = np.where(thr_ns > IMPOSSIBLE_SHARE * cpus * (end - t[strict]), loose, strict)
    return out


def read_percentiles(x: np.ndarray, qs: tuple[float, ...]) -> tuple[float, ...]:
    """``np.percentile(x, qs)`` of int64 ``x`` (its linear method; the same floats for
    values within ±2**53, as read intervals in ns are) without sorting or selecting over all
    of ``x``: how fast numpy sorts or selects int64 depends on the CPU (an hour of read
    intervals: 14-171 ms to sort, 34 ms to select, on two x86 machines), while a pass of
    comparisons is cheap everywhere. A strided sample brackets the two order statistics
    each percentile lies between; they are selected from the few values inside the bracket,
    or, where the bracket misses them (an unlucky sample), from all of ``x``."""
    n = len(x)
    if x.dtype != np.int64:
        return tuple(float(v) for v in np.percentile(x, qs))
    out = []
    for q in qs:
        pos = q / 100 * (n - 1)
        k = int(np.floor(pos))
        a, b = (float(v) for v in _order_pair(x, k))
        g = pos - k
        # numpy's lerp: from the nearer end, so that the ends are exact
        out.append(b - (b - a) * (1 - g) if g >= 0.5 else a + (b - a) * g)
    return tuple(out)


def _order_pair(x: np.ndarray, k: int) -> np.ndarray:
    """The k-th and (k+1)-th smallest values of int64 ``x`` (0-based; the last twice at the end)."""
    n = len(x)
    k1 = min(k + 1, n - 1)
    if n < 65_536:
        return np.partition(x, [k, k1])[[k, k1]]
    # 65,536 of them: the bracket holds ~2 % of x (sorting the sample costs less than
    # passing over a wider one); the passes over x make no int64 temporary (an hour of
    # intervals is 28 MB, and a fresh one costs its page faults)
    sample = np.sort(x[:: n // 65_536])
    m = len(sample)
    r = k / (n - 1) * (m - 1)
    margin = 5 * np.sqrt(m * 0.25) + 2  # five times the sample rank's widest standard error
    lo = sample[max(int(r - margin), 0)]
    hi = sample[min(int(r + margin) + 1, m - 1)]
    keep = x >= lo
    below = n - int(np.count_nonzero(keep))
    keep &= x <= hi
    inside = x[keep]
    if below <= k and k1 < below + len(inside):
        return np.partition(inside, [k - below, k1 - below])[[k - below, k1 - below]]
    return np.partition(x, [k, k1])[[k, k1]]


# past this, int64 ns do not all convert to float64 exactly (CLOCK_MONOTONIC after ~104 days)
_EXACT_NS = 2**53


def interp_at(x: np.ndarray, t: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``np.interp(x, t, u)`` for int64 ``x`` and ascending int64 read times ``t``: the same
    floats, from the reads around each x only (and the first and last, for x outside), so
    that an hour of reads is not converted to float whole (28 MB of fresh pages for a few
    thousand x). Between two consecutive reads np.interp's arithmetic uses those two alone,
    and where every time converts exactly the int64 order is the float order, so it picks
    the same two."""
    n = len(t)
    x = np.asarray(x)
    exact = n and len(x) and -_EXACT_NS < int(t[0]) and int(t[-1]) < _EXACT_NS
    # many x: the reads around them are much of the reads, and np.unique over their indices
    # costs more than converting all (288 k x of 3.6 M reads: 0.44 s against 0.12 s)
    if not exact or n <= 32 * len(x) or x.dtype != np.int64 or t.dtype != np.int64:
        return np.interp(x.astype(np.float64), t.astype(np.float64), u)
    j = np.searchsorted(t, x, side="right") - 1
    sub = np.unique(np.concatenate(([0, n - 1], np.clip(j, 0, n - 1), np.clip(j + 1, 0, n - 1))))
    return np.interp(x.astype(np.float64), t[sub].astype(np.float64), u[sub])


def usage_at_boundaries(
    t: np.ndarray, u: np.ndarray, B: np.ndarray, unc_ns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Usage in each period between the boundaries ``B`` (µs), interpolated between the
    reads around each boundary, and the bracket those reads allow: cumulative usage is
    monotone, so the truth at a boundary lies between them (a boundary known to the grid's
    uncertainty ``unc_ns``); and the usage interpolated at each boundary."""
    u_at = interp_at(B, t, u)
    i_after = np.clip(np.searchsorted(t, B + unc_ns, side="left"), 0, len(t) - 1)
    i_before = np.clip(np.searchsorted(t, B - unc_ns, side="right") - 1, 0, len(t) - 1)
    u_lo_b, u_hi_b = u[i_before], u[i_after]
    return np.diff(u_at), np.maximum(u_lo_b[1:] - u_hi_b[:-1], 0.0), u_hi_b[1:] - u_lo_b[:-1], u_at


def hole_ms_per_period(t: np.ndarray, dt: np.ndarray, nominal: float, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per period [start, end) (sorted): the longest hole in the reads (a stretch without
    reads longer than HOLE_READS nominal intervals) that overlaps it, ms; 0 if none."""
    hole_ms = np.zeros(len(start))
    a = np.flatnonzero(dt > HOLE_READS * nominal)
    # each hole (t[a], t[a + 1]) overlaps the run of periods from the first that ends after
    # it starts to the last that starts before it ends
    lo = np.searchsorted(end, t[a], side="right")
    cnt = np.maximum(np.searchsorted(start, t[a + 1], side="left") - lo, 0)
    first = np.repeat(np.cumsum(cnt) - cnt, cnt)
    np.maximum.at(hole_ms, np.repeat(lo, cnt) + np.arange(len(first)) - first, np.repeat(dt[a] / 1e6, cnt))
    return hole_ms
