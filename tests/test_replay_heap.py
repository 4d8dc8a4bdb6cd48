"""The replay's requests in service as one service clock and a heap of the readings at which
each is served (gmpanalysis.cfskernel): the heap itself, and replays that lean on it (many
alike, costs over twelve decades, zero costs, a clock that goes back to 0 many times), in
the compiled and the plain-Python loop."""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmpanalysis import cfskernel
from gmpanalysis import cfsreplay as R

LOOPS = [pytest.param(True, id="compiled"), pytest.param(False, id="python")]


def _replay(compiled: bool, *args, **kw) -> pd.DataFrame:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cfskernel, "ENABLED", compiled and cfskernel.AVAILABLE)
        return R.replay(*args, **kw)


def _both(*args, **kw) -> pd.DataFrame:
    """The compiled and the plain-Python loop's tables, the same bit for bit; returns one."""
    a, b = _replay(True, *args, **kw), _replay(False, *args, **kw)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert np.array_equal(a.attrs["latency_ms"], b.attrs["latency_ms"], equal_nan=True)
    return a


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ops=st.lists(st.one_of(st.integers(0, 5).map(float), st.just(None)), max_size=200))
def test_push_and_pop_keep_a_heap_with_duplicates(ops):
    """heap_push/heap_pop against heapq: pushes of few distinct readings (many alike), pops down to
    none; the least comes out first and every id comes out once."""
    n_max = len(ops) + 1
    ids, rem = [0] * n_max, [0.0] * n_max
    n, ref, out, want = 0, [], [], []
    for x, at in enumerate(ops):
        if at is None:
            if n:
                out.append((rem[0], ids[0]))
                n = cfskernel.heap_pop(ids, rem, n)
                want.append(heapq.heappop(ref))
        else:
            n = cfskernel.heap_push(ids, rem, n, x, at)
            heapq.heappush(ref, (at, x))
        assert n == len(ref)
        assert all(rem[(j - 1) // 2] <= rem[j] for j in range(1, n))
    while n:
        out.append((rem[0], ids[0]))
        n = cfskernel.heap_pop(ids, rem, n)
        want.append(heapq.heappop(ref))
    assert [r for r, _ in out] == [r for r, _ in want]
    assert sorted(x for _, x in out) == sorted(x for _, x in want)


def test_pop_of_one_and_push_into_empty():
    ids, rem = [7], [3.0]
    assert cfskernel.heap_pop(ids, rem, 1) == 0
    assert cfskernel.heap_push(ids, rem, 0, 4, 1.5) == 1 and (ids, rem) == ([4], [1.5])


def test_thousands_alike_finish_together():
    """5,000 requests of the same CPU at once on 4 CPUs, no limit: all answered together at
    5,000 x 1 ms / 4."""
    n = 5000
    per = _both(np.zeros(n, dtype=np.int64), 1e6, None, None, 100_000_000, 0, 0.0, 4, 4)
    lat = per.attrs["latency_ms"]
    assert np.all(lat == lat[0]) and lat[0] == pytest.approx(n * 1.0 / 4, rel=1e-12)
    assert per["usage_us"].sum() == pytest.approx(n * 1000.0, rel=1e-12)


def test_costs_over_twelve_decades_at_one_instant():
    """Costs from 1e-3 to 1e9 ns sent together: each finishes when processor sharing's
    arithmetic says (within the loop's tolerance, 1e-6 of the mean cost, per request still
    in service), in both loops alike."""
    rng = np.random.default_rng(7)
    n, cpus = 1500, 3
    costs = 10 ** rng.uniform(-3, 9, n)
    per = _both(np.zeros(n, dtype=np.int64), costs, None, None, 100_000_000, 0, 0.0, cpus, cpus)
    order = np.sort(costs)
    t, prev, want = 0.0, 0.0, {}
    for i, c in enumerate(order):
        m = n - i
        t += (c - prev) * m / min(m, cpus)
        prev = c
        want.setdefault(c, t)
    tol = 1e-6 * costs.mean() * n / cpus
    got = per.attrs["latency_ms"] * 1e6
    assert got == pytest.approx([want[c] for c in costs], rel=1e-9, abs=tol)


@pytest.mark.parametrize("compiled", LOOPS)
@pytest.mark.parametrize("conc", [None, 3])
def test_zero_costs_are_answered_at_once(compiled, conc):
    """Every cost 0 (the tolerance is 0 then): each request answered when it is sent."""
    sched = np.sort(np.random.default_rng(3).integers(0, 10**9, 400))
    if conc is not None:
        sched = np.zeros(400, dtype=np.int64)
    per = _replay(compiled, sched, np.zeros(400), conc, 50_000, 100_000_000, 0, 0.0, 2, 2)
    assert np.all(per.attrs["latency_ms"] == 0.0)
    assert per["usage_us"].sum() == 0.0


def test_the_clock_goes_back_to_zero_many_times():
    """A minute of requests one after another, each 15 ms of CPU every 20 ms on one CPU: the
    service clock passes REBASE_NS some fifty times; each request still takes its own CPU,
    and both loops agree bit for bit."""
    n = 3000
    sched = np.arange(n, dtype=np.int64) * 20_000_000
    per = _both(sched, 15e6, None, None, 100_000_000, 0, 0.0, 1, 1)
    assert 15e6 * n / cfskernel.REBASE_NS > 40
    assert per.attrs["latency_ms"] == pytest.approx(np.full(n, 15.0), abs=1e-6)


def test_a_backlog_under_a_tight_limit_over_many_rebases():
    """A limit below the demand for a minute (the backlog grows, the clock rebases again and
    again, closed and open loop): both loops agree bit for bit, all the work is done (within
    the loop's tolerance), and
    answers come in the order the requests were sent (all cost alike)."""
    rng = np.random.default_rng(11)
    sched = np.sort(rng.integers(0, 60 * 10**9, 20_000))
    for conc in (None, 16):
        s = sched if conc is None else np.zeros(len(sched), dtype=np.int64)
        per = _both(s, 2e6, conc, 25_000, 100_000_000, 0, 0.0, 4, 4, hz=250)
        # each request answered within the loop's tolerance (1e-6 of the mean cost) of its CPU
        assert per["usage_us"].sum() * 1000 == pytest.approx(2e6 * len(sched), rel=1e-12, abs=2.0 * len(sched))
        if conc is None:
            end = per.attrs["latency_ms"] * 1e6 + (sched - sched[0])
            assert np.all(np.diff(end) >= -1e-3)


@pytest.mark.parametrize("conc, cost", [(0, 1e6), (-3, 1e6), (2.5, 1e6), (None, np.nan), (None, -1.0), (None, np.inf)])
def test_a_replay_that_could_never_end_is_refused(conc, cost):
    """No client to send a request, or a cost no clock reaches: a UsageError, not a loop that
    runs for ever."""
    from gmpanalysis.errors import UsageError

    with pytest.raises(UsageError):
        R.replay(np.zeros(3, dtype=np.int64), cost, conc, None, 100_000_000, 0, 0.0, 2, 2)
