"""How well the sampler itself sampled: wake-up lateness, holes, and the host's steal time.

gmp-sampler sleeps to absolute CLOCK_MONOTONIC deadlines ``start + k·interval``
(clock_nanosleep TIMER_ABSTIME) and reads cpu.stat when it wakes. After each tick it moves
to deadline ``k+1``; if it is already past that one it skips to the latest deadline not in
the future (``k = floor((now − start) / interval)``) and counts the skipped ones as missed.
So every read serves one deadline, its lateness is ``read start − deadline``, and a missed
deadline has no read at all. A hole in the reads is time the analysis must interpolate
across; on a VM much of it can be the hypervisor running someone else ("steal", from the
host's /proc/stat, recorded by the sampler in ``host_stat.csv``).

Public: :func:`read_lateness` (the shipped lateness fixture), :func:`df_lateness`
(reconstruct per-deadline lateness from cpu.stat reads), :func:`df_sampling_holes` and
:func:`sampling_summary`.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pandas as pd

from .bundle import Run
from .bundlefiles import parse_csv, read_bytes
from .errors import BundleError, MissingDataError
from .levels import level_names, level_run

LATENESS_COLUMNS: dict[str, Any] = {
    "tick": np.int64,  # deadline index k from 0: the deadline is start + k·interval
    "lateness_us": np.int64,  # read start − deadline, µs (≥ 0)
}

# A stretch between two consecutive reads longer than this many sampling intervals is a
# hole (one or more deadlines were skipped: 2 intervals = at least one missed tick, plus
# room for a late read beside an on-time one).
HOLE_INTERVALS = 3


def read_lateness(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a sampler lateness file such as ``fixtures/sampling/inpod-lateness.csv``.

    Columns, one row per deadline the sampler served (missed deadlines are absent):
    ``tick`` int64, the deadline's index k from 0 (deadline = first deadline + k·interval);
    ``lateness_us`` int64 µs between the deadline and the start of the read it served.
    ``df.attrs["source"]`` is the path. Malformed lines raise :class:`BundleError` naming
    the file and line; a last line without its newline is dropped.
    """
    df, _ = parse_csv(read_bytes(path), str(path), LATENESS_COLUMNS)
    df = df[list(LATENESS_COLUMNS)]
    tick = df["tick"].to_numpy()
    if len(tick) and (tick[0] < 0 or (np.diff(tick) <= 0).any()):
        bad = 0 if tick[0] < 0 else int(np.flatnonzero(np.diff(tick) <= 0)[0]) + 1
        raise BundleError(f"{path} line {bad + 2}: tick must start ≥ 0 and strictly increase; the file is corrupt")
    df.attrs["source"] = str(path)
    return df


def _interval_ns(run: Run) -> int:
    iv = (run.meta.get("sampler") or {}).get("interval_ns")
    if isinstance(iv, int) and iv > 0:
        return iv
    dt = np.diff(_reads(run))
    if not len(dt):
        raise MissingDataError(f"{run.path}: one read only and no sampler.interval_ns in meta.json")
    return int(np.median(dt))


def _tick_rows(run: Run) -> pd.DataFrame:
    """One row per tick: with several cgroups sampled per tick, the first cgroup's rows
    (all cgroups of a tick are read back to back)."""
    s = run.samples
    if "cgroup" in s and len(level_names(run)) > 1:
        # the level's rows as its own run keeps them (selecting them anew costs ~0.1 s for
        # an hour of two levels' samples, and the report asks several times)
        return level_run(run, str(s["cgroup"].iloc[0])).samples
    return s


def _reads(run: Run) -> np.ndarray:
    """Read times (t_ns, mid-read) of one read per tick."""
    return _tick_rows(run)["t_ns"].to_numpy(np.int64)


