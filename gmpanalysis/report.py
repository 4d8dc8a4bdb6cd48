"""A self-contained HTML report of one or more runs (images embedded, no external files)."""

from __future__ import annotations

import base64
import html
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .bundle import Run
from .compare import compare_runs
from .mmu import df_mmu
from .sampling import sampling_summary
from .timeline import cpus_available, df_period_groups, df_period_offsets, df_periods, df_stw_periods

SUMMARY_COLUMNS = {
    "name": "run",
    "gomaxprocs": "GOMAXPROCS",
    "cpu_limit": "CPU limit",
    "load": "load",
    "throughput_rps": "throughput (req/s)",
    "latency_p50_ms": "latency p50 (ms)",
    "latency_p99_ms": "latency p99 (ms)",
    "throttled_pct_wall": "periods throttled (% of all periods)",
    "throttled_pct_active": "classic nr_throttled/nr_periods (% of active periods only)",
    "unknown_periods": "periods unknown (holes in the samples)",
    "exhausted_p50_ms": "quota ran out at (p50, ms)",
    "stall_ms_per_period": "frozen per throttled period (ms)",
    "cpus_throttled_p50": "CPUs frozen (p50)",
    "stw_p99_us": "STW p99 (µs)",
    "stw_max_us": "STW max (µs)",
    "stw_spanning_boundary": "STWs across a frozen boundary",
    "gc_cpu_pct": "GC CPU (%)",
}


def findings(cmp: pd.DataFrame) -> list[str]:
    """Plain-language findings computed from :func:`compare_runs` output."""
    out = []
    for r in cmp.itertuples(index=False):
        limit = r.cpu_limit or "no"
        if r.throttled_periods:
            s = (
                f"{r.name}: GOMAXPROCS {r.gomaxprocs} with a {limit} CPU limit — the quota ran out "
                f"{r.exhausted_p50_ms:.0f} ms into the period (median) in {r.throttled_pct_wall:.0f} % of "
                f"periods; then about {r.cpus_throttled_p50:.1f} CPUs stood frozen for "
                f"{r.stall_ms_per_period:.0f} ms."
            )
        else:
            s = f"{r.name}: GOMAXPROCS {r.gomaxprocs} with a {limit} CPU limit — never throttled."
        if r.stw_spanning_boundary:
            s += (
                f" The longest stop-the-world pause, {r.stw_max_us / 1e3:.0f} ms, spanned a frozen boundary "
                f"({r.stw_spanning_boundary} pause(s) did; the median pause was {r.stw_p50_us / 1e3:.2f} ms)."
            )
        if r.throttled_pct_active - r.throttled_pct_wall >= 5:
            s += (
                f" The classic nr_throttled/nr_periods ratio says {r.throttled_pct_active:.0f} %: it leaves out "
                "the periods in which the group was idle and its timer stopped."
            )
        out.append(s)
    # latency only compares between runs under the same load, and only where the 95 %
    # confidence intervals of p99 do not overlap (a p99 from ~100 requests is wide)
    for load, g in cmp[cmp["latency_p99_ms"].notna()].groupby("load"):
        if len(g) < 2:
            continue
        best, worst = g.loc[g["latency_p99_ms"].idxmin()], g.loc[g["latency_p99_ms"].idxmax()]
        separated = best.get("latency_p99_hi_ms", np.nan) < worst.get("latency_p99_lo_ms", np.nan)
        if separated:
            out.append(
                f"Under the same load ({load}): lowest p99 latency with GOMAXPROCS {best['gomaxprocs']} "
                f"({best['latency_p99_ms']:.0f} ms, {best['name']}), highest with GOMAXPROCS "
                f"{worst['gomaxprocs']} ({worst['latency_p99_ms']:.0f} ms, {worst['name']}); their 95 % "
                "confidence intervals do not overlap."
            )
        else:
            out.append(
                f"Under the same load ({load}): p99 latency ranges {g['latency_p99_ms'].min():.0f}-"
                f"{g['latency_p99_ms'].max():.0f} ms, but with {len(g)} runs of this size the 95 % confidence "
                "intervals overlap (or stay open): no run is ranked above another on latency."
            )
    return out


def data_quality(run: Run, per: pd.DataFrame) -> list[str]:
    """Plain sentences on what the samples could not see: holes, ambiguous groups, the
    sampler's misses and the host's steal time (when the bundle recorded it)."""
    out = []
    groups = df_period_groups(per)
    unknown = int(per["throttled"].isna().sum())
    gap = int(per["gap"].sum())
    if gap:
        out.append(
            f"{gap} period(s) overlap holes in the samples (longest {per['hole_ms'].max():.0f} ms): their usage is "
            "interpolated across the hole and shown with its bracket; their counts stay exact where one period "
            "end fell in the hole."
        )
    for g in groups.itertuples(index=False):
        out.append(
            f"Periods {g.first_period}-{g.last_period}: {g.boundaries} period ends fell in one "
            f"{(g.hole_end_ns - g.hole_start_ns) / 1e6:.0f} ms hole; the counters prove {int(g.nr_throttled)} of "
            f"them throttled with {g.throttled_us / 1e3:.1f} ms of throttled time between them"
            + (" (each one)" if g.nr_throttled_resolved and g.nr_throttled else "")
            + "."
        )
    if unknown:
        out.append(f"{unknown} period(s) are shown as unknown (hatched): the samples cannot tell which were throttled.")
    sm = sampling_summary(run)
    if sm["holes"]:
        steal = sm["host_steal_ms"]
        out.append(
            f"The sampler missed {sm['missed_ms']:.0f} ms in {sm['holes']} hole(s) (longest "
            f"{sm['longest_hole_ms']:.0f} ms); the host stole "
            + (
                f"{steal:.0f} ms of CPU over the run."
                if np.isfinite(steal)
                else "an unknown amount (no host_stat.csv)."
            )
        )
    return out
    sm = sampling_summary(run)
    if sm.get("holes"):
        txt = (
            f"The sampler missed {sm['missed_ms']:.0f} ms in {sm['holes']} hole(s) (longest {sm['longest_ms']:.0f} ms)"
        )
        steal = sm.get("steal_ms")
        txt += "; the host stole " + (
            f"{steal:.0f} ms of CPU over the run." if np.isfinite(steal) else "an unknown amount (no host_stat.csv)."
        )
        out.append(txt)
    return out


