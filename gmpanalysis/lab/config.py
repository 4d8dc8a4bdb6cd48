"""One lab experiment's settings (:class:`LabConfig`), read by the run, its processes and
the VM lab alike."""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass
class LabConfig:
    """One lab experiment. Defaults reproduce the classic result on a 2-core machine."""

    name: str = "lab"  # bundle name, recorded in meta.json
    cpu_limit: float | None = 0.5  # CPUs; quota = limit × period (None: no limit)
    period_us: int = 100_000  # CFS period
    burst_us: int = 0  # cpu.cfs_burst_us / cpu.max.burst
    gomaxprocs: int | None = None  # GOMAXPROCS env of the app; None: unset (runtime default)
    workload: str = "cpu"  # "cpu": pure compute per request; "alloc": compute + garbage + live heap
    work_ms: float = 30.0  # calibrated CPU per request, ms
    alloc_kb: int = 4096  # garbage per request for workload "alloc", KiB
    live_mb: int = 64  # live pointer-rich heap for workload "alloc", MiB
    iters_per_ms: int | None = None  # work calibration; None: measure once outside the cgroup
    mode: str = "open"  # load: "open" (arrival rate) or "closed" (fixed clients)
    arrivals: str = "poisson"  # open loop: "poisson" or "constant"
    rate: float | None = None  # open loop req/s; None: 80 % of what the quota can serve
    concurrency: int = 4  # closed loop clients (open loop: initial workers)
    duration_s: float = 6.0  # load duration
    max_requests: int = 100_000  # load bound in count
    seed: int = 1  # Poisson schedule seed
    trace_start_s: float = 1.0  # trace window start, after load starts
    trace_s: float = 4.0  # trace window length (0: no trace)
    sample_interval_us: int = 997  # sampler interval; not a divisor of the period, on purpose
    sampler_fifo: bool = True  # SCHED_FIFO sampler (root, root cpu cgroup)
    cgroup_root: str = "/sys/fs/cgroup"  # cgroup mount
    cgroup_parent: str = ""  # parent cgroup, relative to the mount (v2: a delegated subtree)
    parent_cpu_limit: float | None = None  # a pod-like parent cgroup with this quota (CPUs); None: none
    resize_at_s: float | None = None  # rewrite the quota in place this long after the load starts
    cpu_limit_after: float | None = None  # the limit written then (CPUs; None: no limit)
    app_build: str = "default"  # demo app build: "default" (go 1.26 module), "go124", "automaxprocs"
    # each request's own CPU in requests.csv's cpu_ns (the handler holds its OS thread while
    # it runs, for the thread CPU clock: more thread hand-offs); False: not measured
    cpu_header: bool = True
    # "lab": gmp-lab-* cgroups under cgroup_parent; "kubelet...": the tree a kubelet makes
    # (levels.LAYOUTS: systemd or cgroupfs driver, containerd or CRI-O names), the pod's quota
    # the container's unless parent_cpu_limit says otherwise (a one-container pod)
    layout: str = "lab"

    def effective_rate(self) -> float:
        """The open loop's rate: as given, else 80 % of what the group can serve at the
        start (the least of its limit, the parent's and the machine's CPUs)."""
        if self.rate is not None:
            return self.rate
        cpus = min(x for x in (self.cpu_limit, self.parent_cpu_limit, float(os.cpu_count() or 1)) if x is not None)
        return round(0.8 * cpus * 1000.0 / self.work_ms, 2)
