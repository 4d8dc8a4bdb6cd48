"""How far the what-if estimator (:func:`gmpanalysis.whatif.estimate`) has missed on real runs,
by regime: the error bars the advice and the report print.

``benchmarks/validate_whatif.py`` predicts every run of a sweep from the runs of the other
configurations of its workload (leave one configuration out), and writes the held-out
errors here, to ``whatif-validation.json`` beside this module, with the date, the runs and
the machines. A regime is where a setting lives: the CPUs the service can run on, and
GOMAXPROCS over the limit. Outside every regime the validation covered, there are no error
bars to give, and the advice says so. The latency figures (p99, throughput) are validated per
load loop too: a closed loop's spread is carried over from the source run, an open loop's
queue is replayed, so a regime validated on one says nothing of the other's latency.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .cgroup import DEFAULT_PERIOD_US

VALIDATION_FILE = Path(__file__).with_name("whatif-validation.json")
# the figures and how each error is measured
UNITS = {
    "throttled_pct": "points",
    "exhausted_p50_ms": "ms",
    "cpus_frozen_p50": "CPUs",
    "stall_ms_per_s": "ms/s",
    "p99_pct": "% of p99",
    "throughput_pct": "% of req/s",
}
# the figures whose error depends on how the load was sent (open or closed loop)
LATENCY_FIGURES = ("p99_pct", "throughput_pct")
# the least held-out predictions, and distinct runs predicted, a regime needs before its
# error bars are given
# the validation's goal for the throttled share of the periods (points): the advice also
# says where the replay of a run's own setting misses the run by more
THROTTLED_GOAL_POINTS = 5.0
MIN_PREDICTIONS = 3
MIN_TARGETS = 2


def regime(cpus: float, limit_cpu: float | None, gomaxprocs: float, period_us: int = DEFAULT_PERIOD_US) -> str:
    """The regime of a setting: ``cpus`` the CPUs it may run on (2 or fewer, 3-8, 9 or more)
    and GOMAXPROCS over the limit in CPUs (at most 1, up to 4, above 4; "no limit"); a CFS
    period other than the kernel's default 100 ms is a regime of its own (the quota's slices,
    the tick and the sampling weigh differently against a short period)."""
    c = "≤2 CPUs" if cpus <= 2 else ("3-8 CPUs" if cpus <= 8 else "≥9 CPUs")
    if limit_cpu is None or not math.isfinite(limit_cpu) or limit_cpu <= 0:
        return f"{c}, no limit"
    r = gomaxprocs / limit_cpu
    if r <= 1 + 1e-9:
        g = "GOMAXPROCS ≤ limit"
    else:
        g = "GOMAXPROCS ≤ 4× limit" if r <= 4 + 1e-9 else "GOMAXPROCS > 4× limit"
    p = "" if period_us == DEFAULT_PERIOD_US else f", {period_us / 1000:g} ms periods"
    return f"{c}, {g}{p}"


def loop_of(meta: dict[str, Any]) -> str | None:
    """How a run's load was sent: "closed" (``load.mode``: clients that each wait for their
    answer), "open" (requests sent on a schedule, whatever is in flight), None where the
    bundle does not say."""
    load = meta.get("load")
    mode = load.get("mode") if isinstance(load, dict) else None
    mode = mode.strip().lower() if isinstance(mode, str) else None
    return mode if mode in ("open", "closed") else None


def errors_of(pred: dict[str, float], truth: dict[str, float]) -> dict[str, float]:
    """One prediction's errors, figure by figure (:data:`UNITS`; NaN where either side has
    none): absolute, latency and throughput as a share of the measured value."""
    out = {}
    for k in ("throttled_pct", "exhausted_p50_ms", "cpus_frozen_p50", "stall_ms_per_s"):
        out[k] = abs(pred[k] - truth[k])
    for k, fig in (("p99_pct", "p99_ms"), ("throughput_pct", "throughput_rps")):
        out[k] = 100 * abs(pred[fig] - truth[fig]) / truth[fig] if truth[fig] else math.nan
    return out


def measured_range(pred: float, err_pct: float) -> tuple[float, float]:
    """Where the measured value lies for a prediction ``pred`` whose error, as a share of
    the measured value (:func:`errors_of`), is at most ``err_pct``: |pred - m| <= e·m gives
    m in [pred / (1 + e), pred / (1 - e)] (no upper end from e = 100 %)."""
    e = err_pct / 100
    return pred / (1 + e), (pred / (1 - e) if e < 1 else math.inf)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per regime and figure: the held-out predictions' count (``n``), the distinct runs
    predicted (``targets``), the median and 90th percentile of the absolute error; and
    ``loops``, how the predicted runs' load was sent (:func:`loop_of`), and ``cpus``, the
    CPUs they ran on. ``rows``: one per prediction, with ``regime``, ``target``, ``loop``,
    ``cpus`` and :func:`errors_of`'s keys."""
    out: dict[str, Any] = {}
    for reg in sorted({r["regime"] for r in rows}):
        mine = [r for r in rows if r["regime"] == reg]
        out[reg] = {}
        loops = sorted({r["loop"] for r in mine if r.get("loop")})
        if loops:
            out[reg]["loops"] = loops
        cpus = sorted({int(r["cpus"]) for r in mine if r.get("cpus")})
        if cpus:
            out[reg]["cpus"] = cpus
        for k in UNITS:
            v = np.array([r[k] for r in mine], dtype=float)
            keep = ~np.isnan(v)
            v = v[keep]
            if len(v):
                out[reg][k] = {
                    "n": int(len(v)),
                    "targets": len({r["target"] for r, kept in zip(mine, keep, strict=True) if kept}),
                    "median": round(float(np.median(v)), 2),
                    "p90": round(float(np.quantile(v, 0.9)), 2),
                }
    return out