def _png(draw: Any, size: tuple[float, float]) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    draw(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _img(src: str, alt: str) -> str:
    return f'<figure><img src="{src}" alt="{html.escape(alt)}"><figcaption>{html.escape(alt)}</figcaption></figure>'


def to_report(runs: Sequence[Run], path: str | os.PathLike[str], *, title: str = "gmpanalysis report") -> Path:
    """Write one self-contained HTML file: summary table, findings in plain words, and per
    run the period plot, the in-period heatmap and the STW plot; a comparison panel when
    there are several runs."""
    from . import plot

    pers = [df_periods(r) for r in runs]
    cmp = compare_runs(runs, periods=pers)
    parts = [f"<h1>{html.escape(title)}</h1>", "<h2>Findings</h2><ul>"]
    parts += [f"<li>{html.escape(f)}</li>" for f in findings(cmp)]
    parts.append("</ul><h2>Summary</h2>")
    table = cmp[[c for c in SUMMARY_COLUMNS if c in cmp]].rename(columns=SUMMARY_COLUMNS)
    parts.append(table.to_html(index=False, float_format=lambda v: f"{v:,.1f}", na_rep="–", border=0))
    if len(runs) > 1:
        parts.append(
            _img(
                _png(lambda f: plot.plot_compare(cmp, axes=f.subplots(1, len(plot.COMPARE_METRICS))), (14, 3.6)),
                "runs side by side",
            )
        )
    traced = [r for r in runs if r.trace is not None]
    if traced:
        mmus = [(r.name, df_mmu(r)) for r in traced]

        def draw_mmu(f: Any) -> None:
            ax = f.add_subplot()
            for name, m in mmus:
                plot.plot_mmu(m, ax=ax, label=name)

        parts.append(
            _img(
                _png(draw_mmu, (8, 4)),
                "minimum mutator utilisation per run (the Go runtime's view: a "
                "stop-the-world stretched across a frozen period counts in full)",
            )
        )
    vmax = max(cpus_available(r) for r in runs)  # one colour scale, so runs compare
    for run, per in zip(runs, pers, strict=True):
        m = run.meta
        parts.append(
            f"<h2>{html.escape(run.name)}</h2><p>GOMAXPROCS {m.get('gomaxprocs_effective')} "
            f"(env {html.escape(str(m.get('gomaxprocs_env')))}), quota {m.get('quota_us')} µs per "
            f"{m.get('period_us')} µs, {html.escape(str(m.get('go_version')))}, kernel "
            f"{html.escape(str(m.get('kernel')))}; period grid phase "
            f"±{per.attrs['grid'].uncertainty_ns / 1e3:.0f} µs.</p>"
        )
        parts += [f"<p>{html.escape(x)}</p>" for x in data_quality(run, per)]
        parts.append(
            _img(
                _png(lambda f, per=per: plot.plot_periods(per, ax=f.add_subplot()), (12, 4.2)),
                f"{run.name}: CPU per period against the quota",
            )
        )
        off = df_period_offsets(run, per=per)
        parts.append(
            _img(
                _png(lambda f, off=off: plot.plot_period_heatmap(off, ax=f.add_subplot(), vmax=vmax), (12, 4)),
                f"{run.name}: inside each period",
            )
        )
        if run.trace is not None:
            stw = df_stw_periods(run, per=per)
            parts.append(
                _img(
                    _png(lambda f, stw=stw: plot.plot_stw_vs_boundary(stw, ax=f.add_subplot()), (8, 4)),
                    f"{run.name}: stop-the-world pauses against the period boundary",
                )
            )
    body = "\n".join(parts)
    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1250px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ padding: 0.3em 0.6em; border-bottom: 1px solid #ddd; text-align: right; }}
th {{ background: #f3f3f3; }}
img {{ max-width: 100%; }}
figure {{ margin: 1em 0; }} figcaption {{ color: #666; font-size: 0.85em; }}
li {{ margin: 0.4em 0; }}
</style></head><body>
{body}
<p style="color:#888;font-size:0.8em">Times are CLOCK_MONOTONIC; periods are the kernel's own CFS periods,
reconstructed from cpu.stat. Generated by gmpanalysis.</p>
</body></html>
"""
    out = Path(path)
    out.write_text(doc)
    return out
