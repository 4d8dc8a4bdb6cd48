"""The settings :func:`gmpanalysis.what_if` replays, the run's own where not given, checked
against what the kernel and Go accept before any replay: a
:class:`~gmpanalysis.errors.UsageError` names each one."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .cgroup import MAX_CPUS, MAX_PERIOD_US, MAX_QUOTA_US, MIN_PERIOD_US, MIN_QUOTA_US
from .errors import MissingDataError, UsageError


def num(x: object) -> bool:
    """A finite real number (numpy's too), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def check_settings(
    P: Any, quota_us: Any, burst: Any, G: Any, C: Any, tick_phase_ns: Any, unlimited: bool, outer: Any
) -> None:
    """A :class:`UsageError` naming every setting what_if cannot replay."""
    bad = [
        f"{k}={v!r}"
        for k, v, ok in (
            ("period_us", P, num(P) and MIN_PERIOD_US <= P <= MAX_PERIOD_US and float(P).is_integer()),
            ("quota_us", quota_us, quota_us is None or (num(quota_us) and MIN_QUOTA_US <= quota_us <= MAX_QUOTA_US)),
            ("burst_us", burst, num(burst) and burst >= 0),
            ("gomaxprocs", G, num(G) and G >= 1 and float(G).is_integer()),
            ("cpus", C, num(C) and 1 <= C <= MAX_CPUS and float(C).is_integer()),
            ("tick_phase_ns", tick_phase_ns, tick_phase_ns is None or (num(tick_phase_ns) and tick_phase_ns >= 0)),
        )
        if not ok
    ]
    if unlimited and outer:
        bad.append(f"unlimited=True with outer={outer!r}")
    if bad:
        raise UsageError(
            f"what_if({', '.join(bad)}): give a whole period of 1,000-1,000,000 µs and a quota of at least "
            "1,000 µs (the bounds cpu.max and cpu.cfs_period_us/cfs_quota_us accept), a whole positive GOMAXPROCS "
            f"and CPU count (at most {MAX_CPUS:,}, the kernel's most; cpus= where the bundle does not record "
            "them); burst >= 0, tick_phase_ns >= 0; unlimited=True takes no levels above"
        )


def check_burst(q: float | dict[int, float] | None, quota_us: Any, burst_us: Any, burst: Any) -> None:
    """A :class:`UsageError` where the burst replayed is above a quota replayed: the kernel
    refuses a cpu.max.burst (cpu.cfs_burst_us) above the quota (tg_set_cfs_bandwidth:
    -EINVAL), whether the burst is given or the run's own under a quota given."""
    qs = np.fromiter(q.values(), dtype=np.float64) if isinstance(q, dict) else np.array([np.nan if q is None else q])
    qs = qs[np.isfinite(qs)]
    if burst_us is None and quota_us is not None and num(burst) and burst > 0 and len(qs) and burst > qs.min():
        raise UsageError(
            f"what_if(quota_us={quota_us!r}): the run's burst ({burst:g} µs) is more than that quota, which the "
            "kernel refuses (cpu.max.burst at most the quota): give burst_us= too"
        )
    if burst_us is not None and num(burst_us) and len(qs) and burst_us > qs.min():
        # tg_set_cfs_bandwidth: -EINVAL where burst > quota
        raise UsageError(
            f"what_if(burst_us={burst_us!r}): more than the quota ({qs.min():g} µs); the kernel refuses a "
            "cpu.max.burst (cpu.cfs_burst_us) above the quota"
        )


def resolved(
    prep: dict[str, Any],
    path: Any,
    quota_us: float | None,
    period_us: int | None,
    burst_us: float | None,
    gomaxprocs: int | None,
    cpus: int | None,
    unlimited: bool = False,
    outer: list[dict[str, Any]] | None = None,
    tick_phase_ns: int | None = None,
) -> tuple[float | dict[int, float] | None, int, float, int, int]:
    """The setting :func:`gmpanalysis.whatif.what_if` replays, the run's own where not given, checked:
    (quota: µs, or the run's own period by period, None: no limit; period µs, burst µs,
    GOMAXPROCS, CPUs)."""
    lim = prep["settings"]
    P = lim["period_us"] if period_us is None else period_us
    burst = lim["burst_us"] if burst_us is None else burst_us
    G = lim["gomaxprocs"] if gomaxprocs is None else gomaxprocs
    C = lim["cpus"] if cpus is None else cpus
    if C is None:
        raise MissingDataError(f"{path}: meta.json records no ncpu: give what_if(..., cpus=N)")
    check_settings(P, quota_us, burst, G, C, tick_phase_ns, unlimited, outer)
    q: float | dict[int, float] | None
    if unlimited:
        q = None
    elif quota_us is None:  # the run's own, period by period
        q = prep["own_quota"]
        if P != lim["period_us"] and q:
            q = own_quota_at(q, lim["period_us"], P, path)
        elif not q:
            q = None if lim["quota_us"] is None else lim["quota_us"] * P / lim["period_us"]
    else:
        q = quota_us
    check_burst(q, quota_us, burst_us, burst)
    return q, int(P), float(burst), int(G), int(C)


def own_quota_at(own: dict[int, float], run_p: int, P: int, path: Any) -> dict[int, float]:
    """The run's quotas, period by period, on a grid of another period: each from the first
    period of the new grid that starts at or after its own period did, in the same CPUs
    (Kubernetes writes quota = limit × period). A quota the kernel would refuse at the new
    period (under MIN_QUOTA_US) is a UsageError."""
    ks = np.fromiter(own.keys(), dtype=np.int64, count=len(own))
    v = np.fromiter(own.values(), dtype=np.float64, count=len(own)) * P / run_p
    new_k = -((-ks * run_p) // P)  # ceil(k·run_p / P): the same phase on both grids
    low = np.isfinite(v) & (v < MIN_QUOTA_US)
    if low.any():
        raise UsageError(
            f"what_if(period_us={P}) for {path}: the run's limit of {float(v[low][0]) / P:g} CPU is a "
            f"{float(v[low][0]):g} µs quota at that period, under the least the kernel accepts ({MIN_QUOTA_US} µs); "
            "give a longer period"
        )
    return dict(zip(new_k.tolist(), v.tolist(), strict=True))
