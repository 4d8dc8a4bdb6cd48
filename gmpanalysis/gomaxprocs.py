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
from .cgroup import DEFAULT_PERIOD_US, bundle_cpus
from .goversion import go_minor, go_version_of

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


# The runtime re-checks the limit about once a second (Go >= 1.25); a change it follows shows
# up to this long after the limit moved.
FOLLOW_LAG_NS = 1_500_000_000


def applicable(go_version: Any, default_godebug: Any) -> set[str]:
    """The rules the runtime itself may apply, from the binary's Go version and its
    DefaultGODEBUG (set by the module's go line): ``go1.25 default`` for Go >= 1.25 without
    containermaxprocs=0, ``NumCPU`` otherwise; both when neither is known. env, automaxprocs
    and the downward API are always possible (they act through the environment or a call)."""
    out = {"env", "automaxprocs", "downward API"}  # (env and the downward API need a value in env)
    ver = go_minor(go_version)
    off = isinstance(default_godebug, str) and "containermaxprocs=0" in default_godebug.split(",")
    if ver is None and not isinstance(default_godebug, str):
        return out | {"go1.25 default", "NumCPU"}
    if ver is not None and ver < 25 or off:
        return out | {"NumCPU"}
    return out | {"go1.25 default"}


def effective(run: Run) -> int | None:
    """GOMAXPROCS at the start of the run: what the collector recorded, else the first value
    in the trace (the runtime's own ProcsChange), else a literal GOMAXPROCS in the
    environment (the runtime takes it as is); None when nothing tells."""
    m = run.meta
    g = m.get("gomaxprocs_effective")
    if isinstance(g, int) and not isinstance(g, bool) and g > 0:
        return g
    tr = run.trace
    if tr is not None and len(tr.gomaxprocs):
        return int(tr.gomaxprocs["procs"].iloc[0])
    return parse_env(m.get("gomaxprocs_env"))


