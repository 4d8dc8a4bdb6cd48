"""What the advice says beside its figures where the runs give reason: a cpuset narrower
than the node, a demand held down by the quota, a host others kept busy, a replay that
misses its own run, runs of several services, a best setting that needs a burst a pod spec
cannot set. Each returns a sentence to append (with its leading space) or "".
"""

from __future__ import annotations

import math

import pandas as pd

from .bundle import Run
from .hostload import contention_sentence
from .levels import resized
from .modelerror import THROTTLED_GOAL_POINTS, loop_of
from .services import service_of
from .whatif import measured, settings


def cpuset_caveat(run: Run, cpus: int) -> str:
    """Where the run's threads had fewer CPUs than the node (a cpuset, taskset): the limits
    and the replay stop at those. "" where they had the node's."""
    node = run.meta.get("ncpu")
    if not isinstance(node, int) or cpus >= node:
        return ""
    return (
        f" Its threads ran on {cpus} of the node's {node} CPUs (a cpuset or taskset), so the settings and the "
        "replay stop there; under the static CPU manager a larger whole-CPU limit brings as many CPUs: "
        "give cpus=N (--cpus N) to weigh such limits."
    )


def self_caveat(runs: list[Run], table: pd.DataFrame) -> str:
    """Where one run's own setting is among the candidates and the replay of it misses the
    throttled share the run measured by more than the validation's goal (5 points): what
    the model leaves out moved that run ("" otherwise; runs averaged, or a limit resized
    mid-run, have no one setting to hold against)."""
    if len(runs) != 1 or resized(runs[0]) is not None:
        return ""
    own = settings(runs[0])
    if own["quota_us"] is None or not own["gomaxprocs"]:
        return ""
    row = table[
        (table["quota_us"] == own["quota_us"])
        & (table["gomaxprocs"] == own["gomaxprocs"])
        & (table["burst_us"] == (own.get("burst_us") or 0))
    ]
    got = measured(runs[0])["throttled_pct"]
    if not len(row) or not abs(float(row.iloc[0].throttled_pct) - got) > THROTTLED_GOAL_POINTS:
        return ""
    return (
        f" Replayed at its own setting the run gives {row.iloc[0].throttled_pct:.0f} % of periods throttled where "
        f"it measured {got:.0f} %: something the replay leaves out moved it (threads running outside the Ps, "
        "a host others kept busy, the runtime's scheduling: docs, Validating the model), and may move the figures "
        "above as much."
    )


def host_caveat(runs: list[Run]) -> str:
    """Where a run's host was saturated and shared (:mod:`gmpanalysis.hostload`): the
    replay gives the group CPUs others held ("" where none was)."""
    for r in runs:
        said = contention_sentence(r, replay=True)
        if said:
            return f" {r.meta.get('name') or r.path.name}: {said}" if len(runs) > 1 else f" {said}"
    return ""


def no_burst(table: pd.DataFrame) -> str:
    """Where the best setting needs a burst: the best without one, which is all a Kubernetes
    pod spec sets ("" where the best has none, or every candidate has one)."""
    if not table.iloc[0].burst_us > 0 or not (table["burst_us"] == 0).any():
        return ""
    b = table[table["burst_us"] == 0].iloc[0]
    p99 = f"p99 {b.p99_ms:.0f} ms, " if math.isfinite(float(b.p99_ms)) else ""
    return (
        " A burst is set on the node (cpu.max.burst), not by a Kubernetes pod spec; without one the best is a "
        f"limit of {b.limit_cpu:g} with GOMAXPROCS={b.gomaxprocs:.0f} (rank {b['rank']:.0f}: {p99}"
        f"{b.throttled_pct:.0f} % of periods throttled; bursts=[0], --bursts 0, weighs none)."
    )


def usage_caveat(runs: list[Run]) -> str:
    """For runs without requests: the CPU a throttled run used is less than it wanted (what
    its quota held back came later or never), so a replay of it at that limit or below
    understates the throttling. "" where none throttled."""
    thr = max(float(measured(r)["throttled_pct"]) for r in runs)
    if not thr > 0:
        return ""
    return (
        f" Without requests the demand replayed is the CPU the run used, which its quota held down "
        f"({thr:.0f} % of its periods from its first CPU use to its last throttled): at its own limit or "
        "below, the throttling predicted "
        "is a lower bound."
    )


def service_caveat(runs: list[Run]) -> str:
    """Where the runs are of different services (:func:`gmpanalysis.services.service_of`):
    the advice averages their demands as one service's ("" where they are of one)."""
    seen = list(dict.fromkeys(service_of(r.meta) for r in runs))
    if len(seen) < 2:
        return ""
    return (
        f" The runs are of {len(seen)} different services ({'; '.join(seen)}): the figures average their "
        "demands as if one service's; advise each service from its own runs."
    )


def edge_caveat(runs: list[Run], table: pd.DataFrame) -> str:
    """Where the best limit is the largest tried: the figures still improve there, and a
    closed loop's clients, answered faster, send faster ("" otherwise)."""
    lims = table["limit_cpu"]
    if len(table) < 2 or lims.nunique() < 2 or float(table.iloc[0].limit_cpu) < float(lims.max()):
        return ""
    said = f" The best limit is the largest tried ({float(lims.max()):g} CPUs): the figures still improve there"
    if any(loop_of(r.meta) == "closed" for r in runs):
        said += (
            "; a closed loop's clients send again as soon as they are answered, so each CPU more answers more "
            "of them: its p99 ranks how much the service can serve, not what it needs (the cost objective, or an "
            "open-loop run at the traffic it gets, tells that)"
        )
    return said + "."


def overload_caveat(runs: list[Run], table: pd.DataFrame) -> str:
    """Where an open loop's runs offered more requests per second than the best setting
    answers: the service falls behind there ("" otherwise)."""
    best = table.iloc[0]
    rates = []
    for r in runs:
        q = r.requests
        if loop_of(r.meta) == "closed" or q is None or len(q) < 2:
            continue
        span = float(q["sched_ns"].max() - q["sched_ns"].min()) / 1e9
        if span > 0:
            rates.append(len(q) / span)
    got = float(best.get("throughput_rps", math.nan))
    if not rates or not math.isfinite(got):
        return ""
    offered = sum(rates) / len(rates)
    if got >= 0.9 * offered:
        return ""
    return (
        f" At this setting the service answers {got:.1f} of the {offered:.1f} requests per second offered: it "
        "falls behind, and its queue and p99 grow for as long as the load lasts."
    )


def runs_caveats(runs: list[Run], table: pd.DataFrame, ncpu: int, node_cpus: bool) -> str:
    """What the runs themselves give reason to say beside the advice: an open loop the best
    setting falls behind, a best limit at the edge of those tried, a replay that misses its
    own run, runs of several services, a host others kept busy and (``node_cpus``: no CPUs
    were given) a cpuset narrower than the node."""
    return (
        overload_caveat(runs, table)
        + edge_caveat(runs, table)
        + self_caveat(runs, table)
        + service_caveat(runs)
        + host_caveat(runs)
        + (cpuset_caveat(runs[0], ncpu) if node_cpus else "")
    )
