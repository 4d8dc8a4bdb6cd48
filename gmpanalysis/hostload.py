"""How busy the host's CPUs were beside the cgroup: contention a quota does not explain.

A CFS quota caps what a group may use; it says nothing of what the group gets. Where the
host's CPUs are all busy, the group's threads share them with everything else by CFS
weight (cpu.shares / cpu.weight, the pod's CPU request), so a group can be held below its
quota, and below what its threads would run, without being throttled. The what-if replay
gives the group every CPU it may run on, so on a saturated host it overstates the CPU a
setting that runs more threads would get: more throttling and more throughput than the
host would have given. The host's own /proc/stat, read about once a second into
``host_stat.csv``, tells whether that was so; its busy time is user, nice, system, irq and
softirq (idle, iowait and a hypervisor's steal are not the host running anything).

Public: :func:`host_load` and :func:`contention_sentence`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .bundle import Run
from .replayinputs import memo

# a host_stat interval counts as saturated where its CPUs were busy this share of the time
# or more (/proc/stat counts in USER_HZ ticks: ~1 % of one CPU per second at HZ 100)
SATURATED = 0.95
# the host's load is called contention where it was saturated through this share of the
# time and others used at least OTHERS_SHARE of its CPUs beside the group (a group that
# fills the host alone contends with nobody)
SATURATED_SPAN = 0.5
OTHERS_SHARE = 0.05
# /proc/stat's fields of time the host ran something (guest time is within user already)
BUSY = ("user_us", "nice_us", "system_us", "irq_us", "softirq_us")


def _group_cpus(run: Run, t0: int, t1: int) -> float:
    """The CPUs the bundle's outermost cgroup used between t0 and t1 (ns): its usage counter's
    rises over the reads in between, over the time they span (a reset starts it again at
    zero and loses only the read interval it fell in). Each level sampled is a group; a pod
    holds its containers, so the one that used most is the outermost. NaN without reads."""
    s = run.samples
    best = np.nan
    levels = s.groupby("cgroup", sort=False) if "cgroup" in s else [(None, s)]
    for _, lv in levels:
        t_all = lv["t_ns"].to_numpy(np.int64)
        keep = (t_all >= t0) & (t_all <= t1)
        t, u = t_all[keep], lv["usage_us"].to_numpy(np.float64)[keep]
        if len(t) < 2:
            continue
        if (np.diff(t) < 0).any():  # the reader keeps a level's reads in time order; a caller's table may not
            order = np.argsort(t, kind="stable")
            t, u = t[order], u[order]
        span = float(t[-1] - t[0])
        if span > 0:
            cpus = float(np.clip(np.diff(u), 0, None).sum()) * 1e3 / span
            best = cpus if not best >= cpus else best
    return best


def host_load(run: Run) -> dict[str, Any] | None:
    """The host's CPUs over the span ``host_stat.csv`` covers, beside the group's (kept with
    the run: the advice, the report and the validation ask for it more than once): see
    :func:`_host_load`."""
    return memo(run, "host_load", _host_load)


def _host_load(run: Run) -> dict[str, Any] | None:
    """The host's CPUs over the span ``host_stat.csv`` covers, beside the group's: ``ncpu``
    (CPUs online at its last read), ``busy_cpus`` (the mean CPUs busy), ``group_cpus`` (the
    bundle's outermost cgroup's mean use, from cpu_stat.csv), ``others_cpus`` (busy beside
    the group, at least 0), ``saturated_share`` (the share of the span whose interval had
    :data:`SATURATED` of the CPUs busy or more), ``span_s``. None where the bundle has no
    host_stat.csv with two reads apart in time."""
    h = run.host_stat
    if h is None or len(h) < 2:
        return None
    h = h.sort_values("t_ns", kind="stable")
    t = h["t_ns"].to_numpy(np.int64)
    dt_us = np.diff(t) / 1e3
    d_busy = np.diff(h[list(BUSY)].sum(axis=1).to_numpy(np.float64))
    d_total = np.diff(h["cpu_total_us"].to_numpy(np.float64))
    # each interval's busy share of all the CPU time /proc/stat counted in it (the CPUs
    # online times the time, whatever the reads' timing); an interval whose counters went
    # back or past their total (a reboot between reads, another host's file) tells nothing
    ok = (dt_us > 0) & (d_total > 0) & (d_busy >= 0) & (d_busy <= d_total)
    if not ok.any():
        return None
    ncpu = h["ncpu"].to_numpy(np.float64)[1:][ok]
    share = d_busy[ok] / d_total[ok]
    dt = dt_us[ok]
    span_us = float(dt.sum())
    busy_cpus = float((share * ncpu * dt).sum() / span_us)
    saturated = float(dt[share >= SATURATED].sum() / span_us)
    group = _group_cpus(run, int(t[0]), int(t[-1]))
    return {
        "ncpu": int(ncpu[-1]),
        "busy_cpus": busy_cpus,
        "group_cpus": group,
        "others_cpus": max(0.0, busy_cpus - group) if np.isfinite(group) else np.nan,
        "saturated_share": saturated,
        "span_s": span_us / 1e6,
    }


def contended(load: dict[str, Any] | None) -> bool:
    """Whether :func:`host_load`'s figures are of a saturated host others shared."""
    return bool(
        load and load["saturated_share"] >= SATURATED_SPAN and load["others_cpus"] >= OTHERS_SHARE * load["ncpu"]
    )


def contention_sentence(run: Run, *, replay: bool = False) -> str:
    """One sentence where the host was saturated and others used its CPUs beside the group
    (:func:`contended`), "" otherwise; with ``replay``, what that does to the what-if
    replay's figures."""
    load = host_load(run)
    if not contended(load):
        return ""
    assert load is not None
    fact = (
        f"The host's CPUs were busy through {100 * load['saturated_share']:.0f} % of the time host_stat.csv "
        f"covers ({load['busy_cpus']:.2f} of {load['ncpu']} CPUs on average, {load['others_cpus']:.2f} of them "
        "beside this cgroup): the group shared its CPUs with others by CPU weight, which no throttling counter shows"
    )
    if not replay:
        return fact + "."
    return (
        fact + "; the what-if replay gives it every CPU, so for settings that run more threads it may predict "
        "more throttling and throughput than such a host gives."
    )
