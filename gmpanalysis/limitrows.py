"""What limits.csv's rows say beyond their values, checked against the samples at load.

The sampler writes a level's first row without ``prev_ns`` (nothing was read before it),
then a row, with the read before it as ``prev_ns``, only when a value changed: a change lies
in (prev_ns, t_ns]. A restarted sampler writes every level's first row again without
``prev_ns``; where that row's values differ from the last row of the level, the limit
changed while no sampler was reading it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .bundlefiles import file_line

# The name of the process's own cgroup when a bundle does not name its levels.
OWN = "container"

# How often the sampler reads the limits where meta.json does not say (sampler
# limits_series every_ns): its last read before it stopped may lie this far before its last
# read of cpu.stat.
LIMITS_EVERY_NS = 10_000_000


def change_words(quota: tuple[float, float], period: tuple[int, int], burst: tuple[int, int]) -> list[str]:
    """What changed between two rows of one level's limits, in words ("quota 50000 µs ->
    200000 µs", ...): each (before, after); a quota of NaN is no limit. Empty: nothing."""
    what = []
    qa, qb = (float(x) for x in quota)
    if not (np.isnan(qa) and np.isnan(qb)) and qa != qb:
        words = ["no limit" if np.isnan(x) else f"{x:.0f} µs" for x in (qa, qb)]
        what.append(f"quota {words[0]} -> {words[1]}")
    for name, (a, b) in (("period", period), ("burst", burst)):
        if a != b:
            what.append(f"{name} {a} -> {b} µs")
    return what


def _changed(a: pd.Series, b: pd.Series) -> list[str]:
    """:func:`change_words` of two rows of limits.csv."""
    q = tuple(np.nan if pd.isna(r["quota_us"]) else float(r["quota_us"]) for r in (a, b))
    return change_words(q, (int(a["period_us"]), int(b["period_us"])), (int(a["burst_us"]), int(b["burst_us"])))


def bracket_restarts(
    limits: pd.DataFrame | None, samples: pd.DataFrame, path: Path, meta: dict[str, Any]
) -> tuple[pd.DataFrame | None, list[str]]:
    """limits.csv with a ``prev_ns`` for every row a restarted sampler wrote first (no
    ``prev_ns``, after the level's first row) whose values differ from the level's row
    before it, and a note for each. Its change lies after the old sampler's last read of the
    limits: the last read of cpu.stat before the widest gap in the reads up to the row (the
    restart) less one limits interval, and never before the level's row before it."""
    if limits is None or len(limits) < 2:
        return limits, []
    every = ((meta.get("sampler") or {}).get("limits_series") or {}).get("every_ns")
    every = every if isinstance(every, int) and every > 0 else LIMITS_EVERY_NS
    t_reads = np.unique(samples["t_ns"].to_numpy(np.int64)) if len(samples) else np.zeros(0, np.int64)
    out, notes = limits, []
    for _, g in limits.groupby("cgroup", sort=False):
        for k in range(1, len(g)):
            row, before = g.iloc[k], g.iloc[k - 1]
            what = _changed(before, row)
            if not pd.isna(row["prev_ns"]) or not what:
                continue
            t, lo = int(row["t_ns"]), int(before["t_ns"])
            # the reads from the row before up to the first one after this row: the restart
            # is the widest gap between them (the new sampler may read cpu.stat first or not)
            i0 = np.searchsorted(t_reads, lo, side="left")
            i1 = np.searchsorted(t_reads, t, side="right") + 1
            r = t_reads[i0:i1]
            since = f"the {row['cgroup']}'s row before"
            if len(r) >= 2:
                last_old = int(r[int(np.argmax(np.diff(r)))])
                if last_old - every > lo:
                    lo = min(last_old - every, t - 1)
                    since = f"the old sampler's last read, less one {every / 1e6:g} ms interval of its limits reads"
            if out is limits:
                out = limits.copy()
            out.loc[g.index[k], "prev_ns"] = lo
            notes.append(
                f"{path} line {file_line(limits, g.index[k])}: the {row['cgroup']}'s row has no prev_ns after its "
                f"first (a restarted sampler's first read) and its limits changed ({', '.join(what)}) while no "
                f"sampler read them: the change is taken to lie between t_ns {lo} ({since}) and {t}"
                + ("; periods that start there have no quota_us" if what[0].startswith("quota") else "")
            )
    return out, notes


def stray_limits(limits: pd.DataFrame | None, samples: pd.DataFrame, path: Path, own: str | None) -> list[str]:
    """A note for limits.csv naming levels cpu_stat.csv never samples (``own``: meta.json
    levels' first, the level of samples without a ``cgroup`` column; :data:`OWN` where it
    names none). One sampler names the levels alike in both files: a name only limits.csv
    has is a level read for nothing, or files of two collections put together. A bundle of
    one level whose limits.csv names one level only has none: that is the samples' level."""
    if limits is None or not len(limits) or not len(samples):
        return []
    named = {str(x) for x in pd.unique(limits["cgroup"])}
    if "cgroup" in samples:
        sampled = {str(x) for x in pd.unique(samples["cgroup"])}
    elif len(named) == 1:
        return []
    else:
        sampled = {own or OWN}
    stray = sorted(named - sampled)
    if not stray:
        return []
    return [
        f"{path}: level(s) {', '.join(map(repr, stray))} are in no row of cpu_stat.csv (it samples "
        f"{', '.join(map(repr, sorted(sampled)))}); their limits are not used (remove their rows, or check that "
        "the two files come from one collection)"
    ]
