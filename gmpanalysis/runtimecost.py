"""How the Go runtime's own CPU per request grows with the Ps it can run at once.

A Go service under a CPU limit spends more CPU per request the more Ps it has, where it
collects garbage: every GC cycle stops and restarts every P (two stop-the-world pauses),
scans each P's goroutine stacks and caches, and runs dedicated mark workers on a quarter of
the Ps; between cycles, each goroutine woken while Ps are idle wakes a spinning thread that
searches every P's run queue. The execution trace shows the consequence, not the CPU: on
the allocation-heavy handler of the 16-CPU sweeps, scheduling intervals per request went
from 8 at GOMAXPROCS 1 to 112 at 16, and CPU per request (cpu.stat over the requests) from
8.35 to 12.20 ms at a 1.5-CPU limit and from 7.61 to 12.90 ms at 250m. A CPU-bound handler
that does not allocate kept its CPU per request (31.63 ms at GOMAXPROCS 1 and 8 on 16 CPUs;
30.28 / 30.29 / 30.78 ms at 1 / 2 / 8 on 2 CPUs).

The model: a request's CPU is ``base × (1 + k × r × (P - 1))``, where P = min(GOMAXPROCS,
CPUs) and r is the GC's stop-the-world pauses per CPU-second of the run (the trace's; two
per cycle). ``k`` is fitted on those sweeps (:data:`PER_P_PER_STW`), so the growth is an
estimate carried with its spread between them; where the run has no trace (r unknown) the
CPU per request is kept as measured.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator

# The growth the fit saw at most (1.70 at 16 Ps, 250m): a request's CPU at any number of
# Ps is taken as at most this many times its CPU at one P, and the Ps beyond MAX_FIT_PS
# add nothing more (outside what the sweeps measured, the growth is not extrapolated)
MAX_GROWTH = 1.7
MAX_FIT_PS = 16
# the fewest Ps a workload's widest run must have to fit the growth on (fit), and the fewest
# stop-the-world pauses per CPU-second its one-P runs must show (the 16-CPU workloads the
# constant comes from: 23.8 and 28.8)
MIN_FIT_PS = 8
MIN_FIT_STW = 1.0

# The fraction of a request's CPU added per P beyond the first, per GC stop-the-world pause
# per CPU-second: fitted on the 16-CPU sweeps of the allocation-heavy handler (GOMAXPROCS 1
# against 16, from GOMAXPROCS 1's rate): 0.00129 at a 1.5-CPU limit (23.8 pauses per CPU-s,
# +46 % at 16 Ps), 0.00161 at 250m (28.8 per CPU-s, +70 %). Their mean (:func:`fit`); their
# spread is the estimate's (±11 %).
PER_P_PER_STW = 0.00145
# the constant the functions below use: PER_P_PER_STW, or a refit while held_out() is open
_k = PER_P_PER_STW


def fit(workloads: Iterable[Iterable[tuple[int, float, float]]]) -> float | None:
    """:data:`PER_P_PER_STW` from measured runs: for each workload, its runs as (Ps, CPU per
    request, stop-the-world pauses per CPU-second); its one-P runs and its runs with the most
    Ps (each the mean of its repeats) give ``(cpu_P / cpu_1 - 1) / (r_1 × (P - 1))``, and the
    workloads' values are averaged. A workload adds nothing without both, with fewer than
    :data:`MIN_FIT_PS` Ps at most (the growth over a P or two is within a run's noise), or
    whose one-P runs stop the world fewer than :data:`MIN_FIT_STW` times per CPU-second (the
    growth per pause of a service that hardly pauses is noise over almost nothing); a value
    below 0 counts as 0 (more Ps never take the runtime less CPU: that is noise too). None
    where no workload adds anything."""
    ks = []
    for runs in workloads:
        pts = [(int(p), float(c), float(r)) for p, c, r in runs if math.isfinite(c) and c > 0 and math.isfinite(r)]
        if not pts:
            continue
        top = max(p for p, _, _ in pts)
        one = [(c, r) for p, c, r in pts if p == 1]
        wide = [c for p, c, _ in pts if p == top]
        if not one or top < MIN_FIT_PS:
            continue
        c1, r1 = sum(c for c, _ in one) / len(one), sum(r for _, r in one) / len(one)
        if r1 < MIN_FIT_STW:
            continue
        cp = sum(wide) / len(wide)
        ks.append(max((cp / c1 - 1) / (r1 * (min(top, MAX_FIT_PS) - 1)), 0.0))
    return sum(ks) / len(ks) if ks else None


@contextlib.contextmanager
def held_out(k: float) -> Iterator[None]:
    """Use ``k`` instead of :data:`PER_P_PER_STW` inside the block: the validation predicts
    each workload with the constant fitted without it (one thread at a time)."""
    global _k
    before, _k = _k, k
    try:
        yield
    finally:
        _k = before


def ps(gomaxprocs: int, cpus: int) -> int:
    """The Ps that can run at once: GOMAXPROCS, at most one per CPU."""
    return max(min(int(gomaxprocs), int(cpus)), 1)


def growth(stw_per_cpu_s: float, p: int) -> float:
    """A request's CPU at ``p`` Ps over its CPU at one P, for a service whose GC stops the
    world ``stw_per_cpu_s`` times per CPU-second at one P: linear in the Ps up to the ones
    the fit saw (:data:`MAX_FIT_PS`), and at most :data:`MAX_GROWTH`."""
    return min(1.0 + _k * stw_per_cpu_s * (min(p, MAX_FIT_PS) - 1), MAX_GROWTH)


def extrapolated(stw_per_cpu_s: float | None, p: int) -> bool:
    """Whether :func:`growth` at ``p`` Ps leaves what the fit measured (more Ps, or a
    growth past :data:`MAX_GROWTH`, held there)."""
    if stw_per_cpu_s is None or not math.isfinite(stw_per_cpu_s) or stw_per_cpu_s <= 0:
        return False
    return p > MAX_FIT_PS or 1.0 + _k * stw_per_cpu_s * (min(p, MAX_FIT_PS) - 1) > MAX_GROWTH


def scale(stw_per_cpu_s: float | None, source_ps: int, target_ps: int) -> float:
    """A request's CPU at ``target_ps`` Ps over its CPU at ``source_ps``, given the
    stop-the-world rate measured at the source (None or NaN: unknown, 1.0). The rate
    measured at ``source_ps`` Ps is per CPU-second of that run, whose CPU already carries
    the growth: its rate at one P is solved from ``r1 = r × growth(r1, source_ps)`` (exact
    while the growth is linear; where the source's own growth would pass MAX_GROWTH, it is
    held there). So the result lies within [1 / MAX_GROWTH, MAX_GROWTH]."""
    if stw_per_cpu_s is None or not math.isfinite(stw_per_cpu_s) or stw_per_cpu_s <= 0 or source_ps == target_ps:
        return 1.0
    k = _k * (min(source_ps, MAX_FIT_PS) - 1)
    # r1 = r / (1 - k r) while the source's growth 1 + k r1 = 1 / (1 - k r) stays below the
    # cap; past it the source's growth is the cap, r1 = r × MAX_GROWTH
    linear = k * stw_per_cpu_s < 1.0 - 1.0 / MAX_GROWTH
    r1 = stw_per_cpu_s / (1.0 - k * stw_per_cpu_s) if linear else stw_per_cpu_s * MAX_GROWTH
    return growth(r1, target_ps) / growth(r1, source_ps)
