"""Run-level summaries from the per-period table, and the side-by-side comparison of runs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .bundle import Run
from .errors import UsageError
from .gotrace.gcwork import gc_cpu
from .grid import restart_ns
from .levels import QUOTA_NOT_KNOWN, level_names, level_run, quota_at_end, settings_in_turn, table_level
from .served import latency_ms, sampled, succeeded
from .services import service_of


def _pct(x: pd.Series | np.ndarray, q: float) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if len(x) else np.nan


def told_or_typical(
    value: np.ndarray,
    event: np.ndarray,
    known: np.ndarray,
    least: np.ndarray | None = None,
    most: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-period values of a rate (stall, frozen time) where some periods froze but the
    reads leave how long open (``event`` and a NaN ``value``): such a period gets the mean
    of the frozen periods that tell theirs, so a rate over the ``known`` periods is not
    drawn towards the unfrozen ones, which always tell theirs (0), held to what each such
    period's own reads allow (``least``..``most``, where given). Where no frozen period
    tells its value, none of them does: every period is then unknown. Returns the values and
    which periods are known."""
    value = np.array(value, dtype=np.float64)
    told = np.isfinite(value)
    event = event & known
    open_ = event & ~told
    if not open_.any():
        return value, known & told
    if not (event & told).any():
        return value, np.zeros(len(value), dtype=bool)
    fill = np.full(int(open_.sum()), value[event & told].mean())
    if least is not None and most is not None:
        fill = np.clip(fill, np.nan_to_num(least[open_], nan=-np.inf), np.nan_to_num(most[open_], nan=np.inf))
    value[open_] = fill
    return value, known & np.isfinite(value)


def stall_bracket(per: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, float]:
    """The one owner of a throttled period's stall bracket: it stood frozen from somewhere in
    its exhaustion bracket (``exhausted_lo_us``..``exhausted_hi_us``) to the boundary, so its
    stall lies in P - hi .. P - lo (µs; NaN where the reads do not bound it, or it was not
    throttled), and the period P (µs, the table's first row's)."""
    P = float((per["end_ns"] - per["start_ns"]).iloc[0]) / 1e3 if len(per) else math.nan
    return P - column(per, "exhausted_hi_us"), P - column(per, "exhausted_lo_us"), P


