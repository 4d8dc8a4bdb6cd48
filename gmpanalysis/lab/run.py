"""Run the demo Go service under a real CFS quota, load it, and record a run bundle.

Order of a run: create the cgroup; start the sampler (outside the cgroup, SCHED_FIFO) so
the bundle holds the cgroup from its first period; start gmp-demoapp INSIDE the cgroup
before it execs (the Go runtime reads its cgroup limit at start); drive load from outside;
fetch the execution trace window from /debug/pprof/trace; stop everything by PID and remove
the cgroup, on success, failure or Ctrl-C alike.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..bundle import to_meta
from ..cgroup import MIN_QUOTA_US
from ..errors import GmpError, LabError
from ..schema import new_meta
from .binaries import ensure_binaries
from .cgroups import PREFIX, LabCgroup, check_cgroup_parent
from .config import LabConfig
from .levels import LAYOUTS, Levels, Resizer
from .procs import (
    fetch_trace,
    read_json,
    sampler_died,
    sampler_failed,
    start_app,
    start_load,
    start_sampler,
    stop_proc,
    wait_listening,
)
from .reaper import CgroupReaper

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """A progress callback that says nothing."""
    pass


def preflight(cfg: LabConfig) -> None:
    """Fail early, with what is needed, where the lab cannot run: the configuration first
    (a mistake in it is worth knowing before finding a machine to run on), then the machine."""
    check_config(cfg)
    if os.geteuid() != 0 and not os.access(cfg.cgroup_root, os.W_OK):
        raise LabError(
            f"the lab creates cgroups with CPU quotas: run it as root (or with write access to {cfg.cgroup_root})"
        )


def check_config(cfg: LabConfig) -> None:
    """The configuration's own mistakes (LabError), before any machine is touched."""
    check_cgroup_parent(cfg.cgroup_parent)
    if cfg.layout not in LAYOUTS:
        raise LabError(f"layout must be one of {', '.join(LAYOUTS)}, not {cfg.layout!r}")
    if cfg.workload not in ("cpu", "alloc"):
        raise LabError(f"workload must be 'cpu' or 'alloc', not {cfg.workload!r}")
    if cfg.mode not in ("open", "closed"):
        raise LabError(f"mode must be 'open' or 'closed', not {cfg.mode!r}")
    if cfg.cpu_limit is not None and not 0.001 <= cfg.cpu_limit <= 1024:
        raise LabError(f"cpu_limit {cfg.cpu_limit} is out of range (0.001..1024 CPUs)")
    if not 1000 <= cfg.period_us <= 1_000_000:
        raise LabError(f"period_us {cfg.period_us} is outside the kernel's range 1000..1000000")
    if cfg.gomaxprocs is not None and cfg.gomaxprocs < 1:
        raise LabError("gomaxprocs must be >= 1 (or unset)")
    if not 0 < cfg.duration_s <= 3600:
        raise LabError("duration_s must be in (0, 3600]: load runs are bounded")
    if cfg.trace_s and cfg.trace_start_s + cfg.trace_s > cfg.duration_s:
        raise LabError(f"trace window {cfg.trace_start_s}+{cfg.trace_s}s does not fit in the {cfg.duration_s}s run")
    if cfg.resize_at_s is not None and not 0 < cfg.resize_at_s < cfg.duration_s:
        raise LabError(f"resize_at_s {cfg.resize_at_s} is not inside the {cfg.duration_s}s run: no resize would happen")
    for what, cpus in (("cpu_limit", cfg.cpu_limit), ("parent_cpu_limit", cfg.parent_cpu_limit),
                       ("cpu_limit_after", cfg.cpu_limit_after)):  # fmt: skip
        if cpus is not None and round(cpus * cfg.period_us) < MIN_QUOTA_US:
            raise LabError(
                f"{what} {cpus:g} CPU is a quota of {cpus * cfg.period_us:g} µs per {cfg.period_us} µs period, below "
                f"the kernel's least ({MIN_QUOTA_US} µs: {MIN_QUOTA_US / cfg.period_us:g} CPU); give at least that, or "
                "a longer period (a kubelet raises such a limit to the least quota: give that limit to run its case)"
            )
    for what, cpus in (("cpu_limit", cfg.cpu_limit), ("cpu_limit_after", cfg.cpu_limit_after)):
        if cpus is not None and cfg.burst_us > round(cpus * cfg.period_us):
            raise LabError(
                f"burst_us {cfg.burst_us} is above the quota of {what} {cpus:g} CPU ({round(cpus * cfg.period_us)} µs "
                "per period): the kernel refuses a burst above the quota"
            )
    if 2 * cfg.sample_interval_us > cfg.period_us:
        raise LabError(
            f"sample_interval_us {cfg.sample_interval_us} is more than half the {cfg.period_us} µs period: the "
            f"analysis places the period grid from reads at least every half period; give at most "
            f"{(cfg.period_us // 2 - 1) | 1} µs (--interval-us; an odd number, so the reads sweep across the period)"
        )