def _deadlines(t0: np.ndarray, t1: np.ndarray, start_ns: int, iv: int, tau_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The deadline index each read served: the most plausible path through the sampler's
    rule (fewest delays outside clock_nanosleep), by dynamic programming over the few
    deadlines each read could have served. Returns (k, needed_a_preemption)."""
    n = len(t0)
    idx = np.arange(n, dtype=np.int64)
    # bounds: a read serves a deadline already due at its start (D_k <= t0), strictly
    # increasing ...  K_i = min(floor((t0_i - start)/iv), K_{i+1} - 1), a backward cummin
    g = np.floor_divide(t0 - start_ns, iv)
    hi = np.minimum.accumulate((g - idx)[::-1])[::-1] + idx
    # ... and at least the one the rule gives if nothing delayed the sampler between the
    # end of a read and its next deadline computation: k_i = max(k_{i-1}+1, floor((t1_{i-1} - start)/iv))
    f = np.zeros(n, np.int64)
    f[1:] = np.floor_divide(t1[:-1] - start_ns, iv)
    lo = np.minimum(np.maximum.accumulate(np.maximum(f - idx, 0)) + idx, hi)
    lo[0] = hi[0] = 0
    cands: list[np.ndarray] = [np.zeros(1, np.int64)]
    costs: list[np.ndarray] = [np.zeros(1)]
    back: list[np.ndarray] = [np.zeros(1, np.int64)]
    for i in range(1, n):  # a loop over reads; most have a single candidate
        c = np.arange(lo[i], hi[i] + 1)
        a, b = int(t1[i - 1]), int(t0[i])
        best = np.full(len(c), np.inf)
        arg = np.zeros(len(c), np.int64)
        for pj, kp in enumerate(cands[-1].tolist()):
            nxt = start_ns + (kp + 1) * iv  # the deadline after the previous read's
            for cj, k in enumerate(c.tolist()):
                d = start_ns + k * iv
                if k <= kp or d > b:
                    continue
                if k == kp + 1 and a < nxt:
                    cost = 0  # not behind: slept to D_k and woke (late or not) at t0
                elif a >= d and a < d + iv:
                    # behind when the previous read ended: no sleep, the read follows at once;
                    # a longer pause is a preemption
                    cost = int(b - a > tau_ns)
                elif a < d:
                    # the sampler only jumps to D_k if delayed past it before computing
                    # its next deadline: a preemption (two if the read waited again after)
                    cost = 1 + int(b >= d + iv + tau_ns)
                else:
                    continue
                tot = costs[-1][pj] + cost
                if tot < best[cj]:
                    best[cj], arg[cj] = tot, pj
        if not np.isfinite(best).any():  # cannot happen for rows a sampler wrote in order
            raise BundleError(f"read {i}: no deadline consistent with the sampler's rule (rows out of order?)")
        cands.append(c)
        costs.append(best)
        back.append(arg)
    k = np.empty(n, np.int64)
    pre = np.zeros(n, bool)
    j = int(np.argmin(costs[-1]))
    for i in range(n - 1, -1, -1):
        k[i] = cands[i][j]
        if i:
            pj = int(back[i][j])
            pre[i] = costs[i][j] > costs[i - 1][pj]
            j = pj
    return k, pre


def df_lateness(
    samples: pd.DataFrame, interval_ns: int, start_ns: int | None = None, *, tau_ns: int | None = None
) -> pd.DataFrame:
    """Per-read wake-up lateness of ONE sampler process, reconstructed from its cpu.stat rows.

    ``samples``: the rows of one sampler process and one target cgroup
    (:func:`~gmpanalysis.read_cpu_stat`); ``interval_ns``: meta.json ``sampler.interval_ns``;
    ``start_ns``: the sampler's first deadline, its summary's ``mono_start_ns`` (meta.json
    ``sampler.mono_start_ns``); None takes the first read's start (lateness 0 there).

    The sampler (collectors/cmd/gmp-sampler) reads at deadline ``start + k·interval``; after
    a read it takes ``k+1`` unless the clock is already past that, then
    ``floor((now − start)/interval)`` and reads at once. From the rows alone this is exact
    while the sampler is only ever delayed inside its sleep; a preemption between two reads
    (``tau_ns``, default a tenth of the interval, beyond the normal few µs) can make a late
    wake and a skip look alike. The deadlines chosen are those of the most plausible path
    (fewest such preemptions); on the shipped runs the missed count and the maximum equal
    the sampler's own summary.

    Columns: ``tick`` int64 deadline index k (0 = first deadline); ``deadline_ns`` int64
    CLOCK_MONOTONIC ns; ``read_start_ns`` int64 ns (t_ns − read_ns/2); ``lateness_ns`` int64
    ns, read start − deadline (≥ 0); ``missed_before`` int64 deadlines skipped just before
    this read; ``preempted`` bool, the path needed a delay outside the sleep before this read.
    Cost: a Python loop over reads (~6 µs each).
    """
    cols = ("tick", "deadline_ns", "read_start_ns", "lateness_ns", "missed_before")
    if len(samples) == 0:
        out = pd.DataFrame({c: pd.Series(dtype=np.int64) for c in cols})
        out["preempted"] = pd.Series(dtype=bool)
        return out
    t = samples["t_ns"].to_numpy(np.int64)
    r = samples["read_ns"].to_numpy(np.int64)
    t0 = t - r // 2
    t1 = t0 + r
    iv = int(interval_ns)
    start = int(t0[0]) if start_ns is None else int(start_ns)
    if t0[0] < start:
        raise BundleError(
            f"{samples.attrs.get('source', 'samples')} line 2: first read at {t0[0]} before the "
            f"sampler's first deadline {start}; wrong start_ns or rows of another sampler run"
        )
    k, pre = _deadlines(t0, t1, start, iv, iv // 10 if tau_ns is None else int(tau_ns))
    deadline = start + k * iv
    return pd.DataFrame(
        {
            "tick": k,
            "deadline_ns": deadline,
            "read_start_ns": t0,
            "lateness_ns": t0 - deadline,
            "missed_before": np.diff(k, prepend=-1) - 1,
            "preempted": pre,
        }
    )


def _host_at(hs: pd.DataFrame, col: str, t: np.ndarray) -> np.ndarray:
    """A cumulative host counter linearly interpolated at times t (NaN outside the rows)."""
    ht = hs["t_ns"].to_numpy(np.float64)
    v = hs[col].to_numpy(np.float64)
    out = np.interp(t.astype(np.float64), ht, v)
    out[(t < ht[0]) | (t > ht[-1])] = np.nan
    return out


def df_sampling_holes(run: Run, min_gap_ms: float | None = None) -> pd.DataFrame:
    """Every hole in the cpu.stat reads: consecutive reads further apart than ``min_gap_ms``
    (default: 3 sampling intervals, ≈3 ms at 997 µs, i.e. at least two missed deadlines).

    Columns, one row per hole, in time order:
    ``start_ns`` int64 CLOCK_MONOTONIC ns of the read before the hole; ``end_ns`` int64 ns
    of the read after it; ``gap_ms`` float64 ms between them; ``missed_ms`` float64 ms of
    the gap beyond one interval (time that should have had reads but had none);
    ``missed_ticks`` int64 ≈ deadlines without a read (gap / interval − 1, rounded);
    ``steal_ms`` float64 CPU-ms the hypervisor stole from the whole machine (summed over
    its CPUs, so it can exceed gap_ms) during the hole, linearly interpolated from the
    1 s host_stat rows (an estimate: the host counter advances in 10 ms USER_HZ ticks),
    NaN when the run has no host_stat.csv or the hole lies outside its rows;
    ``steal_bracket_ms`` float64 the steal between the host_stat rows that enclose the
    hole (what was really measured; ≥ steal_ms), NaN likewise.
    """
    iv = _interval_ns(run)
    gap_ns = HOLE_INTERVALS * iv if min_gap_ms is None else min_gap_ms * 1e6
    t = _reads(run)
    dt = np.diff(t)
    at = np.flatnonzero(dt > gap_ns)
    start, end = t[at], t[at + 1]
    gap = (end - start).astype(np.float64)
    steal = np.full(len(at), np.nan)
    bracket = np.full(len(at), np.nan)
    hs = run.host_stat
    if hs is not None and len(hs) >= 2 and len(at):
        steal = (_host_at(hs, "steal_us", end) - _host_at(hs, "steal_us", start)) / 1e3
        ht = hs["t_ns"].to_numpy(np.int64)
        sv = hs["steal_us"].to_numpy(np.float64)
        lo = np.searchsorted(ht, start, side="right") - 1
        hi = np.searchsorted(ht, end, side="left")
        ok = (lo >= 0) & (hi < len(ht))
        bracket[ok] = (sv[hi[ok]] - sv[lo[ok]]) / 1e3
    return pd.DataFrame(
        {
            "start_ns": start.astype(np.int64),
            "end_ns": end.astype(np.int64),
            "gap_ms": gap / 1e6,
            "missed_ms": (gap - iv) / 1e6,
            "missed_ticks": np.rint(gap / iv - 1).astype(np.int64),
            "steal_ms": steal,
            "steal_bracket_ms": bracket,
        }
    )


def sampling_summary(run: Run, min_gap_ms: float | None = None) -> dict[str, Any]:
    """How much the sampler missed and how much the host stole, over the whole run.

    Keys: ``reads`` (int, one per tick), ``span_ms`` (first to last read), ``interval_ms``,
    ``holes`` (int, as :func:`df_sampling_holes` with the same ``min_gap_ms``),
    ``missed_ms`` (sum of the holes' missed_ms), ``longest_hole_ms`` (0.0 without holes),
    ``missed_ticks`` (deadlines without a read over the whole run, holes or not: deadlines
    from the sampler's first (meta.json ``sampler.mono_start_ns``, else the first read) to
    the last read, minus reads; across a sampler restart the pause counts too),
    ``host_steal_ms`` (CPU-ms stolen from the whole machine, summed over its CPUs, between
    the first and last read, interpolated from host_stat; NaN without host_stat.csv),
    ``host_steal_share`` (that steal over all CPU time of the machine in the same span,
    0..1; NaN likewise) and ``host_ncpu`` (CPUs online, NaN likewise). For the report line "the sampler missed
    {missed_ms} ms in {holes} holes; the host stole {host_steal_ms} ms".
    """
    iv = _interval_ns(run)
    t = _reads(run)
    holes = df_sampling_holes(run, min_gap_ms)
    start = (run.meta.get("sampler") or {}).get("mono_start_ns")
    if len(t):
        t0 = t - _tick_rows(run)["read_ns"].to_numpy(np.int64) // 2  # read starts
        if not isinstance(start, int) or start > t0[0]:
            start = int(t0[0])
        missed = int((t0[-1] - start) // iv) + 1 - len(t)
    else:
        missed = 0
    out: dict[str, Any] = {
        "reads": len(t),
        "span_ms": float(t[-1] - t[0]) / 1e6 if len(t) else 0.0,
        "interval_ms": iv / 1e6,
        "holes": len(holes),
        "missed_ms": float(holes["missed_ms"].sum()),
        "longest_hole_ms": float(holes["gap_ms"].max()) if len(holes) else 0.0,
        "missed_ticks": max(missed, 0),
        "host_steal_ms": math.nan,
        "host_steal_share": math.nan,
        "host_ncpu": math.nan,
    }
    hs = run.host_stat
    if hs is not None and len(hs) >= 2 and len(t) >= 2:
        ends = np.array([max(t[0], hs["t_ns"].iloc[0]), min(t[-1], hs["t_ns"].iloc[-1])], np.int64)
        if ends[1] > ends[0]:
            steal = _host_at(hs, "steal_us", ends)
            total = _host_at(hs, "cpu_total_us", ends)
            out["host_steal_ms"] = float(steal[1] - steal[0]) / 1e3
            dtot = float(total[1] - total[0])
            out["host_steal_share"] = float(steal[1] - steal[0]) / dtot if dtot > 0 else math.nan
        out["host_ncpu"] = int(hs["ncpu"].iloc[-1])
    return out
