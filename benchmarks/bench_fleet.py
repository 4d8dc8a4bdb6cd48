"""The fleet analysis at scale: a store of N bundles processed on 1, 2, ... Dask workers.

    .venv/bin/python benchmarks/bench_fleet.py [N] [--work DIR] [--workers 1,2,4,8,16] [--markdown PATH] [--ceiling K]

The store is made of the shipped example runs (fixtures/runs, real lab captures), each
stored N / 8 times re-labelled as another pod (meta.json's cluster, namespace, pod and
capture changed, nothing else): bundle i is pod RUN-i in cluster bench{i % 4}, namespace
ns{i % 10}, so the pods of one run in one cluster and namespace are one workload's (a
StatefulSet's names): 40 workloads, N / 40 captures each. Real data, not real diversity.
Each worker count gets its own output directory; the run prints, per worker count, the
wall time, bundles/s and cpu.stat samples/s, the advisor's runs (once per workload), the
scaling ratio (each worker count against 1), and each worker's peak memory (VmHWM from
/proc/self/status, read inside the worker after its tasks). Not a test; numbers move with
the machine and whatever else runs on it. ``--markdown PATH`` also writes the rows as the
table of docs/benchmarks.md (one file per machine under docs/benchmarks/results/, e.g.
fleet-2cpu.md).

``--ceiling K`` first measures what the machine itself allows, without Dask: K of the
bundles analysed by one plain process alone, then by as many plain processes as the most
workers asked for, all at once (each the same K, after a pass over them to warm up and a
barrier; native thread pools of one thread, as Dask's workers have). The bundles' analysis
only: the advisor's runs (about 5 % of one worker's time) are not in it.
Their throughput against the lone process's is the scaling no scheduler can pass here:
cores shared by two hyperthreads, a clock that drops with every core busy, and the memory
bus all count in it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def vmhwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _probe(rows: list[dict], out: str, barrier: Any, q: Any) -> None:  # a process of the ceiling probe
    import os

    # as Dask's nanny starts its workers: native thread pools of one thread
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[k] = "1"
    from gmpanalysis.fleet.compute import analyse_bundle
    from gmpanalysis.fleet.store import PARTS

    def one(r: dict, where: str) -> None:
        analyse_bundle(r["path"], r["key"], {p: r[p] for p in PARTS}, where)

    for r in rows:  # imports, numba's cache, every path the bundles take, first pages
        one(r, out + "-warm")
    barrier.wait(timeout=600)
    t = time.perf_counter()
    for r in rows:
        one(r, out)
    q.put(time.perf_counter() - t)


def ceiling(store: Path, k: int, n: int, work: Path) -> float:
    """Plain processes analysing K bundles: n at once against one alone (see the module doc)."""
    import multiprocessing as mp

    from gmpanalysis.fleet.store import list_bundles

    b = list_bundles([str(store)]).sort_values("key", ignore_index=True)
    rows = b.iloc[:: max(len(b) // k, 1)].head(k).to_dict("records")  # every run of the store, spread
    ctx = mp.get_context("spawn")
    walls = {}
    for m in (1, n):
        q, barrier = ctx.Queue(), ctx.Barrier(m)
        procs = [ctx.Process(target=_probe, args=(rows, str(work / f"ceiling-{m}-{i}"), barrier, q)) for i in range(m)]
        for p in procs:
            p.start()
        try:
            walls[m] = [q.get(timeout=600) for _ in procs]
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.exitcode is None:
                    p.kill()
    one = walls[1][0]
    scale = n * one / max(walls[n])
    print(
        f"ceiling without Dask: {len(rows)} bundles by 1 process alone {one:.2f} s; by {n} at once "
        f"{min(walls[n]):.2f}-{max(walls[n]):.2f} s each: {scale:.2f}x the throughput of one"
    )
    return scale


def build_store(n: int, work: Path) -> tuple[Path, int]:
    from gmpanalysis.fleet import put_bundle

    runs = sorted(p for p in (ROOT / "fixtures" / "runs").iterdir() if (p / "meta.json").exists())
    store = work / "store"
    tmp = work / "relabel"
    samples = 0
    for i in range(n):
        src = runs[i % len(runs)]
        dst = tmp / f"b{i}"
        if not dst.exists():
            shutil.copytree(src, dst)
            meta = json.loads((src / "meta.json").read_text())
            meta.update(cluster=f"bench{i % 4}", namespace=f"ns{i % 10}", pod=f"{src.name}-{i}", capture=f"c{i}")
            (dst / "meta.json").write_text(json.dumps(meta))
        put_bundle(dst, store)
        samples += sum(1 for _ in (dst / "cpu_stat.csv").open()) - 1
    return store, samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=1000, help="bundles in the store (default: 1000)")
    ap.add_argument("--work", default="/tmp/gmp-bench-fleet", help="scratch directory (default: /tmp/gmp-bench-fleet)")
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated (default: 1,2)")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the rows as a Markdown table here")
    ap.add_argument(
        "--ceiling", type=int, default=0, metavar="K", help="first time K bundles in plain processes (see above)"
    )
    a = ap.parse_args()
    counts = [int(x) for x in a.workers.split(",")]
    from machine import describe

    print(describe())
    import dask
    import distributed

    from gmpanalysis.fleet import fleet

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    store, samples = build_store(a.n, work)
    print(f"store: {a.n} bundles, {samples:,} cpu.stat samples, built in {time.perf_counter() - t0:.0f} s")
    top = ceiling(store, a.ceiling, max(counts), work) if a.ceiling else None
    rates = {}
    rows = []
    for w in counts:
        out = work / f"out-{w}"
        shutil.rmtree(out, ignore_errors=True)
        # workers as gmpanalysis.fleet starts them: without Dask's statistical profiler,
        # whose kept stacks grow a worker per task (docs/fleet.md)
        with (
            dask.config.set({"distributed.worker.profile.enabled": False}),
            distributed.LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=None) as c,
        ):
            with distributed.Client(c) as client:
                t = time.perf_counter()
                s = fleet(store, out, scheduler=c.scheduler_address, progress=False)
                wall = time.perf_counter() - t
                peaks = client.run(vmhwm_mib)
        rates[w] = len(s) / wall
        workloads = s.groupby(["cluster", "namespace", "workload"]).ngroups
        print(
            f"{w} worker(s): {wall:.1f} s, {len(s) / wall:.2f} bundles/s, {samples / wall:,.0f} samples/s, "
            f"errors {int(s['error'].notna().sum())}, {workloads} workloads, advisor runs "
            f"{int(s['advice_s'].notna().sum())} ({s['advice_s'].sum():.1f} s), peak memory per worker (VmHWM) "
            + ", ".join(f"{v:.0f} MiB" for v in peaks.values())
        )
        lo, hi = min(peaks.values()), max(peaks.values())
        rows.append(
            [
                "same" if rows else describe().removeprefix("machine: "),
                str(w),
                f"{wall:.1f} s",
                f"{len(s) / wall:.1f}",
                f"{samples / wall:,.0f}",
                "",
                f"{int(s['advice_s'].notna().sum())} runs, {s['advice_s'].sum():.1f} s",
                f"{lo:.0f} MiB" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f} MiB",
            ]
        )
    if 1 in rates:
        print("scaling against 1 worker: " + ", ".join(f"{w}: {rates[w] / rates[1]:.2f}x" for w in counts if w != 1))
        for r in rows:
            r[5] = "" if r[1] == "1" else f"{rates[int(r[1])] / rates[1]:.2f}x"
    if a.markdown:
        head = (
            "| machine | workers | wall time | bundles/s | cpu.stat samples/s | scaling | advisor "
            "| peak memory per worker (VmHWM) |\n|---|---|---|---|---|---|---|---|\n"
        )
        note = (
            f"<!-- rewritten by: .venv/bin/python benchmarks/bench_fleet.py {a.n} --workers {a.workers} "
            f"--markdown PATH -->\n<!-- {a.n:,} bundles ({samples:,} samples) -->\n\n"
        )
        if top is not None:
            note += (
                f"Plain processes without Dask, {a.ceiling} bundles each, {max(counts)} at once: {top:.2f}x the "
                "throughput of one alone (the most this machine allows).\n\n"
            )
        a.markdown.write_text(note + head + "".join("| " + " | ".join(r) + " |\n" for r in rows))
        print(f"wrote {a.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
