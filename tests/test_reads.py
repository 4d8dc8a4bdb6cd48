"""Property tests for the two fast paths in gmpanalysis.reads against the code they replace:
``read_percentiles`` gives ``np.percentile``'s floats (its linear method), and
``hole_ms_per_period`` gives what the per-hole mask loop gave, for every input the table
builder can hand them (read times sorted or not, with repeats; holes before, after, across
and exactly on period boundaries; no reads, one read, no periods)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gmpanalysis.reads import HOLE_READS, hole_ms_per_period, interp_at, read_percentiles

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# int64 values a float holds exactly (|x| <= 2**53: read intervals in ns up to ~104 days).
# Past that numpy subtracts the two int64 neighbours before converting and
# read_percentiles converts first, so the last bit can differ: the median of
# [16462481440947661, 16462481440947678] is 1.646248144094767e16 by numpy and
# 1.6462481440947668e16 by read_percentiles.
EXACT = 2**53
qs_st = st.lists(
    st.one_of(
        st.sampled_from([0, 10, 50, 90, 99, 100, 0.0, 100.0, 12.5, 33.333333333333336]),
        st.floats(0, 100, allow_nan=False),
        st.integers(0, 100),
    ),
    min_size=1,
    max_size=6,
)


def _same(got: tuple[float, ...], want: np.ndarray, zero_sign: bool = True) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want.tolist(), strict=True):
        assert type(g) is float
        # bit for bit: the same float, and (for integer input) the same sign of a zero
        assert g == w, (g, w)
        assert not zero_sign or math.copysign(1.0, g) == math.copysign(1.0, w), (g, w)


@SETTINGS
@given(
    x=st.lists(st.integers(-EXACT, EXACT), min_size=1, max_size=60),
    qs=qs_st,
)
@example(x=[7], qs=[0, 10, 50, 100])
@example(x=[3, 3], qs=[0, 50, 100])
@example(x=[1, 2], qs=[0, 10, 50, 90, 100])
@example(x=[EXACT - 1, EXACT, -EXACT], qs=[0, 10, 50, 90, 100])
def test_read_percentiles_int64_is_np_percentile(x: list[int], qs: list[float]) -> None:
    a = np.array(x, dtype=np.int64)
    _same(read_percentiles(a, tuple(qs)), np.percentile(a, qs))
    # the input is not touched (read_percentiles selects from a copy)
    assert a.tolist() == x


@SETTINGS
@given(
    x=st.lists(st.integers(0, 10**10), min_size=2, max_size=200).map(sorted),
)
def test_read_percentiles_of_read_intervals(x: list[int]) -> None:
    """As the table builder calls it: the 10th percentile and median of np.diff of read times."""
    dt = np.diff(np.array(x, dtype=np.int64))
    _same(read_percentiles(dt, (10, 50)), np.percentile(dt, [10, 50]))


@SETTINGS
@given(
    x=st.lists(st.floats(-1e15, 1e15, allow_nan=False), min_size=1, max_size=60),
    qs=qs_st,
)
def test_read_percentiles_float64_is_np_percentile(x: list[float], qs: list[float]) -> None:
    """Not what the table builder passes (int64 intervals): numpy's own answer."""
    a = np.array(x, dtype=np.float64)
    _same(read_percentiles(a, tuple(qs)), np.percentile(a, qs))


@st.composite
def long_intervals(draw: st.DrawFn) -> np.ndarray:
    """Arrays long enough for read_percentiles' bracketed path (65,536 values and more),
    shaped to defeat a strided sample: a pattern whose period is the stride (so the sample
    sees one phase only), sorted either way, ties everywhere, outliers at the edges of what
    a float holds exactly, and plain noise around 1 ms."""
    n = draw(st.integers(65_536, 300_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["stride", "sorted", "reversed", "ties", "extremes", "noise"]))
    if kind == "stride":
        step = n // 4096
        x = np.where(np.arange(n) % step == 0, 997_000, rng.integers(0, 2_000_000, n))
    elif kind in ("sorted", "reversed"):
        x = np.sort(rng.integers(-(10**9), 10**9, n))
        x = x[::-1] if kind == "reversed" else x
    elif kind == "ties":
        x = rng.integers(0, draw(st.integers(1, 5)), n) * 1000
    elif kind == "extremes":
        x = rng.integers(990_000, 1_010_000, n)
        x[rng.integers(0, n, draw(st.integers(1, 50)))] = EXACT
        x[rng.integers(0, n, draw(st.integers(1, 50)))] = -EXACT
    else:
        x = 997_000 + rng.normal(0, 20_000, n).astype(np.int64)
    return np.ascontiguousarray(x, dtype=np.int64)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(x=long_intervals(), qs=qs_st)
def test_read_percentiles_of_long_arrays_is_np_percentile(x: np.ndarray, qs: list[float]) -> None:
    before = x.copy()
    _same(read_percentiles(x, tuple(qs)), np.percentile(x, qs))
    assert np.array_equal(x, before)


