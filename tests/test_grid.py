"""The CFS period grid: real fixtures, and tiny inline cases built from the kernel's
documented behaviour (timer expiries at phase + k·period bump nr_periods)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import RUNS

import gmpanalysis as gmp
from gmpanalysis.grid import TIMER_LATE_NS, fit_period_grid, split_segments
from gmpanalysis.levels import level_run

P = 100_000_000


def synth(
    phase_ns: int, interval_ns: int, seconds: float, *, late: dict[int, int] | None = None, t0: int = 10_000_000_000
) -> pd.DataFrame:
    """Reads every interval_ns of a group whose timer fires at phase + k·P (a boundary k
    listed in ``late`` fires that many ns late)."""
    t = t0 + np.arange(int(seconds * 1e9 / interval_ns), dtype=np.int64) * interval_ns
    k0 = (t0 - phase_ns) // P + 1
    ks = np.arange(k0, k0 + int(seconds * 1e9 / P) + 2)
    fire = phase_ns + ks * P + np.array([(late or {}).get(int(k - k0), 0) for k in ks])
    periods = np.searchsorted(fire, t, side="right")  # expiries at or before each read
    return pd.DataFrame(
        {
            "t_ns": t,
            "read_ns": 8000,
            "usage_us": periods * 50_000.0,
            "nr_periods": periods,
            "nr_throttled": periods,
            "throttled_us": periods * 1000.0,
            "nr_bursts": 0,
            "burst_us": 0.0,
        }
    )


@pytest.mark.parametrize("phase", [0, 1_234_567, 55_290_000, 99_999_000])
def test_vernier_interval_pins_the_phase(phase):
    g = fit_period_grid(synth(phase, 997_000, 6.0), P)
    s = g.main
    assert s.boundaries_used >= 55
    d = (s.phase_ns - phase + P // 2) % P - P // 2
    assert abs(d) <= s.uncertainty_ns + 4_000  # + half a read
    # the sliding reads narrow the bracket to tens of µs; the rest is the timer's allowance
    assert s.uncertainty_ns <= TIMER_LATE_NS // 2 + 40_000


def test_commensurate_interval_is_honest_about_one_interval():
    g = fit_period_grid(synth(37_000_000, 1_000_000, 6.0), P)
    d = (g.phase_ns - 37_000_000 + P // 2) % P - P // 2
    assert abs(d) <= g.uncertainty_ns
    assert 400_000 <= g.uncertainty_ns <= 1_000_000  # the bracket never narrows below one interval


def test_late_expiry_is_dropped():
    # boundary 20 fires 1.5 ms late: the read after the true boundary still shows no increment
    g = fit_period_grid(synth(31_000_000, 997_000, 6.0, late={20: 1_500_000}), P)
    assert g.main.late_dropped == 1
    d = (g.phase_ns - 31_000_000 + P // 2) % P - P // 2
    assert abs(d) <= g.uncertainty_ns + 4_000


def test_reset_makes_a_new_segment_with_its_own_phase():
    a = synth(10_000_000, 997_000, 3.0)
    b = synth(70_000_000, 997_000, 3.0, t0=int(a.t_ns.iloc[-1]) + 5_000_000)
    g = fit_period_grid(pd.concat([a, b], ignore_index=True), P)
    assert len(g.segments) == 2
    assert abs(g.segments[0].phase_ns - 10_000_000) <= g.segments[0].uncertainty_ns + 4_000
    assert abs(g.segments[1].phase_ns - 70_000_000) <= g.segments[1].uncertainty_ns + 4_000
    assert split_segments(pd.concat([a, b], ignore_index=True)) == [(0, len(a) - 1), (len(a), len(a) + len(b) - 1)]


def test_no_limit_cannot_place_a_grid():
    s = synth(0, 997_000, 1.0)
    s["nr_periods"] = 0
    with pytest.raises(gmp.MissingDataError, match="no CPU limit|cannot place"):
        fit_period_grid(s, P)


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_fixture_phase_within_100us(path):
    run = gmp.load_run(path)
    for level in gmp.df_levels(run)["level"]:  # every level has its own timer and phase
        s = level_run(run, level).samples
        g = fit_period_grid(s, run.meta["period_us"] * 1000)
        assert len(g.segments) == 1
        # nearly every boundary of the run brackets the phase
        assert g.main.boundaries_used >= 0.75 * (s["t_ns"].iloc[-1] - s["t_ns"].iloc[0]) / P
        # measured 78-111 µs: half the vernier bracket plus the timer's 150 µs expiry allowance
        assert g.uncertainty_ns <= 150_000, g.uncertainty_ns


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_fixture_grid_agrees_with_the_trace(path):
    """An independent check: the Go trace (which knows nothing of cpu.stat) falls silent
    from quota exhaustion to each throttled period's end on the fitted grid."""
    c = gmp.df_checks(gmp.load_run(path))
    assert len(c) >= 10  # throttled periods inside the trace (a resize to 2 CPUs ends them)
    assert c.attrs["silent_fraction"] >= 0.95
    assert c["first_event_after_us"].median() < 3000  # NOTES: 0.04-3 ms after the boundary


