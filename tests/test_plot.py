"""Every plot renders on fixture data under Agg; assertions are on what was drawn."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest import RUNS  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

import gmpanalysis as gmp  # noqa: E402

ALLOC = next(p for p in RUNS if p.name.startswith("alloc"))


@pytest.fixture(scope="module")
def alloc():
    run = gmp.load_run(ALLOC)
    return run, gmp.df_periods(run)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_plot_periods(alloc):
    run, per = alloc
    ax = gmp.plot_periods(per)
    (bars,) = [c for c in ax.collections if c.get_gid() == "usage"]
    assert len(bars.get_paths()) == len(per)
    thr = per["throttled"].to_numpy()
    # throttled bars cover only the time the group ran: narrower than the period
    widths = np.array([np.ptp(p.vertices[:, 0]) for p in bars.get_paths()])
    heights = np.array([p.vertices[:, 1].max() for p in bars.get_paths()])
    assert np.allclose(heights, np.nan_to_num(per["usage_us"].to_numpy()) / 1e3)
    assert (widths[thr] < 0.1).all() and np.median(widths[thr]) < 0.05
    assert any(np.allclose(line.get_ydata(), 50.0) for line in ax.get_lines())  # the quota, ms
    frozen = [c for c in ax.collections if isinstance(c, PolyCollection) and c.get_gid() == "frozen"]
    assert len(frozen) == 1 and len(frozen[0].get_paths()) == int((thr & per.exhausted_at_us.notna()).sum())
    ax2 = [a for a in ax.figure.axes if a is not ax and a.bbox.bounds == ax.bbox.bounds][0]
    crosses = ax2.collections[1].get_offsets()
    assert len(crosses) == int(per["stw_spans_boundary"].sum()) == 3
    assert any("GOMAXPROCS=8" in t.get_text() for t in ax.texts)


def test_plot_period_heatmap(alloc):
    run, per = alloc
    off = gmp.df_period_offsets(run, per=per)
    ax = gmp.plot_period_heatmap(off)
    images = ax.get_images()
    assert len(images) == 2
    busy, frozen = images[0].get_array(), images[1].get_array()
    assert busy.shape == (10, len(per))  # 10 ms buckets of a 100 ms period, one column per period
    assert np.isfinite(frozen).sum() == int(off["frozen"].sum()) > 0


@pytest.mark.parametrize("name", [p.name for p in RUNS])
def test_heatmap_shows_only_what_a_machine_can_do(name):
    """cpuacct charges CPU in tick steps, so raw 5-10 ms buckets show more CPUs than exist
    (up to 2.x on 2 CPUs, and above 1 at GOMAXPROCS 1); moved back, no bucket exceeds the
    CPUs available and every period keeps its CPU-seconds."""
    run = gmp.load_run(next(p for p in RUNS if p.name == name))
    per = gmp.df_periods(run)
    off = gmp.df_period_offsets(run, per=per)
    cap = min(run.meta["ncpu"], run.meta["gomaxprocs_effective"])
    assert off.attrs["cpus_max"] == cap
    # a period that as a whole shows more (tick charges at its edges: seen at GOMAXPROCS 1 once a
    # resize lifted the quota) keeps it: no bucket exceeds the cap or that period's mean
    mean = (per.set_index("period")["usage_us"] / 100_000).reindex(off["period"]).to_numpy()
    assert (off["cpus"].to_numpy() <= np.maximum(cap, mean) + 1e-9).all()
    got = off.groupby("period")["cpus"].sum() * 10_000  # µs of CPU per period (10 ms buckets)
    want = per.set_index("period")["usage_us"]
    assert np.allclose(got.to_numpy(), want.loc[got.index].to_numpy(), rtol=1e-9, atol=1e-6)


def test_plot_stw_vs_boundary(alloc):
    run, per = alloc
    stw = gmp.df_stw_periods(run, per=per)
    ax = gmp.plot_stw_vs_boundary(stw)
    dots, crosses = ax.collections[-2], ax.collections[-1]
    assert len(crosses.get_offsets()) == int(stw["spans_boundary"].sum()) == 3
    assert len(dots.get_offsets()) + len(crosses.get_offsets()) == len(stw)
    assert ax.get_yscale() == "log"


def test_plot_compare():
    cmp = gmp.compare_runs([gmp.load_run(p) for p in RUNS])
    axes = gmp.plot_compare(cmp)
    assert len(axes) == 5
    for ax in axes:
        assert len(ax.patches) == len(cmp)


def test_plot_on_given_axes(alloc):
    _, per = alloc
    fig, ax = plt.subplots()
    assert gmp.plot_periods(per, ax=ax) is ax


def test_plot_mmu_and_the_stretched_stw():
    ax = None
    mmus = {}
    for p in RUNS:
        mmus[p.name] = gmp.df_mmu(gmp.load_run(p))
        ax = gmp.plot_mmu(mmus[p.name], ax=ax, label=p.name)
    assert len(ax.get_lines()) == len(RUNS)
    alloc = mmus["alloc-0.5cpu-gmp8"].set_index("window_ms")["mmu"]
    one = mmus["cpu-0.5cpu-gmp1"].set_index("window_ms")["mmu"]
    # the 78-86 ms stop-the-world pauses leave the program no P at all for 50 ms windows
    assert alloc[50.0] == 0.0 and alloc[1000.0] > 0.5
    assert (one >= 0.99).all()


@pytest.mark.parametrize(
    "plot",
    ["plot_periods", "plot_period_heatmap", "plot_stw_vs_boundary", "plot_mmu", "plot_compare", "plot_advice"],
)
def test_a_plot_given_a_run_names_the_table_it_takes(plot):
    """A Run is the easy mistake: refused with the table to pass, not an AttributeError."""
    run = gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp8")
    with pytest.raises(gmp.UsageError, match=rf"{plot}: takes gmpanalysis\.\w+'s table .* not Run"):
        getattr(gmp, plot)(run)


def test_plot_compare_groups_the_runs_the_report_compares():
    """The comparison panels and the report's findings take one grouping of the runs
    (compare.comparable_groups): the CPU-bound 0.5-CPU runs together, the allocating one
    and the resized ones apart."""
    from gmpanalysis.compare import comparable_groups

    cmp = gmp.compare_runs([gmp.load_run(p) for p in RUNS])
    groups = dict(zip(cmp["name"], comparable_groups(cmp), strict=True))
    cpu = {groups[f"cpu-0.5cpu-gmp{g}"] for g in (1, 2, 8)}
    assert len(cpu) == 1 and groups["alloc-0.5cpu-gmp8"] not in cpu
    assert all(groups[n] not in cpu for n in groups if n.startswith("resize"))
    axes = gmp.plot_compare(cmp)
    titles = [ax.get_title() for ax in np.ravel(axes)]
    assert any("grouped by service, load, limit" in t for t in titles)
    plt.close("all")