def calibrate(bins: dict[str, Path]) -> int:
    """Loop iterations per ms of CPU, measured outside any quota (best of several rounds)."""
    out = subprocess.run([str(bins["gmp-demoapp"]), "-calibrate"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise LabError(f"gmp-demoapp -calibrate failed: {out.stderr.strip()}")
    return int(out.stdout.strip())


def kernel_hz(config: str | os.PathLike[str] | None = None) -> int | None:
    """CONFIG_HZ of the running kernel, from /proc/config.gz or /boot/config-RELEASE (or of
    the kernel whose build config ``config`` is).

    The tick rate bounds how stale cpuacct usage can be and when quota is enforced
    (at ticks); USER_HZ from sysconf is a different, fixed number.
    """
    import gzip

    where = (
        ((config, open),)
        if config is not None
        else (("/proc/config.gz", gzip.open), (f"/boot/config-{platform.release()}", open))
    )
    for path, opener in where:
        try:
            with opener(path, "rt") as f:
                for line in f:
                    if line.startswith("CONFIG_HZ="):
                        return int(line.split("=", 1)[1])
        except (OSError, ValueError):
            continue
    return None


def virtualization() -> str | None:
    """The hypervisor under this kernel: systemd-detect-virt --vm's word (kvm, qemu,
    microsoft, ...), "unknown" where the CPU says it is virtual but nothing names the
    hypervisor, None on bare metal. A guest of the VM lab says "tcg" itself (vm.py)."""
    try:
        with open("/proc/cpuinfo") as f:
            virtual = any(line.startswith("flags") and " hypervisor" in line for line in f)
    except OSError:
        virtual = False
    exe = shutil.which("systemd-detect-virt")
    if exe is not None:
        try:
            word = subprocess.run([exe, "--vm"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            word = ""
        if word and word != "none":
            return word
    return "unknown" if virtual else None


def _host_meta(cg: LabCgroup) -> dict[str, Any]:
    return {
        "kernel": platform.release(),
        "cgroup_version": cg.version,
        "cgroup_paths": cg.paths,
        "ncpu": os.cpu_count(),
        "hz": kernel_hz(),
        "hostname": platform.node(),
        "virtualization": virtualization(),
    }


def reap_stale_cgroups(root: str | os.PathLike[str] = "/sys/fs/cgroup", parent: str = "") -> list[str]:
    """Remove the lab cgroups of runs that were killed outright (no clean-up ran): named
    ``gmp-lab-<runner pid>-...``, that runner gone, and no process left inside. Returns the
    directories removed. Every lab run calls it first."""
    probe = LabCgroup(f"{PREFIX}probe", root=root, parent=parent)
    removed = []
    for base in {d.parent for d in probe.dirs}:
        for d in sorted(base.glob(f"{PREFIX}*-*")):
            pid = d.name[len(PREFIX) :].split("-", 1)[0]
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            procs = d / "cgroup.procs"
            if procs.exists() and procs.read_text().strip():
                continue
            try:
                for child in sorted(d.glob(f"{PREFIX}*")):  # a run's app cgroup inside its pod-like parent
                    os.rmdir(child)
                os.rmdir(d)
                removed.append(str(d))
            except OSError:
                continue  # busy or gone meanwhile: another run's business
    return removed


def _initial_meta(
    cfg: LabConfig, cg: LabCgroup, ipm: int, quota_us: int | None, rate: float, host_facts: dict[str, Any] | None
) -> dict[str, Any]:
    """The bundle's meta.json at the start of a run: every key of the contract, the
    settings, and null where the run has not learnt the value yet."""
    fields: dict[str, Any] = {
        "namespace": None,
        "pod": None,
        "container": None,
        "node": platform.node(),
        "pod_uid": None,
        "container_id": None,
        "qos": None,
        "period_us": cfg.period_us,
        "quota_us": quota_us,
        "burst_us": cfg.burst_us,
        "cpu_limit": None if cfg.cpu_limit is None else f"{round(cfg.cpu_limit * 1000)}m",
        "gomaxprocs_env": None if cfg.gomaxprocs is None else str(cfg.gomaxprocs),
        "go_version": None,
        **_host_meta(cg),
        **(host_facts or {}),
        "cgroup": cg.rel,
        "sampler": {
            "interval_ns": cfg.sample_interval_us * 1000,
            "policy": "SCHED_FIFO" if cfg.sampler_fifo else "SCHED_OTHER",
        },
        "mono_start_ns": None,
        "mono_end_ns": None,
        "wall_start": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "workload": {
            "kind": cfg.workload,
            "work_ms": cfg.work_ms,
            "iters_per_ms": ipm,
            "alloc_kb": cfg.alloc_kb if cfg.workload == "alloc" else 0,
            "live_mb": cfg.live_mb if cfg.workload == "alloc" else 0,
        },
        "load": {
            "mode": cfg.mode,
            "arrivals": cfg.arrivals if cfg.mode == "open" else None,
            "rate": rate if cfg.mode == "open" else None,
            "concurrency": cfg.concurrency,
            "duration_s": cfg.duration_s,
            "max_requests": cfg.max_requests,
            "seed": cfg.seed,
        },
        "lab_config": dataclasses.asdict(cfg),
    }
    return new_meta("lab", cfg.name, **fields)


def run_lab(
    cfg: LabConfig,
    out: str | os.PathLike[str],
    *,
    progress: Progress = quiet,
    bins: dict[str, Path] | None = None,
    host_facts: dict[str, Any] | None = None,
) -> Path:
    """Run one experiment and write its bundle to ``out`` (a new or empty directory).
    ``host_facts`` overrides what meta.json says of the machine (the VM lab's guest names
    its virtualization and the kernel's tick rate this way)."""
    preflight(cfg)
    bins = bins or ensure_binaries()
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise LabError(f"{out} exists and is not empty; bundles are never overwritten: choose a new directory")
    out.mkdir(parents=True, exist_ok=True)
    lock = lock_output(out)
    try:
        return _run(cfg, out, progress, bins, host_facts)
    finally:
        lock.unlink(missing_ok=True)


LOCK = ".gmp-lab.lock"


def lock_output(out: Path) -> Path:
    """Claim the output directory for one run: a lock file made with O_EXCL (atomic: of two
    runs given the same directory, one gets it), then the directory must hold nothing else.
    A run killed outright leaves the lock beside its bundle, which is then not empty either."""
    lock = out / LOCK
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise LabError(
            f"{out}: another lab run writes there ({lock} exists; left by a killed run, the bundle "
            "beside it is that run's): choose a new directory"
        ) from None
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    if any(p.name != LOCK for p in out.iterdir()):
        lock.unlink()
        raise LabError(f"{out} is not empty; bundles are never overwritten: choose a new directory")
    return lock


def _failed(meta: dict[str, Any], out: Path, err: GmpError) -> GmpError:
    """Record in meta.json why the run ends early (``complete`` stays false); returns ``err``."""
    meta["complete"] = False
    meta["error"] = str(err)
    to_meta(out / "meta.json", meta)
    return err


def _run(
    cfg: LabConfig, out: Path, progress: Progress, bins: dict[str, Path], host_facts: dict[str, Any] | None
) -> Path:
    ipm = cfg.iters_per_ms or calibrate(bins)

    quota_us = _quota(cfg.cpu_limit, cfg.period_us)
    lv = Levels(cfg.cgroup_root, cfg.cgroup_parent, with_pod=cfg.parent_cpu_limit is not None, layout=cfg.layout)
    cg = lv.app
    rate = cfg.effective_rate()
    meta = _initial_meta(cfg, cg, ipm, quota_us, rate, host_facts)
    if lv.pod_uid is not None:
        meta.update(pod_uid=lv.pod_uid, container_id=lv.container_id)
    to_meta(out / "meta.json", meta)  # a bundle from the first moment: killed now, it still loads
    for d in reap_stale_cgroups(cfg.cgroup_root, cfg.cgroup_parent):
        progress(f"removed {d}, left by a lab run that was killed")
    sampler = app = loadgen = None
    resizer: Resizer | None = None
    old_term = _sigterm_as_ctrl_c()
    app_log = out / "app.log"
    # removes the cgroups below if this process is killed outright (SIGKILL runs no finally)
    reaper = CgroupReaper([d for c in (lv.app, lv.pod, *lv.slices[::-1]) if c is not None for d in c.paths])
    try:
        _create_levels(cfg, lv, quota_us, meta, out, progress)
        sampler = start_sampler(cfg, bins, lv, out)
        progress(f"sampler pid {sampler.pid} every {cfg.sample_interval_us} µs")

        app = start_app(cfg, bins, cg, ipm, app_log)
        addr = _app_info(app, meta, out, progress)

        load_t0 = time.monotonic()
        loadgen = start_load(cfg, bins, addr, rate, out)
        if cfg.resize_at_s is not None:
            at = time.monotonic_ns() + int(cfg.resize_at_s * 1e9)
            resizer = Resizer(lv, at, _quota(cfg.cpu_limit_after, cfg.period_us), progress)
        what = f"{rate} req/s {cfg.arrivals}" if cfg.mode == "open" else f"{cfg.concurrency} clients"
        progress(f"load: {cfg.mode} loop, {what}, {cfg.duration_s}s")

        tthread, trace_res = _start_trace(cfg, addr, out, load_t0, progress)
        load_err = _wait_load(cfg, loadgen, sampler, meta, out, load_t0, progress)
        if tthread is not None:
            tthread.join(cfg.trace_s + 60)
        # A short tail so the last periods' credits are in the samples.
        time.sleep(0.3)
        if sampler.poll() is not None:
            raise _failed(meta, out, sampler_died(sampler, out))
        stop_proc(sampler, signal.SIGTERM)
        sampler_err = sampler.stderr.read() if sampler.stderr else ""
        stop_proc(app, signal.SIGTERM)

        _finish_bundle(meta, out, trace_res, resizer, app_log)
        progress(sampler_err.strip())
        progress(load_err.strip())
        if trace_res.get("error"):
            progress(f"trace capture failed: {trace_res['error']} (bundle kept without a complete trace)")
        return out
    finally:
        if resizer is not None:
            resizer.stop()
        for p in (loadgen, app, sampler):
            stop_proc(p, signal.SIGTERM, wait_s=3.0)
        try:
            lv.remove()
        finally:
            reaper.close()
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)


def _sigterm_as_ctrl_c() -> Any:
    """In the main thread, SIGTERM raises KeyboardInterrupt from now on; returns the handler
    it replaced (None in another thread: nothing changed)."""
    old_term = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM takes the same clean-up path as Ctrl-C.
        def _on_term(signum, frame):  # noqa: ANN001
            raise KeyboardInterrupt

        old_term = signal.signal(signal.SIGTERM, _on_term)
    return old_term


def _create_levels(
    cfg: LabConfig, lv: Levels, quota_us: int | None, meta: dict[str, Any], out: Path, progress: Progress
) -> None:
    """Create the cgroup levels with their quotas, and record in meta.json the limits they
    got and the moment the run starts."""
    cg = lv.app
    lv.create(quota_us, _quota(cfg.parent_cpu_limit, cfg.period_us), cfg.period_us, cfg.burst_us)
    lim = cg.limits()
    meta.update(quota_us=lim.quota_us, period_us=lim.period_us, burst_us=lim.burst_us, levels=lv.meta())
    meta["cgroup_paths"] = [p for c in (lv.app, lv.pod) if c is not None for p in c.paths]
    meta["mono_start_ns"] = time.monotonic_ns()
    to_meta(out / "meta.json", meta)
    for x in meta["levels"]:
        q = f"quota {x['quota_us']} µs / {x['period_us']} µs"
        progress(f"cgroup {x['cgroup']} ({x['level']}, v{cg.version}): {q}")


def _app_info(app: subprocess.Popen, meta: dict[str, Any], out: Path, progress: Progress) -> str:
    """Wait for the demo app to listen, and record in meta.json what it says of itself (Go
    version, GOMAXPROCS in force); returns its address."""
    addr = wait_listening(app)
    with urllib.request.urlopen(f"http://{addr}/info", timeout=10) as r:
        info = json.load(r)
    meta.update(
        go_version=info["go_version"],
        gomaxprocs_effective=info["gomaxprocs"],
        default_godebug=info.get("default_godebug"),
        app_pid=app.pid,
        app_addr=addr,
    )
    to_meta(out / "meta.json", meta)
    progress(
        f"gmp-demoapp pid {app.pid} on {addr}: GOMAXPROCS={info['gomaxprocs']} "
        f"(env {meta['gomaxprocs_env'] or 'unset'}), {info['go_version']}"
    )
    return addr


def _start_trace(
    cfg: LabConfig, addr: str, out: Path, load_t0: float, progress: Progress
) -> tuple[threading.Thread | None, dict[str, Any]]:
    """With a trace window, wait for its start (``cfg.trace_start_s`` past the load's) and
    fetch the trace in a thread; returns the thread (None: no trace) and the dict it fills."""
    trace_res: dict[str, Any] = {}
    tthread = None
    if cfg.trace_s > 0:
        time.sleep(max(0.0, load_t0 + cfg.trace_start_s - time.monotonic()))
        tthread = threading.Thread(
            target=fetch_trace, args=(addr, cfg.trace_s, out / "trace.out", trace_res), daemon=True
        )
        tthread.start()
        progress(f"trace: {cfg.trace_s}s window from t+{cfg.trace_start_s}s")
    return tthread, trace_res


def _wait_load(
    cfg: LabConfig,
    loadgen: subprocess.Popen,
    sampler: subprocess.Popen,
    meta: dict[str, Any],
    out: Path,
    load_t0: float,
    progress: Progress,
) -> str:
    """Wait for the load generator to finish, the sampler watched meanwhile (the run fails if
    either fails); returns the load generator's stderr."""
    while loadgen.poll() is None:
        if sampler.poll() is not None:
            raise _failed(meta, out, sampler_died(sampler, out))
        time.sleep(0.25)
        el = time.monotonic() - load_t0
        progress(f"\r  {min(el, cfg.duration_s):5.1f}/{cfg.duration_s:.1f}s")
    progress("")
    load_err = loadgen.stderr.read() if loadgen.stderr else ""
    if loadgen.returncode != 0:
        raise LabError(f"gmp-loadgen failed (exit {loadgen.returncode}): {load_err.strip()}")
    return load_err


def _finish_bundle(
    meta: dict[str, Any], out: Path, trace_res: dict[str, Any], resizer: Resizer | None, app_log: Path
) -> None:
    """Record in meta.json what the sampler, the load generator, the trace and the resize
    reported, the run complete, and remove the collectors' reports and an empty app log."""
    sstat = read_json(out / ".sampler.json") or {}
    if isinstance(sstat.get("error"), dict):
        raise sampler_failed(sstat["error"])
    lstat = read_json(out / ".loadgen.json") or {}
    meta["mono_end_ns"] = sstat.get("mono_end_ns") or time.monotonic_ns()
    meta["sampler"].update(sstat)
    # the CPUs the app's threads may run on (taskset, a cpuset), as the sampler found them in
    # its cgroup: the same reading a Kubernetes collection records
    cgs = sstat.get("cgroups") or [{}]
    if isinstance(cgs[0].get("cpus"), int) and cgs[0]["cpus"] > 0:
        meta["cpus_allowed"] = cgs[0]["cpus"]
    meta["load"].update({k: v for k, v in lstat.items() if k not in meta["load"]})
    meta["trace"] = trace_res or None
    if resizer is not None:
        resizer.stop()
        meta["resizes"] = resizer.done
        if resizer.error:
            raise LabError(f"the resize failed: {resizer.error}")
    meta["complete"] = True
    to_meta(out / "meta.json", meta)
    for f in (".sampler.json", ".loadgen.json"):
        (out / f).unlink(missing_ok=True)
    if app_log.exists() and app_log.stat().st_size == 0:
        app_log.unlink()


def sweep(
    base: LabConfig,
    gomaxprocs_values: list[int | None],
    out_dir: str | os.PathLike[str],
    *,
    progress: Progress = quiet,
    runner: Callable[..., Path] | None = None,
) -> list[Path]:
    """The same experiment at several GOMAXPROCS values, one bundle each, same calibration
    (``runner(cfg, out, progress=...)``: another way to run each, e.g. in a VM of another
    kernel: :func:`gmpanalysis.lab.vm.run_vm_lab` with its spec bound; the first run
    calibrates there and the others take its calibration from its meta.json)."""
    out_dir = Path(out_dir)
    bins = ensure_binaries()
    ipm = base.iters_per_ms or (None if runner is not None else calibrate(bins))
    paths = []
    for i, g in enumerate(gomaxprocs_values, 1):
        label = "unset" if g is None else str(g)
        cfg = dataclasses.replace(base, gomaxprocs=g, iters_per_ms=ipm, name=f"{base.name}-gmp{label}")
        progress(f"[{i}/{len(gomaxprocs_values)}] GOMAXPROCS={label}")
        if runner is not None:
            paths.append(runner(cfg, out_dir / cfg.name, progress=progress))
            if ipm is None:
                ipm = int(read_json(paths[-1] / "meta.json")["workload"]["iters_per_ms"])
        else:
            paths.append(run_lab(cfg, out_dir / cfg.name, progress=progress, bins=bins))
    return paths


def _quota(cpus: float | None, period_us: int) -> int | None:
    """A CPU limit as a CFS quota (µs per period; check_config refuses one below the kernel's least)."""
    return None if cpus is None else round(cpus * period_us)


def parse_cpu_limit(text: str) -> float | None:
    """'500m', '0.5', '2' or 'none' -> CPUs (None: no limit)."""
    t = text.strip().lower()
    if t in ("none", "unlimited", "max"):
        return None
    try:
        v = float(t[:-1]) / 1000 if t.endswith("m") else float(t)
    except ValueError:
        raise LabError(f"cpu limit {text!r}: expected e.g. 500m, 0.5 or none") from None
    if not math.isfinite(v) or v <= 0:
        raise LabError(f"cpu limit {text!r} must be positive")
    return v
