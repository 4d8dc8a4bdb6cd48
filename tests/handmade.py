"""GoTrace objects built by hand (tier-3 data) and plain-loop references for the GC-work and
MMU tests: slow, obvious code that the vectorised versions must agree with."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gmpanalysis.bundle import Run
from gmpanalysis.gotrace import GoTrace
from gmpanalysis.gotrace.columns import SCHEMAS, typed_frame


def make_trace(
    first_ns: int,
    last_ns: int,
    *,
    running: list[tuple] = (),
    assist: list[tuple] = (),
    stw: list[tuple] = (),
    gomaxprocs: list[tuple[int, int]] = (),
) -> GoTrace:
    """running: (g, p, start_ns, end_ns[, label]); assist: (g, start_ns, end_ns);
    stw: (start_ns, end_ns, kind); gomaxprocs: (t_ns, procs)."""
    run = [(*r, "") if len(r) == 4 else tuple(r) for r in running]
    cols = {
        "running": {
            "g": [r[0] for r in run],
            "p": [r[1] for r in run],
            "m": [r[1] for r in run],
            "start_ns": [r[2] for r in run],
            "end_ns": [r[3] for r in run],
            "label": [r[4] for r in run],
            "open": [False] * len(run),
        },
        "assist": {
            "g": [a[0] for a in assist],
            "start_ns": [a[1] for a in assist],
            "end_ns": [a[2] for a in assist],
            "open": [False] * len(assist),
        },
        "stw": {
            "start_ns": [s[0] for s in stw],
            "end_ns": [s[1] for s in stw],
            "kind": [s[2] for s in stw],
            "g": [0] * len(stw),
            "open": [False] * len(stw),
        },
    }
    tables = {k: typed_frame(v, SCHEMAS[k]) for k, v in cols.items()}
    return GoTrace(
        stw=tables["stw"],
        gc=typed_frame({}, SCHEMAS["gc"]),
        gomaxprocs=pd.DataFrame(
            {"t_ns": [t for t, _ in gomaxprocs], "procs": [n for _, n in gomaxprocs]}, dtype="int64"
        ),
        running=tables["running"],
        assist=tables["assist"],
        sweep=typed_frame({}, SCHEMAS["sweep"]),
        heap=pd.DataFrame({"t_ns": [], "heap_alloc_bytes": [], "heap_goal_bytes": []}),
        logs=typed_frame({}, SCHEMAS["logs"]),
        meta={
            "version": 26,
            "frequency": 15_625_000,
            "first_ns": first_ns,
            "last_ns": last_ns,
            "generations": 1,
            "clock_snapshots": [],
            "events": 1,
            "truncated": None,
            "source": "hand-made",
        },
    )


def as_run(tr: GoTrace, meta: dict | None = None) -> Run:
    return Run(Path("hand-made"), meta or {}, pd.DataFrame(), None, None, _trace=tr)


def slice_trace(tr: GoTrace, a: int, b: int) -> GoTrace:
    """The trace cut to [a, b]: intervals clipped, GOMAXPROCS changes kept whole (the value in
    force at a comes from before it)."""

    def cut(df: pd.DataFrame) -> pd.DataFrame:
        d = df[(df.end_ns > a) & (df.start_ns < b)].copy()
        d["start_ns"] = d.start_ns.clip(lower=a)
        d["end_ns"] = d.end_ns.clip(upper=b)
        return d.reset_index(drop=True)

    return GoTrace(
        stw=cut(tr.stw),
        gc=cut(tr.gc),
        gomaxprocs=tr.gomaxprocs,
        running=cut(tr.running),
        assist=cut(tr.assist),
        sweep=cut(tr.sweep),
        heap=tr.heap,
        logs=tr.logs,
        meta={**tr.meta, "first_ns": a, "last_ns": b},
    )


# --- plain-loop references ---------------------------------------------------------------


def _merge(pieces: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """(g, p, start, end) pieces sorted; pieces that touch on the same g and P joined."""
    out: list[list[int]] = []
    for g, p, s, e in sorted(pieces, key=lambda x: (x[0], x[2])):
        if out and out[-1][0] == g and out[-1][1] == p and out[-1][3] == s:
            out[-1][3] = e
        else:
            out.append([g, p, s, e])
    return [tuple(x) for x in out]


def worker_goroutines(tr: GoTrace) -> set[int]:
    return {int(g) for g, lab in zip(tr.running.g, tr.running.label, strict=True) if str(lab).startswith("GC (")}


def assist_on_p_loop(tr: GoTrace) -> list[tuple[int, int, int, int]]:
    """Every assist range against every running interval of its goroutine."""
    workers = worker_goroutines(tr)
    runs: dict[int, list[tuple[int, int, int]]] = {}
    for g, p, s, e in zip(tr.running.g, tr.running.p, tr.running.start_ns, tr.running.end_ns, strict=True):
        if int(g) not in workers:
            runs.setdefault(int(g), []).append((int(p), int(s), int(e)))
    pieces = []
    for g, s, e in zip(tr.assist.g, tr.assist.start_ns, tr.assist.end_ns, strict=True):
        for p, rs, re_ in runs.get(int(g), []):
            lo, hi = max(int(s), rs), min(int(e), re_)
            if hi > lo:
                pieces.append((int(g), p, lo, hi))
    return _merge(pieces)


def util_loop(tr: GoTrace) -> tuple[list[int], list[float]]:
    """Mutator utilisation by counting, at every elementary piece, what covers it: returns
    the boundaries b (first_ns .. last_ns) and u on [b[i], b[i+1])."""
    t0, t1 = int(tr.meta["first_ns"]), int(tr.meta["last_ns"])
    workers = worker_goroutines(tr)
    busy = [
        (int(s), int(e))
        for g, s, e, lab in zip(tr.running.g, tr.running.start_ns, tr.running.end_ns, tr.running.label, strict=True)
        if int(g) in workers and str(lab) != "GC (idle)"
    ]
    busy += [(s, e) for _, _, s, e in assist_on_p_loop(tr)]
    stws = [(int(s), int(e)) for s, e, k in zip(tr.stw.start_ns, tr.stw.end_ns, tr.stw.kind, strict=True) if "GC" in k]
    changes = [(int(t), int(n)) for t, n in zip(tr.gomaxprocs.t_ns, tr.gomaxprocs.procs, strict=True)]
    pts = {t0, t1}
    for s, e in busy + stws:
        pts |= {min(max(s, t0), t1), min(max(e, t0), t1)}
    pts |= {t for t, _ in changes if t0 < t < t1}
    b = sorted(pts)
    u = []
    for x in b[:-1]:
        procs = changes[0][1] if changes else 1
        for t, n in changes:
            if t <= x:
                procs = n
        if any(s <= x < e for s, e in stws):
            u.append(0.0)
        else:
            n_busy = sum(1 for s, e in busy if s <= x < e)
            u.append(min(max(1.0 - n_busy / procs, 0.0), 1.0))
    return b, u


def window_mean_loop(b: list[int], u: list[float], s: float, w: float) -> float:
    total = 0.0
    for i in range(len(u)):
        lo, hi = max(b[i], s), min(b[i + 1], s + w)
        if hi > lo:
            total += u[i] * (hi - lo)
    return total / w
