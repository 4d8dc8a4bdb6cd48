"""Create, configure and remove the lab's own cgroups (v1 and v2).

Only cgroups this module created are touched; their names start with ``gmp-lab-``.
``root`` is the cgroup mount (``/sys/fs/cgroup``); tests point it at a fixture tree that
mirrors a real one, which is how the v2 paths are exercised on hosts whose cpu controller
is bound to v1.
"""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path

from ..cgroup import CpuLimits, detect_version, read_cpu_limits_v1, read_cpu_limits_v2, v1_dirs
from ..errors import LabError, UsageError

PREFIX = "gmp-lab-"
# the names a kubelet gives the QoS levels, a pod and a container: the systemd driver's
# slices and scopes (containerd, CRI-O), the cgroupfs driver's plain directories
KUBE_NAME = re.compile(
    r"kubepods(-[a-z]+)?(-pod[0-9a-f_]+)?\.slice|(cri-containerd-|crio-)[0-9a-f]{64}\.scope"
    r"|kubepods|burstable|pod[0-9a-f-]{36}|(crio-)?[0-9a-f]{64}"
)
# the kernel's ceilings for a group's CPU weight: v1 cpu.shares, v2 cpu.weight
V1_SHARES_MAX = 262144
V2_WEIGHT_MAX = 10000


def check_cgroup_parent(parent: str) -> str:
    """``parent`` (``--cgroup-parent``) if it is a path relative to the cgroup mount that stays
    inside it, with one trailing '/' dropped; else UsageError. Refused: an absolute path,
    '..' or '.' or empty components (``a//b``), NUL, newline or other control characters,
    more than 4096 bytes. The lab creates and removes cgroups below it as root, so it may not
    name anything outside the cpu hierarchy, nor a second line in a file it is written to."""
    if not isinstance(parent, str):
        raise UsageError(f"cgroup parent {parent!r}: give a path relative to the cgroup mount, e.g. 'lab.slice'")
    text = parent[:-1] if parent.endswith("/") and parent != "/" else parent
    if text == "":
        return ""
    why = None
    if text.startswith("/"):
        why = "an absolute path"
    elif any(ord(c) < 32 or ord(c) == 127 for c in text):
        why = "a control character (NUL, newline, ...)"
    elif len(text.encode("utf-8", "surrogatepass")) > 4096:
        why = "longer than 4096 bytes"
    elif any(part in ("", ".", "..") for part in text.split("/")):
        why = "a '..', '.' or empty component"
    if why is not None:
        raise UsageError(
            f"cgroup parent {parent!r} is {why}: give a path relative to the cgroup mount that stays "
            "inside it, e.g. 'lab.slice' or 'user.slice/gmp' (--cgroup-parent)"
        )
    return text