def _hole_ms_reference(t: np.ndarray, dt: np.ndarray, nominal: float, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The loop hole_ms_per_period replaced: a mask per hole."""
    hole_ms = np.zeros(len(start))
    for a in np.flatnonzero(dt > HOLE_READS * nominal).tolist():
        hit = (end > t[a]) & (start < t[a + 1])
        hole_ms[hit] = np.maximum(hole_ms[hit], dt[a] / 1e6)
    return hole_ms


# small coordinates, so that holes start and end exactly on boundaries often
times = st.integers(-50, 400)


@st.composite
def hole_case(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    t = draw(st.lists(times, min_size=0, max_size=40))
    if draw(st.booleans()):
        t = sorted(t)  # the builder's reads are in time order; unsorted ones are checked too
    t = np.array(t, dtype=np.int64)
    if draw(st.booleans()):
        # contiguous periods, as the builder cuts them: start, end = B[:-1], B[1:]
        B = np.array(sorted(draw(st.lists(times, min_size=0, max_size=12))), dtype=np.int64)
        start, end = B[:-1], B[1:]
    else:
        # any sorted starts and ends (gaps between periods, empty periods, overlaps)
        n = draw(st.integers(0, 10))
        start = np.array(sorted(draw(st.lists(times, min_size=n, max_size=n))), dtype=np.int64)
        end = np.array(sorted(draw(st.lists(times, min_size=n, max_size=n))), dtype=np.int64)
    dt = np.diff(t)
    nominal = draw(
        st.one_of(
            st.just(max(float(np.median(dt)) if len(dt) else 1.0, 1.0)),  # as the builder passes it
            st.floats(0.0, 30.0, allow_nan=False),
            st.sampled_from([0.0, 0.1, 1.0, 2.5]),
        )
    )
    return t, dt, nominal, start, end


@SETTINGS
@given(case=hole_case())
def test_hole_ms_per_period_is_the_mask_loop(case) -> None:
    t, dt, nominal, start, end = case
    got = hole_ms_per_period(t, dt, nominal, start, end)
    want = _hole_ms_reference(t, dt, nominal, start, end)
    assert got.shape == want.shape == (len(start),)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want), (got, want)


def test_hole_ms_boundaries_exactly() -> None:
    """A hole that ends exactly at a period's start does not reach it; one that starts
    exactly at a period's end does not reach it either; holes before the first period and
    after the last reach none."""
    B = np.array([100, 200, 300, 400], dtype=np.int64)
    start, end = B[:-1], B[1:]
    # holes (0, 100) before the first period, (103, 200) ending on a boundary, (202, 300)
    # ending on one, (300, 400) starting on one and (402, 500) after the last period
    t = np.array([0, 100, 101, 102, 103, 200, 201, 202, 300, 400, 401, 402, 500], dtype=np.int64)
    dt = np.diff(t)
    got = hole_ms_per_period(t, dt, 1.0, start, end)
    assert np.array_equal(got, _hole_ms_reference(t, dt, 1.0, start, end))
    assert got.tolist() == [97 / 1e6, 98 / 1e6, 100 / 1e6]
    # no reads, one read, no periods
    for t in (np.zeros(0, np.int64), np.array([150], np.int64)):
        assert hole_ms_per_period(t, np.diff(t), 1.0, start, end).tolist() == [0.0, 0.0, 0.0]
    t = np.array([0, 1000], np.int64)
    assert hole_ms_per_period(t, np.diff(t), 1.0, B[:0], B[:0]).tolist() == []


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(65_536, 400_000),
    kind=st.sampled_from(["intervals", "few values", "wide", "strided"]),
    qs=qs_st,
)
def test_read_percentiles_of_many_reads_is_np_percentile(seed: int, n: int, kind: str, qs: list[float]) -> None:
    """Past 65,536 values the order statistics come from a strided sample's bracket: the same
    floats as np.percentile whatever the values, also where the sample misleads (``strided``:
    the sampled positions hold values unlike the rest, so the bracket misses and all of x is
    selected from)."""
    rng = np.random.default_rng(seed)
    if kind == "intervals":  # an hour of ~1 ms reads with jitter and a few holes
        a = rng.normal(1_000_000, 20_000, n).astype(np.int64)
        a[rng.integers(0, n, 20)] = rng.integers(10**8, 10**10, 20)
    elif kind == "few values":
        a = rng.integers(0, 4, n).astype(np.int64)
    elif kind == "wide":
        a = rng.integers(-EXACT, EXACT, n, dtype=np.int64)
    else:
        a = rng.integers(0, 1000, n).astype(np.int64)
        a[:: n // 65_536] = 10**9 + rng.integers(0, 1000, len(a[:: n // 65_536]))
    was = a.copy()
    _same(read_percentiles(a, tuple(qs)), np.percentile(a, qs))
    assert np.array_equal(a, was)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    t=st.lists(st.integers(-(2**54), 2**54), min_size=1, max_size=400).map(sorted),
    x=st.lists(st.integers(-(2**54), 2**54), min_size=1, max_size=30),
    data=st.data(),
)
@example(t=[0, 10, 10, 10, 20] * 1, x=[10, 0, 20, -5, 25, 15], data=None)
def test_interp_at_is_np_interp(t: list[int], x: list[int], data) -> None:
    """The usage at the boundaries read from the reads around each boundary: np.interp's floats
    bit for bit, with repeated read times, boundaries outside the reads, and times past
    2**53 ns (where float64 rounds them: all of it converted then)."""
    tt = np.array(t, dtype=np.int64)
    if data is not None and data.draw(st.booleans()):  # times an hour of reads could have
        tt = np.sort(tt % 10**13)
        x = [v % 10**13 for v in x]
    u = np.cumsum(np.arange(len(tt), dtype=np.float64) % 7 * 0.5)
    xx = np.array(x, dtype=np.int64)
    want = np.interp(xx.astype(np.float64), tt.astype(np.float64), u)
    assert np.array_equal(interp_at(xx, tt, u), want, equal_nan=True)
