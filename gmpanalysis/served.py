"""What requests.csv says about the service, decided in one place: which requests
succeeded (an HTTP 2xx; a status 0 is a transport error or the client's timeout), which
were answered at all, and their latency, measured from the scheduled start (an open loop's
arrival time: the queueing before the send counts, as a user of the service sees it)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def succeeded(r: pd.DataFrame) -> np.ndarray:
    """Per request: the service answered it with a 2xx."""
    return r["status"].to_numpy() // 100 == 2


def answered(r: pd.DataFrame) -> np.ndarray:
    """Per request: the service answered it, with any HTTP status."""
    return r["status"].to_numpy() > 0


def latency_ms(r: pd.DataFrame) -> np.ndarray:
    """Per request: ms from its scheduled start to its end."""
    return (r["end_ns"].to_numpy() - r["sched_ns"].to_numpy()) / 1e6


def sampled(r: pd.DataFrame, samples: pd.DataFrame) -> np.ndarray:
    """Per request: begun inside the sampled span (from cpu_stat.csv's first read to its
    last). One begun outside ran in periods nobody measured (a sampler that died early, or
    started late): the counters say nothing of the CPU it took."""
    if not len(samples):
        return np.zeros(len(r), dtype=bool)
    t = samples["t_ns"].to_numpy()
    start = r["start_ns"].to_numpy()
    return (start >= t.min()) & (start <= t.max())
