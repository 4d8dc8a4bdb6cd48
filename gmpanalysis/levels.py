"""Every cgroup level that can freeze the process: the container's quota and the pod's.

The kubelet gives a pod's cgroup a quota of its own (the sum of its containers' limits) with
its own bandwidth timer, at its own random phase. The container's cpu.stat does not count a
freeze by the pod's quota: usage simply stops rising. A bundle may sample several levels
(cpu_stat.csv's ``cgroup`` column names them; meta.json ``levels`` lists them, the process's
own cgroup first). Each level is analysed as a run of its own (its samples, its quota, its
grid, its ledger: conservation holds per level), and the freezes of every level are then laid
on one chosen level's grid: :func:`df_freezes`, and the ``frozen_*`` columns of
:func:`gmpanalysis.df_periods`.

A freeze of a level is the stretch of one of its throttled periods after the quota ran out
(``exhausted_at_us``) up to its period end, where the kernel's period timer refills the
quota and unthrottles the group.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from .bundle import Run, streams_trace
from .cgroup import bundle_period_us
from .errors import MissingDataError, UsageError
from .freezes import freezes_of
from .limitrows import OWN, change_words  # the process's own cgroup's name where a bundle names no levels


def level_names(run: Run) -> list[str]:
    """The levels a bundle samples, the process's own cgroup first (meta.json ``levels``
    order, then any other name the samples carry)."""
    if isinstance(run.meta.get("level"), str):  # one level of a bundle (level_run)
        return [run.meta["level"]]
    listed = [x.get("level") for x in run.meta.get("levels") or () if isinstance(x, dict)]
    listed = [x for x in listed if isinstance(x, str) and x]
    s = run.samples
    if "cgroup" in s and len(s):
        # the names in the samples, kept on the run for these inputs (pd.unique over an hour
        # of two levels' samples takes ~30 ms, and every level's table asks)
        seen = run.__dict__.get("_level_names_in")
        if seen is None or seen[0] is not s or seen[1] is not s["cgroup"].array:
            seen = (s, s["cgroup"].array, [str(x) for x in pd.unique(s["cgroup"])])
            run.__dict__["_level_names_in"] = seen
        present = seen[2]
        return [x for x in listed if x in present] + [x for x in present if x not in listed]
    return listed[:1] or [OWN]


def own_level(run: Run) -> str:
    """The name of the level the process itself lives in."""
    return level_names(run)[0]


def table_level(run: Run) -> str:
    """The level whose grid the per-period table is on by default: the process's own, or
    when it has no quota (a container without a limit in a pod with one), the nearest level
    above it that has one; failing those, the nearest that got one in place during the run."""
    names = level_names(run)
    for limited in (lambda n: _level_meta(run, n).get("quota_us") is not None, lambda n: ever_limited(run, n)):
        for name in names:
            if limited(name):
                return name
    return names[0]


def ever_limited(run: Run, name: str | None = None) -> bool:
    """Whether a level (the process's own by default) had a CPU limit at any time of the run:
    at the start (meta.json), or written in place later (a row of limits.csv). The kernel
    starts a group's period timer when a quota is first written, so a group that had none at
    the start has CFS periods from then on."""
    name = own_level(run) if name is None else name
    if _level_meta(run, name).get("quota_us") is not None:
        return True
    lim = run.limits
    if lim is None or not len(lim):
        return False
    if "cgroup" in lim:
        lim = lim[lim["cgroup"] == name]
    return bool(lim["quota_us"].notna().any())


def _level_meta(run: Run, name: str) -> dict[str, Any]:
    meta = dict(run.meta)
    for x in run.meta.get("levels") or ():
        if isinstance(x, dict) and x.get("level") == name:
            for k in ("period_us", "quota_us", "burst_us"):
                if k in x:
                    meta[k] = x[k]
    lim = run.limits
    if lim is not None and len(lim):
        first = lim[lim["cgroup"] == name].head(1)
        if len(first):
            q = first["quota_us"].iloc[0]
            meta["quota_us"] = None if pd.isna(q) else int(q)
            meta["period_us"] = int(first["period_us"].iloc[0])
            meta["burst_us"] = int(first["burst_us"].iloc[0])
    meta["level"] = name
    if name != level_names(run)[0]:
        # a container's restart recreates its own cgroup, not the pod's above it
        meta["restarts"] = []
        # the process's threads' CPUs are not its pod's: a sidecar may run on others
        meta.pop("cpus_allowed", None)
    return meta


def level_run(run: Run, name: str | None = None) -> Run:
    """One level of a bundle as a run of its own: its samples (without the ``cgroup``
    column), its limits, its quota in ``meta``; the trace and requests shared. Kept on the
    run, so the analysis of a level is built once."""
    names = level_names(run)
    name = names[0] if name is None else name
    if name not in names:
        raise UsageError(f"{run.path}: no level {name!r} in this bundle; it samples {', '.join(names)}")
    # kept for these very inputs (compared by identity: the entry holds them, so no new
    # object can take an old one's id), each level under its name; and for the run's
    # analysis, which is built anew when the samples or limits are edited in place
    inputs = (run.samples, run.limits, run.meta, run.trace_path, run.__dict__.get("_analysis"))
    kept = run.__dict__.get("_level_runs")
    if kept is None or any(a is not b for a, b in zip(kept[0], inputs, strict=True)):
        kept = (inputs, {})
        run.__dict__["_level_runs"] = kept
    if name in (cache := kept[1]):
        return cache[name]
    s = run.samples
    if "cgroup" in s:
        s = s[s["cgroup"] == name].drop(columns="cgroup").reset_index(drop=True)
        s.attrs.update(run.samples.attrs)
    lim = None if run.limits is None else run.limits[run.limits["cgroup"] == name].reset_index(drop=True)
    r = dataclasses.replace(run, meta=_level_meta(run, name), samples=s, limits=lim)
    if run.trace_path is not None and not streams_trace(run):  # a big one: summed per generation by each level
        r._trace = run.trace  # parsed once, shared by every level
    r.notes = run.notes
    # every level of the current inputs is kept: a multi-level table asks for each in turn,
    # and selecting a level's rows of an hour's samples costs ~0.1 s
    cache[name] = r
    return r


def settings_in_turn(run: Run, level: str) -> list[tuple[int | None, int]]:
    """A level's CFS settings in the order they held: (quota µs or None for no limit, burst
    µs), from limits.csv's rows with consecutive repeats merged (a limit changed and changed
    back is three), meta.json's where the bundle has no rows."""
    lr = level_run(run, level)
    lim = lr.limits
    if lim is None or not len(lim):
        q = lr.meta.get("quota_us")
        return [(None if q is None else int(q), int(lr.meta.get("burst_us") or 0))]
    quota = lim["quota_us"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    burst = lim["burst_us"].astype("Float64").to_numpy(dtype=np.float64, na_value=0.0)
    out: list[tuple[int | None, int]] = []
    for q, b in zip(quota.tolist(), burst.tolist(), strict=True):
        x = (None if math.isnan(q) else int(q), int(b))
        if not out or out[-1] != x:
            out.append(x)
    return out


def resized(run: Run) -> str | None:
    """Where a limit of the run was changed in place mid-run, at any level (a quota or a
    burst changed, set where there was none or taken away): the level and its settings in
    turn ("container: none → 150000 µs → none"); None where every level kept one setting."""
    for name in level_names(run):
        seen = [
            ("none" if q is None else f"{q} µs") + (f" (burst {b} µs)" if b else "")
            for q, b in settings_in_turn(run, name)
        ]
        if len(seen) > 1:
            return f"{name}: " + " → ".join(seen[:4]) + (" → …" if len(seen) > 4 else "")
    return None


def quota_at_end(run: Run, level: str | None = None) -> int | None:
    """A level's quota at the end of the run (µs; None: no limit, or a limit removed in
    place): the last row of limits.csv where the limit was resized in place, meta.json's
    otherwise. The table's level by default."""
    return settings_in_turn(run, table_level(run) if level is None else level)[-1][0]


# The words of a period's reason where its quota_us is NA for not being known, not for there
# being no limit: the period started inside the bracket of a quota change.
QUOTA_NOT_KNOWN = "which quota held at its start is not known"


def quota_per_period(run: Run, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """The quota in force at each period start (µs; NaN: no limit, or not known where the
    period starts inside a change's bracket, whose sentence then ends in
    :data:`QUOTA_NOT_KNOWN`), from limits.csv when the bundle has it, else meta.json; and
    (row, sentence) for every period in which a change was seen (a change lies in
    (prev_ns, t_ns] of its row: the periods that interval touches are named)."""
    n = len(start)
    q0 = run.meta.get("quota_us")
    lim = run.limits
    if lim is not None and len(lim) and lim["cgroup"].nunique() > 1:
        lim = lim[lim["cgroup"] == own_level(run)].reset_index(drop=True)
    if lim is None or not len(lim):
        return np.full(n, np.nan if q0 is None else float(q0)), []
    t = lim["t_ns"].to_numpy(dtype=np.int64)
    q = lim["quota_us"].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    idx = np.searchsorted(t, start, side="right") - 1
    # before the first read the first value is the best known
    out = q[np.maximum(idx, 0)]
    notes: list[tuple[int, str]] = []
    prev = lim["prev_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    per_us = lim["period_us"].to_numpy()
    burst = lim["burst_us"].to_numpy()
    for i in range(1, len(lim)):  # changes are rare: a loop over them
        if np.isnan(prev[i]):
            continue
        a, b = int(prev[i]), int(t[i])
        hit = np.flatnonzero((end > a) & (start < b))
        what = change_words((q[i - 1], q[i]), (per_us[i - 1], per_us[i]), (burst[i - 1], burst[i]))
        quota_moved = bool(what) and what[0].startswith("quota")
        if not what:
            continue
        # periods that start inside the change interval: which value held is not known
        inside = quota_moved & (start > a) & (start < b)
        for r in hit.tolist():
            notes.append(
                (
                    r,
                    f"limit changed ({', '.join(what)}) between {(a - start[r]) / 1e6:+.1f} and "
                    f"{(b - start[r]) / 1e6:+.1f} ms of this period" + (f": {QUOTA_NOT_KNOWN}" if inside[r] else ""),
                )
            )
        out[inside] = np.nan
    return out, notes


def limit_series(run: Run) -> pd.DataFrame:
    """Every level's limits over time: t_ns (NA-free: a level's first row at the start of
    the collection), level, quota_us (Int64, NA: none), period_us, burst_us; from limits.csv,
    else the limits at the start from meta.json."""
    lim = run.limits
    start = run.meta.get("mono_start_ns") or (int(run.samples["t_ns"].iloc[0]) if len(run.samples) else 0)
    if lim is not None and len(lim):
        out = lim.rename(columns={"cgroup": "level"})[["t_ns", "level", "quota_us", "period_us", "burst_us"]].copy()
        first = ~out.duplicated("level")
        out.loc[first, "t_ns"] = np.minimum(out.loc[first, "t_ns"], start)
        return out.reset_index(drop=True)
    rows = []
    for name in level_names(run):
        m = _level_meta(run, name)
        rows.append(
            {
                "t_ns": start,
                "level": name,
                "quota_us": m.get("quota_us"),
                "period_us": bundle_period_us(m),
                "burst_us": m.get("burst_us") or 0,
            }
        )
    out = pd.DataFrame(rows)
    out["quota_us"] = out["quota_us"].astype("Int64")
    return out


def period_changes(run: Run) -> pd.DataFrame:
    """The rows of limits.csv where a level's CFS period changed (the grid does not survive
    those: the kernel's timer takes the new length from its next expiry)."""
    lim = run.limits
    if lim is not None and lim["cgroup"].nunique() > 1:
        lim = lim[lim["cgroup"].isin(level_names(run))]  # a level never sampled is not analysed
    if lim is None or len(lim) < 2:
        return pd.DataFrame(columns=["t_ns", "prev_ns", "cgroup", "period_us"])
    ch = lim["period_us"].ne(lim.groupby("cgroup")["period_us"].shift()) & lim["prev_ns"].notna()
    return lim[ch.to_numpy(dtype=bool)]


def levels_table(a: Any) -> pd.DataFrame:
    """:func:`gmpanalysis.df_levels` (its columns are listed there) from the run's
    :class:`~gmpanalysis.Analysis` ``a``: each level's own grid and table, memoised."""
    run = a.run
    names = level_names(run)
    rows = []
    own_phase = None
    paths = {x.get("level"): x.get("cgroup") for x in run.meta.get("levels") or () if isinstance(x, dict)}
    for i, name in enumerate(names):
        la = a.of_level(name)
        lr = la.run
        m = lr.meta
        row: dict[str, Any] = {
            "level": name,
            "own": i == 0,
            "cgroup": paths.get(name),
            "period_us": m.get("period_us"),
            "quota_us": m.get("quota_us"),
            "burst_us": m.get("burst_us"),
            "quota_changes": 0,
            "phase_ms": np.nan,
            "phase_unc_ms": np.nan,
            "offset_ms": np.nan,
            "periods": 0,
            "throttled": 0,
            "frozen_s": 0.0,
        }
        row["quota_last_us"] = quota_at_end(run, name)
        if lr.limits is not None and len(lr.limits) > 1:
            q = lr.limits["quota_us"]
            prev = q.shift()
            # a limit set or lifted ("max") is a change too: a comparison with NA is NA
            both = q.notna() & prev.notna()
            changed = (q.isna() != prev.isna()) | (both & q.ne(prev).fillna(False))
            row["quota_changes"] = int((changed & lr.limits["prev_ns"].notna()).sum())
        if ever_limited(lr) and len(lr.samples):
            try:
                g = la.grid
                per = la.periods
            except MissingDataError:
                per = None
            if per is not None:
                P = g.period_ns
                row["phase_ms"] = (g.phase_ns % P) / 1e6
                row["phase_unc_ms"] = g.uncertainty_ns / 1e6
                if own_phase is None and i == 0:
                    own_phase = g.phase_ns % P
                if own_phase is not None:
                    row["offset_ms"] = ((g.phase_ns - own_phase) % P) / 1e6
                row["periods"] = len(per)
                row["throttled"] = int(per["throttled"].fillna(False).sum())
                row["frozen_s"] = float(freezes_of(per, name)["dur_ms"].sum() / 1e3)
        rows.append(row)
    out = pd.DataFrame(rows)
    for c in ("period_us", "quota_us", "quota_last_us", "burst_us"):
        out[c] = out[c].astype("Int64")
    out["cgroup"] = out["cgroup"].astype("string")
    return out


def quota_words(first: Any, last: Any, period_us: Any, burst_us: Any = None) -> str:
    """A level's limit in words: "50 ms per 100 ms", "50 ms per 100 ms, then 200 ms" after
    a resize in place, "no limit"; with a burst, "(burst 20 ms)" after it."""
    q = _quota_words(first, last, period_us)
    if burst_us is not None and not pd.isna(burst_us) and int(burst_us) > 0 and q != "no limit":
        q += f" (burst {int(burst_us) / 1e3:g} ms)"
    return q


def _quota_words(first: Any, last: Any, period_us: Any) -> str:

    def ms(x: Any) -> str:
        return "no limit" if pd.isna(x) else f"{int(x) / 1e3:g} ms"

    if pd.isna(first) and pd.isna(last):
        return "no limit"
    per = f" per {int(period_us) / 1e3:g} ms" if not pd.isna(period_us) else ""
    q = f"{ms(first)}{per if not pd.isna(first) else ''}"
    if not pd.isna(last) and (pd.isna(first) or int(last) != int(first)):
        q += f", then {ms(last)}" + (per if pd.isna(first) else "")
    elif pd.isna(last) and not pd.isna(first):
        q += ", then no limit"
    return q


def describe(a: Any, level: str | None = None) -> list[str]:
    """Sentences for the report about a run's :class:`~gmpanalysis.Analysis` ``a``: which
    quota froze the process, where in its own period, and how much of it its own cpu.stat
    does not count. Empty for a bundle of one level."""
    run = a.run
    names = a.levels
    if len(names) < 2:
        return []
    ref = level or table_level(run)
    per = a.level_periods(ref)
    fz = a.freezes(ref)
    lv = a.levels_table
    P = (per["end_ns"] - per["start_ns"]).iloc[0] / 1e6 if len(per) else 100.0
    out = []
    parts = []
    for r in lv.itertuples(index=False):
        q = quota_words(r.quota_us, r.quota_last_us, r.period_us, r.burst_us)
        when = "" if r.level == ref or np.isnan(r.offset_ms) else f", its period ends {r.offset_ms:.1f} ms after"
        parts.append(f"the {r.level}'s ({q}{when})")
    out.append(f"{len(names)} bandwidth timers can freeze this process: " + ", ".join(parts) + ".")
    inside = fz[fz["ref_period"].notna()]
    # a level limited at any moment of the run (set in place where it had none, or taken away)
    limited = {r.level: not (pd.isna(r.quota_us) and pd.isna(r.quota_last_us)) for r in lv.itertuples(index=False)}
    own_count = {r.level: (r.throttled, r.periods) for r in lv.itertuples(index=False)}
    for name in names:
        f = inside[inside["level"] == name]
        if not limited.get(name, False):
            out.append(
                f"The {name} has no limit of its own" + (": the runtime reads only that." if name == names[0] else ".")
            )
            continue
        if not len(f):
            out.append(f"The {name}'s quota did not freeze it in the {len(per)} periods of the table.")
            continue
        whose = "its own quota" if name == names[0] else f"the {name}'s quota"
        # the count is the level's own (its cpu.stat, on its own grid: df_levels' throttled),
        # where in the period is on the table's
        n_thr, n_per = own_count[name]
        s = (
            f"{whose[0].upper() + whose[1:]} froze it in {n_thr} of its {n_per} periods, "
            f"typically from {f['from_ms'].median():.0f} to {min(f['to_ms'].median(), P):.0f} ms of the "
            f"{ref}'s period (median), {f['dur_ms'].sum() / 1e3:.2f} s in all"
        )
        if name != ref:
            s += f"; the {ref}'s own cpu.stat does not count that time"
        out.append(s + ".")
    both = per["frozen_by"].fillna("").str.contains(",")
    if both.any():
        out.append(f"In {int(both.sum())} periods both quotas froze it, one after the other.")
    return out