def frozen_wall(per: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The one definition of the wall time a run stood frozen, per period: µs frozen by any
    level (``frozen_us``: the container's quota or the pod's, their union), and which periods
    know it (their throttling is known). A frozen period whose freeze the reads leave open
    counts the mean of those that tell theirs (:func:`told_or_typical`). A table without the
    levels' columns counts its own stall."""
    if "frozen_us" not in per:
        stall = per["stall_us"].to_numpy(dtype=np.float64, na_value=np.nan)
        thr = per["throttled"]
        return told_or_typical(stall, thr.fillna(False).to_numpy(dtype=bool), thr.notna().to_numpy())
    frozen = per["frozen_us"].to_numpy(dtype=np.float64, na_value=np.nan)
    # the periods that know it are those whose throttling, and which level froze them, is known
    known = per["throttled"].notna().to_numpy().copy()
    thr = per["throttled"].fillna(False).to_numpy(dtype=bool)
    if "frozen_by" in per:
        by = per["frozen_by"]
        known &= by.notna().to_numpy()
        event = by.fillna("").str.len().to_numpy() > 0
        only_own = by.fillna("").to_numpy(dtype=object) == str(per.attrs.get("level"))
        if "frozen_other_us" in per:
            # outside another level's reads (its freezes not known) the own one may not be alone
            only_own &= per["frozen_other_us"].notna().to_numpy()
    else:
        event, only_own = thr, thr
    least = most = None
    if "exhausted_lo_us" in per and len(per):
        # what the period's own reads allow: frozen at least as long as its own quota's
        # stall, and no longer than that stall where no other level froze it
        s_least, s_most, P = stall_bracket(per)
        least = np.where(thr, s_least, 0.0)
        most = np.where(only_own, s_most, P)
        if "frozen_lo_us" in per:
            # and what the freezes of every level allow (another level's brackets too)
            least = np.fmax(least, per["frozen_lo_us"].to_numpy(dtype=np.float64, na_value=np.nan))
            most = np.fmin(most, per["frozen_hi_us"].to_numpy(dtype=np.float64, na_value=np.nan))
    return told_or_typical(frozen, event, known, least, most)


def column(
    per: pd.DataFrame | Mapping[str, np.ndarray], col: str, dtype: Any = np.float64, na: Any = np.nan
) -> np.ndarray:
    """A column of a period table as an array: a frame's (its NA as ``na``) or one of a
    replay's columns (:func:`gmpanalysis.cfsreplay.replay_columns`: arrays already)."""
    if isinstance(per, pd.DataFrame):
        return per[col].to_numpy(dtype=dtype, na_value=na)
    return np.asarray(per[col], dtype=dtype)


def stall_ms_per_s(per: pd.DataFrame | Mapping[str, np.ndarray]) -> float:
    """The one definition of the stall rate: ms the group stood frozen by its own quota per
    second of wall time, over the periods whose throttling is known; a throttled period
    whose moment of exhaustion the reads leave open counts the mean stall of those that tell
    theirs (:func:`told_or_typical`: otherwise the rate leans towards the unthrottled
    periods, which always tell theirs). The period's length is the table's first row's.
    NaN when no period tells it. Of a frame or of a replay's columns."""
    stall = column(per, "stall_us")
    thr = column(per, "throttled", np.float64)
    least = most = None
    if isinstance(per, pd.DataFrame) and "exhausted_lo_us" in per and len(per):
        least, most, _ = stall_bracket(per)
    stall, known = told_or_typical(stall, thr == 1, np.isfinite(thr), least, most)
    if not known.any():
        return np.nan
    start, end = column(per, "start_ns", np.int64, 0), column(per, "end_ns", np.int64, 0)
    period_s = float(end[0] - start[0]) / 1e9
    return float(stall[known].sum() / 1e3 / (known.sum() * period_s))


def frozen_by_levels(per: pd.DataFrame) -> dict[str, int]:
    """How many periods each level's quota froze (a period frozen by two counts for both)."""
    if "frozen_by" not in per:
        return {}
    out: dict[str, int] = {}
    for v in per["frozen_by"].dropna():
        for lv in str(v).split(","):
            if lv:
                out[lv] = out.get(lv, 0) + 1
    return out


def period_summary(per: pd.DataFrame) -> dict[str, float]:
    """Throttling metrics of one run. One definition is THE share of periods throttled:
    ``throttled_pct_wall``, throttled periods among all the CFS periods of the sampled span
    (wall clock). The classic ratio is kept beside it, labelled: ``throttled_pct_active``
    is what cAdvisor / kube-prometheus report (nr_throttled / nr_periods), active periods
    only, so idle stretches, when the period timer stops, vanish from the denominator and
    bursty services look worse than they are; of a whole table it counts the periods in
    progress when the reads began and ended too, so it is the counters' deltas' ratio.

    Counts include what ambiguous groups hold (periods inside holes in the samples, see
    :func:`gmpanalysis.df_period_groups`), so they equal the kernel's counter deltas.
    Keys: periods, active_periods, throttled_periods, unknown_periods (rows whose
    throttling the samples cannot tell), unlimited_periods (rows without a quota: a limit
    set or removed in place during the run), unknown_quota_periods (rows whose quota is not
    known: they start inside the bracket of a quota change), throttled_pct_wall (%), throttled_pct_active (%),
    stall_ms_per_s (ms frozen per second of wall time, over periods that know it), with
    stall_ms_per_s_lo and stall_ms_per_s_hi the least and most it can be where the reads
    leave moments of exhaustion open (:func:`stall_bounds_ms_per_s`),
    exhausted_p10_ms, exhausted_p50_ms, exhausted_p90_ms (quota-exhaustion offset inside
    throttled periods), cpus_throttled_p50, throttled_rq_ms_per_throttled (throttled time, a
    sum over CPUs, per throttled period), throttled_rq_s (all of it: CPU-seconds the group's
    run queues stood frozen, the counter's delta), usage_ms_per_active (CPU per active period: about
    the quota when quota-bound). What froze the process at any level (a pod's quota too,
    which the table's own counters do not see): frozen_periods, frozen_pct_wall (% of all
    periods), frozen_ms_per_s (:func:`frozen_wall` per second of the periods that know it)
    and frozen_by ("pod 153, container 115": periods per level, most first).
    """
    missing = [c for c in ("nr_periods", "nr_throttled", "throttled_rq_us") if c not in per]
    if missing:
        replay = "model" in per.attrs
        raise UsageError(
            f"period_summary: the table has no {', '.join(missing)}: it takes gmp.df_periods' table"
            + ("; a what_if table is summarised by gmpanalysis.whatif.summarize(table)" if replay else "")
        )
    n = len(per)
    thr_known = per["throttled"].fillna(False).astype(bool)
    groups = per.attrs["ledger"].groups if "ledger" in per.attrs else None
    in_table = groups is not None and len(groups)
    extra = {}
    for c in ("nr_periods", "nr_throttled", "throttled_us"):
        # the sums of groups whose rows stayed NA (a filtered table keeps only its groups)
        extra[c] = (
            float(groups.loc[~groups[f"{c}_resolved"].astype(bool) & groups["group"].isin(per["group"]), c].sum())
            if in_table
            else 0.0
        )
    act = int(per["nr_periods"].sum()) + int(extra["nr_periods"])
    # the kernel counts periods (a timer overrun credits several at one boundary)
    thr = int(per["nr_throttled"].sum()) + int(extra["nr_throttled"])
    out_act, out_thr = _outside(per, act, thr)
    ex = per.loc[thr_known, "exhausted_at_us"] / 1e3
    thr_us = float(np.nansum(per["throttled_rq_us"])) + extra["throttled_us"]
    return {
        "periods": n,
        "active_periods": act,
        "throttled_periods": thr,
        "unknown_periods": int(per["throttled"].isna().sum()),
        **_quota_counts(per),
        "throttled_pct_wall": 100 * thr / n if n else np.nan,
        "throttled_pct_active": 100 * (thr + out_thr) / (act + out_act) if act + out_act else np.nan,
        "stall_ms_per_s": stall_ms_per_s(per),
        **dict(zip(("stall_ms_per_s_lo", "stall_ms_per_s_hi"), stall_bounds_ms_per_s(per), strict=True)),
        "exhausted_p10_ms": _pct(ex, 10),
        "exhausted_p50_ms": _pct(ex, 50),
        "exhausted_p90_ms": _pct(ex, 90),
        "cpus_throttled_p50": _pct(per["cpus_throttled"], 50),
        "throttled_rq_ms_per_throttled": thr_us / 1e3 / thr if thr else np.nan,
        "throttled_rq_s": thr_us / 1e6,
        # every row's usage (an idle period uses about none), over the kernel's active count
        "usage_ms_per_active": float(np.nansum(per["usage_us"]) / 1e3 / act) if act else np.nan,
        **_frozen_summary(per, int(extra["nr_throttled"])),
    }


# runs whose latency and throughput compare: one service under one load and one limit at
# one level (what GOMAXPROCS alone moved); compare_runs' columns
COMPARABLE = ("service", "load", "cpu_limit", "quota_level")


def comparable_groups(cmp: pd.DataFrame) -> list[str]:
    """Each :func:`gmpanalysis.compare_runs` row's group of runs that compare on latency and
    throughput (:data:`COMPARABLE`), in words: "service; load; limit at the level"."""
    keys = [k for k in COMPARABLE if k in cmp]

    def said(row: pd.Series) -> str:
        head = "; ".join(str(row[k]) for k in ("service", "load") if k in keys)
        tail = f"; {row['cpu_limit']} at the {row['quota_level']}" if {"cpu_limit", "quota_level"} <= set(keys) else ""
        return head + tail

    return [said(r) for _, r in cmp.iterrows()]


def _outside(per: pd.DataFrame, act: int, thr: int) -> tuple[int, int]:
    """The periods the kernel counted before the table's first boundary and after its last
    (the ones in progress when the reads began and ended: ``outside`` in
    :func:`gmpanalysis.df_conservation`), and how many of them it counted throttled, where the
    table is whole (its rows and groups hold every count the ledger puts in them): over the
    whole collection nr_throttled / nr_periods is then the counters' deltas', as cAdvisor
    reads them. (0, 0) for a table filtered from one."""
    led = per.attrs.get("ledger")
    if led is None or not len(led.conservation):
        return 0, 0
    c = led.conservation.groupby("counter")[["rows", "groups", "outside"]].sum()
    if not {"nr_periods", "nr_throttled"} <= set(c.index):
        return 0, 0
    whole = act == round(c.loc["nr_periods", ["rows", "groups"]].sum()) and thr == round(
        c.loc["nr_throttled", ["rows", "groups"]].sum()
    )
    if not whole:
        return 0, 0
    return int(round(c.loc["nr_periods", "outside"])), int(round(c.loc["nr_throttled", "outside"]))


def _quota_counts(per: pd.DataFrame) -> dict[str, int]:
    """The rows without a quota (``unlimited_periods``) and those whose quota is not known
    (``unknown_quota_periods``): both are NA in ``quota_us``; the reason tells them apart."""
    if "quota_us" not in per:
        return {"unlimited_periods": 0, "unknown_quota_periods": 0}
    na = per["quota_us"].isna().to_numpy()
    reason = per["reason"] if "reason" in per else pd.Series("", index=per.index)
    unknown = na & reason.fillna("").str.contains(QUOTA_NOT_KNOWN, regex=False).to_numpy(dtype=bool)
    return {"unlimited_periods": int((na & ~unknown).sum()), "unknown_quota_periods": int(unknown.sum())}


def stall_bounds_ms_per_s(per: pd.DataFrame) -> tuple[float, float]:
    """The least and the most the stall rate can be (ms per second, over the periods whose
    throttling is known): a throttled period whose moment of exhaustion the reads leave open
    stalled from somewhere in its bracket (``exhausted_lo_us``..``exhausted_hi_us``) to the
    boundary. :func:`stall_ms_per_s` lies between them; equal where every stall is dated."""
    stall = per["stall_us"].to_numpy(dtype=np.float64, na_value=np.nan)
    thr = per["throttled"]
    known = thr.notna().to_numpy()
    hit = thr.fillna(False).to_numpy(dtype=bool)
    if not known.any():
        return np.nan, np.nan
    b_least, b_most, P = stall_bracket(per)
    # a dated exhaustion too lies in its bracket; one the reads do not even bound, anywhere
    # in the period
    least = np.where(hit, np.nan_to_num(b_least, nan=0.0), stall)
    most = np.where(hit, np.nan_to_num(b_most, nan=P), stall)
    ok = known & np.isfinite(least) & np.isfinite(most)
    if not ok.any():
        return np.nan, np.nan
    scale = 1e3 * known.sum() * P / 1e6  # ms of stall per second over the known periods
    return float(np.clip(least[ok], 0, P).sum() / scale), float(np.clip(most[ok], 0, P).sum() / scale)


def frozen_ms_per_s(per: pd.DataFrame | Mapping[str, np.ndarray]) -> float:
    """The one definition of the frozen rate: ms the group stood frozen by any level's quota
    per second of wall time (:func:`frozen_wall`), over the periods that know it; NaN when
    none does. Of a frame or of a replay's columns (their ``frozen_us``: every period told)."""
    if isinstance(per, pd.DataFrame):
        frozen, known = frozen_wall(per)
    else:
        frozen = column(per, "frozen_us" if "frozen_us" in per else "stall_us")
        known = np.isfinite(frozen)
    if not known.any():
        return np.nan
    start, end = column(per, "start_ns", np.int64, 0), column(per, "end_ns", np.int64, 0)
    period_s = float(end[0] - start[0]) / 1e9
    return float(frozen[known].sum() / 1e3 / (known.sum() * period_s))


def frozen_periods(per: pd.DataFrame | Mapping[str, np.ndarray]) -> np.ndarray:
    """Which periods some level's quota froze: df_periods' ``frozen_by`` (NA: unknown,
    False), or a replay's own throttling and what the levels above alone held."""
    if isinstance(per, pd.DataFrame) and "frozen_by" in per:
        # a period the own level's counters call throttled was frozen, whatever the other
        # levels' (unknown outside their samples' span) did
        return (per["frozen_by"].fillna("").str.len() > 0).to_numpy() | per["throttled"].fillna(False).to_numpy(
            dtype=bool
        )
    hit = column(per, "throttled", bool, False)
    if "frozen_other_us" in per:  # a replay's, as a frame or as its columns
        hit = hit | (column(per, "frozen_other_us", na=0.0) > 0)
    return hit


def _frozen_summary(per: pd.DataFrame, group_throttled: int = 0) -> dict[str, object]:
    """The frozen keys of :func:`period_summary`; ``group_throttled``: the throttled periods
    ambiguous groups hold (rows whose own throttling is NA), frozen each, which no row says."""
    n = len(per)
    hit = int(frozen_periods(per).sum()) + group_throttled
    levels = frozen_by_levels(per)
    own = per.attrs.get("level")
    if group_throttled and own and "frozen_by" in per:
        # a group's throttles are the own level's nr_throttled: its own quota froze each
        # (the group's rows say NA, so no row names the level)
        levels[own] = levels.get(own, 0) + group_throttled
    by = sorted(levels.items(), key=lambda x: (-x[1], x[0]))
    return {
        "frozen_periods": hit,
        "frozen_pct_wall": 100 * hit / n if n else np.nan,
        "frozen_ms_per_s": frozen_ms_per_s(per) if n else np.nan,
        "frozen_by": ", ".join(f"{lv} {k}" for lv, k in by),
    }


def latency_ci(requests: pd.DataFrame | None, q: float = 0.99, level: float = 0.95) -> dict[str, float]:
    """A distribution-free confidence interval of a latency quantile (successful requests,
    from the scheduled start): the order statistics X(r) and X(s) (1-based ranks) with
    P(X(r) <= the quantile <= X(s)) >= ``level``, from the binomial count B of the n
    latencies below the quantile (B ~ Bin(n, q)): r the largest with P(B < r) <= (1 -
    level) / 2, s the least with P(B >= s) <= (1 - level) / 2. Keys ``latency_p99_lo_ms``,
    ``latency_p99_hi_ms`` (NaN where no order statistic bounds it: for p99 at 95 % the upper
    bound needs 368 requests, where it is the largest of them)."""
    out = {"latency_p99_lo_ms": np.nan, "latency_p99_hi_ms": np.nan}
    if not (0 < level < 1) or not (0 < q < 1):
        raise UsageError(f"latency_ci: q={q!r}, level={level!r}: give each between 0 and 1")
    if requests is None or not len(requests):
        return out
    lat = np.sort(latency_ms(requests)[succeeded(requests)])
    n = len(lat)
    if n == 0:
        return out
    r, s = _order_ranks(n, q, (1 - level) / 2)
    if r >= 1:
        out["latency_p99_lo_ms"] = float(lat[r - 1])
    if s <= n:
        out["latency_p99_hi_ms"] = float(lat[s - 1])
    return out


def _order_ranks(n: int, q: float, tail: float) -> tuple[int, int]:
    """(r, s) of :func:`latency_ci`: 1-based ranks, r = 0 or s = n + 1 where none bounds it.
    The binomial's probabilities come from its log pmf over the counts within 12 standard
    deviations of n·q (what lies beyond is below 1e-30), so a million requests cost a few
    thousand terms."""
    sd = math.sqrt(n * q * (1 - q))
    a, b = max(0, math.floor(n * q - 12 * sd) - 2), min(n, math.ceil(n * q + 12 * sd) + 2)
    k = np.arange(a, b + 1)
    lg = np.array([math.lgamma(x + 1) for x in range(a, b + 1)])
    lg_rest = np.array([math.lgamma(n - x + 1) for x in range(a, b + 1)])
    logp = math.lgamma(n + 1) - lg - lg_rest + k * math.log(q) + (n - k) * math.log1p(-q)
    p = np.exp(logp)
    below = np.cumsum(p) - p  # P(B < k) for each k of the window (nothing below a counts)
    at_least = np.cumsum(p[::-1])[::-1]  # P(B >= k)
    ok_r = k[(below <= tail) & (k >= 1)]
    ok_s = k[(at_least <= tail) & (k <= n)]
    r = int(ok_r.max()) if len(ok_r) else 0
    # P(B >= s) for s past the window's end is below the window's last term: b + 1 then
    s = int(ok_s.min()) if len(ok_s) else (b + 1 if b < n else n + 1)
    return r, s


def shown_names(runs: Sequence[Run]) -> list[str]:
    """Each run's name as tables and reports show it: its own (meta.json's, else its
    directory's), with its directory where another run has the same, and its whole path
    where that is not enough (copies of one bundle say the same name)."""
    names = [r.name for r in runs]
    if len(set(names)) == len(names):
        return names
    dup = {n for n in names if names.count(n) > 1}
    out = [f"{r.name} ({r.path.resolve().name})" if r.name in dup else r.name for r in runs]
    dup = {n for n in out if out.count(n) > 1}
    return [f"{r.name} ({r.path})" if o in dup else o for r, o in zip(runs, out, strict=True)]


def unlimited_summary() -> dict[str, object]:
    """:func:`period_summary`'s keys for a run that no quota limited at any level: the
    kernel keeps no CFS periods for it (its timer never runs), so nothing throttled or froze
    it; what only periods tell (their count, exhaustion, CPUs throttled) is NaN."""
    out: dict[str, object] = dict.fromkeys(
        (
            "periods", "active_periods", "unknown_periods", "unlimited_periods", "unknown_quota_periods",
            "throttled_pct_active",
            "exhausted_p10_ms",
            "exhausted_p50_ms", "exhausted_p90_ms", "cpus_throttled_p50", "throttled_rq_ms_per_throttled",
            "usage_ms_per_active",
        ),
        np.nan,
    )  # fmt: skip
    out.update(
        throttled_periods=0, throttled_pct_wall=0.0, stall_ms_per_s=0.0, stall_ms_per_s_lo=0.0,
        stall_ms_per_s_hi=0.0, throttled_rq_s=0.0, frozen_periods=0, frozen_pct_wall=0.0, frozen_ms_per_s=0.0,
        frozen_by="",
    )  # fmt: skip
    return out


def _limit_in_turn(run: Run, limit: str | None) -> str | None:
    """The process's own limit in words as it changed in place ("500m → 2", "none → 0.5",
    "500m → 1 → 0.5": limits.csv, in CPUs); ``limit`` (meta.json's) where it never did."""
    m = run.meta
    period = m.get("period_us")
    quotas: list[int | None] = []
    for q, _ in settings_in_turn(run, level_names(run)[0]):
        if not quotas or quotas[-1] != q:
            quotas.append(q)
    if len(quotas) < 2 or not period:
        return limit
    words = ["none" if q is None else f"{q / period:g}" for q in quotas]
    if limit and quotas[0] is not None and quotas[0] == m.get("quota_us"):
        words[0] = limit
    return " → ".join(words)


def compare_table(
    runs: Sequence[Run], periods: Sequence[pd.DataFrame | None], gomaxprocs: Sequence[int | None]
) -> pd.DataFrame:
    """:func:`gmpanalysis.compare_runs` from the runs' period tables (None: a run no quota
    limited, :func:`unlimited_summary`) and their GOMAXPROCS at the start."""
    rows = []
    shown = shown_names(runs)
    for i, run in enumerate(runs):
        per = periods[i]
        m = run.meta
        load = m.get("load") or {}
        desc = f"{load.get('mode')} {load.get('arrivals') or ''} {load.get('rate') or load.get('concurrency')}".replace(
            "  ", " "
        )
        # a limit resized in place (limits.csv): the quota of the table's last period too;
        # both of the table's level (a pod's, where the container has no limit of its own)
        level = table_level(run) if per is not None else level_names(run)[0]
        lm = level_run(run, level).meta
        last = quota_at_end(run)
        limit = m.get("cpu_limit")
        if not limit and m.get("quota_us") is not None and m.get("period_us"):
            limit = f"{m['quota_us'] / m['period_us']:g}"  # a collector that wrote the quota alone
        limit = _limit_in_turn(run, limit)
        row: dict[str, object] = {
            "name": shown[i],
            "gomaxprocs": gomaxprocs[i],
            "cpu_limit": limit,
            "quota_level": level,
            "own_level": level == level_names(run)[0],
            "quota_us": lm.get("quota_us"),
            "quota_last_us": last,
            "burst_us": lm.get("burst_us") or 0,
            "service": service_of(m),
            "load": desc,
        }
        r = run.requests
        if r is not None and len(r) and len(run.samples):
            # a request begun outside the sampled span ran in periods nobody measured (a
            # sampler that died early): it is counted apart, not in throughput or latency
            inside = sampled(r, run.samples, restart_ns(run.meta))
            row["requests_unsampled"] = int((~inside).sum())
            r = r[inside]
        if r is not None and len(r):
            ok = succeeded(r)
            lat = pd.Series(latency_ms(r)[ok])
            span = (r["end_ns"].max() - r["start_ns"].min()) / 1e9
            row.update(
                throughput_rps=int(ok.sum()) / span if span > 0 else np.nan,
                latency_p50_ms=_pct(lat, 50),
                latency_p99_ms=_pct(lat, 99),
            )
        else:
            row.update(throughput_rps=np.nan, latency_p50_ms=np.nan, latency_p99_ms=np.nan)
        if per is None:
            row.update(unlimited_summary(), stall_ms_per_period=0.0)
        else:
            row.update(period_summary(per))
            thr = per["throttled"].fillna(False).astype(bool)
            row["stall_ms_per_period"] = float(per.loc[thr, "stall_us"].mean() / 1e3) if thr.any() else 0.0
        tr = run.trace
        if tr is not None:
            d = (tr.stw.end_ns - tr.stw.start_ns) / 1e3
            row.update(stw_p50_us=_pct(d, 50), stw_p99_us=_pct(d, 99), stw_max_us=float(d.max()) if len(d) else np.nan)
            row["gc_cpu_pct"] = gc_cpu(tr)["gc_cpu_pct"]
        else:
            row.update(stw_p50_us=np.nan, stw_p99_us=np.nan, stw_max_us=np.nan, gc_cpu_pct=np.nan)
        # without a trace nothing tells the pauses; without a quota no boundary froze
        if tr is None:
            row["stw_spanning_boundary"] = np.nan
        else:
            row["stw_spanning_boundary"] = 0 if per is None else int(per["stw_spans_boundary"].sum())
        row.update(latency_ci(r))
        grid = None if per is None else per.attrs.get("grid")
        row["phase_uncertainty_us"] = grid.uncertainty_ns / 1e3 if grid is not None else np.nan
        rows.append(row)
    return _frame(rows)


def _frame(rows: list[dict]) -> pd.DataFrame:
    """The rows as a frame, the run names kept as Python objects: a name may hold a lone
    surrogate (an undecodable byte of a directory name), which pandas' Arrow-backed string
    columns (pandas 3 with pyarrow installed) refuse."""
    names = [r.get("name") for r in rows]
    df = pd.DataFrame([{k: v for k, v in r.items() if k != "name"} for r in rows])
    if rows and "name" in rows[0]:
        df.insert(list(rows[0]).index("name"), "name", pd.Series(names, dtype=object, index=df.index))
    return df
