"""The fleet report: which workloads freeze, how much it costs them, what to set."""

from __future__ import annotations

import html
import os

import numpy as np
import pandas as pd

from ..errors import GmpError
from .store import newest_first


def _pct(num: pd.Series, den: pd.Series) -> float:
    d = float(den.sum())
    return 100 * float(num.sum()) / d if d else np.nan


def df_fleet_workloads(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per workload (cluster, namespace, workload), ranked by the share of time it
    stood frozen by any level's quota (a pod's too, which its own counters do not see), then
    by frozen CPU-seconds per hour, from the fleet's summary rows
    (:func:`gmpanalysis.fleet.compute.read_summary`).

    Columns: ``cluster``, ``namespace``, ``workload``; ``bundles`` analysed and ``errors``
    (bundles that could not be); ``hours`` covered (its periods; a bundle no quota
    limited, its samples' span); ``frozen_cpu_s_per_h``
    CPU-seconds its run queues stood throttled per hour (cpu.stat throttled time);
    ``frozen_wall_pct`` share of wall-clock time the group stood frozen (Σ stall over the
    periods that know it: what users feel); ``throttled_pct_wall`` the share of its CFS
    periods (wall clock, idle ones too) that ended throttled, and ``throttled_pct_active``
    the classic ratio (nr_throttled / nr_periods: active periods only), both counting what
    holes in the samples hide (:func:`gmpanalysis.compare.period_summary`);
    ``stw_spanning_per_h`` stop-the-world
    pauses stretched over a boundary per hour of traced periods (NaN without a trace);
    ``gomaxprocs`` and ``limit_cpus`` (medians
    over its bundles) and ``gomaxprocs_per_limit`` their ratio; ``advice`` the what-if
    advisor's sentence for its latest bundle (by meta.json wall_start) that has one,
    ``advice_limit_cpus``,
    ``advice_gomaxprocs``.
    """
    cols = [
        "cluster", "namespace", "workload", "bundles", "errors", "hours", "frozen_cpu_s_per_h",
        "frozen_wall_pct", "throttled_pct_wall", "throttled_pct_active", "stw_spanning_per_h", "gomaxprocs",
        "limit_cpus", "gomaxprocs_per_limit", "advice", "advice_limit_cpus", "advice_gomaxprocs",
    ]  # fmt: skip
    if summary.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (c, ns, w), g in summary.groupby(["cluster", "namespace", "workload"], sort=False, dropna=False):
        ok = g[g["error"].isna()]
        span = float(ok["span_s"].sum())
        hours = span / 3600
        traced = float(ok["trace_s"].sum())
        adv = newest_first(ok.dropna(subset=["advice"]))
        last = adv.iloc[0] if len(adv) else None
        gm, lim = float(ok["gomaxprocs"].median()), float(ok["limit_cpus"].median())
        rows.append(
            {
                "cluster": c,
                "namespace": ns,
                "workload": w,
                "bundles": len(ok),
                "errors": len(g) - len(ok),
                "hours": hours,
                "frozen_cpu_s_per_h": float(ok["frozen_cpu_s"].sum()) / hours if hours else np.nan,
                "frozen_wall_pct": _pct(ok["stall_s"], ok["stall_known_s"]),
                "throttled_pct_wall": _pct(ok["throttled_periods"], ok["periods"]),
                "throttled_pct_active": _pct(ok["throttled_periods"], ok["active_periods"]),
                "stw_spanning_per_h": float(ok["stw_spanning"].sum()) / (traced / 3600) if traced else np.nan,
                "gomaxprocs": gm,
                "limit_cpus": lim,
                "gomaxprocs_per_limit": gm / lim if lim and not np.isnan(lim) else np.nan,
                "advice": None if last is None else last["advice"],
                "advice_limit_cpus": np.nan if last is None else float(last["advice_limit_cpus"]),
                "advice_gomaxprocs": np.nan if last is None else float(last["advice_gomaxprocs"]),
            }
        )
    out = pd.DataFrame(rows, columns=cols)
    order = ["frozen_wall_pct", "frozen_cpu_s_per_h"]
    return out.sort_values(order, ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def _partial_html(summary: pd.DataFrame) -> str:
    """The bundles still being written when analysed (meta.json "complete": false)."""
    if "complete" not in summary:
        return ""
    keys = summary.loc[summary["complete"].eq(False).fillna(False).to_numpy(dtype=bool), "key"]
    if not len(keys):
        return ""
    shown = ", ".join(html.escape(str(k)) for k in keys[:20]) + (" ..." if len(keys) > 20 else "")
    return (
        f"<p>{len(keys)} bundle(s) were still being written: analysed as they were, and again by the next "
        f"fleet run: {shown}</p>"
    )


def to_fleet_report(summary: pd.DataFrame, path: str | os.PathLike[str]) -> str:
    """Write the fleet report (HTML, one file) and return its path: workloads ranked by
    the share of time frozen by any level's quota, then every bundle, failures with their
    messages."""
    from ..location import fs_of

    wl = df_fleet_workloads(summary)
    fmt = {c: "{:.2f}".format for c in wl.columns if wl[c].dtype.kind == "f"}
    shown = wl.copy()
    for c, f in fmt.items():
        shown[c] = [("" if pd.isna(v) else f(v)) for v in shown[c]]
    bad = summary[summary["error"].notna()][["key", "error"]]
    n, hours = len(summary), float(summary["span_s"].sum()) / 3600 if len(summary) else 0.0
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>gmpanalysis fleet report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td:nth-child(-n+3){text-align:left}</style>",
        "</head><body><h1>Fleet report</h1>",
        f"<p>{n} bundles, {hours:.2f} hours covered, {len(wl)} workloads, {len(bad)} bundles not analysed.</p>",
        _partial_html(summary),
        "<h2>Workloads by the share of time frozen (any level's quota)</h2>",
        "<p>Frozen CPU-seconds: time the group's run queues stood throttled (cpu.stat), summed over CPUs. "
        "Frozen wall %: share of wall-clock time the group stood frozen (by any level). Throttled % wall: share "
        "of all CFS periods (idle ones too) that ended throttled; throttled % active: the classic "
        "nr_throttled / nr_periods, which leaves idle periods out. GOMAXPROCS per limit above 1: more Go threads "
        "than the quota's CPUs. Advice: the what-if replay of the workload's latest bundle.</p>",
        shown.to_html(index=False, na_rep="", escape=True),
    ]
    if len(bad):
        parts += ["<h2>Bundles not analysed</h2>", bad.to_html(index=False, escape=True)]
    parts.append("</body></html>")
    text = "\n".join(parts)
    import uuid

    fs, p = fs_of(path)
    d, name = p.rsplit("/", 1)
    tmp = f"{d}/.{name}.{uuid.uuid4().hex}.tmp"
    try:
        fs.pipe_file(tmp, text.encode("utf-8"))
        fs.mv(tmp, p)
    except OSError as e:
        raise GmpError(
            f"{path}: cannot write the fleet report ({e}); check that its directory exists and is writable"
        ) from None
    return str(path)


__all__ = ["df_fleet_workloads", "to_fleet_report"]
