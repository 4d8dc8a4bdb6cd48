"""Sets of [start, end) intervals in ns, vectorised: how much of them lies before a time,
and their union; a nullable mask as a plain one."""

from __future__ import annotations

import numpy as np
import pandas as pd


def coverage(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """C(x) = total length of [start, end) intervals before x, for every x (intervals may
    overlap; each counts). The overlap with [a, b) is C(b) - C(a)."""
    s = np.sort(starts.astype(np.int64))
    e = np.sort(ends.astype(np.int64))
    cs = np.r_[0, np.cumsum(s, dtype=np.float64)]
    ce = np.r_[0, np.cumsum(e, dtype=np.float64)]
    ns = np.searchsorted(s, x, side="right")
    ne = np.searchsorted(e, x, side="right")
    xf = x.astype(np.float64)
    return (ns * xf - cs[ns]) - (ne * xf - ce[ne])


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping [start, end) intervals."""
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    grp = np.cumsum(new) - 1
    us = s[new]
    ue = np.zeros(len(us), dtype=e.dtype)
    np.maximum.at(ue, grp, e)
    return us, ue


def known_true(col: pd.Series) -> np.ndarray:
    """A nullable boolean column as a numpy mask: unknown (NA) rows are not selected."""
    return col.fillna(False).to_numpy(dtype=bool)
