"""``gmpanalysis lab``: its arguments and its commands (run, sweep, clean)."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from .cgroup import DEFAULT_PERIOD_US
from .cliargs import (
    bundle_name,
    cgroup_parent,
    check_out_dir,
    duration,
    existing_dir,
    float_in,
    int_in,
    progress,
)
from .errors import UsageError


def _lab_config(a: argparse.Namespace):  # -> LabConfig
    from .lab import LabConfig, parse_cpu_limit

    g = getattr(a, "gomaxprocs", None)
    parent = None if a.parent_cpu_limit is None else parse_cpu_limit(a.parent_cpu_limit)
    if a.parent_cpu_limit is not None and parent is None:
        raise UsageError("--parent-cpu-limit none: leave the option out for no pod-like parent")
    if (a.resize_at is None) != (a.cpu_limit_after is None):
        raise UsageError("--resize-at and --cpu-limit-after go together (e.g. --resize-at 10 --cpu-limit-after 2000m)")
    return LabConfig(
        name=a.name,
        cpu_limit=parse_cpu_limit(a.cpu_limit),
        period_us=a.period_us,
        burst_us=a.burst_us,
        gomaxprocs=g,
        workload=a.workload,
        work_ms=a.work_ms,
        alloc_kb=a.alloc_kb,
        live_mb=a.live_mb,
        mode=a.mode,
        arrivals=a.arrivals,
        rate=a.rate,
        concurrency=a.concurrency,
        duration_s=a.duration,
        max_requests=a.max_requests,
        seed=a.seed,
        trace_start_s=a.trace_start,
        trace_s=a.trace_seconds,
        sample_interval_us=a.interval_us,
        sampler_fifo=not a.no_fifo,
        cgroup_root=a.cgroup_root,
        cgroup_parent=a.cgroup_parent,
        parent_cpu_limit=parent,
        resize_at_s=a.resize_at,
        cpu_limit_after=None if a.cpu_limit_after is None else parse_cpu_limit(a.cpu_limit_after),
        app_build=a.app_build,
        cpu_header=not a.no_cpu_header,
        layout=a.layout or ("kubelet" if a.kernel else "lab"),
    )


def _vm_spec(a: argparse.Namespace):  # -> VmSpec | None
    """--kernel/--cpus/--vm-memory-mb as the VM to run in (None: this machine)."""
    if a.kernel is None:
        if a.cpus is not None:
            raise UsageError("--cpus sets the VM's vCPUs: it goes with --kernel (the host's CPUs are what they are)")
        return None
    from .lab.vm import DEFAULT_MEMORY_MB, VmSpec

    return VmSpec(kernel=a.kernel, cpus=a.cpus or 2, memory_mb=a.vm_memory_mb or DEFAULT_MEMORY_MB)


def add_lab_args(p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``gmpanalysis lab run`` and ``lab sweep`` (the lab's configuration) to ``p``."""
    from .lab.levels import LAYOUTS

    p.add_argument("--name", type=bundle_name, default="lab", help="bundle name (default: lab)")
    p.add_argument("--cpu-limit", default="500m", help="CPU limit: 500m, 0.5, 2 or none (default: 500m)")
    p.add_argument(
        "--period-us",
        type=int_in(1_000, 1_000_000),
        default=DEFAULT_PERIOD_US,
        help=f"CFS period in µs, 1000..1000000 (default: {DEFAULT_PERIOD_US}, the kernel's)",
    )
    p.add_argument("--burst-us", type=int_in(0), default=0, help="CFS burst in µs (default: 0)")
    p.add_argument(
        "--workload",
        choices=["cpu", "alloc"],
        default="cpu",
        help="cpu: pure compute per request; alloc: compute + garbage + a live heap",
    )
    p.add_argument(
        "--work-ms", type=float_in(0, 10_000, lo_open=True), default=30.0, help="CPU per request in ms (default: 30)"
    )
    p.add_argument("--alloc-kb", type=int_in(0), default=4096, help="garbage per request for --workload alloc (KiB)")
    p.add_argument("--live-mb", type=int_in(0), default=64, help="live heap for --workload alloc (MiB)")
    p.add_argument("--mode", choices=["open", "closed"], default="open", help="load loop (default: open)")
    p.add_argument("--arrivals", choices=["poisson", "constant"], default="poisson", help="open-loop arrivals")
    p.add_argument(
        "--rate",
        type=float_in(0, 1e6, lo_open=True),
        default=None,
        help="open-loop req/s (default: 80%% of the quota's capacity)",
    )
    p.add_argument("--concurrency", type=int_in(1, 10_000), default=4, help="closed-loop clients (default: 4)")
    p.add_argument(
        "--duration", type=float_in(0, 3600, lo_open=True), default=6.0, help="load duration in s (default: 6)"
    )
    p.add_argument("--max-requests", type=int_in(1), default=100_000, help="load bound in requests")
    p.add_argument("--seed", type=int_in(-(1 << 63), (1 << 63) - 1), default=1, help="arrival schedule seed")
    p.add_argument("--trace-start", type=float_in(0, 3600), default=1.0, help="trace window start after load start, s")
    p.add_argument("--trace-seconds", type=float_in(0, 3600), default=4.0, help="trace window length, s (0: none)")
    p.add_argument(
        "--interval-us", type=int_in(1, 1_000_000), default=997, help="sampling interval in µs (default: 997)"
    )
    p.add_argument("--no-fifo", action="store_true", help="sampler under SCHED_OTHER instead of SCHED_FIFO")
    p.add_argument("--cgroup-root", type=existing_dir, default="/sys/fs/cgroup", help="cgroup mount")
    p.add_argument(
        "--cgroup-parent",
        type=cgroup_parent,
        default="",
        help="parent cgroup for the lab's cgroup (v2: delegated subtree)",
    )
    p.add_argument(
        "--parent-cpu-limit",
        default=None,
        help="put the app's cgroup inside a pod-like parent with this CPU limit of its own (e.g. 500m); "
        "both levels are sampled",
    )
    p.add_argument(
        "--resize-at",
        type=duration(0, 3600),
        default=None,
        help="rewrite the limit in place this long after load start (s)",
    )
    p.add_argument("--cpu-limit-after", default=None, help="the limit written at --resize-at: 2000m, 0.5 or none")
    p.add_argument(
        "--app-build",
        choices=["default", "go124", "automaxprocs"],
        default="default",
        help="demo app build: default (go 1.26 module: the runtime follows the limit), go124 (a go 1.24 module "
        "line: NumCPU), automaxprocs (go.uber.org/automaxprocs, set once at start)",
    )
    p.add_argument(
        "--kernel",
        metavar="SERIES",
        default=None,
        help="run inside a VM of Debian's newest kernel of this series (e.g. 6.1, 6.12; cgroup v2; qemu, TCG); "
        "default: this machine's kernel",
    )
    p.add_argument("--cpus", type=int_in(1, 64), default=None, help="the VM's vCPUs with --kernel (default: 2)")
    p.add_argument(
        "--vm-memory-mb", type=int_in(512, 65536), default=None, help="the VM's memory with --kernel (default: 2048)"
    )
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=None,
        help="cgroup names: lab (gmp-lab-*) or a kubelet's: kubelet (systemd driver, containerd: "
        "kubepods.slice/.../cri-containerd-<id>.scope), kubelet-crio (crio-<id>.scope), kubelet-cgroupfs "
        "(kubepods/burstable/pod<uid>/<id>), kubelet-cgroupfs-crio (.../crio-<id>); the pod's quota the "
        "container's unless --parent-cpu-limit; only where no kubelet made that tree; default: kubelet with "
        "--kernel, else lab",
    )
    p.add_argument(
        "--no-cpu-header",
        action="store_true",
        help="do not record each request's own CPU (requests.csv cpu_ns): the handler then does not hold its OS "
        "thread while it runs",
    )


