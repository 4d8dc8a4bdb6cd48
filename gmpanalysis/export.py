"""Export to the Chrome trace-event JSON format (opened by ui.perfetto.dev and
chrome://tracing), so periods, freezes, STW and GC can be zoomed into."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .analysis import analyze
from .bundle import Run
from .errors import UsageError

PID_CGROUP, PID_GO = 1, 2


def _slices(table: Any, name: Any, cat: str, tid: int, args: Any) -> list[dict[str, Any]]:
    """Complete ("X") events on the Go runtime's track from a table of start_ns/end_ns ranges."""
    return [
        {
            "ph": "X",
            "name": name(r),
            "cat": cat,
            "pid": PID_GO,
            "tid": tid,
            "ts": r.start_ns / 1e3,
            "dur": (r.end_ns - r.start_ns) / 1e3,
            "args": args(r),
        }
        for r in table.itertuples(index=False)
    ]


def chrome_trace_events(run: Run) -> list[dict[str, Any]]:
    """The trace events: counter tracks per period (CPU used, throttled time), one slice per
    frozen interval, and from the Go trace one slice per STW pause and GC mark phase.
    Times are µs of CLOCK_MONOTONIC."""
    per = analyze(run).periods
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID_CGROUP, "tid": 0, "args": {"name": f"cgroup ({run.name})"}},
        {"ph": "M", "name": "thread_name", "pid": PID_CGROUP, "tid": 1, "args": {"name": "frozen (quota exhausted)"}},
        {"ph": "M", "name": "process_name", "pid": PID_GO, "tid": 0, "args": {"name": "Go runtime"}},
        {"ph": "M", "name": "thread_name", "pid": PID_GO, "tid": 1, "args": {"name": "stop-the-world"}},
        {"ph": "M", "name": "thread_name", "pid": PID_GO, "tid": 2, "args": {"name": "GC mark phase"}},
    ]
    start_us = per["start_ns"].to_numpy() / 1e3
    for t, u, thr in zip(start_us, per["usage_us"].to_numpy(), per["throttled_rq_us"].to_numpy(), strict=True):
        ev.append(
            {
                "ph": "C",
                "name": "CPU used per period (ms)",
                "pid": PID_CGROUP,
                "tid": 0,
                "ts": float(t),
                "args": {"ms": None if np.isnan(u) else round(float(u) / 1e3, 3)},
            }
        )
        ev.append(
            {
                "ph": "C",
                "name": "throttled time per period (ms, sum over CPUs)",
                "pid": PID_CGROUP,
                "tid": 0,
                "ts": float(t),
                "args": {"ms": None if np.isnan(thr) else round(float(thr) / 1e3, 3)},
            }
        )
    fr = per[per["throttled"].fillna(False).astype(bool) & per["exhausted_at_us"].notna()]
    for r in fr.itertuples(index=False):
        ev.append(
            {
                "ph": "X",
                "name": "frozen",
                "cat": "cfs",
                "pid": PID_CGROUP,
                "tid": 1,
                "ts": r.start_ns / 1e3 + r.exhausted_at_us,
                "dur": float(r.stall_us),
                "args": {
                    "period": int(r.period),
                    "cpus_throttled": None if np.isnan(r.cpus_throttled) else round(float(r.cpus_throttled), 2),
                },
            }
        )
    tr = run.trace
    if tr is not None:
        ev += _slices(tr.stw, lambda r: f"STW ({r.kind})", "stw", 1, lambda r: {"g": int(r.g)})
        ev += _slices(tr.gc, lambda r: "GC mark", "gc", 2, lambda r: {"seq": int(r.seq)})
    return ev


def to_chrome_trace(run: Run, path: str | os.PathLike[str]) -> Path:
    """Write the run as Chrome trace-event JSON (``{"traceEvents": [...]}``)."""
    out = Path(path)
    # json.dumps writes ASCII: a lone surrogate in a name is escaped, not an encoding error
    text = json.dumps(
        {
            "traceEvents": chrome_trace_events(run),
            "displayTimeUnit": "ms",
            "otherData": {"source": "gmpanalysis", "run": run.name},
        }
    )
    try:
        out.write_text(text, encoding="ascii")
    except OSError as e:
        raise UsageError(
            f"{out}: cannot write the trace JSON ({e.strerror or e}); choose another output file"
        ) from None
    return out
