"""A closed loop's latency spread across settings, for the advice.

The replay predicts a closed loop's mean latency (Little's law ties it to the throughput)
and carries the spread the run measured around it (:mod:`gmpanalysis.whatif`). That spread
is Go's: its run queues order a closed loop's requests more evenly at one P than at several
(at 1.5 CPUs on 2: p99 1.9-2.6x the mean at 1 P, 4.0-5.1x at 2 and 4 Ps, throttled or not;
fixtures/closed-loop). Given runs at several GOMAXPROCS, each setting takes the spread of
the runs nearest it in Ps, applied to every run's own replay (so every setting is predicted
from the same runs), and the advice says which settings had no run at their Ps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .analysis import analyze
from .bundle import Run
from .cgroup import bundle_cpus
from .modelerror import loop_of

# one run's replay inputs as the advice holds them: (prep, path, the Ps its spread was
# measured at: None for an open loop, or where its GOMAXPROCS is not known)
Input = tuple[dict[str, Any], Any, float | None]


def spread_ps(run: Run) -> float | None:
    """The Ps a closed-loop run's latency spread was measured at (its GOMAXPROCS, at most
    its CPUs); None for an open loop, or where the run does not tell its GOMAXPROCS."""
    if loop_of(run.meta) != "closed":
        return None
    g = analyze(run).gomaxprocs
    if not g:
        return None
    cpus = bundle_cpus(run.meta)
    return float(min(g, cpus) if cpus else g)


def _shape(inp: Input) -> np.ndarray | None:
    return inp[0]["demand"].get("latency_shape")


def nearest(inputs: list[Input], ps: float) -> tuple[int, ...]:
    """The closed-loop runs measured nearest ``ps`` Ps (by ratio); () where none says."""
    d = {i: abs(math.log(x[2] / ps)) for i, x in enumerate(inputs) if x[2] and _shape(x) is not None}
    if not d:
        return ()
    least = min(d.values())
    return tuple(i for i, v in d.items() if v <= least + 1e-9)


def with_spread(inputs: list[Input], ps: float, variants: dict[tuple[int, ...], list[Input]]) -> list[Input]:
    """The runs' replay inputs for a setting at ``ps`` Ps: every closed-loop run carries the
    spread of the runs nearest it (their spreads pooled), kept in ``variants`` per set of
    runs (a replay keeps its spread's quantiles with the inputs)."""
    near = nearest(inputs, ps)
    if not near:
        return inputs
    if near not in variants:
        pooled = np.sort(np.concatenate([_shape(inputs[i]) for i in near]))
        out = []
        for i, x in enumerate(inputs):
            if _shape(x) is None or not x[2] or near == (i,):
                # an open loop's queue is replayed; a run at unknown Ps, or the only one
                # nearest, keeps its own spread
                out.append(x)
            else:
                prep = {**x[0], "demand": {**x[0]["demand"], "latency_shape": pooled}, "spread_quantiles": {}}
                out.append((prep, x[1], x[2]))
        variants[near] = out
    return variants[near]


def caveat(inputs: list[Input], settings_ps: list[float]) -> str:
    """What the advice says of the spreads its p99s carry: settings at Ps no run was at,
    and closed-loop runs whose Ps are not known ("" where there is nothing to say)."""
    closed = [x for x in inputs if _shape(x) is not None]
    if not closed:
        return ""
    said = ""
    unknown = sum(1 for x in closed if not x[2])
    if unknown:
        said += (
            f" {'One closed-loop run does' if unknown == 1 else f'{unknown} closed-loop runs do'} not tell the "
            "GOMAXPROCS it ran with, so where its latency spread belongs is not known; its p99s carry it as measured."
        )
    have = {x[2] for x in closed if x[2]}
    carried = []
    for p in sorted(set(settings_ps)):
        if have and p not in have:
            at = sorted({inputs[i][2] for i in nearest(inputs, p)})
            carried.append(f"at {p:g} P{_s(p)} from {' and '.join(f'{a:g}' for a in at)} P{_s(*at)}")
    if carried:
        said += (
            f" The p99s carry the latency spread of a closed loop measured at other Ps (the nearest): "
            f"{'; '.join(carried)}. The spread changes with the Ps (docs: Validating the model, a closed loop on "
            "2 CPUs); record a run at those settings to compare."
        )
    return said


def _s(*ps: float) -> str:
    return "" if ps == (1.0,) else "s"