def cmd_lab_run(a: argparse.Namespace) -> int:
    from .lab import run_lab

    cfg = _lab_config(a)
    vm = _vm_spec(a)
    out = Path(a.out or f"runs/{cfg.name}")
    check_out_dir(str(out), "-o", empty=True)
    if vm is not None:
        from .lab.vm import run_vm_lab

        run_vm_lab(cfg, out, vm, progress=progress)
    else:
        run_lab(cfg, out, progress=progress)
    print(out)
    return 0


def cmd_lab_sweep(a: argparse.Namespace) -> int:
    from .lab import sweep

    cfg = _lab_config(a)
    vm = _vm_spec(a)
    check_out_dir(a.out, "-o", empty=False)
    runner = None
    if vm is not None:
        from .lab.vm import run_vm_lab

        runner = functools.partial(run_vm_lab, spec=vm)
    for p in sweep(cfg, a.gomaxprocs_values, a.out, progress=progress, runner=runner):
        print(p)
    return 0


def cmd_lab_clean(a: argparse.Namespace) -> int:
    from .lab.run import reap_stale_cgroups

    removed = reap_stale_cgroups(a.cgroup_root, a.cgroup_parent)
    for d in removed:
        print(d)
    progress(f"removed {len(removed)} cgroup(s) left by killed lab runs")
    return 0