def df_gomaxprocs(run: Run) -> pd.DataFrame:
    """GOMAXPROCS over the run against every level's CPU limit over time, what each rule
    would set, the rule the process followed, and where it drifted from the limit.

    One row at the start, at every event (a GOMAXPROCS change in the trace, a limit change of
    any level: limits.csv) and at the end. Columns: ``t_ns`` (CLOCK_MONOTONIC); ``event``
    ("start", "gomaxprocs", "limit <level>", "end"); ``gomaxprocs`` in force (Int64; NA: unknown, outside the
    trace with nothing recorded); ``limit_cpus`` the process's own cgroup's quota / period
    (NaN: no limit); ``ancestor_limit_cpus`` the tightest limit of the levels above it (NaN:
    none sampled or no limit); ``event_limit_cpus`` for a "limit <level>" row, that level's new
    limit (NaN otherwise, or no limit); one column per rule in :data:`RULES` (Int64, NA where it cannot
    be told) for the limit in force: ``automaxprocs`` and ``downward API`` act once, at the
    start, but their columns say what they would give now; ``followed`` the rules that give
    this value and that the runtime can apply here (comma-separated); ``above_limit`` bool,
    more Ps than the limit's whole CPUs (ceil): the extra Ps only burn the quota sooner;
    ``pinned`` bool, an environment value fixes it (the runtime then follows no limit
    change); ``drift`` what is off, in words ("" when nothing is); ``lag_ms`` for a
    GOMAXPROCS change, how long after the last limit change of the own level it came (NaN
    otherwise); ``stw_us`` the stop-the-world the runtime took to apply it (NaN: none seen).
    ``df.attrs``: ``rule`` the rule(s) the process followed through the run; ``go_version``;
    ``default_godebug``; ``applicable`` the runtime rules possible for this binary;
    ``own_level`` the level the process lives in (the one the runtime reads).
    """
    from .levels import level_names, limit_series

    m = run.meta
    ncpu = bundle_cpus(m)  # what the runtime counts as NumCPU: its affinity
    env = m.get("gomaxprocs_env")
    names = level_names(run)
    own = names[0]
    lim = limit_series(run)
    start_ns = int(lim["t_ns"].min()) if len(lim) else int(m.get("mono_start_ns") or 0)

    tr = run.trace
    g_t, g_v = _steps(run, start_ns)
    stw = tr.stw if tr is not None else None
    events = _events(run, lim, start_ns, g_t)

    can = applicable(go_version_of(run), m.get("default_godebug"))
    if parse_env(env) is None:
        can -= {"env", "downward API"}  # both act only through the environment
    else:
        can -= {"automaxprocs"}  # it leaves a GOMAXPROCS set in the environment alone
    _, q0, p0 = _limit_at(lim, own, start_ns)
    at_start = rules(q0, p0, ncpu, env)
    rows = []
    last_own_change = None
    prev_own = _limit_at(lim, own, start_ns)[0]
    for t, ev in events:
        lc, q, p = _limit_at(lim, own, t)
        if ev == f"limit {own}":
            if not (np.isnan(lc) and np.isnan(prev_own)) and lc != prev_own:
                last_own_change = t
            prev_own = lc
        anc = [_limit_at(lim, n, t)[0] for n in names[1:]]
        anc = [a for a in anc if not np.isnan(a)]
        i = int(np.searchsorted(np.asarray(g_t, dtype=np.int64), t, side="right")) - 1 if g_t else -1
        v = g_v[i] if i >= 0 else None
        r = rules(q, p, ncpu, env)
        r["automaxprocs_now"] = r["automaxprocs"]
        followed = [name for name in RULES if v is not None and r[name] == v and name in can]
        since = t - last_own_change if last_own_change is not None else None
        drift = _drift(v, lc, anc, r, at_start, can, since)
        lag = np.nan
        stw_us = np.nan
        if ev == "gomaxprocs":
            if last_own_change is not None:
                lag = (t - last_own_change) / 1e6
            stw_us = _longest_stw_near(stw, t)
        rows.append(
            {
                "t_ns": t,
                "event": ev,
                "gomaxprocs": v,
                "limit_cpus": lc,
                "ancestor_limit_cpus": min(anc) if anc else np.nan,
                "event_limit_cpus": _limit_at(lim, ev[6:], t)[0] if ev.startswith("limit ") else np.nan,
                **{name: r[name] for name in RULES},
                "followed": ", ".join(followed),
                "above_limit": bool(v is not None and not np.isnan(lc) and v > math.ceil(lc)),
                "pinned": r["env"] is not None,
                "drift": "; ".join(drift),
                "lag_ms": lag,
                "stw_us": stw_us,
            }
        )
    out = pd.DataFrame(rows)
    out["gomaxprocs"] = out["gomaxprocs"].astype("Int64")
    for name in RULES:
        out[name] = out[name].astype("Int64")
    out.attrs["rule"] = _rule_followed(out, at_start, can)
    out.attrs["go_version"] = go_version_of(run)
    out.attrs["default_godebug"] = m.get("default_godebug")
    out.attrs["applicable"] = sorted(can)
    out.attrs["own_level"] = own
    return out


def _longest_stw_near(stw: pd.DataFrame | None, t: int) -> float:
    """µs of the longest stop-the-world within 1 ms of ``t`` (a GOMAXPROCS change stops
    the world), NaN if none."""
    if stw is None or not len(stw):
        return np.nan
    near = stw[(stw["start_ns"] <= t + 1_000_000) & (stw["end_ns"] >= t - 1_000_000)]
    return float((near["end_ns"] - near["start_ns"]).max() / 1e3) if len(near) else np.nan


