"""One line naming the machine a benchmark ran on, printed beside its ratios: CPUs this
process may use (and the machine's; their cores and threads per core), CPU model, kernel,
cgroup version, load, Python and numpy. Ratios move with all of these."""

from __future__ import annotations

import os
import platform

import numpy as np

from gmpanalysis.cgroup import detect_version


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _topology(cpus: set[int]) -> str:
    """Cores and threads per core of the CPUs given, from sysfs: 16 CPUs may be 8 cores of
    two hyperthreads, which share a core's units (CPU-bound work scales less than 16x)."""
    cores = set()
    for c in cpus:
        base = f"/sys/devices/system/cpu/cpu{c}/topology"
        try:
            with open(f"{base}/physical_package_id") as f, open(f"{base}/core_id") as g:
                cores.add((f.read().strip(), g.read().strip()))
        except OSError:
            return ""
    if not cores:
        return ""
    if len(cpus) == len(cores):
        return f"{len(cores)} cores, "
    per = len(cpus) / len(cores)
    if per == int(per):
        return f"{len(cores)} cores x {per:g} threads, "
    return f"on {len(cores)} cores, "  # part of some cores' threads


def describe() -> str:
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    usable = len(mine)
    version = detect_version()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"machine: {usable} of {os.cpu_count()} CPUs ({_topology(mine)}{_cpu_model()}), Linux {platform.release()}, "
        f"cgroup {'v' + str(version) if version else 'none'}, load {load}; "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )


if __name__ == "__main__":
    print(describe())