class LabCgroup:
    """A cgroup with a CFS bandwidth limit, for one lab run.

    ``rel`` is its path relative to the mount root (what gmp-sampler's --cgroup takes);
    ``procs_files`` are the cgroup.procs files a process must be written into to join it
    (v1: one per hierarchy, cpu and cpuacct; v2: one).
    """

    def __init__(self, name: str, *, root: str | Path = "/sys/fs/cgroup", parent: str = "", kube: bool = False) -> None:
        if kube and KUBE_NAME.fullmatch(name):
            pass  # the kubelet layout's names (Levels refuses a tree a kubelet already made)
        elif not name.startswith(PREFIX) or "/" in name:
            raise UsageError(
                f"LabCgroup: lab cgroup names start with {PREFIX!r} and have no '/', got {name!r}; "
                f"choose e.g. {PREFIX + 'mytest'!r} (put nesting in parent=)"
            )
        self.root = Path(root)
        self.version = detect_version(self.root)
        if self.version is None:
            raise LabError(
                f"{self.root}: no cgroup cpu controller found (neither a v1 cpu hierarchy nor a v2 "
                "mount listing 'cpu' in cgroup.controllers); the lab needs CFS bandwidth control"
            )
        parent = check_cgroup_parent(parent)
        self.rel = f"{parent}/{name}".strip("/")
        if self.version == 1:
            cpu, acct = v1_dirs(self.root, self.rel)
            self.dirs = [cpu] if cpu == acct else [cpu, acct]
        else:
            self.dirs = [self.root / self.rel]
        top = self.root.resolve()
        for d in self.dirs:
            # a symlink on the way (not something cgroupfs has) may not lead out of the mount
            if not d.resolve().is_relative_to(top):
                raise UsageError(f"{d} leads to {d.resolve()}, outside the cgroup mount {top}: choose another parent")
        self.created: list[Path] = []

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    @property
    def paths(self) -> list[str]:
        return [str(d) for d in self.dirs]

    def create(self, *, quota_us: int | None, period_us: int = 100_000, burst_us: int = 0) -> None:
        """Make the directories and set the limit; raises LabError naming what is needed."""
        if self.version == 2:
            self._enable_cpu_v2(self.dirs[0].parent)
        for d in self.dirs:
            try:
                d.mkdir()
            except FileExistsError:
                raise LabError(
                    f"{d} exists already: another lab run uses it, or a crashed one left it "
                    f"(remove it with 'rmdir {d}' once no process is in it)"
                ) from None
            except PermissionError:
                raise LabError(
                    f"cannot create {d}: permission denied; the lab needs root (or write access to "
                    "the cgroup tree) to create cgroups with CPU quotas"
                ) from None
            except OSError as e:
                raise LabError(f"cannot create {d}: {e.strerror}") from None
            self.created.append(d)
        try:
            # The experiment is about the quota: give the group the highest CPU weight there is,
            # so that other load on the machine (a build, a CPU hog) cannot decide how much CPU
            # it gets below its quota. In Kubernetes the request does this (shares = request x
            # 1024 on a node whose requests are not overcommitted); weight never changes when or
            # how the bandwidth timer throttles.
            if self.version == 1:
                cpu = self.dirs[0]
                self._write(cpu / "cpu.shares", str(V1_SHARES_MAX))
                self._write(cpu / "cpu.cfs_period_us", str(period_us))
                self._write(cpu / "cpu.cfs_quota_us", str(quota_us if quota_us is not None else -1))
                if burst_us:
                    self._write(cpu / "cpu.cfs_burst_us", str(burst_us))
            else:
                d = self.dirs[0]
                self._write(d / "cpu.weight", str(V2_WEIGHT_MAX))
                self._write(d / "cpu.max", f"{quota_us if quota_us is not None else 'max'} {period_us}")
                if burst_us:
                    self._write(d / "cpu.max.burst", str(burst_us))
        except BaseException:
            self.remove()
            raise

    def set_quota(self, quota_us: int | None, period_us: int) -> None:
        """Rewrite the quota in place (the period's timer keeps running on its grid)."""
        if self.version == 1:
            self._write(self.dirs[0] / "cpu.cfs_quota_us", str(quota_us if quota_us is not None else -1))
        else:
            self._write(self.dirs[0] / "cpu.max", f"{quota_us if quota_us is not None else 'max'} {period_us}")

    def limits(self) -> CpuLimits:
        """Read back the limit as the kernel holds it."""
        return read_cpu_limits_v1(self.dirs[0]) if self.version == 1 else read_cpu_limits_v2(self.dirs[0])

    def _enable_cpu_v2(self, parent: Path) -> None:
        # v2 only offers cpu.max in a child when the parent lists cpu in
        # cgroup.subtree_control, and (outside the root) a parent holding processes may not
        # enable controllers for children ("no internal processes" rule).
        ctl = parent / "cgroup.subtree_control"
        try:
            enabled = ctl.read_text().split()
        except FileNotFoundError:
            raise LabError(f"{ctl} missing: {parent} is not a cgroup v2 directory") from None
        if "cpu" in enabled:
            return
        ctrl_file = parent / "cgroup.controllers"
        available = ctrl_file.read_text().split() if ctrl_file.exists() else []
        if "cpu" not in available:
            raise LabError(
                f"{parent}: the cpu controller is not available here (cgroup.controllers: "
                f"{' '.join(available) or 'none'}); delegate it from the parent, or choose a "
                "parent with --cgroup-parent where it is"
            )
        try:
            self._write(ctl, "+cpu")
        except LabError as e:
            raise LabError(
                f"{e}; a cgroup v2 parent that holds processes cannot enable controllers for its "
                "children: use --cgroup-parent to pick an empty, delegated subtree"
            ) from None

    @staticmethod
    def _write(path: Path, value: str) -> None:
        try:
            with open(path, "w") as f:
                f.write(value)
        except OSError as e:
            why = ""
            if e.errno == errno.EINVAL and path.name.startswith(("cpu.max", "cpu.cfs_")):
                # tg_set_cfs_bandwidth and, on v1 only, tg_cfs_schedulable_down refuse these
                why = (
                    " (the kernel refuses a burst above the quota, and on cgroup v1 a quota above the parent "
                    "cgroup's: raise the parent's limit, or lower this one or the burst)"
                )
            raise LabError(f"writing {value!r} to {path} failed: {e.strerror}{why}") from None

    def remove(self, timeout_s: float = 5.0) -> None:
        """Remove the directories this object created, waiting for exited processes to leave.

        A cgroup cannot be removed while a process is in it (EBUSY); the caller has already
        ended its own processes by PID, so we only wait for the kernel to reap them.
        """
        deadline = time.monotonic() + timeout_s
        for d in reversed(self.created):
            while True:
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        procs = d / "cgroup.procs"
                        left = procs.read_text().split() if procs.exists() else "?"
                        raise LabError(f"cannot remove {d}: {e.strerror}; processes still in it: {left}") from None
                    time.sleep(0.05)
        self.created.clear()

    def join_in_child(self) -> None:
        """Move the calling process into this cgroup (used between fork and exec)."""
        pid = str(os.getpid())
        for f in self.procs_files:
            with open(f, "w") as fh:
                fh.write(pid)
