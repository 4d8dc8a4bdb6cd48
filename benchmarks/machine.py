"""One line naming the machine a benchmark ran on, printed beside its ratios: CPUs this
process may use (and the machine's), CPU model, kernel, cgroup version, load, Python and
numpy. Ratios move with all of these."""

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


def describe() -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    version = detect_version()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"machine: {usable} of {os.cpu_count()} CPUs ({_cpu_model()}), Linux {platform.release()}, "
        f"cgroup {'v' + str(version) if version else 'none'}, load {load}; "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )


if __name__ == "__main__":
    print(describe())
