"""What requests.csv says about the service, decided in one place: which requests
succeeded (an HTTP 2xx; a status 0 is a transport error or the client's timeout), which
were answered at all, and their latency, measured from the scheduled start (an open loop's
arrival time: the queueing before the send counts, as a user of the service sees it)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .grid import split_segments


def succeeded(r: pd.DataFrame) -> np.ndarray:
    """Per request: the service answered it with a 2xx."""
    return r["status"].to_numpy() // 100 == 2


def answered(r: pd.DataFrame) -> np.ndarray:
    """Per request: the service answered it, with any HTTP status."""
    return r["status"].to_numpy() > 0


def latency_ms(r: pd.DataFrame) -> np.ndarray:
    """Per request: ms from its scheduled start to its end."""
    return (r["end_ns"].to_numpy() - r["sched_ns"].to_numpy()) / 1e6


def sampled(r: pd.DataFrame, samples: pd.DataFrame, restarts_ns: Sequence[int] = ()) -> np.ndarray:
    """Per request: begun where the counters measured (from cpu_stat.csv's first read to its
    last, and not between the reads either side of a reset: a cgroup recreated, a restart
    the collector saw, ``restarts_ns``). One begun elsewhere ran in a stretch nobody
    measured (a sampler that died early, or started late; the old cgroup's last CPU): the
    counters say nothing of the CPU it took."""
    if not len(samples):
        return np.zeros(len(r), dtype=bool)
    t = samples["t_ns"].to_numpy()
    start = r["start_ns"].to_numpy()
    inside = (start >= t.min()) & (start <= t.max())
    levels = [samples] if "cgroup" not in samples else [g for _, g in samples.groupby("cgroup", sort=False)]
    for i, s in enumerate(levels):
        # the restarts the collector saw are the own level's, which meta.json lists first
        segs = split_segments(s, restarts_ns if i == 0 else ())
        ts = s["t_ns"].to_numpy()
        for (_, last), (first, _) in zip(segs[:-1], segs[1:], strict=True):
            inside &= ~((start > ts[last]) & (start < ts[first]))
    return inside
