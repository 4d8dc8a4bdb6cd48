"""Exact minimum mutator utilisation: brute-force references on hand-made utilisation
functions and on a slice of a real trace, what counts as GC, and what the curve does."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import FIXTURES, RUNS
from handmade import as_run, make_trace, slice_trace, util_loop, window_mean_loop

import gmpanalysis as gmp
from gmpanalysis.gotrace import read_trace
from gmpanalysis.mmu import df_mmu, df_mmu_trace, df_mutator_util, min_window_mean

MS = 1_000_000
TRACES = sorted((FIXTURES / "traces").glob("*.trace")) + [p / "trace.out" for p in RUNS if (p / "trace.out").exists()]
IDS = [p.name if p.suffix == ".trace" else p.parent.name for p in TRACES]


@pytest.fixture(scope="module")
def traces():
    return {p: read_trace(p) for p in TRACES}


def brute_min_integer(b: list[int], u: list[float], w: int) -> float:
    """With integer change points and an integer window, the window mean is linear between
    integer starts: the minimum over every integer start is the exact minimum."""
    return min(window_mean_loop(b, u, s, w) for s in range(b[0], b[-1] - w + 1))


@pytest.mark.parametrize("seed", range(6))
def test_min_window_mean_equals_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 25)
    cuts = sorted(rng.sample(range(1, 300), n))
    b = [0, *cuts, 300 + rng.randint(0, 7)]
    u = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, rng.random()]) for _ in range(len(b) - 1)]
    for w in sorted({1, 2, 3, 7, 10, 33, 64, 150, b[-1] - 1, b[-1]} | {rng.randint(1, b[-1]) for _ in range(4)}):
        got, s = min_window_mean(np.array(b[:-1]), np.array(b[1:]), np.array(u), w)
        assert got == pytest.approx(brute_min_integer(b, u, w), abs=1e-9), (seed, w)
        assert b[0] <= s <= b[-1] - w and window_mean_loop(b, u, s, w) == pytest.approx(got, abs=1e-9)
    assert np.isnan(min_window_mean(np.array(b[:-1]), np.array(b[1:]), np.array(u), b[-1] + 1)[0])


@pytest.mark.parametrize("name", ["alloc-0.5cpu-gmp8", "go1.25.trace"])
def test_exact_on_a_slice_of_a_real_trace(traces, name):
    """Real GC cycles (workers, assists, stop-the-worlds; the alloc run is throttled, the
    go1.25 trace changes GOMAXPROCS): the MMU from the vectorised utilisation equals a
    plain-loop utilisation searched by brute force at every start where an edge of the
    window meets a change, plus random starts."""
    tr = next(t for p, t in traces.items() if name in (p.name, p.parent.name))
    gc = tr.gc.iloc[1:4]
    part = slice_trace(tr, int(gc.start_ns.iat[0]) - 3 * MS, int(gc.end_ns.iat[-1]) + 3 * MS)
    assert len(part.assist) > 0 and (part.stw.kind == "GC mark termination").sum() >= 2
    bb, uu = util_loop(part)
    util = df_mutator_util(part)
    # the same function: evaluate both at every boundary of either
    xs = np.unique(np.r_[bb[:-1], util.start_ns])
    k = np.searchsorted(util.start_ns, xs, side="right") - 1
    kk = np.searchsorted(bb, xs, side="right") - 1
    assert np.allclose(util.util.to_numpy()[k], np.asarray(uu)[kk], atol=1e-12)
    rng = random.Random(1)
    seen = set()
    for w_ms in (0.05, 0.5, 1, 5, 20, 100, 300):
        w = round(w_ms * MS)
        if w > bb[-1] - bb[0]:
            continue
        cands = [s for x in bb for s in (x, x - w) if bb[0] <= s <= bb[-1] - w]
        cands += [rng.uniform(bb[0], bb[-1] - w) for _ in range(100)]
        ref = min(window_mean_loop(bb, uu, s, w) for s in cands)
        got = df_mmu_trace(part, (w_ms,)).mmu.iat[0]
        assert got == pytest.approx(ref, abs=1e-9), w_ms
        seen.add(round(got, 6))
    assert len(seen) >= 3  # the curve is not flat here: the check has teeth


def test_what_takes_a_p():
    """GOMAXPROCS 4 then 2; a dedicated worker, an idle worker (not counted, as in Go), an
    assist whose goroutine is parked half the time, a GC STW and a non-GC STW (not counted)."""
    tr = make_trace(
        0,
        100,
        running=[
            (1, 0, 10, 30, "GC (dedicated)"),
            (2, 1, 10, 30, "GC (idle)"),
            (3, 2, 20, 25),  # assisting goroutine, on a P only for [20, 25)
            (4, 3, 0, 100),  # a user goroutine that never assists
        ],
        assist=[(3, 20, 40)],
        stw=[(50, 55, "GC mark termination"), (70, 75, "read mem stats")],
        gomaxprocs=[(5, 4), (60, 2)],
    )
    u = df_mutator_util(tr)
    at = {int(s): (float(x), int(p)) for s, x, p in zip(u.start_ns, u.util, u.gomaxprocs, strict=True)}
    assert at[0] == (1.0, 4)  # before the first change: its value is in force
    assert at[10] == (0.75, 4)  # the dedicated worker; the idle one takes nothing
    assert at[20] == (0.5, 4)  # + the assist while its goroutine runs
    assert at[25] == (0.75, 4)  # assisting goroutine parked: the range is still open
    assert at[30] == (1.0, 4)
    assert at[50] == (0.0, 4)  # GC stop-the-world
    assert at[60] == (1.0, 2) and 70 not in at  # a non-GC stop-the-world is not GC
    assert list(u.end_ns[:-1]) == list(u.start_ns[1:]) and u.end_ns.iat[-1] == 100


def test_parked_assist_does_not_count():
    """Fails on the old behaviour: a 10 ms assist range whose goroutine runs only its first
    and last millisecond (parked on the assist queue in between) kept the single P busy for
    all 10 ms, so every window up to 10 ms read 0."""
    tr = make_trace(
        0,
        100 * MS,
        running=[(7, 0, 20 * MS, 21 * MS), (7, 0, 29 * MS, 30 * MS), (8, 0, 21 * MS, 29 * MS)],
        assist=[(7, 20 * MS, 30 * MS)],
        gomaxprocs=[(0, 1)],
    )
    m = df_mmu(as_run(tr), (1, 2, 5, 10, 20)).set_index("window_ms").mmu
    assert m[1.0] == 0.0
    assert m[2.0] == pytest.approx(0.5)
    assert m[5.0] == pytest.approx(0.8)
    assert m[10.0] == pytest.approx(0.8)  # whole assist ranges gave 0
    assert m[20.0] == pytest.approx(0.9)


def test_exact_not_on_a_grid():
    """Fails on the old stepped grid (window starts every max(w/20, 100 µs)): a 1 ms GC STW
    off the grid leaves no whole 1 ms window inside it on the grid."""
    tr = make_trace(0, 50 * MS, stw=[(10_050_000, 11_050_000, "GC sweep termination")], gomaxprocs=[(0, 2)])
    m = df_mmu(as_run(tr), (1, 2)).set_index("window_ms").mmu
    assert m[1.0] == 0.0 and m[2.0] == pytest.approx(0.5)


def test_gomaxprocs_column_and_fallback():
    tr = make_trace(0, 100 * MS, running=[(1, 0, 10 * MS, 12 * MS, "GC (dedicated)")])  # no GOMAXPROCS event
    m = df_mmu(as_run(tr, {"gomaxprocs_effective": 4}), (1, 50, 200))
    assert list(m.columns) == ["window_ms", "mmu", "gomaxprocs"]
    assert list(m.window_ms) == [1.0, 50.0]  # a window longer than the trace is left out
    assert list(m.gomaxprocs) == [4, 4] and m.mmu.iat[0] == pytest.approx(0.75)


def test_no_trace_is_a_clear_error():
    run = as_run(None)
    with pytest.raises(gmp.MissingDataError, match="no trace.out"):
        df_mmu(run)


def test_longer_windows_can_have_a_lower_mmu():
    """The exact MMU is not monotone in the window length in general (nor is Go's): GC, a
    free stretch, GC again. A 2 ms window always holds the free millisecond (0.5), the only
    3 ms window holds 1 ms free of 3 (1/3). Only whole multiples are ordered."""
    tr = make_trace(
        0,
        3 * MS,
        stw=[(0, MS, "GC sweep termination"), (2 * MS, 3 * MS, "GC mark termination")],
        gomaxprocs=[(0, 1)],
    )
    m = df_mmu(as_run(tr), (1, 2, 3)).set_index("window_ms").mmu
    assert m[1.0] == 0.0 and m[2.0] == pytest.approx(0.5) and m[3.0] == pytest.approx(1 / 3)


@pytest.mark.parametrize("path", TRACES, ids=IDS)
def test_mmu_of_whole_multiples_does_not_drop(traces, path):
    """A window of k*w splits into k windows of w, each with a mean >= MMU(w): so MMU(k*w) >=
    MMU(w), and for any w2 >= w1, MMU(w2) >= MMU(w1) * floor(w2/w1) * w1 / w2."""
    ws = (0.1, 0.2, 0.5, 1, 2, 3, 5, 7, 10, 20, 50, 100, 200, 500, 1000)
    m = df_mmu_trace(traces[path], ws).set_index("window_ms").mmu
    for w1 in m.index:
        for w2 in m.index:
            if w2 >= w1:
                k = int(np.floor(round(w2 / w1, 9)))
                assert m[w2] >= m[w1] * k * w1 / w2 - 1e-9, (w1, w2)
                if w2 / w1 == k:
                    assert m[w2] >= m[w1] - 1e-9, (w1, w2)
    assert ((m >= 0) & (m <= 1)).all()
