"""A self-contained HTML report of one or more runs (images embedded, no external files)."""

from __future__ import annotations

import base64
import contextlib
import html
import io
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .analysis import analyze, held
from .bundle import Run
from .compare import comparable_groups, shown_names
from .errors import GmpError, GmpWarning, UsageError
from .frames import compare_runs
from .gomaxprocs import explain as explain_gomaxprocs
from .goversion import go_version_of
from .hostload import contention_sentence
from .levels import describe as describe_levels
from .levels import level_names, level_run, quota_at_end, quota_words, table_level
from .offsets import cpus_available
from .periods import df_period_groups
from .replayinputs import no_quota
from .sampling import sampling_summary

SUMMARY_COLUMNS = {
    "name": "run",
    "gomaxprocs": "GOMAXPROCS",
    "cpu_limit": "CPU limit",
    "load": "load",
    "throughput_rps": "throughput (req/s)",
    "latency_p50_ms": "latency p50 (ms)",
    "latency_p99_ms": "latency p99 (ms)",
    "frozen_pct_wall": "periods frozen, any level (% of all periods)",
    "frozen_ms_per_s": "frozen, any level (ms per s)",
    "frozen_by": "frozen by (periods per level)",
    "throttled_pct_wall": "own quota ran out (% of all periods)",
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

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _shares_said(r: Any) -> str:
    """What the shares of periods above count, where the table holds periods without a
    limit (set or removed in place), and why the classic ratio differs."""
    u = getattr(r, "unlimited_periods", 0)
    u = int(u) if pd.notna(u) else 0
    k = getattr(r, "unknown_quota_periods", 0)
    k = int(k) if pd.notna(k) else 0
    s = ""
    parts = [f"{u} of them had no limit"] if u else []
    if k:
        parts.append(f"{k} began while the limit was being changed (their quota is not known)")
    if parts:
        s += f" The shares are of all {int(r.periods)} periods; {' and '.join(parts)}."
    if pd.notna(r.throttled_pct_active) and r.throttled_pct_active - r.throttled_pct_wall >= 5:
        why = "had no limit or " if u else ""
        s += (
            f" The classic nr_throttled/nr_periods ratio says {r.throttled_pct_active:.0f} %: it leaves out "
            f"the periods in which the group {why}was idle and its timer stopped."
        )
    return s


def _ran_out(r: Any) -> str:
    """When the run's own quota ran out and what followed, in words; what the reads leave
    open is said to be open, not printed as nan."""
    if pd.isna(r.exhausted_p50_ms):
        s = (
            f"ran out in {r.throttled_pct_wall:.0f} % of periods, at moments the reads leave open (read "
            "cpu.stat more often than the scheduler's tick to date them)"
        )
    else:
        s = f"ran out {r.exhausted_p50_ms:.0f} ms into the period (median) in {r.throttled_pct_wall:.0f} % of periods"
    if pd.notna(r.stall_ms_per_period):
        cpus = f"about {r.cpus_throttled_p50:.1f} CPUs" if pd.notna(r.cpus_throttled_p50) else "it"
        s += f", then {cpus} stood frozen for {r.stall_ms_per_period:.0f} ms"
        g = getattr(r, "gomaxprocs", None)
        if pd.notna(r.cpus_throttled_p50) and isinstance(g, int | float) and r.cpus_throttled_p50 > g + 0.5:
            # the count is the run queues' throttled time over the stall: threads without a
            # P (in syscalls, the runtime's own) and queues throttled before the usage went
            # flat add to it
            s += (
                f" (more than its {g:g} Ps: the run queues' throttled time over the stall, which counts "
                "threads without a P and CPUs that froze before the quota's last read)"
            )
    lo, hi = getattr(r, "stall_ms_per_s_lo", np.nan), getattr(r, "stall_ms_per_s_hi", np.nan)
    if pd.notna(lo) and pd.notna(hi) and hi - lo > 0.25 * max(hi, 1.0):
        s += f" (the stall, {lo:.0f}-{hi:.0f} ms per second: the reads leave moments of exhaustion open)"
    return s


def findings(cmp: pd.DataFrame) -> list[str]:
    """Plain-language findings computed from :func:`compare_runs` output."""
    out = []
    for r in cmp.itertuples(index=False):
        limit = f"a {r.cpu_limit} CPU limit" if isinstance(r.cpu_limit, str) and r.cpu_limit else "no CPU limit"
        own = getattr(r, "own_level", True) is not False
        whose = "its own quota" if own else f"the {r.quota_level}'s quota"
        if not own and limit == "no CPU limit":
            q = r.quota_us if pd.notna(r.quota_us) else r.quota_last_us
            limit = "no CPU limit of its own" + (
                f" (the {r.quota_level}'s quota: {q / 1e3:g} ms per period)" if pd.notna(q) else ""
            )
        burst = getattr(r, "burst_us", 0)
        if pd.notna(burst) and burst > 0:
            limit += f" and a {burst / 1e3:g} ms burst"
        head = f"{r.name}: GOMAXPROCS {r.gomaxprocs} with {limit}"
        if r.frozen_periods:
            # what froze the process, at any level, first: a pod's quota freezes a container
            # whose own cpu.stat never counts it
            per_s = (
                f"{r.frozen_ms_per_s:.0f} ms per second"
                if pd.notna(r.frozen_ms_per_s)
                else "for a time per second the reads leave open"
            )
            s = f"{head} — frozen in {r.frozen_pct_wall:.0f} % of periods, {per_s} (periods per level: {r.frozen_by})"
            if r.throttled_periods:
                s += f"; {whose} {_ran_out(r)}."
            elif own:
                s += "; its own cgroup's quota never ran out: another level's quota froze it."
            else:
                s += f"; the {r.quota_level}'s quota never ran out: another level's quota froze it."
        elif r.throttled_periods:
            s = f"{head} — {'the quota' if own else whose} {_ran_out(r)}."
        else:
            s = f"{head} — never throttled."
        if pd.notna(r.stw_spanning_boundary) and r.stw_spanning_boundary > 0:
            s += (
                f" The longest stop-the-world pause, {r.stw_max_us / 1e3:.0f} ms, spanned a frozen boundary "
                f"({int(r.stw_spanning_boundary)} pause(s) did; the median pause was {r.stw_p50_us / 1e3:.2f} ms)."
            )
        s += _shares_said(r)
        out.append(s)
    # latency only compares between runs of one service under the same load and limit (what
    # GOMAXPROCS alone moved), and only where the 95 % confidence intervals of p99 do not
    # overlap (a p99 from ~100 requests is wide)
    timed = cmp[cmp["latency_p99_ms"].notna()]
    for load, g in timed.groupby(comparable_groups(timed), sort=False):
        if len(g) < 2:
            continue
        best, worst = g.loc[g["latency_p99_ms"].idxmin()], g.loc[g["latency_p99_ms"].idxmax()]
        separated = best.get("latency_p99_hi_ms", np.nan) < worst.get("latency_p99_lo_ms", np.nan)
        if separated:
            out.append(
                f"One service, load and limit ({load}): lowest p99 latency with GOMAXPROCS {best['gomaxprocs']} "
                f"({best['latency_p99_ms']:.0f} ms, {best['name']}), highest with GOMAXPROCS "
                f"{worst['gomaxprocs']} ({worst['latency_p99_ms']:.0f} ms, {worst['name']}); their 95 % "
                "confidence intervals do not overlap."
            )
        else:
            out.append(
                f"One service, load and limit ({load}): p99 latency ranges {g['latency_p99_ms'].min():.0f}-"
                f"{g['latency_p99_ms'].max():.0f} ms, but with {len(g)} runs of this size the 95 % confidence "
                "intervals overlap (or stay open): no run is ranked above another on latency."
            )
        out[-1] += _throughput_said(g)
    return out


def _throughput_said(g: pd.DataFrame) -> str:
    """The requests answered per second across runs under one load, where they differ by
    more than 10 % (an open loop's offered rate answers the same whatever the setting, until
    it falls behind; a closed loop's clients send as fast as they are answered)."""
    if "throughput_rps" not in g:
        return ""
    t = g[g["throughput_rps"].notna() & (g["throughput_rps"] > 0)]
    if len(t) < 2:
        return ""
    hi, lo = t.loc[t["throughput_rps"].idxmax()], t.loc[t["throughput_rps"].idxmin()]
    if lo["throughput_rps"] >= 0.9 * hi["throughput_rps"]:
        return ""
    return (
        f" Requests answered per second: {hi['throughput_rps']:.1f} with GOMAXPROCS {hi['gomaxprocs']} "
        f"({hi['name']}), {lo['throughput_rps']:.1f} with GOMAXPROCS {lo['gomaxprocs']} ({lo['name']}), "
        f"{100 * (lo['throughput_rps'] / hi['throughput_rps'] - 1):.0f} %."
    )


def data_quality(run: Run, per: pd.DataFrame) -> list[str]:
    """Plain sentences on what the samples could not see: holes, ambiguous groups, a host
    others kept busy, the sampler's misses and the host's steal time (when the bundle
    recorded it)."""
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
    shared = contention_sentence(run)
    if shared:
        out.append(shared)
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


@contextlib.contextmanager
def recording_notes(into: list[str]) -> Iterator[list[str]]:
    """Inside the block, every :class:`~gmpanalysis.errors.GmpWarning` is recorded: its
    message is appended to ``into`` (once) instead of being printed, whatever the warning
    filters outside say. Other warnings pass through as they would have.

    Example: ``with recording_notes(notes): run = load_run(path)``.
    """
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GmpWarning)
            yield into
    finally:
        for w in caught:
            if not issubclass(w.category, GmpWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            elif str(w.message) not in into:
                into.append(str(w.message))


def _data_notes_html(runs: Sequence[Run], notes: Sequence[Sequence[str]], general: Sequence[str]) -> str:
    """The "Data notes" box at the top of the report: per run, what its readers tolerated."""
    parts = ['<section id="data-notes" class="data-notes"><h2>Data notes</h2>']
    if not general and not any(notes):
        parts.append("<p>None: no run had a line dropped, a trace cut short or anything else tolerated.</p>")
        return "".join(parts) + "</section>"
    parts.append(
        "<p>Read these first: some data below was dropped, cut short or tolerated while reading. "
        "The figures rest on what was left.</p>"
    )
    for name, ns in zip(shown_names(runs), notes, strict=True):
        parts.append(f"<h3>{html.escape(name)}</h3>")
        if ns:
            parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in ns) + "</ul>")
        else:
            parts.append("<p>No notes.</p>")
    if general:
        parts.append("<h3>All runs</h3><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in general) + "</ul>")
    return "".join(parts) + "</section>"


def _png(draw: Any, size: tuple[float, float]) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    draw(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _img(src: str, alt: str) -> str:
    return f'<figure><img src="{src}" alt="{html.escape(alt)}"><figcaption>{html.escape(alt)}</figcaption></figure>'


ADVICE_COLUMNS = {
    "limit_cpu": "limit (CPUs)",
    "gomaxprocs": "GOMAXPROCS",
    "throttled_pct": "throttled %",
    "stall_ms_per_s": "stall ms/s",
    "p99_ms": "p99 ms",
}


# a limit is shown as it would be set (0.25, 1.75), not rounded like the measured figures
_LIMIT_AS_SET = {ADVICE_COLUMNS["limit_cpu"]: lambda v: f"{v:g}"}


def _advice_html(run: Run) -> str:
    """What the replay says this run should have run with (:func:`gmpanalysis.advise`, for
    p99, without burst), the best five settings, and the usual rules at that limit."""
    from .advise import advise

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adv = advise(run, objective="p99", bursts=(0.0,))
    except GmpError as e:
        return f"<p>What should it run with? The replay cannot tell: {html.escape(str(e))}</p>"
    head = adv.head(5)[list(ADVICE_COLUMNS)].rename(columns=ADVICE_COLUMNS)
    out = [
        f"<h3>What should it run with?</h3><p>{html.escape(adv.attrs['recommendation'])} "
        "(a replay of this run's demand without a burst, which a Kubernetes pod spec cannot set: "
        "<code>gmp.advise(run, bursts=[0])</code>, <code>gmp.what_if</code>)</p>",
        head.to_html(index=False, float_format=lambda v: f"{v:,.1f}", formatters=_LIMIT_AS_SET, na_rep="–", border=0),
    ]
    b = adv.attrs["baselines"]
    if len(b):
        keep = {"setting": "setting", **{k: v for k, v in ADVICE_COLUMNS.items() if k != "gomaxprocs"}}
        rows = b[list(keep)].rename(columns=keep)
        out.append(
            rows.to_html(
                index=False, float_format=lambda v: f"{v:,.1f}", formatters=_LIMIT_AS_SET, na_rep="–", border=0
            )
        )
    return "".join(out)


@held
def to_report(
    runs: Run | Sequence[Run],
    path: str | os.PathLike[str],
    *,
    title: str = "gmpanalysis report",
    notes: Sequence[Sequence[str]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write one self-contained HTML file: "Data notes" at the top, then findings in plain
    words, the summary table, and per run the period plot, the in-period heatmap and the
    STW plot; a comparison panel when there are several runs. ``runs`` may be one run.

    The Data notes list, per run, everything the data could not vouch for: ``run.notes``
    (a dropped partial CSV line, an unfinished collection, an empty trace), the message of
    every :class:`~gmpanalysis.errors.GmpWarning` raised while analysing the run here (a
    trace cut mid-generation, a foreign trace clock), and ``notes[i]`` for ``runs[i]``:
    extra notes from the caller, e.g. warnings recorded with :func:`recording_notes`
    while loading. Those warnings are recorded, not printed. ``progress``, when given, is
    called with a line per step (each run analysed, the figures drawn)."""
    from . import plot

    say = progress or (lambda _msg: None)
    if isinstance(runs, Run):  # one run: a report of it alone
        runs = [runs]
    if notes is not None and len(notes) != len(runs):
        raise UsageError(f"to_report: notes has {len(notes)} entries for {len(runs)} runs; give one list per run")
    tables = [_analysed(r, notes[i] if notes is not None else (), say, i, len(runs)) for i, r in enumerate(runs)]
    run_notes = [t["notes"] for t in tables]
    general: list[str] = []
    with recording_notes(general):
        cmp = compare_runs(runs)
        caps = [c for c in (cpus_available(r) for r in runs) if c == c]
        vmax = max(caps) if caps else None  # one colour scale, so runs compare
    general = [n for n in general if not any(n in ns for ns in run_notes)]

    say(f"report: drawing the figures of {len(runs)} run(s)")
    parts = [f"<h1>{html.escape(title)}</h1>", _data_notes_html(runs, run_notes, general), "<h2>Findings</h2><ul>"]
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
    if any(t["mmu"] is not None for t in tables):
        parts.append(_mmu_figure(plot, runs, [t["mmu"] for t in tables]))
    for run, name, t in zip(runs, shown_names(runs), tables, strict=True):
        parts += _run_section(plot, run, name, t, vmax)
    out = Path(path)
    try:
        # a lone surrogate (an undecodable byte in a run's name) becomes U+FFFD: the file is UTF-8
        out.write_text(_LONE_SURROGATE.sub("\ufffd", _page(title, "\n".join(parts))), encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{out}: cannot write the report ({e.strerror or e}); choose another output file") from None
    return out


def _analysed(r: Run, extra: Sequence[str], say: Callable[[str], None], i: int, n: int) -> dict[str, Any]:
    """What a run's part of the report is drawn from, built once (and shared with
    compare_runs), with its data notes: the run's, the caller's, and the warnings raised
    while analysing it."""
    say(f"report: analysing {r.name} ({i + 1}/{n})")
    found = list(r.notes)
    found += [x for x in extra if x not in found]
    with recording_notes(found):
        a = analyze(r)
        traced = r.trace is not None
        if no_quota(r):  # no CFS periods: what is told without them
            out = {"per": None, "quality": [], "off": None, "stw": None, "mmu": a.mmu if traced else None}
        else:
            per = a.periods
            out = {
                "per": per,
                "quality": data_quality(r, per),
                "off": a.offsets(),
                "stw": a.stw_periods if traced else None,
                "mmu": a.mmu if traced else None,
            }
    for x in r.notes:  # reading the trace above may have added to them
        if x not in found:
            found.insert(0, x)
    out["notes"] = found
    return out


def _mmu_figure(plot: Any, runs: Sequence[Run], mmus: list[pd.DataFrame | None]) -> str:
    def draw_mmu(f: Any) -> None:
        ax = f.add_subplot()
        for name, m in zip(shown_names(runs), mmus, strict=True):
            if m is not None:
                plot.plot_mmu(m, ax=ax, label=name)

    return _img(
        _png(draw_mmu, (8, 4)),
        "minimum mutator utilisation per run (the Go runtime's view: a "
        "stop-the-world stretched across a frozen period counts in full)",
    )


def _run_section(plot: Any, run: Run, name: str, t: dict[str, Any], vmax: float | None) -> list[str]:
    """A run's part of the report: its settings in words, what froze it, its data notes and
    advice, and its figures."""
    m, per, off, stw = run.meta, t["per"], t["off"], t["stw"]
    env = m.get("gomaxprocs_env")
    grid = "no CFS periods" if per is None else f"period grid phase ±{per.attrs['grid'].uncertainty_ns / 1e3:.0f} µs"
    # the quota of the level the table is on: a pod's where the container has none
    level = table_level(run) if per is not None else level_names(run)[0]
    lm = level_run(run, level).meta
    whose = "quota" if level == level_names(run)[0] else f"no quota of its own, the {level}'s"
    parts = [
        f"<h2>{html.escape(name)}</h2><p>GOMAXPROCS {analyze(run).gomaxprocs} "
        f"({html.escape('GOMAXPROCS unset' if env is None else f'env {env}')}), {html.escape(whose)} "
        f"{html.escape(quota_words(lm.get('quota_us'), quota_at_end(run), lm.get('period_us'), lm.get('burst_us')))}, "
        f"{html.escape(str(go_version_of(run) or 'Go version unknown'))}, kernel "
        f"{html.escape(str(m.get('kernel')))}; {grid}.</p>",
        f"<p>{html.escape(explain_gomaxprocs(run))}</p>",
    ]
    if per is None:
        parts.append(
            "<p>No quota limited this run at any level: the kernel keeps no CFS periods for it, so it never "
            "throttled, and there is no period to draw. What a limit would do is below.</p>"
        )
        if t["notes"]:
            parts.append(
                f'<p class="data-note">{len(t["notes"])} data note(s) for this run: see <a href="#data-notes">Data '
                "notes</a> at the top.</p>"
            )
        parts.append(_advice_html(run))
        return parts
    parts += [f"<p>{html.escape(x)}</p>" for x in describe_levels(analyze(run))]
    if t["notes"]:
        parts.append(
            f'<p class="data-note">{len(t["notes"])} data note(s) for this run: see <a href="#data-notes">Data '
            "notes</a> at the top.</p>"
        )
    parts += [f"<p>{html.escape(x)}</p>" for x in t["quality"]]
    parts.append(_advice_html(run))
    parts.append(
        _img(
            _png(lambda f: plot.plot_periods(per, ax=f.add_subplot()), (12, 4.2)),
            f"{name}: CPU per period against the quota",
        )
    )
    parts.append(
        _img(
            _png(lambda f: plot.plot_period_heatmap(off, ax=f.add_subplot(), vmax=vmax), (12, 4)),
            f"{name}: inside each period",
        )
    )
    if stw is not None:
        parts.append(
            _img(
                _png(lambda f: plot.plot_stw_vs_boundary(stw, ax=f.add_subplot()), (8, 4)),
                f"{name}: stop-the-world pauses against the period boundary",
            )
        )
    return parts


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1250px; margin: 2em auto; padding: 0 1em; color: #222; }}
/* a table never widens the page: one wider than the column scrolls inside it (display: block
   makes the table its own scroll box) */
table {{ border-collapse: collapse; font-size: 0.85em; display: block; max-width: 100%; overflow-x: auto; }}
th, td {{ padding: 0.3em 0.6em; border-bottom: 1px solid #ddd; text-align: right; }}
p, li, figcaption {{ overflow-wrap: anywhere; }}
th {{ background: #f3f3f3; }}
img {{ max-width: 100%; }}
figure {{ margin: 1em 0; }} figcaption {{ color: #666; font-size: 0.85em; }}
li {{ margin: 0.4em 0; }}
.data-notes {{ background: #fff4e0; border-left: 6px solid #e08a00; padding: 0.2em 1em 0.6em; margin: 1em 0; }}
.data-notes h3 {{ margin: 0.6em 0 0.2em; }}
.data-note {{ color: #9a5a00; }}
</style></head><body>
{body}
<p style="color:#888;font-size:0.8em">Times are CLOCK_MONOTONIC; periods are the kernel's own CFS periods,
reconstructed from cpu.stat. Generated by gmpanalysis.</p>
</body></html>
"""


def _page(title: str, body: str) -> str:
    return PAGE.format(title=html.escape(title), body=body)
