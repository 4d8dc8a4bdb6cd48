"""Where a pod's and a container's cgroups live on a node.

The kubelet names them by cgroup driver and QoS class (Guaranteed pods have no QoS level):

- cgroupfs: ``kubepods[/burstable|/besteffort]/pod<UID>/<container>``
- systemd: ``kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<UID with _>.slice/<container>``

and the container's directory by runtime and driver: containerd ``<id>`` /
``cri-containerd-<id>.scope``, CRI-O ``crio-<id>`` / ``crio-<id>.scope``, docker ``<id>`` /
``docker-<id>.scope``. cgroup v1 puts these under each controller's hierarchy (cpu/,
cpuacct/), v2 under the single mount. The candidates are listed for every combination and
the first that exists on the node wins, so no driver setting has to be guessed.

collect.py joins these lists with ``|`` into gmp-sampler's --cgroup argument; the sampler
(collectors/internal/cgroup/kube.go builds the same lists) resolves them on the node. Both
are tested against tests/data/cgroup/paths.json, so the two cannot drift.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..cgroup import detect, lookup
from ..errors import CollectError

QOS = ("Guaranteed", "Burstable", "BestEffort")
_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_CID = re.compile(r"^[0-9a-f]{12,128}$")


def split_container_id(container_id: str) -> tuple[str, str]:
    """``containerd://abc...`` -> ("containerd", "abc..."); validated, never used in a shell."""
    runtime, sep, cid = container_id.partition("://")
    if not sep or runtime not in ("containerd", "cri-o", "docker") or not _CID.match(cid):
        raise CollectError(
            f"container ID {container_id!r} (the pod's status.containerStatuses[].containerID): expected "
            "containerd://, cri-o:// or docker:// and a hex ID; other runtimes are not supported"
        )
    return runtime, cid


def pod_cgroup_candidates(pod_uid: str, qos: str) -> list[str]:
    """Relative paths (to a hierarchy root) the pod's cgroup may have: cgroupfs, then systemd."""
    if not _UID.match(pod_uid):
        raise CollectError(f"pod UID {pod_uid!r} (the pod's metadata.uid) is not a UID; pass the UID the API gives")
    if qos not in QOS:
        raise CollectError(f"QoS class {qos!r} (the pod's status.qosClass): expected one of {', '.join(QOS)}")
    q = qos.lower()
    us = pod_uid.replace("-", "_")
    if qos == "Guaranteed":
        return [f"kubepods/pod{pod_uid}", f"kubepods.slice/kubepods-pod{us}.slice"]
    return [f"kubepods/{q}/pod{pod_uid}", f"kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{us}.slice"]


def container_dir_candidates(container_id: str) -> list[str]:
    runtime, cid = split_container_id(container_id)
    if runtime == "containerd":
        return [cid, f"cri-containerd-{cid}.scope"]
    if runtime == "cri-o":
        return [f"crio-{cid}", f"crio-{cid}.scope"]
    return [cid, f"docker-{cid}.scope"]


def container_cgroup_candidates(pod_uid: str, qos: str, container_id: str) -> list[str]:
    return [f"{p}/{c}" for p in pod_cgroup_candidates(pod_uid, qos) for c in container_dir_candidates(container_id)]


def resolve(root: str | Path, candidates: list[str]) -> tuple[str, int]:
    """The first candidate that exists under the cgroup mount ``root`` -> (relative path,
    cgroup version), by the rule gmp-sampler applies to its ``|``-joined --cgroup argument
    (:func:`gmpanalysis.cgroup.lookup`, the mirror of collectors/internal/cgroup)."""
    mount = detect(root)
    if mount is None:
        raise CollectError(
            f"no cgroup cpu controller under {root}: neither a v1 cpu hierarchy nor a v2 mount listing cpu "
            "in cgroup.controllers; is the host's cgroup mount the one given?"
        )
    for rel in candidates:
        found = lookup(mount, rel)
        if not isinstance(found, str):
            return found.rel, found.version
    raise CollectError(
        f"none of these cgroups exists under {root}: {', '.join(candidates)}; is the pod running on this "
        "node, and is the host's cgroup mount the one given?"
    )
