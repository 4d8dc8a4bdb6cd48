"""Record a large real trace of a busy HTTP server for the reader benchmark.

    .venv/bin/python benchmarks/make_big_trace.py [OUT] [SECONDS]

Starts gmp-demoapp (no CPU limit) on loopback, drives it with gmp-loadgen in closed loop
(16 clients, tiny requests: the scheduler-heavy mix of a real server), and saves
/debug/pprof/trace?seconds=N, streamed to the file. Default: benchmarks/data/http-server.trace,
18 s (≈25 MB here: the full-read benchmark). The selective and window benchmarks want a trace
of 500 MB or more and 60 s or more: ``make_big_trace.py benchmarks/data/http-server-big.trace 380``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gmpanalysis.lab import ensure_binaries
from gmpanalysis.lab.procs import stop_proc, wait_listening

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "data" / "http-server.trace"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 18.0
    out.parent.mkdir(parents=True, exist_ok=True)
    bins = ensure_binaries()
    app = subprocess.Popen(
        [str(bins["gmp-demoapp"]), "-ready", "json", "-addr", "127.0.0.1:0", "-work-ms", "0.02", "-alloc-kb", "16"],
        stdout=subprocess.PIPE,
    )
    load = None
    try:
        addr = wait_listening(app)
        load = subprocess.Popen(
            [
                str(bins["gmp-loadgen"]),
                "-url",
                f"http://{addr}/work",
                "-mode",
                "closed",
                "-concurrency",
                "16",
                "-duration",
                f"{seconds + 3}s",
                "-max-requests",
                "10000000",
                "-out",
                "/dev/null",
            ],
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1)
        url = f"http://{addr}/debug/pprof/trace?seconds={seconds:g}"
        with urllib.request.urlopen(url, timeout=seconds + 30) as r, open(out, "wb") as f:
            shutil.copyfileobj(r, f, 1 << 20)
        print(f"{out}: {out.stat().st_size / 1e6:.1f} MB")
    finally:
        stop_proc(load)
        stop_proc(app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
