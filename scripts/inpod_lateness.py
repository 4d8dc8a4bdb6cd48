"""Measure gmp-sampler's wake-up lateness inside a Kubernetes pod (where SCHED_FIFO is
refused) and write the per-deadline sequence as a small fixture.

    # 1. a real one-node cluster (scripts/cluster), the demo pod under open-loop load from the
    #    host, `gmpanalysis collect` for SECONDS; the bundle is kept in OUTDIR; the cluster is
    #    torn down whatever happens
    .venv/bin/python scripts/inpod_lateness.py run OUTDIR --seconds 25
    # 2. per-deadline lateness from that bundle's cpu_stat.csv -> fixture CSV + quantiles
    .venv/bin/python scripts/inpod_lateness.py fixture BUNDLE fixtures/sampling/inpod-lateness.csv

Needs root, cgroup v1, the Go toolchain and the [kube] extra (as tests/test_kube_e2e.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run(outdir: Path, seconds: float, rate: int) -> Path:
    import kubernetes

    sys.path.insert(0, str(REPO))
    from gmpanalysis.kube import local
    from gmpanalysis.lab import ensure_binaries

    bins = ensure_binaries()
    local.build()
    base = Path(tempfile.mkdtemp(prefix="gmp-k8s-"))
    try:
        cl = local.start(base, bins)
        kubeconfig, api = cl["kubeconfig"], cl["api"]
        version = kubernetes.client.VersionApi(api).get_code().git_version
        # open-loop load from the host: 40 req/s x 20 ms = 0.8 CPU of demand against a 0.5 limit
        lg = local.start_load(bins, seconds + 4, rate)
        try:
            time.sleep(1)
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gmpanalysis.cli",
                    "collect",
                    "--kubeconfig",
                    kubeconfig,
                    "-n",
                    "default",
                    "-l",
                    "app=gmp-demoapp",
                    "--duration",
                    f"{seconds:.0f}s",
                    "--pprof-port",
                    "18181",
                    "--out",
                    str(outdir),
                ],
                capture_output=True,
                text=True,
                timeout=seconds + 300,
                cwd=REPO,
            )
        finally:
            lg.wait(120)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            raise SystemExit(f"collect failed ({r.returncode})")
        bundle = Path(r.stdout.strip().splitlines()[-1])
        (bundle / "kube-version.json").write_text(json.dumps({"git_version": version, "load_rate": rate}) + "\n")
        print(bundle)
        return bundle
    finally:
        local.stop(base)


def _quantiles(tick: Any, lat_us: Any) -> dict[str, Any]:
    import numpy as np

    deadlines = int(tick[-1] - tick[0]) + 1
    q = np.percentile(lat_us, [50, 90, 99])
    return {
        "reads": len(lat_us),
        "deadlines": deadlines,
        "missed": deadlines - len(lat_us),
        "missed_share": round((deadlines - len(lat_us)) / deadlines, 4),
        "p50_us": float(q[0]),
        "p90_us": float(q[1]),
        "p99_us": float(q[2]),
        "max_us": int(lat_us.max()),
    }


def fixture(bundle: Path, out: Path, last: int) -> None:
    import numpy as np
    import pandas as pd

    sys.path.insert(0, str(REPO))
    import gmpanalysis as gmp
    from gmpanalysis.sampling import df_lateness

    r = gmp.load_run(bundle)
    s = r.meta["sampler"]
    if len(s.get("execs", [])) != 1:
        raise SystemExit("the bundle must come from ONE sampler exec (no container restart)")
    d = df_lateness(r.samples, s["interval_ns"], s["mono_start_ns"])
    tick = d["tick"].to_numpy()
    lat_us = np.rint(d["lateness_ns"].to_numpy() / 1e3).astype(np.int64)
    whole = {**_quantiles(np.r_[0, tick], lat_us), "deadlines": int(tick[-1]) + 1}
    whole["missed"] = whole["deadlines"] - len(lat_us)
    # the last `last` deadlines only (a file well under 200 KB), re-based so tick 0 is the
    # excerpt's first deadline
    first = int(tick[-1]) + 1 - last
    keep = tick >= first
    ex = pd.DataFrame({"tick": tick[keep] - first, "lateness_us": lat_us[keep]})
    out.parent.mkdir(parents=True, exist_ok=True)
    ex.to_csv(out, index=False, lineterminator="\n")
    print(
        json.dumps(
            {
                "whole_run": whole,
                "excerpt": {
                    **_quantiles(np.r_[0, ex["tick"].to_numpy()], ex["lateness_us"].to_numpy()),
                    "first_deadline_of_run": first,
                    "first_deadline_ns": int(s["mono_start_ns"] + first * s["interval_ns"]),
                },
                "sampler_summary": {
                    k: s.get(k)
                    for k in (
                        "policy",
                        "policy_error",
                        "missed_ticks",
                        "lateness_p50_ns",
                        "lateness_p99_ns",
                        "lateness_max_ns",
                        "cpu_pct_of_one_core",
                        "ticks",
                    )
                },
                "bytes": out.stat().st_size,
            },
            indent=1,
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("run")
    a.add_argument("outdir", type=Path)
    a.add_argument("--seconds", type=float, default=25)
    a.add_argument("--rate", type=int, default=40)
    b = sub.add_parser("fixture")
    b.add_argument("bundle", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--last", type=int, default=15_000, help="keep the last N deadlines (default 15000 ≈ 15 s)")
    args = ap.parse_args()
    if args.cmd == "run":
        run(args.outdir, args.seconds, args.rate)
    else:
        fixture(args.bundle, args.out, args.last)


if __name__ == "__main__":
    main()
