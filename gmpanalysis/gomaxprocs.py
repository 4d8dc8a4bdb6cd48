"""GOMAXPROCS explained: what each rule in use would set, and which one the process followed.

The rules (one place for them):

- ``env``: a GOMAXPROCS environment variable of plain ASCII digits, taken as is by the
  runtime; it also turns off the runtime's own updates (Go >= 1.25).
- ``go1.25 default``: Go >= 1.25 (module ``go`` line >= 1.25) sets
  min(CPUs it may run on, max(2, ceil(quota / period))) from the cgroup it started in (the
  leaf only: tighter ancestor limits are ignored, golang/go#81180), re-checks it about once a
  second and applies a change with a stop-the-world.
- ``NumCPU``: Go <= 1.24 (or a module ``go`` line <= 1.24): the CPUs it may run on;
  container limits are ignored.
- ``automaxprocs``: go.uber.org/automaxprocs sets max(1, floor(quota / period)) once at start.
- ``downward API``: Kubernetes' ``resourceFieldRef: limits.cpu`` puts ceil(limit) into the
  environment (node allocatable when there is no limit), frozen at container start.

A rule "is followed" when it gives the GOMAXPROCS the trace shows (or the collector
recorded). Several may agree; the table lists every one that does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .bundle import Run

RULES = ("env", "go1.25 default", "NumCPU", "automaxprocs", "downward API")


def parse_env(value: Any) -> int | None:
    """GOMAXPROCS from the environment as the runtime parses it (plain ASCII digits, > 0);
    None when unset or not a number the runtime accepts."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) > 0:
        return int(value)
    return None


def rules(quota_us: int | None, period_us: int, ncpu: int | None, env: Any = None) -> dict[str, int | None]:
    """What each rule gives for one limit (None where it cannot be told: no CPU count known,
    or no environment value)."""
    limit = None if quota_us is None else quota_us / period_us
    out: dict[str, int | None] = {r: None for r in RULES}
    out["env"] = parse_env(env)
    if ncpu:
        out["NumCPU"] = ncpu
        out["go1.25 default"] = ncpu if limit is None else min(ncpu, max(2, math.ceil(limit)))
        out["downward API"] = ncpu if limit is None else max(1, math.ceil(limit))
    elif limit is not None:
        out["downward API"] = max(1, math.ceil(limit))
    out["automaxprocs"] = (ncpu or None) if limit is None else max(1, math.floor(limit))
    return out


def df_gomaxprocs(run: Run) -> pd.DataFrame:
    """GOMAXPROCS over the run against the CPU limit and what each rule would set.

    One row per value GOMAXPROCS took (from the trace's real changes; without a trace, the
    value the collector recorded at the start). Columns: ``t_ns`` when it took the value
    (CLOCK_MONOTONIC; the trace's first event, or the collection start); ``gomaxprocs``;
    ``limit_cpus`` quota / period in force (NaN: no limit); one column per rule in
    :data:`RULES` (Int64, NA where the rule cannot be told); ``followed`` the rules that give
    this value (comma-separated; "" when none does); ``above_limit`` bool, more Ps than the
    limit's whole CPUs (ceil): the extra Ps only burn the quota sooner; ``pinned`` bool, an
    environment value fixes it (the runtime then follows no limit change).
    ``df.attrs["rule"]``: the rule(s) followed at the start, ``df.attrs["go_version"]``.
    """
    from .analysis import analyze

    m = run.meta
    period_us = int(m.get("period_us") or 100_000)
    quota = m.get("quota_us")
    ncpu = m.get("ncpu") if isinstance(m.get("ncpu"), int) else None
    env = m.get("gomaxprocs_env")
    tr = run.trace
    if tr is not None and len(tr.gomaxprocs):
        gm = tr.gomaxprocs
        t = gm["t_ns"].to_numpy(dtype=np.int64).copy()
        t[0] = min(int(t[0]), int(tr.meta["first_ns"]))
        vals = gm["procs"].to_numpy(dtype=np.int64)
    else:
        g = analyze(run).gomaxprocs
        t = np.array([m.get("mono_start_ns") or 0], dtype=np.int64)
        vals = np.array([g if g is not None else -1], dtype=np.int64)
    r = rules(quota, period_us, ncpu, env)
    rows = []
    for ti, v in zip(t.tolist(), vals.tolist(), strict=True):
        known = v > 0
        followed = [name for name, x in r.items() if known and x == v]
        rows.append(
            {
                "t_ns": ti,
                "gomaxprocs": v if known else None,
                "limit_cpus": np.nan if quota is None else quota / period_us,
                **r,
                "followed": ", ".join(followed),
                "above_limit": bool(known and quota is not None and v > math.ceil(quota / period_us)),
                "pinned": r["env"] is not None,
            }
        )
    out = pd.DataFrame(rows)
    out["gomaxprocs"] = out["gomaxprocs"].astype("Int64")
    for name in RULES:
        out[name] = out[name].astype("Int64")
    out.attrs["rule"] = out["followed"].iloc[0] if len(out) else ""
    out.attrs["go_version"] = m.get("go_version")
    return out


def explain(run: Run) -> str:
    """One sentence for the report: where GOMAXPROCS came from and what it means under the
    limit."""
    g = df_gomaxprocs(run)
    if not len(g) or pd.isna(g["gomaxprocs"].iloc[0]):
        return "GOMAXPROCS is not known for this run (no trace, nothing recorded)."
    row = g.iloc[0]
    v = int(row["gomaxprocs"])
    src = row["followed"] or "no rule known here"
    others = [f"{name} {int(row[name])}" for name in RULES if not pd.isna(row[name]) and int(row[name]) != v]
    s = f"GOMAXPROCS {v} ({src})"
    if others:
        s += "; " + ", ".join(others) + " would have been set by the other rules"
    if row["above_limit"]:
        s += f"; {v} Ps against a {row['limit_cpus']:g}-CPU limit burn the quota sooner, then all stand frozen"
    if len(g) > 1:
        s += f"; it changed {len(g) - 1} time(s) during the trace"
    return s + "."