def load(path: Path = VALIDATION_FILE) -> dict[str, Any]:
    """The committed validation (empty where there is none)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def model_error(
    reg: str, validation: dict[str, Any] | None = None, loops: Iterable[str | None] = (), cpus: float | None = None
) -> dict[str, tuple[float, float, str]]:
    """The error bars of a regime, figure by figure: (median, p90, unit) of the held-out
    absolute errors; none for a figure with fewer than :data:`MIN_PREDICTIONS` predictions
    of :data:`MIN_TARGETS` runs there, nor for the latency figures (:data:`LATENCY_FIGURES`)
    where one of ``loops`` (:func:`loop_of` each advised run) is not among the regime's
    validated loops; none at all on ``cpus`` outside the CPUs the regime's runs had
    (:func:`cpus_validated`)."""
    if not cpus_validated(reg, cpus, validation):
        return {}
    figs = _figures(reg, validation)
    off = not all(loop_validated(reg, x, validation) for x in loops)
    return {
        k: (e["median"], e["p90"], UNITS[k])
        for k, e in figs.items()
        if k in UNITS
        and e.get("n", 0) >= MIN_PREDICTIONS
        and e.get("targets", 0) >= MIN_TARGETS
        and not (off and k in LATENCY_FIGURES)
    }


def _figures(reg: str, validation: dict[str, Any] | None) -> dict[str, Any]:
    v = load() if validation is None else validation
    return (v.get("regimes") or {}).get(reg) or {}


def validated_loops(reg: str, validation: dict[str, Any] | None = None) -> list[str]:
    """How the load of the runs the regime's errors were measured on was sent (empty: not said)."""
    return list(_figures(reg, validation).get("loops") or [])


def loop_validated(reg: str, loop: str | None, validation: dict[str, Any] | None = None) -> bool:
    """Whether the regime's latency errors were measured on runs whose load was sent as
    ``loop`` (True where the validation does not say, one that predates the loops; False
    for a run that does not say how its load was sent where it does)."""
    loops = validated_loops(reg, validation)
    return not loops or loop in loops


def validated_cpus(reg: str, validation: dict[str, Any] | None = None) -> list[int]:
    """The CPUs of the runs the regime's errors were measured on (empty: not said)."""
    return [int(x) for x in _figures(reg, validation).get("cpus") or []]


def cpus_validated(reg: str, cpus: float | None, validation: dict[str, Any] | None = None) -> bool:
    """Whether ``cpus`` lies within the CPUs the regime's runs had (the regime "≥9 CPUs"
    measured on 16 says nothing of 64, where more threads wake on more CPUs). True where
    either side does not say."""
    seen = validated_cpus(reg, validation)
    return cpus is None or not seen or min(seen) <= cpus <= max(seen)


def validated_regimes(validation: dict[str, Any] | None = None) -> list[str]:
    """The regimes with error bars."""
    v = load() if validation is None else validation
    return [r for r in (v.get("regimes") or {}) if model_error(r, v)]
