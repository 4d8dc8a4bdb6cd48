"""The lab's truth check (spinner_truth.start_explained) accepts a freeze's start apart from
the table's bracket only for what explains it, and fails a bracket that is simply wrong."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
from spinner_truth import ran_ns, start_explained

MS = 1_000_000
LO, HI = 100 * MS, 101 * MS  # the table's bracket for the freeze's start


def _gaps(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    g = pd.DataFrame(rows, columns=["thread", "start_ns", "end_ns"])
    g.attrs["gap_ns"] = MS
    return g


def _run(usage_us_per_ms: float = 0.0, flat_from_ms: float = 100.0) -> SimpleNamespace:
    """Reads every millisecond: usage rising at 2 CPUs up to ``flat_from_ms``, then at
    ``usage_us_per_ms`` (µs per ms)."""
    t = np.arange(0, 200) * MS + 10_000
    ms = t / MS
    u = np.where(ms < flat_from_ms, 2000 * ms, 2000 * flat_from_ms + usage_us_per_ms * (ms - flat_from_ms))
    samples = pd.DataFrame({"t_ns": t, "usage_us": u, "cgroup": "container"})
    return SimpleNamespace(samples=samples, meta={"ncpu": 2})


FIRST = pd.Series({"start_lo_ns": LO, "start_hi_ns": HI, "level": "container"})


def test_a_start_in_the_bracket_is_the_tables():
    g = _gaps([(0, LO + MS // 2, 170 * MS), (1, LO + MS // 2, 170 * MS)])
    assert start_explained(_run(), g, [LO + MS // 2], FIRST)


def test_a_later_start_is_leftover_only_if_the_spinner_ran_no_more_than_the_cpus_held():
    # one thread ran 1.2 ms of leftover after the pool ran dry, the other stood still
    g = _gaps([(0, 99 * MS, 170 * MS), (1, 99 * MS, 108 * MS), (1, int(109.2 * MS), 170 * MS)])
    assert ran_ns(g, HI, int(109.2 * MS)) == int(1.2 * MS)
    assert start_explained(_run(), g, [int(109.2 * MS)], FIRST)
    # both threads ran on for 8 ms: the group was not frozen, the bracket is wrong
    g = _gaps([(0, 109 * MS, 170 * MS), (1, 109 * MS, 170 * MS)])
    assert not start_explained(_run(), g, [109 * MS], FIRST)


def test_an_earlier_start_needs_a_merged_run_in_the_bracket_or_the_group_running_on():
    g = _gaps([(0, 95 * MS, 170 * MS), (1, 95 * MS, 170 * MS)])
    # the counters say the group stood still from 95 ms: a bracket at 100 ms is wrong
    assert not start_explained(_run(flat_from_ms=95), g, [95 * MS], FIRST)
    # the group's usage rose on after the spinner stopped (another of its threads ran)
    assert start_explained(_run(usage_us_per_ms=250, flat_from_ms=95), g, [95 * MS], FIRST)
    # the truth merged a sub-millisecond run that ended in the bracket
    assert start_explained(_run(flat_from_ms=95), g, [95 * MS, LO + MS // 2], FIRST)
