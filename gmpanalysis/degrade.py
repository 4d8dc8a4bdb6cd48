"""Damage real cpu.stat samples the ways production damages them, to measure what the
per-period table still knows.

Every operation takes a samples frame (:func:`gmpanalysis.read_cpu_stat`) and returns a
new one made only of recorded reads: a read is never invented or re-read, only dropped
(random loss, a late sampler, a hole, a sampler restart) or, for a counter reset, rebased
as a recreated cgroup would report it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .grid import COUNTERS


def drop_random(s: pd.DataFrame, fraction: float, rng: np.random.Generator) -> pd.DataFrame:
    """Lose each read independently with probability ``fraction`` (the first and last
    reads stay, so the span is unchanged)."""
    keep = rng.random(len(s)) >= fraction
    keep[[0, -1]] = True
    return s[keep].reset_index(drop=True)


def thin_lateness(s: pd.DataFrame, lateness_ns: np.ndarray, interval_ns: int, rng: np.random.Generator) -> pd.DataFrame:
    """Replay a sampler that wakes late: it sleeps to absolute deadlines every
    ``interval_ns`` (as gmp-sampler does), wakes ``lateness_ns[i]`` after its i-th wake-up
    deadline (a recorded lateness sequence, replayed from a random start so its bursts stay
    together), reads, and skips the deadlines it overslept. Each read it would take is the
    first recorded read at or after its wake-up time (a recorded read is never moved)."""
    t = s["t_ns"].to_numpy()
    out = []
    k = 0
    i = int(rng.integers(len(lateness_ns)))
    t0 = int(t[0])
    end = int(t[-1])
    while True:  # one step per deadline served: the count of reads, fine for a benchmark
        deadline = t0 + k * interval_ns
        if deadline > end:
            break
        wake = deadline + int(lateness_ns[i % len(lateness_ns)])
        i += 1
        j = int(np.searchsorted(t, wake, side="left"))
        if j >= len(t):
            break
        out.append(j)
        # the next deadline after the time of the read actually used
        k = max(k + 1, -(-(int(t[j]) - t0) // interval_ns))
    idx = np.unique(np.asarray(out, dtype=np.int64))
    return s.iloc[idx].reset_index(drop=True)


def hole(s: pd.DataFrame, at_ns: int, duration_ns: int) -> pd.DataFrame:
    """No reads in [at_ns, at_ns + duration_ns): a sampler descheduled or a host that stole
    its CPU."""
    t = s["t_ns"].to_numpy()
    return s[(t < at_ns) | (t >= at_ns + duration_ns)].reset_index(drop=True)


def sampler_restart(s: pd.DataFrame, at_ns: int, downtime_ns: int = 300_000_000) -> pd.DataFrame:
    """The sampler dies at ``at_ns`` and a new one starts ``downtime_ns`` later: the same
    cgroup, so the counters go on; only reads are missing."""
    return hole(s, at_ns, downtime_ns)


def counter_reset(s: pd.DataFrame, at_ns: int) -> pd.DataFrame:
    """The cgroup is recreated at ``at_ns`` (a restarted container): from the first read at
    or after it the cumulative counters start again near zero. The timer phase of the
    recorded cgroup is kept (a real new cgroup would draw a new one)."""
    out = s.copy()
    t = out["t_ns"].to_numpy()
    j = int(np.searchsorted(t, at_ns, side="left"))
    if 0 < j < len(out):
        for c in (*COUNTERS, "nr_bursts", "burst_us"):
            if c in out:
                col = out[c].to_numpy().copy()
                col[j:] = col[j:] - col[j - 1]
                # the new cgroup's counters start from zero before its first period ends
                out[c] = col
    return out
