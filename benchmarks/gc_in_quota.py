"""Where a throttled service's quota goes: the GC's workers and assists against the rest of
the Go code, per period, from the trace, counted only while the group was not frozen.

    .venv/bin/python benchmarks/gc_in_quota.py BUNDLE...

A trace's running intervals are time on a P, not on a CPU: a goroutine stays "running"
while the kernel has its thread throttled, and with more Ps than CPUs several threads share
a CPU. So each interval is first clipped to the time no level of the group stood frozen
(gmp.df_freezes), and the period's CPU (cpu.stat usage) is then shared out in proportion to
what ran on Ps: CFS gives runnable threads of one group equal shares. Printed per bundle
(over the periods wholly inside the trace window): requests/s that succeeded, quota per
period, and per period (median [p10-p90]) the CPU of GC workers by kind (dedicated,
fractional, idle, outside a mode), of mark assists, and of everything else (the handlers,
net/http, the scheduler), with the share of the CPU the GC took.

Not a test: it reads bundles recorded with `gmpanalysis lab run` (a trace is needed).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pandas as pd

import gmpanalysis as gmp
from gmpanalysis.gotrace.gcwork import df_assist_on_p, worker_kind


def frozen_before(freezes: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The union of the freezes as a cumulative function: (times, frozen ns up to each)."""
    iv = freezes[["start_ns", "end_ns"]].sort_values("start_ns").to_numpy(dtype=np.int64)
    merged: list[list[int]] = []
    for a, b in iv:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if not merged:
        return np.array([0, 1], dtype=np.float64), np.zeros(2)
    m = np.array(merged, dtype=np.float64)
    t = m.ravel()
    cum = np.zeros(len(t))
    cum[1::2] = m[:, 1] - m[:, 0]
    return t, np.cumsum(cum)


def unfrozen(a: np.ndarray, b: np.ndarray, fz: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    t, cum = fz
    return (b - a) - (np.interp(b, t, cum) - np.interp(a, t, cum))


def per_period(edges: np.ndarray, a: np.ndarray, b: np.ndarray, fz: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Unfrozen running time of intervals [a, b) in each period between edges (ns)."""
    out = np.zeros(len(edges) - 1)
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        aa, bb = np.maximum(a, lo), np.minimum(b, hi)
        ok = bb > aa
        out[i] = unfrozen(aa[ok], bb[ok], fz).sum()
    return out


def main(paths: list[str]) -> int:
    for path in paths:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = gmp.load_run(path)
            per = gmp.df_periods(run)
            fz = frozen_before(gmp.df_freezes(run))
        tr = run.trace
        if tr is None:
            print(f"{path}: no trace")
            continue
        per = per[(per["start_ns"] >= tr.meta["first_ns"]) & (per["end_ns"] <= tr.meta["last_ns"])]
        edges = np.r_[per["start_ns"].to_numpy(), per["end_ns"].to_numpy()[-1]].astype(np.float64)
        r = tr.running
        a, b = r["start_ns"].to_numpy(dtype=np.float64), r["end_ns"].to_numpy(dtype=np.float64)
        kind = worker_kind(tr)
        total = per_period(edges, a, b, fz)
        parts = {}
        for k in sorted(set(kind) - {""}):
            sel = kind == k
            parts[k] = per_period(edges, a[sel], b[sel], fz)
        asg = df_assist_on_p(tr)
        parts["assist"] = per_period(
            edges, asg["start_ns"].to_numpy(dtype=np.float64), asg["end_ns"].to_numpy(dtype=np.float64), fz
        )
        usage = per["usage_us"].to_numpy() / 1000  # ms
        with np.errstate(invalid="ignore", divide="ignore"):
            share = {k: np.where(total > 0, v / total, 0.0) for k, v in parts.items()}
        gc = sum(share.values())
        m = run.meta
        req = run.requests
        span_s = (req["end_ns"].max() - req["start_ns"].min()) / 1e9 if req is not None and len(req) else np.nan
        ok = int((req["status"] // 100 == 2).sum()) if req is not None else 0
        head = f"GOMAXPROCS {m.get('gomaxprocs_effective')}, quota {m.get('quota_us')} µs per {m.get('period_us')} µs"
        print(f"\n{path}: {head}, {ok / span_s:.1f} req/s ok, {len(per)} periods in the trace window")

        def q(x: np.ndarray) -> str:
            return f"{np.median(x):6.1f} [{np.percentile(x, 10):5.1f}-{np.percentile(x, 90):5.1f}]"

        print(f"  CPU per period (ms)        {q(usage)}")
        for k, s in share.items():
            print(f"  {k:<26} {q(s * usage)}")
        print(f"  {'other Go code':<26} {q((1 - gc) * usage)}")
        print(f"  GC share of the CPU        {100 * np.sum(gc * usage) / np.sum(usage):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
