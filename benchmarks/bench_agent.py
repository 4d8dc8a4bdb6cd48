"""What gmp-agent costs while it only watches: its own CPU per 100 watched containers.

    sudo .venv/bin/python benchmarks/bench_agent.py [--containers 100] [--seconds 60] [--repeats 3]

Real cgroups (root; cgroup v1 here, v2 where the machine has it): for each container a pod
cgroup and a container cgroup inside it, each with a CFS quota, a sleeping process in the
container, as the kubelet lays them out. The agent watches both levels of every container
(--watch-cgroup; on Kubernetes it reads the same two files per container) once a second
with its default trigger and no capture budget (--max-per-hour 0), so only the watching is
measured: utime + stime of the agent's process from /proc/PID/stat over the window.

The peer, measured in the same run: gmp-sampler reading one container's two levels at
997 µs (what continuous sampling of one container costs, the thing the agent avoids). The
budget is 1 % of a core for 100 containers. Not a test; numbers move with the
machine and whatever else runs on it (repeats give the spread).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def measure(argv: list[str], seconds: float, warmup: float = 3.0) -> float:
    """Percent of one core the process used over ``seconds`` after a warm-up."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(warmup)
        if p.poll() is not None:
            raise SystemExit(f"{argv[0]} exited {p.returncode}: {' '.join(argv)}")
        c0, t0 = cpu_s(p.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_s(p.pid), time.monotonic()
        return 100 * (c1 - c0) / (t1 - t0)
    finally:
        p.terminate()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--containers", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    from gmpanalysis.lab import LabCgroup, ensure_binaries

    bins = ensure_binaries()
    tag = f"gmp-lab-agentbench-{os.getpid()}"
    pods, cons, sleepers = [], [], []
    try:
        for i in range(a.containers):
            pod = LabCgroup(f"{tag}-pod{i}")
            pod.create(quota_us=100_000, period_us=100_000)
            pods.append(pod)
            c = LabCgroup("gmp-lab-c", parent=pod.rel)
            c.create(quota_us=50_000, period_us=100_000)
            cons.append(c)
            sleepers.append(subprocess.Popen(["sleep", "3600"], preexec_fn=c.join_in_child))
        agent = [
            str(bins["gmp-agent"]),
            "--sampler",
            str(bins["gmp-sampler"]),
            "--max-per-hour",
            "0",
            "--out",
            "/nonexistent",
        ]
        for i, (p, c) in enumerate(zip(pods, cons, strict=True)):
            agent += ["--watch-cgroup", f"p{i}={p.rel}", "--watch-cgroup", f"c{i}={c.rel}"]
        sampler = [str(bins["gmp-sampler"]), "--cgroup", f"container={cons[0].rel}", "--cgroup", f"pod={pods[0].rel}",
                   "--out", "/dev/null"]  # fmt: skip
        rows = []
        for r in range(a.repeats):
            ag = measure(agent, a.seconds)
            sa = measure(sampler, a.seconds)
            rows.append((ag, sa))
            print(
                f"repeat {r + 1}: agent {ag:.3f} % of a core watching {a.containers} containers "
                f"({2 * a.containers} cgroups, 1 Hz); sampler on 1 container at 997 µs {sa:.2f} %",
                flush=True,
            )
        ags = [x for x, _ in rows]
        sas = [y for _, y in rows]
        per100 = [x * 100 / a.containers for x in ags]
        print(
            f"agent per 100 containers: median {statistics.median(per100):.3f} % of a core "
            f"(min {min(per100):.3f}, max {max(per100):.3f}; budget 1 %); "
            f"sampler on one container: median {statistics.median(sas):.2f} %; "
            f"ratio agent(100 containers) / sampler(1 container) = "
            f"{statistics.median(per100) / statistics.median(sas):.3f}"
        )
    finally:
        for s in sleepers:
            s.kill()
            s.wait()
        for c in cons:
            c.remove()
        for p in pods:
            p.remove()


if __name__ == "__main__":
    main()