def test_phase_jump_without_a_reset_makes_a_new_segment():
    """Derived from a real run: the second half shifted by 37 ms (a new timer phase) while
    the counters keep rising, as if a new cgroup had continued the old one's numbers."""
    run = gmp.load_run(next(p for p in RUNS if p.name == "cpu-0.5cpu-gmp8"))
    s = run.samples.copy()
    half = len(s) // 2
    s.loc[half:, "t_ns"] += 37_000_000
    g = fit_period_grid(s, P)
    assert len(g.segments) == 2
    a, b = g.segments
    # the change lies between the last bracket of the old phase and the first of the new one:
    # up to one period of reads after the true change
    assert half - 2 <= b.first_row <= half + 110 and a.last_row == b.first_row - 1
    d = (b.phase_ns - a.phase_ns) % P
    assert abs(d - 37_000_000) <= a.uncertainty_ns + b.uncertainty_ns + 1_000
    run.samples = s
    per = gmp.df_periods(run)
    assert set(per["segment"]) == {0, 1}


def test_no_spurious_jumps_on_real_runs():
    for p in RUNS:
        run = gmp.load_run(p)
        for level in gmp.df_levels(run)["level"]:
            assert len(fit_period_grid(level_run(run, level).samples, P).segments) == 1


@pytest.mark.parametrize(
    "late",
    [
        {1: 2_000_000},
        {5: 3_000_000},
        {20: 5_000_000, 21: 1_000_000},
        {3: 2_000_000, 30: 8_000_000},
        {10: 3_000_000, 11: 3_000_000, 12: 3_000_000, 13: 3_000_000},
    ],
    ids=["second", "early", "two-in-a-row", "scattered", "four-in-a-row"],
)
def test_late_expiries_do_not_split_the_grid(late):
    """A vCPU the host takes away for a few ms delays the timer's expiry (and so the
    increment) by as much, now and then: brackets pushed late are dropped, not a new phase."""
    g = fit_period_grid(synth(31_000_000, 997_000, 6.0, late=late), P)
    assert len(g.segments) == 1
    assert g.main.late_dropped == len(late)
    d = (g.phase_ns - 31_000_000 + P // 2) % P - P // 2
    assert abs(d) <= g.uncertainty_ns + 4_000


@pytest.mark.parametrize("shift_ms", [-30.0, -2.5, 2.5, 37.0])
def test_phase_moved_either_way_without_a_reset_is_a_new_segment(shift_ms):
    """A new timer phase whose counters did not fall, earlier or later than the old one, by
    a little or a lot, is found, late expiries before it notwithstanding. (A shift smaller
    than a read interval plus JUMP_TOL_NS is not told apart from jitter.)"""
    a = synth(10_000_000, 997_000, 3.0, late={4: 3_000_000})
    shift = int(shift_ms * 1e6)
    b = synth(10_000_000 + shift, 997_000, 3.0, t0=int(a.t_ns.iloc[-1]) + 997_000)
    for c in ("usage_us", "nr_periods", "nr_throttled", "throttled_us"):
        b[c] += a[c].iloc[-1]
    g = fit_period_grid(pd.concat([a, b], ignore_index=True), P)
    assert len(g.segments) == 2
    assert len(a) - 2 <= g.segments[1].first_row <= len(a) + 110
    d = (g.segments[1].phase_ns - g.segments[0].phase_ns - shift + P // 2) % P - P // 2
    assert abs(d) <= g.segments[0].uncertainty_ns + g.segments[1].uncertainty_ns + 8_000


@pytest.mark.parametrize("late_ms", [3.0, 10.0, 19.5])
def test_a_late_first_expiry_in_an_emulated_guest_is_no_new_phase(late_ms):
    """The first boundary's expiry runs late (an emulated guest's timers run up to 19.5 ms
    late): its bracket's lower end sets the consensus before any upper end holds it, and the
    brackets after it look earlier. Within the guest's tolerance (timer_late_ns) that is no
    new phase: one segment. On a host's tolerance a move of that size is a new phase."""
    from gmpanalysis.grid import timer_late_ns

    s = synth(31_000_000, 997_000, 6.0, late={0: int(late_ms * 1e6)})
    tcg = timer_late_ns({"virtualization": "tcg"})
    assert len(fit_period_grid(s, P, late_ns=tcg).segments) == 1
    assert len(fit_period_grid(s, P).segments) == 2
