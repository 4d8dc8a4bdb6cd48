"""What the cumulative counters of cpu.stat say about the file that holds them: counters
that run ahead of each other or of the time that passed (a damaged line), counters that
fall (a recreated cgroup, a 32-bit wrap, or a file two writers wrote), reads that share a
timestamp. :func:`check_counters` is run by the bundle reader on every load."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .bundlefiles import file_line
from .errors import BundleError
from .grid import restarted_between


def check_counters(
    samples: pd.DataFrame,
    source: str = "cpu_stat.csv",
    restarts_ns: Sequence[int] = (),
    own: str | None = None,
    period_us: int | None = None,
) -> list[str]:
    """What the cumulative counters of each sampled cgroup say about the file; returns notes.

    The kernel counts every throttled period in nr_periods too, so nr_throttled never runs
    ahead of nr_periods, from the cgroup's creation or between any two reads (by more than
    one: a read can print nr_periods just before the timer bumps both): a file where it does
    is corrupt, and raises :class:`BundleError` naming the line. Counters that fall together
    are read as a recreated cgroup (a restart: every counter starts again, usage included)
    and the analysis starts a new segment there (:func:`gmpanalysis.grid.split_segments`);
    one that falls while usage_us does not, or usage_us falling alone, has no such evidence:
    the segment starts there all the same, and a note names the line. A
    restart the collector saw (``restarts_ns``, of level ``own``: every level where the
    samples name none) starts a new segment too, counters fallen or not. ``period_us``: the
    shortest CFS period of the levels; nr_periods rising by more than that many periods can
    have ended raises :class:`BundleError` naming the line (:func:`_periods_run_ahead`).
    """
    notes: list[str] = []
    if "cgroup" not in samples:
        groups = [(own, samples)]  # one cgroup: the process's own
    else:
        groups = [(str(k), g) for k, g in samples.groupby("cgroup", sort=False)]
    for name, g in groups:
        if len(g) < 2:
            continue
        line = file_line(samples, g.index.to_numpy())
        per = g["nr_periods"].to_numpy()
        thr = g["nr_throttled"].to_numpy()
        usage = g["usage_us"].to_numpy()
        t = g["t_ns"].to_numpy()
        if period_us:
            _periods_run_ahead(t, g["read_ns"].to_numpy() if "read_ns" in g else None, per, line, source, period_us)
        notes += _tied_reads(g, t, line, source)
        fell = {c: np.diff(g[c].to_numpy()) < 0 for c in ("nr_periods", "nr_throttled", "throttled_us")}
        usage_fell = np.diff(usage) < 0
        # a restart the collector saw, between these reads
        told = restarted_between(t, restarts_ns if name == own else ())
        # a new cgroup: every counter starts again from 0
        renewed = (usage_fell & _others_restarted(g, fell)) | told
        alone = np.flatnonzero(usage_fell & ~renewed)
        if len(alone):
            others = "nr_periods, nr_throttled and throttled_us did not"
            notes.append(_fell_alone(source, line, "usage_us", usage, alone, others))
        cut = usage_fell | told
        for c, f in fell.items():
            cut |= f
            odd = np.flatnonzero(f & ~usage_fell & ~told)
            v = g[c].to_numpy()
            if c != "throttled_us" and len(odd):
                # nr_periods and nr_throttled are ints of the kernel's cfs_bandwidth (a 32-bit
                # count here): past 2^32 periods they wrap, a few periods from the top to near 0
                wrap = (v[odd] >= (1 << 32) - WRAP_SLACK) & (v[odd + 1] < WRAP_SLACK)
                for i in odd[wrap][:1].tolist():
                    notes.append(
                        f"{source} line {line[i + 1]}: {c} wrapped from {v[i]} to {v[i + 1]} (the kernel keeps it in "
                        "an int, 2^32 periods at most); the reads after it are analysed as a new segment"
                    )
                odd = odd[~wrap]
            if len(odd):
                notes.append(_fell_alone(source, line, c, v, odd, "usage_us did not fall"))
        seg = np.r_[0, np.cumsum(cut)]  # segment number of every row
        first = np.r_[0, np.flatnonzero(cut) + 1][seg]  # its first row
        # since its creation, where the segment begins with one: after a counter fell alone
        # (nr_periods, an int the kernel prints with %d, wraps at 2^32 periods: 50 days of
        # 1 ms periods) the counters do not start from 0 together
        fresh = np.r_[True, renewed][first]
        over = (fresh & (thr > per + 1)) | ((thr - thr[first]) > (per - per[first]) + 1)
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise BundleError(
                f"{source} line {line[i]}: nr_throttled {thr[i]} has run ahead of nr_periods {per[i]} "
                f"(since line {line[first[i]]}: +{thr[i] - thr[first[i]]} against +{per[i] - per[first[i]]}); "
                "the kernel counts every throttled period in nr_periods, so the file is corrupt "
                "(columns swapped, or rows of another cgroup mixed in)"
            )
    return notes


def _fell_alone(source: str, line: np.ndarray, c: str, v: np.ndarray, where: np.ndarray, others: str) -> str:
    """The note for counter ``c`` falling between reads ``where`` while the ``others`` did not."""
    i = int(where[0])
    return (
        f"{source} line {line[i + 1]}: {c} fell from {v[i]} to {v[i + 1]} while {others} "
        f"({len(where)} such place(s)); a recreated cgroup restarts every counter, so nothing says this is a "
        "restart: the reads after it are analysed as a new segment. Check the file (two writers?)"
    )


def _tied_reads(g: pd.DataFrame, t: np.ndarray, line: np.ndarray, source: str) -> list[str]:
    """A note where two reads of one cgroup share a t_ns but not their counters."""
    tied = np.flatnonzero(t[1:] == t[:-1])
    if not len(tied):
        return []
    c = g[["usage_us", "nr_periods", "nr_throttled", "throttled_us"]].to_numpy(np.float64)
    a, b = c[tied], c[tied + 1]
    unequal = tied[~((a == b) | (np.isnan(a) & np.isnan(b))).all(axis=1)]
    if not len(unequal):
        return []
    i = int(unequal[0])
    return [
        f"{source} lines {line[i]} and {line[i + 1]}: two reads at one t_ns ({t[i]}) with different "
        f"counters ({len(unequal)} such pair(s)); the analysis keeps the later of each (it holds every "
        "increment up to then). Check the writer's clock: a reading finer than the sampling interval "
        "tells the reads apart"
    ]


def _periods_run_ahead(
    t: np.ndarray, read_ns: np.ndarray | None, per: np.ndarray, line: np.ndarray, source: str, period_us: int
) -> None:
    """Raise where one increment of nr_periods is more than the periods that can have ended.
    The period timer credits every expiry it passed when it fires (several at once when it
    fires late), so after the firing seen between two reads it credits only boundaries
    after the first of them: an increment is at most the boundaries since the read before
    the previous increment, one more for where the grid lies. A read's t_ns is its middle,
    and a slow read (v2 prints nr_periods after flushing the CPUs' stats) may have seen the
    counter anywhere in it: the time runs from the earlier read's start to the later one's
    end. The first increment has no such bound (expiries owed from before the first read)."""
    d = np.diff(per)
    inc = np.flatnonzero(d > 0)
    if len(inc) < 2:
        return
    k, prev = inc[1:], inc[:-1]
    half = np.zeros(len(t), dtype=np.int64) if read_ns is None else (np.asarray(read_ns, dtype=np.int64) + 1) // 2
    elapsed = (t[k + 1] + half[k + 1]) - (t[prev] - half[prev])
    most = (elapsed + READ_SLACK_NS) // (period_us * 1000) + 1
    bad = np.flatnonzero(d[k] > most)
    if len(bad):
        j = int(bad[0])
        i, p0 = int(k[j]), int(prev[j])
        raise BundleError(
            f"{source} line {line[i + 1]}: nr_periods rose by {d[i]} since line {line[i]}, but at most {most[j]} CFS "
            f"periods of {period_us} µs can have ended since line {line[p0]} ({elapsed[j] / 1e6:.1f} ms before, "
            "the read before the previous rise): the kernel counts one per period ended, so that line is damaged "
            "(fix or remove it), or meta.json's period_us is longer than the cgroup's CFS period (set it to "
            "cpu.cfs_period_us, or cpu.max's second field)"
        )


# a read's own length and the clock's: slack on the time between two reads' t_ns
READ_SLACK_NS = 1_000_000


def _others_restarted(g: pd.DataFrame, fell: dict[str, np.ndarray]) -> np.ndarray:
    """Between which reads the counters other than usage_us are those of a recreated cgroup:
    one of them fell, or they were all 0 before (a group whose timer never ran: none can
    fall) or are all 0 after (a new group that has not run a period yet)."""
    c = g[["nr_periods", "nr_throttled", "throttled_us"]].to_numpy(np.float64)
    zero = (c == 0).all(axis=1)
    return fell["nr_periods"] | fell["nr_throttled"] | fell["throttled_us"] | zero[:-1] | zero[1:]


# how far from the top and from 0 a 32-bit count's wrap lands between two reads (2^24
# periods: 4.6 hours of 1 ms periods in a hole in the reads)
WRAP_SLACK = 1 << 24
