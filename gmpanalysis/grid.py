"""The kernel's CFS period grid, reconstructed from cpu.stat samples.

The bandwidth timer of a cgroup is an hrtimer on CLOCK_MONOTONIC: its expiries fall at
``phase + k·period`` for the cgroup's whole life, with a phase drawn at random when the
cgroup is created (kernels since ~6.4). Each expiry bumps ``nr_periods`` (while the timer
runs: it stops two periods after the group goes idle and resumes on the same grid). So every
read where nr_periods rose brackets at least one boundary between the previous read and this
one; intersecting those brackets modulo the period pins the phase. A sampling interval that
does not divide the period (997 µs) slides the brackets across the boundary and narrows the
intersection to tens of µs; one that divides it (1 ms) leaves it about one interval wide.

A boundary is always at or before the read that sees its increment, so every bracket's upper
end binds; a late timer expiry (14–146 µs seen) can push an increment past the next read,
and its bracket's lower end past the true boundary: lower ends beyond the consensus are
dropped as late expiries, and every lower end gives way by the timer's expiry latency
(TIMER_LATE_NS), since a late expiry can hide below the tightest upper end. A recreated
cgroup (a restarted container) restarts its counters
and draws a new phase: the samples are split into segments there, each fitted on its own;
brackets that contradict all earlier ones by more than 0.5 ms also start a new segment, for a
new phase whose counters did not visibly fall: two in a row when the boundaries moved earlier
(no late expiry can do that), five when they moved later (a VM that loses its vCPU for tens
of ms delays an expiry by as much, now and then, never five periods in a row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .errors import MissingDataError, UsageError

COUNTERS = ("usage_us", "nr_periods", "nr_throttled", "throttled_us")
# A bracket that disagrees with all before it by more than this is a new phase, not a late
# expiry (late expiries seen here: 14-146 µs).
JUMP_TOL_NS = 500_000
# How late a period timer's expiry (and so its nr_periods increment) can run after the
# nominal boundary: 14-146 µs seen here (NOTES), under load on a VM.
TIMER_LATE_NS = 150_000
# ... and in an emulated guest (qemu TCG, meta virtualization "tcg"): its timer interrupts
# wait for the host to run the vCPU; a 4-vCPU guest on 2 host cores saw nr_periods rise up
# to 19.5 ms after the boundary (Debian 6.1, lab run --kernel)
TIMER_LATE_TCG_NS = 25_000_000


def timer_late_ns(meta: dict) -> int:
    """How late the bundle's period timers may fire: the guest's tolerance under emulation."""
    return TIMER_LATE_TCG_NS if meta.get("virtualization") == "tcg" else TIMER_LATE_NS


# A phase that moved later must hold for this many brackets (periods) in a row to be a new
# phase rather than late expiries.
PERSIST_BRACKETS = 5
# A hole in the reads is laid on the table period by period (its periods form an ambiguous
# group, see gmpanalysis.credits), as long as it holds no more boundaries than the file has
# reads (and at least this many): the table stays the size of the data. A longer one -- a
# sampler stopped for hours, or a corrupt time that jumps by days -- ends the segment; the
# reads after it start another, and the hole is listed in PeriodGrid.left_out.
HOLE_BOUNDARIES_MIN = 10_000


@dataclasses.dataclass(frozen=True)
class GridSegment:
    """The grid of one cgroup lifetime (between counter resets)."""

    first_row: int  # first sample row of the segment (position in the samples frame)
    last_row: int  # last sample row (inclusive)
    start_ns: int  # time of the first sample
    end_ns: int  # time of the last sample
    phase_ns: int  # a boundary lies at phase_ns + k·period_ns (phase_ns in [0, period))
    uncertainty_ns: int  # half-width of the interval the phase is known to lie in
    boundaries_used: int  # brackets that constrained the phase
    late_dropped: int  # brackets dropped as late timer expiries

    def boundaries(self, period_ns: int, start_ns: int | None = None, end_ns: int | None = None) -> np.ndarray:
        """Boundary times (int64 ns) within [start_ns, end_ns] (default: the segment)."""
        lo = self.start_ns if start_ns is None else start_ns
        hi = self.end_ns if end_ns is None else end_ns
        k0 = -((self.phase_ns - lo) // period_ns)  # ceil((lo - phase) / period)
        k1 = (hi - self.phase_ns) // period_ns
        return self.phase_ns + np.arange(k0, k1 + 1, dtype=np.int64) * period_ns


@dataclasses.dataclass(frozen=True)
class PeriodGrid:
    """CFS period boundaries per segment; ``phase_ns``/``uncertainty_ns`` are those of the
    longest segment."""

    period_ns: int
    segments: tuple[GridSegment, ...]
    # holes too long to lay on the table: (last row before, first row after, boundaries inside)
    left_out: tuple[tuple[int, int, int], ...] = ()

    def __deepcopy__(self, memo: dict) -> PeriodGrid:
        return self  # immutable all through: pandas deep-copies a table's attrs into every column

    @property
    def main(self) -> GridSegment:
        return max(self.segments, key=lambda s: s.end_ns - s.start_ns)

    @property
    def phase_ns(self) -> int:
        return self.main.phase_ns

    @property
    def uncertainty_ns(self) -> int:
        return self.main.uncertainty_ns


def restart_ns(meta: dict[str, Any]) -> tuple[int, ...]:
    """When the collector saw the container restart (meta.json ``restarts`` whose ``clock``
    is "samples": ``mono_ns`` on the samples' CLOCK_MONOTONIC): its cgroup was recreated
    then, whether or not its counters fell (a new cgroup that ran longer than the old one
    already counts more). The process's own level only: a level run of another level has
    none (:func:`gmpanalysis.levels.level_run`)."""
    out = []
    for r in meta.get("restarts") or ():
        # older collectors wrote their own machine's clock, which says nothing of the samples'
        if not isinstance(r, dict) or r.get("clock") != "samples":
            continue
        t = r.get("mono_ns")
        if isinstance(t, int) and not isinstance(t, bool):
            out.append(t)
    return tuple(sorted(out))


def restarted_between(t: np.ndarray, restarts_ns: Sequence[int]) -> np.ndarray:
    """For each pair of consecutive reads at ``t``: whether a restart the collector saw
    (:func:`restart_ns`) lies between them."""
    out = np.zeros(max(len(t) - 1, 0), dtype=bool)
    if len(restarts_ns) and len(t):
        after = np.searchsorted(t, np.asarray(restarts_ns, dtype=np.int64), side="right")
        out[after[(after > 0) & (after < len(t))] - 1] = True
    return out


def split_segments(samples: pd.DataFrame, restarts_ns: Sequence[int] = ()) -> list[tuple[int, int]]:
    """(first_row, last_row) ranges between counter resets: any cumulative counter falling
    means the cgroup was recreated, and so does a restart the collector saw
    (``restarts_ns``: :func:`restart_ns`), between the reads either side of it."""
    if len(samples) == 0:
        return []
    fall = np.zeros(len(samples) - 1, dtype=bool)
    for c in COUNTERS:
        v = samples[c].to_numpy()
        fall |= v[1:] < v[:-1]
    fall |= restarted_between(samples["t_ns"].to_numpy(), restarts_ns)
    cuts = np.flatnonzero(fall) + 1
    edges = np.r_[0, cuts, len(samples)]
    return [(int(a), int(b) - 1) for a, b in zip(edges[:-1], edges[1:], strict=True) if b - a >= 1]


def _usable(d: np.ndarray, width: np.ndarray, period_ns: int) -> np.ndarray:
    """Brackets that place a boundary: nr_periods rose between reads less than half a
    period apart. Offsets are unwrapped around the narrowest bracket; that is exact only
    when every bracket is narrower than half a period (a wider one can overlap the truth
    at two places on the circle and would pin a confident wrong phase). Brackets wider than
    a quarter period (holes) say little: when narrower ones exist, only they are used."""
    ok = (d >= 1) & (width < period_ns // 2)
    narrow = ok & (width <= period_ns // 4)
    return narrow if narrow.any() else ok


def _rises(t: np.ndarray, read: np.ndarray, periods: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The read pairs across which nr_periods rose (their first rows), and the earliest and
    latest times of the boundary between each. Only those pairs can hold one (about one in a
    hundred at 1 ms sampling), so the rest are dropped before any arithmetic."""
    rose = np.flatnonzero(periods[1:] > periods[:-1])
    lo = t[rose] - read[rose] // 2  # the previous read started here at the earliest
    hi = t[rose + 1] + read[rose + 1] // 2  # this read ended here at the latest
    return rose, lo, hi


def _brackets(
    t: np.ndarray, read: np.ndarray, periods: np.ndarray, period_ns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The usable brackets (see :func:`_usable`) of :func:`_rises`: for each, the read
    pair's first row and the earliest and latest times of the boundary between them."""
    rose, lo, hi = _rises(t, read, periods)
    use = _usable(periods[rose + 1] - periods[rose], hi - lo, period_ns)
    return rose[use], lo[use], hi[use]


def _fit_phase(t: np.ndarray, read: np.ndarray, periods: np.ndarray, period_ns: int) -> tuple[int, int, int, int]:
    """Phase, uncertainty, brackets used, late brackets dropped, for one segment."""
    _, lo, hi = _brackets(t, read, periods, period_ns)
    if len(lo) == 0:
        raise MissingDataError(
            "no nr_periods increment between two reads closer than half a period: the cgroup has no CPU "
            "limit (no period timer) or the samples are too sparse to place the period grid (sample at "
            f"least every {period_ns / 2e6:g} ms for {period_ns / 1e6:g} ms periods; ~1 ms gives a precise grid)"
        )
    # work relative to a reference so the circle does not wrap: offsets in (-P/2, P/2]; the
    # narrowest bracket's upper end lies closest to a boundary (a wide first bracket, after
    # a hole, could put the phase near the wrap point and split the brackets across it)
    ref = int(hi[np.argmin(hi - lo)])
    half = period_ns // 2
    d_hi = (hi - ref + half) % period_ns - half
    d_lo = d_hi - (hi - lo)
    upper = int(d_hi.min())
    # brackets whose lower end lies past every upper end were raised late
    late = d_lo > upper
    # The upper ends are always valid (a timer never fires early). Any lower end may belong
    # to an expiry that ran late -- by up to TIMER_LATE_NS, not only the rare outliers
    # caught above: two samplers on one busy cgroup disagreed by 130 µs while each claimed
    # ±33-47 µs when only the outliers were allowed for. So the lower bound gives way by it.
    ok = d_lo[~late]
    lower = (int(ok.max()) if len(ok) else upper) - TIMER_LATE_NS
    mid = (lower + upper) // 2
    phase = (ref + mid) % period_ns
    return int(phase), (upper - lower + 1) // 2, int(len(lo)), int(late.sum())


def _phase_jump(
    t: np.ndarray, read: np.ndarray, periods: np.ndarray, period_ns: int, late_ns: int = TIMER_LATE_NS
) -> int | None:
    """The first read (row offset) after which the boundaries follow a different phase, or
    None. A recreated cgroup normally restarts its counters (see split_segments); this
    catches a new timer phase whose counters did not visibly fall. ``late_ns``: how late an
    expiry may run (:func:`timer_late_ns`)."""
    use, lo, hi = _brackets(t, read, periods, period_ns)
    if len(use) < 3:
        return None
    half = period_ns // 2
    d_hi = (hi - int(hi[np.argmin(hi - lo)]) + half) % period_ns - half
    d_lo = d_hi - (hi - lo)
    # Upper ends always hold for an unchanged phase (a timer never fires early); a lower end
    # may be pushed later by a late expiry, and one late bracket must not raise the consensus
    # for every bracket after it: lower ends past the upper consensus are left out of it.
    upper = np.minimum.accumulate(d_hi)
    late = d_lo > upper
    lower = np.maximum.accumulate(np.where(late, np.iinfo(np.int64).min, d_lo))
    # bracket k+1 against brackets 0..k. A phase moved earlier cannot be a late expiry: two
    # such brackets in a row make a new phase. A phase moved later looks like late expiries
    # (a VM that loses its vCPU for tens of ms delays them by as much), which are isolated:
    # it must persist for PERSIST_BRACKETS brackets in a row (or to the end of the samples).
    # the lower ends that set the consensus before an upper one holds them may themselves be
    # late by as much as an expiry can be: an emulated guest's 20 ms is no earlier phase
    earlier = d_hi[1:] < lower[:-1] - max(JUMP_TOL_NS, late_ns)
    bad = earlier | (d_lo[1:] > upper[:-1] + JUMP_TOL_NS)
    n = len(bad)
    idx = np.arange(n)
    # length of the run of conflicting brackets starting at each one
    next_ok = np.minimum.accumulate(np.where(bad, n, idx)[::-1])[::-1]
    run = next_ok - idx
    jump = (earlier[:-1] & earlier[1:]) | ((run[:-1] >= np.minimum(PERSIST_BRACKETS, n - idx[:-1])) & bad[1:])
    k = np.flatnonzero(jump)
    return None if len(k) == 0 else int(use[k[0] + 1])  # the read that starts the first conflicting bracket


def fit_period_grid(
    samples: pd.DataFrame,
    period_ns: int = 100_000_000,
    restarts_ns: Sequence[int] = (),
    late_ns: int = TIMER_LATE_NS,
) -> PeriodGrid:
    """Fit the CFS period grid to cpu.stat samples of ONE cgroup (see module doc);
    ``restarts_ns``: when its container restarted (:func:`restart_ns`), a new segment each;
    ``late_ns``: how late its timer may fire (:func:`timer_late_ns`).

    ``samples`` is a frame from :func:`gmpanalysis.read_cpu_stat`; with several cgroups in
    it, select one first. Raises :class:`MissingDataError` when the samples cannot place
    the grid (no limit, or reads sparser than a period). A hole holding more boundaries
    than the file has reads ends a segment (:data:`HOLE_BOUNDARIES_MIN`); such holes are
    listed in ``left_out``.
    """
    if "cgroup" in samples and samples["cgroup"].nunique() > 1:
        raise MissingDataError(
            f"samples hold {samples['cgroup'].nunique()} cgroups ({', '.join(map(str, samples['cgroup'].unique()))}); "
            "fit one at a time: samples[samples.cgroup == NAME]"
        )
    missing = [c for c in ("t_ns", "read_ns", *COUNTERS) if c not in samples]
    if missing:
        raise MissingDataError(f"samples lack column(s) {', '.join(missing)}; read them with gmp.read_cpu_stat")
    t_all = samples["t_ns"].to_numpy()
    back = np.flatnonzero(t_all[1:] < t_all[:-1])
    if len(back):
        raise UsageError(
            f"samples row {int(back[0]) + 1}: t_ns goes backwards ({t_all[back[0]]} -> {t_all[back[0] + 1]}); "
            "sort the reads by time (samples.sort_values('t_ns'))"
        )
    read_all = samples["read_ns"].to_numpy()
    per_all = samples["nr_periods"].to_numpy()
    segs = []
    pending, left_out = [], []
    cap = max(len(samples), HOLE_BOUNDARIES_MIN)
    for a, b in split_segments(samples, restarts_ns):
        # boundaries inside each stretch between reads, at most (the phase is not known yet):
        # more than cap means a gap of at least cap periods
        for j in (a + np.flatnonzero(t_all[a + 1 : b + 1] - t_all[a:b] >= cap * period_ns)).tolist():
            left_out.append((j, j + 1, int((t_all[j + 1] - t_all[j]) // period_ns + 1)))
            pending.append((a, j))
            a = j + 1
        pending.append((a, b))
    while pending:  # a few segments: resets and phase jumps are rare
        a, b = pending.pop(0)
        if b - a < 2:
            continue
        j = _phase_jump(t_all[a : b + 1], read_all[a : b + 1], per_all[a : b + 1], period_ns, late_ns)
        if j is not None and 1 <= j <= b - a:
            pending[:0] = [(a, a + j - 1), (a + j, b)]
            continue
        try:
            phase, unc, used, late = _fit_phase(t_all[a : b + 1], read_all[a : b + 1], per_all[a : b + 1], period_ns)
        except MissingDataError:
            continue
        segs.append(GridSegment(a, b, int(t_all[a]), int(t_all[b]), phase, unc, used, late))
    if not segs:
        raise MissingDataError(
            f"{samples.attrs.get('source', 'samples')}: cannot place the CFS period grid: no segment of the "
            "samples has nr_periods rising between reads closer than half a period (is there a CPU limit? "
            f"was the group busy? were the reads at least every {period_ns / 2e6:g} ms for "
            f"{period_ns / 1e6:g} ms periods?)"
        )
    return PeriodGrid(period_ns, tuple(segs), tuple(left_out))


def check_period(
    samples: pd.DataFrame, period_ns: int, late_ns: int = TIMER_LATE_NS, restarts_ns: Sequence[int] = ()
) -> tuple[str, str] | None:
    """Do the samples of ONE cgroup agree with a CFS period of ``period_ns``? Returns None
    when they do (or hold too few increments to tell), else ``("error", why)`` when the
    period cannot be the timer's, or ``("note", why)`` when its boundaries drift against
    the increments by more than the grid tolerates.

    The timer fires once every period while it runs, and keeps running two periods after
    the group goes idle, so nr_periods rises at most once per period and in runs of
    consecutive periods: the increments lie a whole number of periods apart, never closer
    than one, and many exactly one apart. Summed over a chain of increments, the misfit of
    the right period stays within the reads' precision; a wrong one grows with every period.
    """
    t_all = samples["t_ns"].to_numpy(np.int64)
    read_all = samples["read_ns"].to_numpy(np.int64)
    per_all = samples["nr_periods"].to_numpy()
    P = int(period_ns)
    segments = split_segments(samples, restarts_ns)
    spacing = []  # time per increment between reads that saw one (consecutive periods: ~P)
    rises = 0
    for a, b in segments:
        t, per = t_all[a : b + 1], per_all[a : b + 1]
        rose = np.flatnonzero(per[1:] > per[:-1]) + 1
        rises += len(rose)
        if len(rose) >= 2:
            spacing.append(np.diff(t[rose]) / (per[rose[1:]] - per[rose[:-1]]))
        span = int(t[-1] - t[0]) + int(read_all[a] + read_all[b])
        if per[-1] - per[0] > span // P + 2:
            return "error", (
                f"nr_periods rose {int(per[-1] - per[0])} times in {span / 1e9:.3g} s, more than once per "
                f"period{_estimate(spacing)}"
            )
    if rises < 8:
        return None
    est = _estimate(spacing)
    low = np.concatenate(spacing) if spacing else np.zeros(0)
    if len(low) >= 8 and float(np.percentile(low, 10)) > 1.5 * P:
        return "error", f"nr_periods never rose in two consecutive periods ({rises} increments){est}"

    # increments placed between the reads around them, where the reads are fine enough
    gaps, tol, close, chains = [], [], 0, []
    for a, b in segments:
        t, read, per = t_all[a : b + 1], read_all[a : b + 1], per_all[a : b + 1]
        _, lo, hi = _rises(t, read, per)
        use = hi - lo <= P // 4
        mid = ((lo + hi) // 2)[use]
        half = ((hi - lo) // 2)[use]
        if len(mid) < 2:
            continue
        dm = np.diff(mid).astype(np.float64)
        h = (half[:-1] + half[1:] + late_ns).astype(np.float64)
        # two increments closer than a period, beyond what the reads leave open
        close += int(np.sum(dm < P - h))
        n = np.rint(dm / P)
        ok = (n >= 1) & (n <= 20)  # a longer idle stretch could round to the wrong count
        gaps.append(n[ok])
        tol.append(h[ok])
        chains.append((np.cumsum(n[ok]), np.cumsum((dm - n * P)[ok]), float(np.median(h[ok])) if ok.any() else 0.0))
    n = np.concatenate(gaps) if gaps else np.zeros(0)
    if len(n) < 8:
        return None
    h = np.concatenate(tol)
    if close >= max(3, (len(n) + close) // 10):
        return "error", f"{close} of {len(n) + close} nr_periods increments came less than one period apart{est}"
    if not (n == 1).any():
        return "error", f"nr_periods never rose in two consecutive periods ({len(n)} increments){est}"
    e = np.concatenate([np.diff(np.r_[0.0, r]) for _, r, _ in chains])
    misfit = int(np.sum(np.abs(e) > h))
    if misfit >= max(3, len(n) // 4):
        return "error", f"{misfit} of {len(n)} intervals between increments are no whole number of periods{est}"
    # drift: the chained misfit against the number of periods (a line through the origin);
    # a phase that jumped once leaves a step, not a line, and is the fit's business
    for k, r, hw in chains:
        if len(k) < 8:
            continue
        # sums of products, not np.dot: a dot product this long is a threaded BLAS call,
        # which would wake numpy's OpenBLAS pool (one thread per CPU) for a few µs of work
        slope = float((k * r).sum() / (k * k).sum())
        drift = slope * k[-1]
        rest = float(np.sqrt(np.mean((r - slope * k) ** 2)))
        if abs(drift) > max(2 * hw, 1_000_000) and rest <= 2 * hw and abs(slope) >= 1000:
            return "note", (
                f"the boundaries drift {drift / 1e6:+.1f} ms over {int(k[-1])} periods against it: the timer's "
                f"period is about {(P + slope) / 1e3:.0f} µs"
            )
    return None


def _estimate(spacing: list[np.ndarray]) -> str:
    """ "; the increments say about N µs": the median time per increment over the lowest
    tenth of those times (the timer running through consecutive periods), for a message."""
    x = np.concatenate(spacing) if spacing else np.zeros(0)
    if len(x) < 4:
        return ""
    low = x[x <= 1.5 * np.percentile(x, 10)]
    return f"; the increments say about {float(np.median(low)) / 1e6:.1f} ms"
