"""The ``gmpanalysis`` command."""

from __future__ import annotations

import argparse
import functools
import io
import math
import os
import re
import stat
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from .errors import GmpError, GmpWarning, UsageError


def _default_bundles() -> list[Path]:
    """The example runs (GMP_DATA, a source checkout's fixtures, or the installed package's copy)."""
    from .examples import example_runs

    return example_runs()


def _progress(msg: str) -> None:
    if msg.startswith("\r"):
        if sys.stderr.isatty():
            print(msg, end="", file=sys.stderr, flush=True)
        return
    if msg:
        print(msg, file=sys.stderr, flush=True)


def _check_out_file(text: str, opt: str) -> Path:
    """The file a command will write, refused before any work when it cannot be one: an
    empty path, a directory, a parent that does not exist or is not a directory. (Writing
    can still fail, /dev/full say: the writer says so, naming the file.)"""
    if not text:
        raise UsageError(f"{opt} '': give the path of the file to write")
    p = Path(text)
    if p.is_dir():
        raise UsageError(f"{opt} {p}: is a directory; give a file path, e.g. {p / 'out'}")
    _check_parent(p, opt)
    return p


def _check_parent(p: Path, opt: str) -> None:
    parent = p.parent
    if not parent.exists():
        up = next((a for a in parent.parents if a.exists()), None)
        if up is not None and not up.is_dir():
            raise UsageError(f"{opt} {p}: {up} is not a directory")
        raise UsageError(f"{opt} {p}: no such directory {parent}; create it first")
    if not parent.is_dir():
        raise UsageError(f"{opt} {p}: {parent} is not a directory")


def _check_out_dir(text: str, opt: str, *, empty: bool) -> Path:
    """A directory a command will write into (created if missing): refused up front when
    something else is in its place or, with ``empty``, when it holds anything (bundles are
    never overwritten)."""
    if not text:
        raise UsageError(f"{opt} '': give a directory")
    p = Path(text)
    if p.exists():
        if not p.is_dir():
            raise UsageError(f"{opt} {p}: not a directory; give a directory (new, or empty)")
        if empty and any(p.iterdir()):
            raise UsageError(
                f"{opt} {p}: exists and is not empty; bundles are never overwritten: choose a new directory"
            )
        return p
    up = next((a for a in p.parents if a.exists()), None)
    if up is not None and not up.is_dir():
        raise UsageError(f"{opt} {p}: {up} is not a directory")
    return p


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


# --- argument types: a value out of range is argparse's usage error, naming the option ---

_INT = re.compile(r"-?(0|[1-9][0-9]*)")  # ASCII digits: int() would also take "١٢" or "1_000"


def _int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: a decimal integer in [lo, hi]."""

    def parse(text: str) -> int:
        t = text.strip()
        if not _INT.fullmatch(t):
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
        v = int(t)
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{v} is out of range: {lo}..{hi if hi is not None else ''}")
        return v

    return parse


def _float_in(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [lo, hi] ((lo, hi] with lo_open)."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        return _in_range(text, v, lo, hi, lo_open)

    return parse


def _in_range(text: str, v: float, lo: float, hi: float, lo_open: bool) -> float:
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if v < lo or (lo_open and v == lo) or v > hi:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: {'(' if lo_open else '['}{lo:g}, {hi:g}]")
    return v


def _gomaxprocs(text: str) -> int | None:
    """--gomaxprocs: a positive integer, or 'unset'/'default' (the env variable not set)."""
    if text.strip().lower() in ("unset", "default"):
        return None
    return _int_in(1, 1 << 20)(text)


def _gomaxprocs_values(text: str) -> list[int | None]:
    """--gomaxprocs-values: a comma list of positive integers and 'unset'."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty list: give e.g. 1,2,8 or unset,2")
    try:
        return [_gomaxprocs(v) for v in text.split(",")]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e} (give e.g. 1,2,8 or unset,2)") from None