def _steps(run: Run, start_ns: int) -> tuple[list[int], list[int]]:
    """GOMAXPROCS as a step function (times, values): the value at the start
    (:func:`effective`), then the trace's changes; real changes only."""
    tr = run.trace
    g_t: list[int] = []
    g_v: list[int] = []
    first = effective(run)
    if tr is not None and len(tr.gomaxprocs):
        gm = tr.gomaxprocs
        g_t = gm["t_ns"].to_numpy(dtype=np.int64).tolist()
        g_v = gm["procs"].to_numpy(dtype=np.int64).tolist()
        g_t[0] = min(g_t[0], int(tr.meta["first_ns"]))
        if first is not None and g_t[0] > start_ns:
            g_t.insert(0, start_ns)
            g_v.insert(0, first)
    elif first is not None:
        g_t, g_v = [start_ns], [first]
    keep = [i for i in range(len(g_v)) if i == 0 or g_v[i] != g_v[i - 1]]
    return [g_t[i] for i in keep], [g_v[i] for i in keep]


def _events(run: Run, lim: pd.DataFrame, start_ns: int, g_t: list[int]) -> list[tuple[int, str]]:
    """The table's rows in time order: the start, each GOMAXPROCS change, each level's limit
    change, and the state the run ended in (a limit change the process did not follow
    shows there)."""
    m, tr = run.meta, run.trace
    events: list[tuple[int, str]] = [(start_ns, "start")]
    events += [(t, "gomaxprocs") for t in g_t[1:]]
    for r in lim.itertuples(index=False):
        if r.t_ns > start_ns:
            events.append((int(r.t_ns), f"limit {r.level}"))
    ends = [x for x in (m.get("mono_end_ns"), tr.meta["last_ns"] if tr is not None else None) if isinstance(x, int)]
    if len(run.samples):
        ends.append(int(run.samples["t_ns"].iloc[-1]))
    if ends and max(ends) > max(t for t, _ in events):
        events.append((max(ends), "end"))
    events.sort()
    return events


def _limit_at(lim: pd.DataFrame, level: str, t: int) -> tuple[float, int | None, int]:
    """A level's limit in force at ``t``: CPUs (NaN: none), quota µs (None: none), period µs."""
    x = lim[(lim["level"] == level) & (lim["t_ns"] <= t)]
    if not len(x):
        x = lim[lim["level"] == level].head(1)
    if not len(x):
        return np.nan, None, DEFAULT_PERIOD_US
    q, p = x["quota_us"].iloc[-1], int(x["period_us"].iloc[-1])
    return (np.nan if pd.isna(q) else float(q) / p), (None if pd.isna(q) else int(q)), p


def _drift(
    v: int | None,
    lc: float,
    anc: list[float],
    r: dict[str, Any],
    at_start: dict[str, int | None],
    can: set[str],
    since: int | None,
) -> list[str]:
    """What is off with GOMAXPROCS ``v`` under the own limit ``lc`` (CPUs) and the levels
    above (``anc``), in words; ``since``: ns since the own limit last changed (None: never)."""
    drift: list[str] = []
    if v is not None and not np.isnan(lc) and v > math.ceil(lc):
        drift.append(f"{v} Ps above the {lc:g}-CPU limit")
    if anc and (np.isnan(lc) or min(anc) < lc) and "go1.25 default" in can and r["env"] is None:
        drift.append(
            f"a level above has a tighter limit ({min(anc):g} CPUs) that the runtime does not read "
            "(it reads only its own cgroup: golang/go#81180)"
        )
    dflt = r["go1.25 default"]
    if v is not None and since is not None and since > FOLLOW_LAG_NS:
        # something is off only where a rule that follows the limit would now give another value
        off = dflt is not None and dflt != v
        numcpu = "NumCPU" in can and "go1.25 default" not in can and r.get("NumCPU") == v
        if r["env"] is not None and off:
            drift.append(f"pinned by GOMAXPROCS={r['env']} in the environment: the default rule would now give {dflt}")
        elif numcpu and r["env"] is None:
            # the binary's runtime takes NumCPU (before Go 1.25, or containermaxprocs=0): its
            # own rule explains the value, where automaxprocs (a library it may not have) would too
            if off:
                drift.append(f"{v} is NumCPU, the rule of this binary's runtime, which no limit moves")
        elif (
            at_start["automaxprocs"] == v
            and r["automaxprocs"] != v
            and r["env"] is None
            and not ("go1.25 default" in can and not off)
        ):
            drift.append(f"automaxprocs set {v} once at start, and its rule now gives {r['automaxprocs']}")
        elif "go1.25 default" in can and off and r["env"] is None:
            drift.append(f"the limit changed {(since / 1e9):.1f} s ago and GOMAXPROCS did not follow")
    return drift


