"""Our Go trace reader against Go's own (x/exp/trace via gmp-tracedump), same file, same run.

    .venv/bin/python benchmarks/bench_trace.py [TRACE] [REPEATS]

Both do the full extraction (STW, GC, GOMAXPROCS, per-goroutine running intervals).
Prints CPU and wall time of each (median and spread of REPEATS runs), the ratio, and the
peak memory of each reader in a fresh process against the file size. Not a test: numbers
vary with what else the machine runs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from gmpanalysis.lab import ensure_binaries

ROOT = Path(__file__).resolve().parents[1]

PY_ONE = """
import resource, sys, time, gc
import numpy, pandas, gmpanalysis.gotrace as g
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0, c0 = time.perf_counter(), time.process_time()
tr = g.read_trace(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(t1 - t0, c1 - c0, base, peak, tr.meta["events"], len(tr.running))
"""


def ours(path: Path) -> tuple[float, float, int, int, int, int]:
    out = subprocess.run([sys.executable, "-c", PY_ONE, str(path)], capture_output=True, text=True, check=True)
    w, c, base, peak, ev, iv = out.stdout.split()
    return float(w), float(c), int(base), int(peak), int(ev), int(iv)


def go(tracedump: Path, path: Path) -> tuple[float, float, int, int]:
    out = subprocess.run([str(tracedump), "--intervals", str(path)], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    return d["read_wall_ns"] / 1e9, d["read_cpu_ns"] / 1e9, d["peak_rss_kib"], d["events"]


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s (min {min(xs):.3f}, max {max(xs):.3f})"


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "data" / "http-server.trace"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if not path.exists():
        print(f"{path} missing: record one with benchmarks/make_big_trace.py", file=sys.stderr)
        return 2
    size = path.stat().st_size
    td = ensure_binaries()["gmp-tracedump"]
    ow, oc, gw, gc = [], [], [], []
    o_peak = g_peak = 0
    for _ in range(reps):  # interleaved, so both see the same machine load
        w, c, base, peak, ev, iv = ours(path)
        ow.append(w)
        oc.append(c)
        o_peak = max(o_peak, peak - base)
        w2, c2, rss, gev = go(td, path)
        gw.append(w2)
        gc.append(c2)
        g_peak = max(g_peak, rss)
    print(f"trace: {path.name}, {size / 1e6:.1f} MB, {ev:,} events (x/exp: {gev:,}), {iv:,} running intervals")
    print(f"ours (Python+numpy) CPU  {spread(oc)}   wall {spread(ow)}   {size / 1e6 / statistics.median(oc):.0f} MB/s")
    print(f"Go x/exp/trace      CPU  {spread(gc)}   wall {spread(gw)}   {size / 1e6 / statistics.median(gc):.0f} MB/s")
    print(
        f"ratio ours/Go: CPU {statistics.median(oc) / statistics.median(gc):.2f}x, "
        f"wall {statistics.median(ow) / statistics.median(gw):.2f}x"
    )
    print(
        f"peak memory: ours +{o_peak / 1024:.0f} MiB over the imported baseline = "
        f"{o_peak * 1024 / size:.2f}x the file; Go {g_peak / 1024:.0f} MiB = {g_peak * 1024 / size:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