def _cgroup_parent(text: str) -> str:
    """--cgroup-parent: a path below the cgroup mount; it may not climb out of it."""
    from .lab.cgroups import check_cgroup_parent

    try:
        return check_cgroup_parent(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _existing_dir(text: str) -> str:
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory (the cgroup mount, e.g. /sys/fs/cgroup)")
    return text


def _name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the bundle name may not be empty")
    return text


def _add_lab_args(p: argparse.ArgumentParser) -> None:
    from .lab.levels import LAYOUTS

    p.add_argument("--name", type=_name, default="lab", help="bundle name (default: lab)")
    p.add_argument("--cpu-limit", default="500m", help="CPU limit: 500m, 0.5, 2 or none (default: 500m)")
    p.add_argument(
        "--period-us",
        type=_int_in(1_000, 1_000_000),
        default=100_000,
        help="CFS period in µs, 1000..1000000 (default: 100000)",
    )
    p.add_argument("--burst-us", type=_int_in(0), default=0, help="CFS burst in µs (default: 0)")
    p.add_argument(
        "--workload",
        choices=["cpu", "alloc"],
        default="cpu",
        help="cpu: pure compute per request; alloc: compute + garbage + a live heap",
    )
    p.add_argument(
        "--work-ms", type=_float_in(0, 10_000, lo_open=True), default=30.0, help="CPU per request in ms (default: 30)"
    )
    p.add_argument("--alloc-kb", type=_int_in(0), default=4096, help="garbage per request for --workload alloc (KiB)")
    p.add_argument("--live-mb", type=_int_in(0), default=64, help="live heap for --workload alloc (MiB)")
    p.add_argument("--mode", choices=["open", "closed"], default="open", help="load loop (default: open)")
    p.add_argument("--arrivals", choices=["poisson", "constant"], default="poisson", help="open-loop arrivals")
    p.add_argument(
        "--rate",
        type=_float_in(0, 1e6, lo_open=True),
        default=None,
        help="open-loop req/s (default: 80%% of the quota's capacity)",
    )
    p.add_argument("--concurrency", type=_int_in(1, 10_000), default=4, help="closed-loop clients (default: 4)")
    p.add_argument(
        "--duration", type=_float_in(0, 3600, lo_open=True), default=6.0, help="load duration in s (default: 6)"
    )
    p.add_argument("--max-requests", type=_int_in(1), default=100_000, help="load bound in requests")
    p.add_argument("--seed", type=_int_in(-(1 << 63), (1 << 63) - 1), default=1, help="arrival schedule seed")
    p.add_argument("--trace-start", type=_float_in(0, 3600), default=1.0, help="trace window start after load start, s")
    p.add_argument("--trace-seconds", type=_float_in(0, 3600), default=4.0, help="trace window length, s (0: none)")
    p.add_argument(
        "--interval-us", type=_int_in(1, 1_000_000), default=997, help="sampling interval in µs (default: 997)"
    )
    p.add_argument("--no-fifo", action="store_true", help="sampler under SCHED_OTHER instead of SCHED_FIFO")
    p.add_argument("--cgroup-root", type=_existing_dir, default="/sys/fs/cgroup", help="cgroup mount")
    p.add_argument(
        "--cgroup-parent",
        type=_cgroup_parent,
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
        type=_duration(0, 3600),
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
    p.add_argument("--cpus", type=_int_in(1, 64), default=None, help="the VM's vCPUs with --kernel (default: 2)")
    p.add_argument(
        "--vm-memory-mb", type=_int_in(512, 65536), default=None, help="the VM's memory with --kernel (default: 2048)"
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
    _check_out_dir(str(out), "-o", empty=True)
    if vm is not None:
        from .lab.vm import run_vm_lab

        run_vm_lab(cfg, out, vm, progress=_progress)
    else:
        run_lab(cfg, out, progress=_progress)
    print(out)
    return 0


def cmd_lab_sweep(a: argparse.Namespace) -> int:
    from .lab import sweep

    cfg = _lab_config(a)
    vm = _vm_spec(a)
    _check_out_dir(a.out, "-o", empty=False)
    runner = None
    if vm is not None:
        from .lab.vm import run_vm_lab

        runner = functools.partial(run_vm_lab, spec=vm)
    for p in sweep(cfg, a.gomaxprocs_values, a.out, progress=_progress, runner=runner):
        print(p)
    return 0


def cmd_lab_clean(a: argparse.Namespace) -> int:
    from .lab.run import reap_stale_cgroups

    removed = reap_stale_cgroups(a.cgroup_root, a.cgroup_parent)
    for d in removed:
        print(d)
    _progress(f"removed {len(removed)} cgroup(s) left by killed lab runs")
    return 0


def cmd_summary(a: argparse.Namespace) -> int:
    import pandas as pd

    from .bundle import load_run
    from .frames import compare_runs

    paths = [Path(p) for p in a.bundles] or _default_bundles()
    if not paths:
        print("no bundles given and no example runs found; pass bundle directories", file=sys.stderr)
        return 2
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in paths:
            run = load_run(p)
            for n in run.notes:
                print(f"{p}: note: {n}", file=sys.stderr)
            runs.append(run)
    df = compare_runs(runs)
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.float_format", "{:.1f}".format):
        print(df.set_index("name").T.to_string())
    return 0


def cmd_advise(a: argparse.Namespace) -> int:
    import pandas as pd

    from .advise import advise
    from .bundle import load_run

    paths = [Path(p) for p in a.bundles]
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in paths:
            runs.append(load_run(p))
        t = advise(runs, objective=a.objective, cpus=a.cpus, max_limit=a.max_limit)
    cols = ["rank", "limit_cpu", "gomaxprocs", "burst_us", "throttled_pct", "stall_ms_per_s", "p99_ms", "cost_cpu"]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.2f}".format):
        print(t[cols].head(a.top).to_string(index=False))
        print()
        print(t.attrs["recommendation"])
        b = t.attrs["baselines"]
        if len(b):
            print()
            print("the same limit with GOMAXPROCS by each rule, and the run as it was:")
            keep = ["setting", "limit_cpu", "throttled_pct", "p99_ms", "throttled_worse_points", "p99_worse_pct"]
            print(b[keep].to_string(index=False))
    err = ", ".join(f"{k} {v[0]:g} (p90 {v[1]:g}) {v[2]}" for k, v in t.attrs["model_error"].items())
    if err:
        print(f"\nthe model's held-out error on real runs in this regime ({t.attrs['regime']}; median, p90): {err}")
    else:
        print(f"\nthe model has not been validated in this regime ({t.attrs['regime']}): no error bars")
    return 0


def cmd_fleet(a: argparse.Namespace) -> int:
    import pandas as pd

    from .fleet import df_fleet_workloads, fleet
    from .fleet.compute import REPORT, default_out

    out = a.out or default_out(a.sources)
    summary = fleet(a.sources, out, scheduler=a.scheduler, workers=a.workers, progress=not a.no_progress)
    wl = df_fleet_workloads(summary)
    cols = ["namespace", "workload", "bundles", "frozen_cpu_s_per_h", "frozen_wall_pct", "throttled_pct_wall",
            "stw_spanning_per_h",
            "gomaxprocs", "limit_cpus"]  # fmt: skip
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.2f}".format):
        print(wl[cols].head(a.top).to_string(index=False))
    bad = int(summary["error"].notna().sum())
    print(f"\n{len(summary)} bundles ({bad} not analysed); tables under {out}, report {out.rstrip('/')}/{REPORT}")
    return 0


def cmd_store_put(a: argparse.Namespace) -> int:
    import shutil

    from .errors import GmpError
    from .fleet import put_bundle
    from .fleet.store import finished_bundles

    failed = 0
    for b in a.bundles:
        if (Path(b) / "meta.json").exists():
            todo = [Path(b)]
        else:
            # a directory of bundles (gmp-agent's spool): the finished ones; those still
            # being written are left for the next put
            todo, busy = finished_bundles(b)
            for d in busy:
                print(f"{d}: still being written: left for the next put", file=sys.stderr)
        for d in todo:
            try:
                print(put_bundle(d, a.store, cluster=a.cluster))
            except GmpError as e:  # one bad bundle does not hold the others back
                print(f"gmpanalysis: {e}", file=sys.stderr)
                failed += 1
                if a.move and d.parent != Path(b).parent:
                    # set aside in the spool, out of the next puts' way (and counted by the
                    # agent's spool cap until someone looks)
                    aside = d.parent / ".failed" / d.name
                    aside.parent.mkdir(exist_ok=True)
                    if aside.exists():  # a bundle of that name set aside before: keep both
                        aside = aside.with_name(f"{d.name}.{time.time_ns()}")
                    d.rename(aside)
                    print(f"gmpanalysis: {d} set aside as {aside}", file=sys.stderr)
                continue
            if a.move:
                shutil.rmtree(d)  # it is in the store (its meta.json last): the copy may go
    if failed:
        print(f"gmpanalysis: {failed} bundle(s) not stored (above); the others are stored", file=sys.stderr)
    return 1 if failed else 0


def cmd_store_ls(a: argparse.Namespace) -> int:
    from .fleet import list_bundles

    for k in list_bundles(a.store)["key"]:
        print(k)
    return 0


def cmd_trace(a: argparse.Namespace) -> int:
    import pandas as pd

    from .gotrace import read_trace
    from .gotrace.summary import RUNNING_NOTE, df_running_by_p, df_stw_by_kind, gc_cpu_text

    path = Path(a.file)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG  # read_trace says it is missing
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror}); give a trace file") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{path}: is a directory; give a trace file, e.g. {path / 'trace.out'}")
    if not stat.S_ISREG(mode):
        # a FIFO would block the read, /dev/zero never end it
        raise UsageError(f"{path}: not a regular file; give a trace file (runtime/trace, /debug/pprof/trace)")
    size = path.stat().st_size if path.exists() else 0
    tr = read_trace(path)
    m = tr.meta
    span = (m["last_ns"] - m["first_ns"]) / 1e9
    print(f"{path}: go 1.{m['version']} trace, {m['events']:,} events, {size:,} bytes, {m['generations']} generations")
    print(f"span: {span:.3f} s  (CLOCK_MONOTONIC {m['first_ns']} .. {m['last_ns']} ns)")
    if m["truncated"] is not None:
        print(f"TRUNCATED at offset {m['truncated']}: the complete generations before it were read")
    gc = tr.gc
    if len(gc):
        mark = (gc.end_ns - gc.start_ns) / 1e6
        print(f"GC cycles: {len(gc)}  (mark phase p50 {mark.median():.2f} ms, max {mark.max():.2f} ms)")
    else:
        print("GC cycles: 0")
    print(
        "GOMAXPROCS: "
        + (
            ", ".join(f"{v} at +{(t - m['first_ns']) / 1e9:.3f}s" for t, v in tr.gomaxprocs.itertuples(index=False))
            or "no event"
        )
    )
    with pd.option_context("display.width", 120, "display.float_format", "{:.1f}".format):
        stw = df_stw_by_kind(tr)
        print("\nstop-the-world pauses by kind (µs):")
        print(stw.to_string(index=False) if len(stw) else "  none")
        print("\ngoroutine running time per P (wall time on the P, see the note):")
        print(df_running_by_p(tr).to_string(index=False))
    print(RUNNING_NOTE)
    print()
    print(gc_cpu_text(tr))
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from .bundle import load_run
    from .report import recording_notes, to_report

    out = _check_out_file(a.out, "-o")
    paths = [Path(p) for p in a.bundles] or _default_bundles()
    if not paths:
        print("no bundles given and no example runs found; pass bundle directories", file=sys.stderr)
        return 2
    runs, loading_notes = [], []
    with warnings.catch_warnings():
        # library noise (pandas, matplotlib) stays quiet; every GmpWarning is recorded instead
        # (here while loading, inside to_report while analysing) and shown in the report's
        # Data notes and below on stderr
        warnings.simplefilter("ignore")
        for p in paths:
            with recording_notes([]) as found:
                runs.append(load_run(p))
            loading_notes.append(found)
        out = to_report(runs, out, notes=loading_notes, progress=_progress)
    for p, run, found in zip(paths, runs, loading_notes, strict=True):
        for n in dict.fromkeys([*run.notes, *found]):
            print(f"{p}: note: {n}", file=sys.stderr)
    print(out)
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from .bundle import load_run
    from .export import to_chrome_trace

    out = _check_out_file(a.out, "-o")
    print(to_chrome_trace(load_run(a.bundle), out))
    return 0


