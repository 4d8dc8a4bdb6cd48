"""The processes of a lab run: starting the sampler, the demo service (inside its cgroup,
dying with its parent) and the load generator; waiting for the service to listen; fetching
its trace; stopping each by PID; and what a failed sampler said."""

from __future__ import annotations

import ctypes
import functools
import http.client
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ..cgroup import sampler_error
from ..errors import GmpError, LabError
from .cgroups import LabCgroup
from .config import LabConfig
from .levels import Levels

APP_BUILDS = {"default": "gmp-demoapp", "go124": "gmp-demoapp-go124", "automaxprocs": "gmp-demoapp-automaxprocs"}


def stop_proc(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, wait_s: float = 5.0) -> None:
    """End a process we started, by its PID: signal, wait, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    except ProcessLookupError:
        pass


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: a forked child must not dlopen


PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """In a child between fork and exec: ask the kernel to SIGKILL it when the lab runner
    dies (prctl PR_SET_PDEATHSIG), so a runner killed outright leaves nothing running.
    The samples it wrote stay: the sampler appends and flushes as it goes. The signal
    follows the forking thread's exit, and the runner forks from its main thread; a runner
    that died before the prctl took effect shows as another parent."""
    _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def wait_listening(proc: subprocess.Popen, timeout_s: float = 20.0) -> str:
    """Read the app's first stdout line (started with ``-ready json``: {"listening":
    {"addr": ...}}) and return the address."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    buf = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            if b"\n" in buf:
                line = buf.split(b"\n", 1)[0].decode("utf-8", "replace")
                try:
                    return str(json.loads(line)["listening"]["addr"])
                except (ValueError, KeyError, TypeError):
                    raise LabError(
                        f"gmp-demoapp said {line!r} instead of its JSON ready line (started without -ready json?)"
                    ) from None
        if proc.poll() is not None:
            break
    raise LabError(f"gmp-demoapp did not start listening within {timeout_s}s (exit code {proc.poll()})")


def fetch_trace(addr: str, seconds: float, dest: Path, result: dict[str, Any]) -> None:
    """Stream /debug/pprof/trace into dest as it arrives (a partial trace survives a crash)."""
    result["mono_request_ns"] = time.monotonic_ns()
    try:
        conn = http.client.HTTPConnection(addr, timeout=seconds + 30)
        conn.request("GET", f"/debug/pprof/trace?seconds={seconds:g}")
        resp = conn.getresponse()
        result["http_status"] = resp.status
        with open(dest, "wb") as f:
            while True:
                chunk = resp.read1(1 << 16)
                if not chunk:
                    break
                f.write(chunk)
                f.flush()
        conn.close()
    except (OSError, http.client.HTTPException) as e:
        result["error"] = f"{type(e).__name__}: {e}"
    result["mono_done_ns"] = time.monotonic_ns()
    result["bytes"] = dest.stat().st_size if dest.exists() else 0


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None where the file is missing or not (yet) whole JSON."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def sampler_failed(facts: dict[str, Any]) -> GmpError:
    """The error the sampler reported as JSON facts (it could not start, or a read stopped
    it): a CgroupFormatError for a cgroup file not as the kernel writes it, else a LabError."""
    return sampler_error(facts) or LabError(f"gmp-sampler: {facts.get('message')}")


def start_sampler(cfg: LabConfig, bins: dict[str, Path], lv: Levels, out: Path) -> subprocess.Popen:
    """gmp-sampler outside the cgroups (never sample from inside: it would be throttled
    with them), appending cpu_stat.csv (every level), limits.csv and host_stat.csv as it goes."""
    sampler_cmd = [
        str(bins["gmp-sampler"]),
        "--root",
        cfg.cgroup_root,
        *lv.sampler_args(),
        # quota, period and burst of every level about every 10 ms: a resize lands in its period
        "--limits-out",
        str(out / "limits.csv"),
        "--interval",
        f"{cfg.sample_interval_us}us",
        "--out",
        str(out / "cpu_stat.csv"),
        "--summary",
        str(out / ".sampler.json"),
        # the host's /proc/stat once a second (steal time: what explains sampling holes on a VM)
        "--host-stat",
        str(out / "host_stat.csv"),
    ]
    if cfg.sampler_fifo:
        sampler_cmd.append("--fifo")
    guard = functools.partial(die_with_parent, os.getpid())
    return subprocess.Popen(sampler_cmd, stderr=subprocess.PIPE, text=True, preexec_fn=guard)


def start_app(cfg: LabConfig, bins: dict[str, Path], cg: LabCgroup, ipm: int, app_log: Path) -> subprocess.Popen:
    """The demo service, started inside the cgroup before it execs."""
    env = dict(os.environ)
    env.pop("GOMAXPROCS", None)
    if cfg.gomaxprocs is not None:
        env["GOMAXPROCS"] = str(cfg.gomaxprocs)
    app_cmd = [
        str(bins[APP_BUILDS[cfg.app_build]]),
        "-ready",
        "json",
        "-addr",
        "127.0.0.1:0",
        "-work-ms",
        str(cfg.work_ms),
        "-iters-per-ms",
        str(ipm),
    ]
    if cfg.workload == "alloc":
        app_cmd += ["-alloc-kb", str(cfg.alloc_kb), "-live-mb", str(cfg.live_mb)]
    if not cfg.cpu_header:
        app_cmd.append("-cpu-header=false")
    with open(app_log, "wb") as log:
        # preexec_fn runs in the child between fork and exec: the Go runtime then starts
        # inside the cgroup and sees its quota from its first instruction.
        return subprocess.Popen(
            app_cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=lambda parent=os.getpid(): (cg.join_in_child(), die_with_parent(parent)),
        )


def start_load(cfg: LabConfig, bins: dict[str, Path], addr: str, rate: float, out: Path) -> subprocess.Popen:
    """The load generator: open-loop (Poisson or constant) or closed-loop, recording every
    request into requests.csv."""
    load_cmd = [
        str(bins["gmp-loadgen"]),
        "-url",
        f"http://{addr}/work",
        "-mode",
        cfg.mode,
        "-arrivals",
        cfg.arrivals,
        "-rate",
        str(rate),
        "-concurrency",
        str(cfg.concurrency),
        "-duration",
        f"{cfg.duration_s}s",
        "-max-requests",
        str(cfg.max_requests),
        "-seed",
        str(cfg.seed),
        "-out",
        str(out / "requests.csv"),
        "-summary",
        str(out / ".loadgen.json"),
    ]
    guard = functools.partial(die_with_parent, os.getpid())
    return subprocess.Popen(load_cmd, stderr=subprocess.PIPE, text=True, preexec_fn=guard)


def sampler_died(sampler: subprocess.Popen, out: Path) -> GmpError:
    """The sampler ended before it was asked to: its own JSON error if it wrote one."""
    facts = read_json(out / ".sampler.json") or {}
    if isinstance(facts.get("error"), dict):
        return sampler_failed(facts["error"])
    err = (sampler.stderr.read() if sampler.stderr else "").strip()
    return LabError(
        f"gmp-sampler (pid {sampler.pid}) exited with code {sampler.returncode} before the run ended"
        + (f": {err[-300:]}" if err else "")
        + f"; the samples it wrote are in {out / 'cpu_stat.csv'} and the bundle is marked incomplete: run again"
    )
