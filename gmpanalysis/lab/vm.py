"""The lab inside a virtual machine of another kernel (``lab run --kernel SERIES``).

qemu boots a Debian kernel (kernels.py) with this machine's root file system as the guest's
(read-only over 9p), so the guest runs this very Python, these collector binaries and the
same lab code (vmguest.py); only the kernel, the CPUs and the cgroup hierarchy are the
guest's own: cgroup v2, laid out as a kubelet with the systemd driver lays it. The bundle
directory is shared writable without caching: every line the sampler flushes is in the
host's file at once, and a VM killed at any moment leaves a bundle that loads.

This machine's /dev/kvm cannot run a stock kernel, so the guest is emulated (TCG): guest
time runs at the host's pace, but a vCPU the host deschedules still counts that time as
run. ``virtualization`` in meta.json says so, and the sampler's lateness says how well the
guest kept its deadlines.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import LabError
from .binaries import ensure_binaries
from .kernels import Kernel, check_series, ensure_kernel
from .procs import die_with_parent, read_json
from .run import LabConfig, Progress, check_config, kernel_hz, quiet

QEMU = "qemu-system-x86_64"
# the guest's own processes (Python, pandas, the demo app's heap, the sampler) fit in 2 GiB
DEFAULT_MEMORY_MB = 2048


@dataclasses.dataclass(frozen=True)
class VmSpec:
    """The machine a VM lab run boots: kernel series, vCPUs, memory."""

    kernel: str  # Debian kernel series, e.g. "6.12"
    cpus: int = 2  # vCPUs (each a host thread under TCG: more than the host's cores share them)
    memory_mb: int = DEFAULT_MEMORY_MB


@functools.lru_cache(maxsize=1)
def qemu_version() -> str | None:
    exe = shutil.which(QEMU)
    if exe is None:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.splitlines()[0] if out else None


# where the guest mounts the state directory (vminit.sh): the guest's own /run
GUEST_STATE = "/run/gmp-vm"
# what the guest mounts a tmpfs over (vminit.sh): the host's files there are hidden from it
GUEST_TMPFS = ("/run",)


def qemu_command(k: Kernel, spec: VmSpec, state: Path, out: Path) -> list[str]:
    """The qemu command line: TCG with one host thread per vCPU, the host's root and the two
    writable directories over virtio-9p, the serial console on stdout."""

    def share(path: str | Path, tag: str, ro: bool) -> list[str]:
        # security_model=none: files are the host user's; multidevs=remap: the host's
        # mounts below / keep distinct inode numbers in the guest; qemu's option syntax
        # escapes a comma by doubling it
        opts = f"local,path={str(path).replace(',', ',,')},mount_tag={tag},security_model=none,multidevs=remap"
        return ["-virtfs", opts + (",readonly=on" if ro else "")]

    return [
        QEMU,
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max",
        "-smp",
        str(spec.cpus),
        "-m",
        str(spec.memory_mb),
        "-kernel",
        str(k.vmlinuz),
        "-initrd",
        str(k.initramfs),
        # psi=1: pressure accounting on even where a kernel's config turns it off by default
        "-append",
        "console=ttyS0 quiet panic=-1 psi=1",
        "-nodefaults",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
        *share("/", "hostroot", True),
        *share(state, "gmpstate", False),
        *share(out, "gmpout", False),
    ]


def _guest_script(state: Path) -> str:
    """What the guest runs (under chroot into the host's root): this interpreter on
    vmguest.py with the job, in a clean environment."""
    env = {
        "HOME": "/run/gmp-home",
        "TMPDIR": "/run/gmp-tmp",
        "PATH": "/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "GMP_VM_GUEST": "1",
        "LANG": "C.UTF-8",
    }
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    job = shlex.quote(f"{GUEST_STATE}/job.json")
    python = shlex.quote(sys.executable)
    return f'{exports}mkdir -p "$HOME" "$TMPDIR"\nexec {python} -m gmpanalysis.lab.vmguest {job}\n'


def _hidden_in_guest(paths: dict[str, Path]) -> None:
    """The guest sees the host's files except under the tmpfs it mounts: refuse a Python,
    a source tree or binaries there, with what to do."""
    for what, p in paths.items():
        for q in {Path(p), Path(p).resolve()}:
            top = next((t for t in GUEST_TMPFS if q.is_relative_to(t)), None)
            if top is not None:
                raise LabError(
                    f"{what} {q} is under {top}, which the VM's guest covers with its own tmpfs: "
                    "put it elsewhere (the virtualenv, XDG_CACHE_HOME or GMP_BIN_DIR)"
                )


def run_vm_lab(cfg: LabConfig, out: str | os.PathLike[str], spec: VmSpec, *, progress: Progress = quiet) -> Path:
    """Run one lab experiment inside a VM of ``spec.kernel`` and write its bundle to ``out``
    (a new or empty directory). Returns ``out``."""
    check_config(cfg)
    if not 1 <= spec.cpus <= 64:
        raise LabError(f"--cpus {spec.cpus}: give 1..64 vCPUs")
    if shutil.which(QEMU) is None:
        raise LabError(f"--kernel runs the lab in a VM: {QEMU} is missing (apt-get install qemu-system-x86)")
    out = Path(out).resolve()
    if out.exists() and any(out.iterdir()):
        raise LabError(f"{out} exists and is not empty; bundles are never overwritten: choose a new directory")
    if any(c in str(out) for c in "\n\0"):
        raise LabError(f"{out!r}: a bundle directory without newlines, please")
    check_series(spec.kernel)
    bins = ensure_binaries()
    _hidden_in_guest(
        {
            "the Python interpreter": Path(sys.executable),
            "the gmpanalysis sources": Path(__file__).resolve().parents[2],
            **{f"the collector binary {k}": v for k, v in bins.items()},
        }
    )
    kernel = ensure_kernel(spec.kernel, progress)
    out.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="gmp-vm-"))
    try:
        return _boot(cfg, out, spec, kernel, bins, state, progress)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _vm_facts(kernel: Kernel, spec: VmSpec) -> dict[str, Any]:
    """What meta.json records of the machine around the guest."""
    hz = kernel_hz(kernel.config)
    return {
        "virtualization": "tcg",
        "hz": hz,
        "vm": {
            "accel": "tcg",
            "qemu": qemu_version(),
            "kernel_package": kernel.package,
            "cpus": spec.cpus,
            "memory_mb": spec.memory_mb,
            "host_kernel": platform.release(),
            "host_ncpu": os.cpu_count(),
        },
    }


# A guest kernel that crashes while it boots is tried again, this many times in all: under
# multi-threaded TCG, qemu 7.2 now and then runs a stale translation of kernel text the
# kernel is patching live (static keys, int3 breakpoints): "Oops: int3" in sched_clock_cpu
# 1.5 s into boot, in update_curr 10 s in; 2 of ~35 boots of 6.12 with 4 vCPUs here.
BOOTS = 3


def _boot(
    cfg: LabConfig, out: Path, spec: VmSpec, kernel: Kernel, bins: dict[str, Path], state: Path, progress: Progress
) -> Path:
    facts = _vm_facts(kernel, spec)
    (state / "out_path").write_text(str(out) + "\n")
    (state / "guest.sh").write_text(_guest_script(state))
    crashes: list[str] = []
    attempt = 0
    while True:
        attempt += 1
        facts["vm"]["boot_crashes"] = crashes
        job = {
            "config": dataclasses.asdict(cfg),
            "out": str(out),
            "bins": {k: str(v) for k, v in bins.items()},
            "host_facts": facts,
        }
        (state / "job.json").write_text(json.dumps(job))
        console, rc = _boot_once(cfg, out, spec, kernel, state, progress)
        result = read_json(state / "result.json")
        if result is not None:
            if not result.get("ok"):
                raise LabError(f"in the VM ({kernel.release}): {result.get('error')}")
            return out
        crash = next((x for x in console if "Oops" in x or "Kernel panic" in x), None)
        # a crashed guest that collected nothing yet is booted again, its leftovers (a
        # meta.json of the run that never started, the console) removed; once samples were
        # written they are the run's and stay, and the run ends with the crash
        if crash is None or (out / "cpu_stat.csv").exists() or attempt == BOOTS:
            tail = " | ".join(x for x in console[-6:] if x.strip())
            raise LabError(
                f"the VM stopped without a result (qemu exit {rc}, boot {attempt} of at most {BOOTS}): "
                f"{tail[-500:]}; console in {out / 'vm-console.log'}"
            )
        crashes.append(crash.split("] ", 1)[-1])
        progress(f"vm: the guest kernel crashed before the run began ({crashes[-1]}); booting it again")
        for f in out.iterdir():
            f.unlink()


def _boot_once(
    cfg: LabConfig, out: Path, spec: VmSpec, kernel: Kernel, state: Path, progress: Progress
) -> tuple[list[str], int | None]:
    """Boot the guest once and follow its console until it powers off; returns the console
    lines and qemu's exit code. A guest still running at the time limit is killed (LabError)."""
    # boot (~5 s), the guest's Python start (tens of seconds emulated), calibration, the
    # run itself and its tail: bounded, so a guest that hangs cannot hold the caller forever
    limit_s = 240 + 3 * cfg.duration_s
    progress(f"vm: booting {kernel.release} ({spec.cpus} vCPUs, {spec.memory_mb} MiB, TCG)")
    t0 = time.monotonic()
    cmd = qemu_command(kernel, spec, state, out)
    guard = functools.partial(die_with_parent, os.getpid())
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=guard)
    console: list[str] = []
    killed = False
    try:
        deadline = t0 + limit_s
        for raw in _lines(proc, deadline):
            line = raw.decode("utf-8", "replace").rstrip("\r\n").replace("\r", "")
            console.append(line)
            if line.strip():
                progress(line)
        try:
            # the console closes as qemu exits: give it the rest of the time to do so
            proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed = True
            proc.kill()
            proc.wait(30)
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
    (out / "vm-console.log").write_text("\n".join(console[-2000:]) + "\n")
    progress(f"vm: powered off after {time.monotonic() - t0:.0f} s")
    if killed:
        raise LabError(
            f"the VM did not finish within {limit_s:.0f} s and was killed; what it wrote is in {out} "
            f"(console: {out / 'vm-console.log'})"
        )
    return console, proc.returncode


def _lines(proc: subprocess.Popen, deadline: float):  # -> Iterator[bytes]
    """qemu's console output line by line until it exits or the deadline passes."""
    import select

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 1.0)
        if not r:
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        *done, buf = buf.split(b"\n")
        yield from done
    if buf:
        yield buf