def _duration(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a duration in seconds ("30", "30s", "500ms", "2m"), finite, in
    [lo, hi] ((lo, hi] with lo_open)."""

    def parse(text: str) -> float:
        t = text.strip().lower()
        try:
            if t.endswith("ms"):
                v = float(t[:-2]) / 1000
            elif t.endswith("m"):
                v = float(t[:-1]) * 60
            else:
                v = float(t[:-1]) if t.endswith("s") else float(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 30s, 2m)") from None
        return _in_range(text, v, lo, hi, lo_open)

    return parse


def cmd_collect(a: argparse.Namespace) -> int:
    from .kube import CollectConfig, collect

    _check_out_dir(a.out, "--out", empty=False)
    cfg = CollectConfig(
        namespace=a.namespace,
        pod=a.pod,
        selector=a.selector,
        container=a.container,
        duration_s=a.duration,
        pprof_port=None if a.pprof_port == 0 else a.pprof_port,
        pprof_host=a.pprof_host,
        pprof_path=a.pprof_path,
        out=Path(a.out),
        kubeconfig=a.kubeconfig,
        context=a.context,
        sampler_namespace=a.sampler_namespace,
    )
    # progress names pods as the API server sent them: escape what does not print
    for p in collect(cfg, log=lambda m: _progress(_one_line(m))):
        print(p)
    return 0


DEFAULT_INPUT = (
    "bundle directories (default: the example runs: $GMP_DATA if set, else a source checkout's "
    "fixtures/runs, else the copy inside the installed package)"
)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gmpanalysis", description="CFS CPU quotas and the Go runtime, period by period.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    sp = sub.add_parser("summary", help="runs side by side, per-period metrics (default: the example runs)")
    sp.add_argument("bundles", nargs="*", help=DEFAULT_INPUT)
    sp.set_defaults(func=cmd_summary)

    rp = sub.add_parser("report", help="self-contained HTML report (default: the example runs)")
    rp.add_argument("bundles", nargs="*", help=DEFAULT_INPUT)
    rp.add_argument("-o", "--out", default="report.html", help="output HTML file (default: report.html)")
    rp.set_defaults(func=cmd_report)

    ep = sub.add_parser("export", help="Chrome trace-event JSON of a bundle, for ui.perfetto.dev")
    ep.add_argument("bundle", help="bundle directory")
    ep.add_argument("-o", "--out", default="trace.json", help="output JSON (default: trace.json)")
    ep.set_defaults(func=cmd_export)

    cp = sub.add_parser("collect", help="bundles from pods in a Kubernetes cluster (needs the [kube] extra)")
    cp.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: the standard lookup)")
    cp.add_argument("--context", default=None, help="kubeconfig context")
    cp.add_argument("-n", "--namespace", required=True, help="the target pods' namespace")
    who = cp.add_mutually_exclusive_group(required=True)
    who.add_argument("--pod", help="target pod name")
    who.add_argument("-l", "--selector", help="label selector of target pods")
    cp.add_argument("--container", default=None, help="container (default: the pod's first)")
    cp.add_argument(
        "--duration", type=_duration(0, 3600, lo_open=True), default=30.0, help="window, e.g. 30s (default: 30s)"
    )
    cp.add_argument("--pprof-port", type=_int_in(0, 65535), default=6060, help="net/http/pprof port (0: no trace)")
    cp.add_argument(
        "--pprof-host", default=None, help="Host header of the trace request (default: 127.0.0.1:PORT, what is dialled)"
    )
    cp.add_argument("--pprof-path", default="/debug/pprof/trace", help="path of the trace endpoint")
    cp.add_argument("--sampler-namespace", default="gmp-system", help="namespace of the sampler DaemonSet")
    cp.add_argument("--out", default="runs", help="directory for the bundles (default: runs)")
    cp.set_defaults(func=cmd_collect)

    tp = sub.add_parser("trace", help="summary of a Go execution trace file")
    tp.add_argument("file", help="trace file (runtime/trace, go test -trace, /debug/pprof/trace)")
    tp.set_defaults(func=cmd_trace)

    av = sub.add_parser("advise", help="CPU limit, GOMAXPROCS and burst ranked by a replay of the runs' demand")
    av.add_argument("bundles", nargs="+", help="run bundle directories (runs of one service)")
    av.add_argument("--objective", choices=["throttle", "p99", "cost"], default="p99", help="what to rank by")
    av.add_argument("--cpus", type=_int_in(1, 4096), default=None, help="CPUs the service may use (default: the run's)")
    av.add_argument(
        "--max-limit", type=_float_in(0, 4096, lo_open=True), default=None, help="largest limit to consider, CPUs"
    )
    av.add_argument("--top", type=_int_in(1), default=10, help="rows to print (default: 10)")
    av.set_defaults(func=cmd_advise)

    fl = sub.add_parser("fleet", help="every bundle of a store or of bundle directories analysed on Dask")
    fl.add_argument("sources", nargs="+", help="a store (local directory or fsspec URL) or bundle directories")
    fl.add_argument("-o", "--out", default=None, help="where the Parquet tables and report go (default: STORE/derived)")
    fl.add_argument("--scheduler", default=None, help="a running Dask scheduler's address (default: a local cluster)")
    fl.add_argument("--workers", type=_int_in(1, 1024), default=None, help="local cluster workers (default: the CPUs)")
    fl.add_argument("--top", type=_int_in(1), default=20, help="workloads to print (default: 20)")
    fl.add_argument("--no-progress", action="store_true", help="no progress bar")
    fl.set_defaults(func=cmd_fleet)
    st = sub.add_parser("store", help="the bundle store: put bundles in, list them")
    stsub = st.add_subparsers(dest="storecmd", required=True)
    sp = stsub.add_parser("put", help="copy bundle directories into a store (a capture stored twice is one bundle)")
    sp.add_argument(
        "bundles", nargs="+", help="run bundle directories, or directories of them (gmp-agent's --out: finished ones)"
    )
    sp.add_argument("--store", required=True, help="the store: a local directory or an fsspec URL")
    sp.add_argument("--cluster", default=None, help="cluster name for bundles whose meta.json has none")
    sp.add_argument("--move", action="store_true", help="remove each bundle once it is in the store (empties a spool)")
    sp.set_defaults(func=cmd_store_put)
    sl = stsub.add_parser("ls", help="the keys of a store's bundles")
    sl.add_argument("store", help="the store")
    sl.set_defaults(func=cmd_store_ls)
    lab = sub.add_parser("lab", help="experiments under real cgroup quotas (root)")
    labsub = lab.add_subparsers(dest="labcmd", required=True)
    lr = labsub.add_parser("run", help="one run -> one bundle")
    _add_lab_args(lr)
    lr.add_argument(
        "--gomaxprocs",
        type=_gomaxprocs,
        default=None,
        help="GOMAXPROCS env of the app, a positive integer; 'default' or 'unset': not set (the default)",
    )
    lr.add_argument("-o", "--out", default=None, help="bundle directory (default: runs/NAME)")
    lr.set_defaults(func=cmd_lab_run)
    ls = labsub.add_parser("sweep", help="the same run at several GOMAXPROCS values")
    _add_lab_args(ls)
    ls.add_argument(
        "--gomaxprocs-values",
        type=_gomaxprocs_values,
        default="1,2,8",
        help="comma list, 'unset' allowed (default: 1,2,8)",
    )
    ls.add_argument("-o", "--out", default="runs", help="directory for the bundles (default: runs)")
    ls.set_defaults(func=cmd_lab_sweep)
    lc = labsub.add_parser("clean", help="remove the cgroups left by lab runs that were killed")
    lc.add_argument("--cgroup-root", type=_existing_dir, default="/sys/fs/cgroup", help="cgroup mount")
    lc.add_argument("--cgroup-parent", type=_cgroup_parent, default="", help="parent cgroup the runs used")
    lc.set_defaults(func=cmd_lab_clean)
    return ap


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    # the data was read but something in it is off: say it as a message, not as the Python
    # source line that happened to issue it
    what = "warning" if issubclass(category, GmpWarning) else category.__name__
    print(f"gmpanalysis: {what}: {message}", file=file or sys.stderr)


def _one_line(text: str) -> str:
    """An error message as one terminal line: its lines joined with "; ", characters that
    do not print (escape sequences, lone surrogates from undecodable names) escaped."""
    text = "; ".join(x.strip() for x in text.splitlines() if x.strip())
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in text)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    # names come from files and directories: a lone surrogate (an undecodable byte) in one
    # is printed escaped rather than ending the command with UnicodeEncodeError
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    showwarning = warnings.showwarning
    warnings.showwarning = _show_warning
    if sys.stderr.isatty():
        from .gotrace import reader

        reader.PROGRESS_BAR_BYTES = 50 << 20  # a big trace takes seconds: show how far it is
    try:
        return a.func(a)
    except BrokenPipeError:
        # the reader went away (`gmpanalysis summary | head`): nothing more to say to it; point
        # stdout at /dev/null so the interpreter's final flush does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command ended by a closed pipe
    except GmpError as e:
        # every error raised on purpose: one line, exit 2; anything else is a bug and keeps
        # its traceback
        print(f"gmpanalysis: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gmpanalysis: interrupted; processes stopped and cgroups removed", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = showwarning


if __name__ == "__main__":
    sys.exit(main())