def _rule_followed(g: pd.DataFrame, at_start: dict[str, int | None], can: set[str]) -> str:
    """The rules consistent with every known value of the run, each by its own semantics:
    env, NumCPU, automaxprocs and the downward API fix the value at the start; the go1.25
    default follows the limit (a mismatch right after a limit change is its re-check lag)."""
    known = g[g["gomaxprocs"].notna()]
    if not len(known):
        return ""
    out = []
    for name in RULES:
        if name not in can:
            continue
        if name == "go1.25 default":
            ok = all(
                pd.notna(x) and int(x) == int(v)
                for x, v, ev in zip(known[name], known["gomaxprocs"], known["event"], strict=True)
                if not ev.startswith("limit")  # the runtime's re-check comes up to a second later
            )
        else:
            ok = at_start[name] is not None and all(int(v) == at_start[name] for v in known["gomaxprocs"])
        if ok:
            out.append(name)
    return ", ".join(out)


def explain(run: Run) -> str:
    """Sentences for the report: where GOMAXPROCS came from, what it means under the
    limit, and where it drifted from the limit."""
    g = df_gomaxprocs(run)
    if not len(g) or pd.isna(g["gomaxprocs"].iloc[0]):
        return "GOMAXPROCS is not known for this run (no trace, nothing recorded)."
    row = g.iloc[0]
    v = int(row["gomaxprocs"])
    src = g.attrs["rule"] or "no rule known here"
    others = [f"{name} {int(row[name])}" for name in RULES if not pd.isna(row[name]) and int(row[name]) != v]
    s = f"GOMAXPROCS {v} at the start ({src})"
    if others:
        s += "; " + ", ".join(others) + " would have been set by the other rules"
    if row["above_limit"]:
        s += f"; {v} Ps against a {row['limit_cpus']:g}-CPU limit burn the quota sooner, then all stand frozen"
    s += "."
    changes = g[g["event"] == "gomaxprocs"]
    for c in changes.itertuples(index=False):
        what = f" It changed to {c.gomaxprocs}"
        if not np.isnan(c.lag_ms):
            what += f" {c.lag_ms / 1e3:.1f} s after the limit changed"
        if not np.isnan(c.stw_us):
            what += f", with a {c.stw_us:.0f} µs stop-the-world"
        s += what + "."
    prev = g.iloc[0]
    for ev in g.itertuples(index=False):
        if not ev.event.startswith("limit"):
            continue
        new = ev.event_limit_cpus
        s += f" The {ev.event[6:]} limit became {'none' if np.isnan(new) else f'{new:g} CPUs'}"
        before, after = prev["go1.25 default"], g.loc[g["t_ns"] == ev.t_ns, "go1.25 default"].iloc[0]
        own = ev.event == f"limit {g.attrs.get('own_level')}"
        if own and "go1.25 default" in g.attrs["rule"].split(", ") and not pd.isna(before) and before == after:
            s += f": the runtime's rule gives {int(after)} for it as before, so no change was due"
        s += "."
        prev = g.loc[g["t_ns"] == ev.t_ns].iloc[0]
    seen = set()
    for d in g["drift"]:
        for part in d.split("; ") if d else ():
            key = part.split(":")[0]
            if key not in seen:
                seen.add(key)
                s += f" Drift: {part}."
    return s
