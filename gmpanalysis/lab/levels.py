"""The lab's cgroup levels: the app's own cgroup, optionally inside a pod-like parent with a
quota of its own, and limits rewritten in place mid-run (an in-place resize).

Kubernetes gives every pod's cgroup a quota (the sum of its containers' limits) with its own
bandwidth timer at its own random phase; ``parent_cpu_limit`` reproduces that: the app's
cgroup is created inside a parent cgroup that carries its own quota. A resize writes the new
quota the way the kubelet orders the writes: growing, the pod first (a child may never be
allowed more than its parent), shrinking, the container first.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..errors import LabError
from .cgroups import PREFIX, LabCgroup

# what a kubelet makes for a Burstable pod (limits above requests, the common case) and a
# container in it, by cgroup driver: the QoS levels, then the pod's and the container's
# names by runtime (as collectors/internal/cgroup/kube.go finds them)
KUBE_SLICES = {"systemd": ("kubepods.slice", "kubepods-burstable.slice"), "cgroupfs": ("kubepods", "burstable")}
KUBE_RUNTIMES = {"containerd": "containerd", "crio": "cri-o"}
# --layout: lab, or kubelet[-cgroupfs][-crio] (the systemd driver and containerd by default)
LAYOUTS = ("lab", "kubelet", "kubelet-crio", "kubelet-cgroupfs", "kubelet-cgroupfs-crio")


def kube_names(driver: str, runtime: str, uid: uuid.UUID, cid: str) -> tuple[str, str]:
    """The pod's and the container's directory names a kubelet gives them."""
    if driver == "systemd":
        pod = f"kubepods-burstable-pod{str(uid).replace('-', '_')}.slice"
        return pod, (f"cri-containerd-{cid}.scope" if runtime == "containerd" else f"crio-{cid}.scope")
    return f"pod{uid}", (cid if runtime == "containerd" else f"crio-{cid}")


class Levels:
    """The cgroups of one lab run: ``app`` (where the process lives) and ``pod`` (its
    parent with a quota of its own, or None). ``layout`` "kubelet..." lays them as a kubelet
    does (the pod always there; :data:`LAYOUTS`: the systemd or the cgroupfs driver,
    containerd's or CRI-O's container names), below the QoS levels, which it creates and
    removes too; the sampler then finds them as the node agent does, from the pod's UID, its
    QoS class and the container ID."""

    def __init__(self, root: str, parent: str, with_pod: bool, layout: str = "lab") -> None:
        base = f"{PREFIX}{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.pod: LabCgroup | None = None
        self.slices: list[LabCgroup] = []
        self.pod_uid: str | None = None
        self.container_id: str | None = None
        self.pod_follows = True  # set by create
        self.parent = parent
        if layout not in LAYOUTS:
            raise LabError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
        if layout.startswith("kubelet"):
            self.driver = "cgroupfs" if "cgroupfs" in layout else "systemd"
            self.runtime = KUBE_RUNTIMES["crio" if layout.endswith("crio") else "containerd"]
            rel = parent
            for name in KUBE_SLICES[self.driver]:
                self.slices.append(LabCgroup(name, root=root, parent=rel, kube=True))
                rel = self.slices[-1].rel
            uid = uuid.uuid4()
            self.container_id = secrets.token_hex(32)
            pod, ctr = kube_names(self.driver, self.runtime, uid, self.container_id)
            self.pod = LabCgroup(pod, root=root, parent=rel, kube=True)
            self.app = LabCgroup(ctr, root=root, parent=self.pod.rel, kube=True)
            self.pod_uid = str(uid)
            return
        if with_pod:
            self.pod = LabCgroup(base, root=root, parent=parent)
            self.app = LabCgroup(f"{PREFIX}{os.getpid()}-app", root=root, parent=self.pod.rel)
        else:
            self.app = LabCgroup(base, root=root, parent=parent)

    def create(self, quota_us: int | None, pod_quota_us: int | None, period_us: int, burst_us: int) -> None:
        """Make the cgroups, the outermost first; on any failure remove what was made. cgroup
        v1 refuses a child quota above its parent's (EINVAL); a child without a limit under a
        limited parent is allowed. In the kubelet layout a pod given no quota of its own gets
        the container's, as a kubelet gives a pod whose containers all have limits their sum."""
        # a pod given a limit of its own (pod-level resources) keeps it through a container's
        # resize; one given its container's (the kubelet's sum for a one-container pod)
        # follows it (resize)
        self.pod_follows = pod_quota_us is None or pod_quota_us == quota_us
        if self.slices and pod_quota_us is None:
            pod_quota_us = quota_us
        try:
            for sl in self.slices:
                if sl.dirs[0].exists():
                    raise LabError(
                        f"{sl.dirs[0]} exists: a kubelet (or another run) owns that tree; the kubelet layout is "
                        "for machines without one (the VM lab: --kernel)"
                    )
                sl.create(quota_us=None, period_us=period_us)
            if self.pod is not None:
                self.pod.create(quota_us=pod_quota_us, period_us=period_us)
            self.app.create(quota_us=quota_us, period_us=period_us, burst_us=burst_us)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        try:
            self.app.remove()
        finally:
            try:
                if self.pod is not None:
                    self.pod.remove()
            finally:
                for sl in reversed(self.slices):
                    sl.remove()

    def sampler_args(self) -> list[str]:
        """gmp-sampler --cgroup arguments: one per level, named as cpu_stat.csv's column. A
        kubelet layout at the mount's root is named as the node agent names it (pod UID, QoS
        class, container ID): the sampler's own rules find the directories."""
        if self.pod_uid is not None and not self.parent:
            return [
                "--cgroup",
                f"container=kube-container:{self.pod_uid}:Burstable:{self.runtime}://{self.container_id}",
                "--cgroup",
                f"pod=kube-pod:{self.pod_uid}:Burstable",
            ]
        out = ["--cgroup", f"container={self.app.rel}"]
        if self.pod is not None:
            out += ["--cgroup", f"pod={self.pod.rel}"]
        return out

    def meta(self) -> list[dict[str, Any]]:
        """meta.json ``levels``: the process's own cgroup first, with the limits the kernel holds."""
        out = []
        for name, cg in (("container", self.app), ("pod", self.pod)):
            if cg is None:
                continue
            lim = cg.limits()
            out.append(
                {
                    "level": name,
                    "cgroup": cg.rel,
                    "period_us": lim.period_us,
                    "quota_us": lim.quota_us,
                    "burst_us": lim.burst_us,
                }
            )
        return out

    def resize(self, quota_us: int | None) -> list[dict[str, Any]]:
        """Rewrite the container's quota in place, and the pod's where it follows the
        container's (the sum a kubelet gives a one-container pod; a pod with a limit of its
        own keeps it), in the kubelet's order. Returns what was written, when."""
        old = self.app.limits().quota_us
        grow = quota_us is None or (old is not None and quota_us > old)
        order = [("pod", self.pod if self.pod_follows else None), ("container", self.app)]
        if not grow:
            order.reverse()
        done = []
        for name, cg in order:
            if cg is None:
                continue
            before = cg.limits()
            t0 = time.monotonic_ns()
            cg.set_quota(quota_us, before.period_us)
            t1 = time.monotonic_ns()
            # the write took effect somewhere in [t_lo_ns, t_hi_ns]: on a loaded machine this
            # thread can be descheduled for tens of ms on either side of the write, so the
            # bracket, not its midpoint, is the fact
            done.append(
                {
                    "level": name,
                    "t_ns": (t0 + t1) // 2,
                    "t_lo_ns": t0,
                    "t_hi_ns": t1,
                    "quota_us_before": before.quota_us,
                    "quota_us": quota_us,
                }
            )
        return done


class Resizer:
    """Writes a new quota at a set moment, in a thread; ``done`` holds what was written."""

    def __init__(self, levels: Levels, at_mono_ns: int, quota_us: int | None, progress: Callable[[str], None]) -> None:
        self.levels, self.at, self.quota_us, self.progress = levels, at_mono_ns, quota_us, progress
        self.done: list[dict[str, Any]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        if self._stop.wait(max(0.0, (self.at - time.monotonic_ns()) / 1e9)):
            return
        try:
            self.done = self.levels.resize(self.quota_us)
            q = "none" if self.quota_us is None else f"{self.quota_us} µs"
            self.progress(f"resize: quota -> {q} ({', '.join(d['level'] for d in self.done)})")
        except LabError as e:
            self.error = str(e)

    def stop(self) -> None:
        self._stop.set()
        self._t.join(5)
