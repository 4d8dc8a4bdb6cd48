"""Figures. Each ``plot_x(frame, *, ax=None)`` takes the output of a ``df_*`` function,
draws on ``ax`` (a new figure when None) and returns the Axes; nothing calls plt.show().
matplotlib is imported when a plot is drawn, not with the package."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from .compare import comparable_groups
from .errors import UsageError

FROZEN = "#d62728"
FROZEN_OTHER = "#9467bd"  # frozen by another level's quota (the pod's)
BUSY = "#1f77b4"
THROTTLED = "#ff7f0e"
UNKNOWN = "#7f7f7f"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def plain_text(text: object) -> str:
    """A name from the data (a run, a cgroup level) as literal text in a figure. matplotlib
    reads text between two "$" as mathtext and raises on what it cannot parse (a run named
    ``$\\foo{x}$``): every "$" is escaped. A lone surrogate (an undecodable byte in a
    file name) becomes U+FFFD and a control character \\xNN, so the text renders."""
    s = _LONE_SURROGATE.sub("\ufffd", str(text))
    s = "".join(c if c.isprintable() or c == "\n" else f"\\x{ord(c):02x}" for c in s)
    return s.replace("$", r"\$")


def _table(x: Any, plot: str, takes: str) -> None:
    """A plot takes a table: anything else (a Run, above all) is refused, naming the one."""
    if not isinstance(x, pd.DataFrame):
        raise UsageError(
            f"{plot}: takes {takes}'s table (a pandas DataFrame), not {type(x).__name__}: e.g. "
            f"gmp.{plot}(gmp.{takes.split('.')[-1]}(run))"
        )


def _axes(ax: Any, size: tuple[float, float]) -> Any:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=size, layout="constrained")
    return ax


def plot_periods(per: pd.DataFrame, *, ax: Any = None, title: str | None = None) -> Any:
    """CPU used in each CFS period (bars) against the quota (dashed line), the frozen part of
    each throttled period shaded red (a dotted bracket where the samples leave the moment of
    exhaustion more than 5 ms open), periods whose throttling is unknown hatched grey, the
    longest STW of each period on the right axis
    (an X where it spanned a throttled boundary), and GOMAXPROCS written where it changes.
    Takes :func:`gmpanalysis.df_periods` output, or :func:`gmpanalysis.what_if`'s (its
    periods as replayed: no holes, no STW markers)."""
    _table(per, "plot_periods", "gmpanalysis.df_periods")
    ax = _axes(ax, (11, 4))
    if per.empty:
        ax.set_title("no periods")
        return ax
    t0 = per["start_ns"].iloc[0]
    x = (per["start_ns"].to_numpy() - t0) / 1e9
    w = (per["end_ns"] - per["start_ns"]).to_numpy() / 1e9
    thr = per["throttled"].fillna(False).to_numpy(dtype=bool)
    unknown = per["throttled"].isna().to_numpy()
    ex = per["exhausted_at_us"].to_numpy() / 1e6  # s into the period
    has_quota, top = _usage_bars(ax, per, x, w, thr, unknown, ex)
    brackets, holes = _frozen_spans(ax, per, x, w, thr, unknown, ex, top)
    ax.set_ylim(0, top)
    ax.set_xlim(x[0], x[-1] + w[-1])
    ax.set_xlabel("time since the first period (s)")
    ax.set_ylabel("CPU used in the period (ms)")
    handles = _periods_legend(ax, has_quota, bool(holes), bool(brackets))
    handles += _stw_markers(ax, per, x, w)
    _gomaxprocs_notes(ax, per, x, top)
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, ncol=3, frameon=False)
    ax.set_title(
        plain_text(title)
        if title
        else "CPU per CFS period against the quota: bars while it ran, red while it stood frozen"
    )
    return ax


def _usage_bars(
    ax: Any, per: pd.DataFrame, x: np.ndarray, w: np.ndarray, thr: np.ndarray, unknown: np.ndarray, ex: np.ndarray
) -> tuple[bool, float]:
    """The CPU used per period as bars, and the quota as a dashed line; returns whether
    there is a quota, and the top of the y axis."""
    from matplotlib.collections import PolyCollection

    usage = per["usage_us"].to_numpy() / 1e3
    # a throttled period's bar covers only the time it ran; the rest of it is the freeze
    run_w = np.where(thr & np.isfinite(ex), np.minimum(ex, w), w)
    # one collection of rectangles, not a patch per bar: an hour is 36,000 periods, and
    # matplotlib lays out and draws patches one by one (~20 s for an hour, ~0.3 s this way)
    h = np.nan_to_num(usage)
    x0, x1 = x, x + run_w
    verts = np.stack([np.c_[x0, 0 * h], np.c_[x0, h], np.c_[x1, h], np.c_[x1, 0 * h]], axis=1)
    bars = PolyCollection(
        verts,
        facecolors=np.where(thr, THROTTLED, np.where(unknown, UNKNOWN, BUSY)),
        edgecolors="white",
        linewidths=0.3,
        zorder=2,
    )
    bars.set_gid("usage")
    ax.add_collection(bars)
    quota = per["quota_us"].dropna()
    top = float(np.nanmax(usage)) if np.isfinite(usage).any() else 1.0
    if len(quota):
        q = float(quota.iloc[0]) / 1e3
        ax.axhline(q, color="black", linestyle="--", linewidth=1, label=f"quota {q:g} ms", zorder=3)
        top = max(top, q)
    return bool(len(quota)), top * 1.25


def _frozen_spans(
    ax: Any,
    per: pd.DataFrame,
    x: np.ndarray,
    w: np.ndarray,
    thr: np.ndarray,
    unknown: np.ndarray,
    ex: np.ndarray,
    top: float,
) -> tuple[list, list]:
    """The frozen part of each throttled period shaded, the wide brackets of the moment of
    exhaustion dotted, the periods of unknown throttling hatched; returns (brackets, holes)."""
    spans = [(x[i] + ex[i], w[i] - ex[i]) for i in np.flatnonzero(thr & np.isfinite(ex))]
    if spans:
        ax.broken_barh(spans, (0, top), facecolors=FROZEN, alpha=0.25, zorder=1).set_gid("frozen")
    # where the samples leave the moment of exhaustion open (a hole around it): the
    # bracket drawn as a dotted span on the quota line's level
    brackets = []
    if "exhausted_lo_us" in per:
        lo_s = per["exhausted_lo_us"].to_numpy(dtype=float) / 1e6
        hi_s = per["exhausted_hi_us"].to_numpy(dtype=float) / 1e6
        wide = thr & np.isfinite(lo_s) & np.isfinite(hi_s) & (hi_s - lo_s > 0.005)
        brackets = [(x[i] + lo_s[i], hi_s[i] - lo_s[i]) for i in np.flatnonzero(wide)]
        if brackets:
            ax.broken_barh(brackets, (top * 0.9, top * 0.04), facecolors="none", edgecolors=FROZEN, linestyle=":")
    # periods whose throttling the samples cannot tell (ends inside a hole): hatched
    holes = [(x[i], w[i]) for i in np.flatnonzero(unknown)]
    if holes:
        ax.broken_barh(holes, (0, top), facecolors="none", edgecolors=UNKNOWN, hatch="///", zorder=1)
    return brackets, holes


def _periods_legend(ax: Any, has_quota: bool, holes: bool, brackets: bool) -> list:
    """The legend's entries for the bars, the freezes, the holes and brackets drawn, and
    the quota line."""
    from matplotlib.patches import Patch

    handles = [
        Patch(color=BUSY, label="CPU used"),
        Patch(color=THROTTLED, label="CPU used (throttled period)"),
        Patch(color=FROZEN, alpha=0.3, label="frozen (quota exhausted)"),
    ]
    if holes:
        handles.append(Patch(facecolor="none", edgecolor=UNKNOWN, hatch="///", label="unknown: hole in the samples"))
    if brackets:
        handles.append(Patch(facecolor="none", edgecolor=FROZEN, linestyle=":", label="quota ran out: bracket > 5 ms"))
    if has_quota:
        handles.insert(0, ax.get_lines()[0])
    return handles


def _stw_markers(ax: Any, per: pd.DataFrame, x: np.ndarray, w: np.ndarray) -> list:
    """The longest STW of each period (of 1 ms or more) on a right axis, an X where it
    spanned a throttled boundary; returns their legend entries."""
    if "stw_max_us" not in per:  # a what_if table: the replay places pauses, not one each
        return []
    stw = per["stw_max_us"].to_numpy() / 1e3
    has = np.isfinite(stw) & (stw >= 1.0)
    if not has.any():
        return []
    ax2 = ax.twinx()
    span = per["stw_spans_boundary"].to_numpy()
    mid = x + w / 2
    ax2.scatter(mid[has & ~span], stw[has & ~span], marker="o", s=14, color="black", label="longest STW", zorder=4)
    ax2.scatter(
        mid[has & span],
        stw[has & span],
        marker="X",
        s=60,
        color=FROZEN,
        label="STW across a frozen boundary",
        zorder=4,
    )
    ax2.set_ylabel("longest STW in the period (ms)")
    ax2.set_ylim(0, max(1.0, float(np.nanmax(stw))) * 1.15)
    return ax2.get_legend_handles_labels()[0]


def _gomaxprocs_notes(ax: Any, per: pd.DataFrame, x: np.ndarray, top: float) -> None:
    """GOMAXPROCS written where it changes (and at the first period)."""
    if "gomaxprocs" not in per:  # a what_if table: its setting is in attrs["model"]
        return
    g = per["gomaxprocs"].to_numpy()
    change = np.r_[True, g[1:] != g[:-1]] & np.isfinite(g)
    for i in np.flatnonzero(change):
        ax.annotate(
            f"GOMAXPROCS={int(g[i])}",
            (x[i], top * 0.97),
            fontsize=8,
            va="top",
            bbox={"boxstyle": "round", "fc": "white", "alpha": 0.8},
        )


def plot_period_heatmap(
    off: pd.DataFrame, *, ax: Any = None, title: str | None = None, vmax: float | None = None
) -> Any:
    """Inside every period: columns are periods, rows the offset from the period start,
    colour the CPUs busy in that slice (blues, 0 to ``vmax`` — pass one value to compare
    runs; default the frame's ``cpus_max``) or red where the group stood frozen after its
    quota ran out; grey where the period's throttling is unknown. Takes
    :func:`gmpanalysis.df_period_offsets` output."""
    _table(off, "plot_period_heatmap", "gmpanalysis.df_period_offsets")
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    ax = _axes(ax, (11, 4))
    cpus = off.pivot(index="offset_ms", columns="period", values="cpus")
    step = float(cpus.index[1] - cpus.index[0]) if len(cpus.index) > 1 else 1.0
    extent = (-0.5, cpus.shape[1] - 0.5, float(cpus.index[-1]) + step, 0.0)
    cap = off.attrs.get("cpus_max")
    vmax = vmax or (cap if cap == cap and cap else None) or float(np.nanmax(cpus.to_numpy()))
    im = ax.imshow(
        cpus.to_numpy(), aspect="auto", cmap="Blues", vmin=0, vmax=vmax, extent=extent, interpolation="nearest"
    )

    def overlay(col: str, color: str, alpha: float) -> None:
        mask = off.pivot(index="offset_ms", columns="period", values=col).to_numpy(dtype=float) > 0
        ax.imshow(
            np.where(mask, 1.0, np.nan),
            aspect="auto",
            extent=extent,
            interpolation="nearest",
            cmap=ListedColormap([color]),
            alpha=alpha,
        )

    own = off.attrs.get("level")
    by = off["frozen_by"].fillna("") if "frozen_by" in off else pd.Series("", index=off.index)
    others = sorted({x for v in by.unique() for x in v.split(",") if x and x != own})
    handles = [Patch(color=FROZEN, label="frozen: its own quota ran out" if others else "frozen: quota exhausted")]
    if others:
        # a freeze by another level's quota (the pod's) in its own colour: the container's
        # cpu.stat does not count it, the pod's does
        names = {v: own in v.split(",") for v in by.unique()}  # a few distinct lists, many buckets
        own_mask = off["frozen"] & by.map(names).to_numpy(dtype=bool)
        off = off.assign(frozen_own=own_mask, frozen_other=off["frozen"] & ~own_mask)
        overlay("frozen_own", FROZEN, 0.85)
        overlay("frozen_other", FROZEN_OTHER, 0.85)
        handles.append(Patch(color=FROZEN_OTHER, label=plain_text(f"frozen: the {', '.join(others)}'s quota ran out")))
    else:
        overlay("frozen", FROZEN, 0.85)
    if "unknown" in off and off["unknown"].any():
        overlay("unknown", UNKNOWN, 0.6)
    ax.figure.colorbar(im, ax=ax, label="CPUs busy")
    ax.set_xlabel("period (from the first)")
    ax.set_ylabel("offset inside the period (ms)")
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.set_title(
        plain_text(title)
        if title
        else f"inside each period, in {step:g} ms buckets: when the CPUs ran, when the quota ran out\n"
        f"(CPU charged at scheduler ticks is moved back to the buckets it ran in, at most {vmax:g} CPUs)",
        fontsize=10,
    )
    return ax


def plot_stw_vs_boundary(stw: pd.DataFrame, *, ax: Any = None, title: str | None = None) -> Any:
    """Each STW pause: its length against where in its period it began. Red X: pauses still
    running when a throttled period ended (stretched across the frozen time); the shaded
    band is where the quota ran out in the run's throttled periods (p10-p90). Takes
    :func:`gmpanalysis.df_stw_periods` output."""
    _table(stw, "plot_stw_vs_boundary", "gmpanalysis.df_stw_periods")
    ax = _axes(ax, (7, 4))
    if stw.empty:
        ax.set_title("no STW pauses in the trace window")
        return ax
    # the run's own distribution of exhaustion (all throttled periods), from the frame
    lo, hi = stw.attrs.get("exhausted_p10_ms", np.nan), stw.attrs.get("exhausted_p90_ms", np.nan)
    if np.isfinite(lo) and np.isfinite(hi):
        ax.axvspan(lo, max(hi, lo + 0.5), color=FROZEN, alpha=0.1, label="quota ran out in the run (p10-p90)")
    sp = stw["spans_boundary"].to_numpy()
    ax.scatter(stw["offset_ms"][~sp], stw["dur_ms"][~sp], s=16, color="black", alpha=0.7, label="STW")
    ax.scatter(
        stw["offset_ms"][sp], stw["dur_ms"][sp], s=70, marker="X", color=FROZEN, label="STW across a frozen boundary"
    )
    ax.set_yscale("log")
    period_ms = stw.attrs.get("period_ms", np.nan)
    ax.set_xlim(0, period_ms if np.isfinite(period_ms) else max(100.0, float(stw["offset_ms"].max())))
    ax.set_xlabel("STW start, offset inside its period (ms)")
    ax.set_ylabel("STW length (ms, log)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(plain_text(title) if title else "stop-the-world pauses against the period boundary")
    return ax


def plot_mmu(mmu: pd.DataFrame, *, ax: Any = None, label: str | None = None, title: str | None = None) -> Any:
    """Minimum mutator utilisation against window length (log scale); call it once per run
    on the same ``ax`` to compare runs. Takes :func:`gmpanalysis.mmu.df_mmu` output."""
    _table(mmu, "plot_mmu", "gmpanalysis.df_mmu")
    ax = _axes(ax, (7, 4))
    ax.plot(mmu["window_ms"], mmu["mmu"], marker="o", label=None if label is None else plain_text(label))
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("window (ms, log)")
    ax.set_ylabel("minimum mutator utilisation")
    if label:
        ax.legend(fontsize=8, loc="lower right")
    ax.set_title(plain_text(title) if title else "minimum mutator utilisation (the Go runtime's view)")
    return ax


COMPARE_METRICS = (
    ("exhausted_p50_ms", "quota ran out at (p50, ms)"),
    ("stall_ms_per_period", "frozen per throttled period (ms)"),
    ("stw_p99_us", "STW p99 (µs, log)"),
    ("latency_p99_ms", "latency p99 (ms, 95 % CI)"),
    ("throughput_rps", "throughput (req/s)"),
)
# throughput and latency depend on the service, the offered load and the limit: compared only within one
# group of comparable_groups
LOAD_BOUND = {"latency_p99_ms", "throughput_rps"}


def plot_compare(cmp: pd.DataFrame, *, axes: Any = None, title: str | None = None) -> Any:
    """Runs side by side, one small panel per metric; takes :func:`gmpanalysis.compare_runs`
    output. Bars are coloured by GOMAXPROCS (legend); runs of other services, loads or limits
    (:func:`gmpanalysis.compare.comparable_groups`) are drawn in separate groups in the
    throughput and latency panels (never ranked against each
    other); STW p99 is on a log axis; latency carries its 95 % confidence interval.
    Returns the array of Axes."""
    _table(cmp, "plot_compare", "gmpanalysis.compare_runs")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if axes is None:
        _, axes = plt.subplots(1, len(COMPARE_METRICS), figsize=(14, 3.6), layout="constrained")
    g = cmp["gomaxprocs"].astype(str).to_numpy()
    palette = plt.get_cmap("viridis")
    kinds = sorted(set(g), key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))
    color_of = {k: palette(i / max(len(kinds) - 1, 1) * 0.85) for i, k in enumerate(kinds)}
    colors = [color_of[v] for v in g]
    loads = np.array(comparable_groups(cmp), dtype=object)
    load_ids = {v: i for i, v in enumerate(dict.fromkeys(loads))}
    names = [plain_text(str(n)) for n in cmp["name"]]  # str(): a name may hold a lone surrogate
    for ax, (col, label) in zip(np.ravel(axes), COMPARE_METRICS, strict=False):
        v = cmp[col].to_numpy(dtype=float) if col in cmp else np.full(len(cmp), np.nan)
        # a gap between load groups where the metric depends on the load
        x = np.arange(len(cmp), dtype=float)
        if col in LOAD_BOUND and len(load_ids) > 1:
            x = x + np.array([load_ids[v] for v in loads]) * 0.8
        ax.bar(x, np.nan_to_num(v), color=colors)
        if col == "latency_p99_ms" and "latency_p99_lo_ms" in cmp:
            lo = cmp["latency_p99_lo_ms"].to_numpy(dtype=float)
            hi = cmp["latency_p99_hi_ms"].to_numpy(dtype=float)
            top = np.where(np.isfinite(hi), hi, np.nan)
            ax.errorbar(x, v, yerr=[np.nan_to_num(v - lo), np.nan_to_num(top - v)], fmt="none", ecolor="black", lw=1)
            for xi, vi, h in zip(x, v, hi, strict=True):
                if np.isfinite(vi) and not np.isfinite(h):
                    ax.annotate("CI open", (xi, vi), fontsize=6, ha="center", va="bottom")
        if col == "stw_p99_us" and np.isfinite(v).any() and np.nanmin(v) > 0:
            ax.set_yscale("log")
        ax.set_xticks(x, names, fontsize=7, rotation=30, ha="right")
        sub = "\n(grouped by service, load, limit)" if col in LOAD_BOUND and len(load_ids) > 1 else ""
        ax.set_title(label + sub, fontsize=9)
    handles = [Patch(color=color_of[k], label=plain_text(f"GOMAXPROCS {k}")) for k in kinds]
    np.ravel(axes)[0].figure.legend(handles=handles, fontsize=7, loc="outside lower center", ncol=len(handles))
    if title:
        np.ravel(axes)[0].figure.suptitle(plain_text(title))
    return axes


def plot_advice(
    adv: pd.DataFrame, *, metric: str = "p99_ms", burst_us: float = 0.0, ax: Any = None, title: str | None = None
) -> Any:
    """A predicted figure against the CPU limit, one line per GOMAXPROCS; takes
    :func:`gmpanalysis.advise` output (``metric``: ``p99_ms``, ``throttled_pct`` or
    ``stall_ms_per_s``; the settings with this burst). The recommended setting is ringed."""
    _table(adv, "plot_advice", "gmpanalysis.advise")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
    t = adv[adv["burst_us"] == burst_us] if (adv["burst_us"] == burst_us).any() else adv
    for g, grp in t.groupby("gomaxprocs"):
        grp = grp.sort_values("limit_cpu")
        ax.plot(grp["limit_cpu"], grp[metric], marker="o", label=f"GOMAXPROCS={g}")
    best = adv.iloc[0]
    ax.plot([best["limit_cpu"]], [best[metric]], "o", ms=14, mfc="none", mec="crimson", label="recommended")
    labels = {"p99_ms": "predicted p99 (ms)", "throttled_pct": "predicted throttled periods (%)",
              "stall_ms_per_s": "predicted stall (ms per s)"}  # fmt: skip
    ax.set_xlabel("CPU limit (CPUs)")
    ax.set_ylabel(labels.get(metric, metric))
    if metric == "p99_ms":
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(plain_text(title))
    return ax
