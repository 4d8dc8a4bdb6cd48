"""Pod and container cgroup paths on fixture trees: both drivers, both cgroup versions,
every QoS class, containerd / CRI-O / docker IDs."""

from __future__ import annotations

import itertools

import pytest

from gmpanalysis.errors import CollectError
from gmpanalysis.kube.paths import container_cgroup_candidates, pod_cgroup_candidates, resolve

UID = "0f2c9c1e-6a41-4a8e-9d0b-5d1c2e3f4a5b"
US = UID.replace("-", "_")
CID = "3b1f" * 16

# what a node really has, per driver, QoS and runtime (kubelet and runtime naming)
EXPECTED = {
    ("cgroupfs", "Guaranteed"): f"kubepods/pod{UID}",
    ("cgroupfs", "Burstable"): f"kubepods/burstable/pod{UID}",
    ("cgroupfs", "BestEffort"): f"kubepods/besteffort/pod{UID}",
    ("systemd", "Guaranteed"): f"kubepods.slice/kubepods-pod{US}.slice",
    ("systemd", "Burstable"): f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{US}.slice",
    ("systemd", "BestEffort"): f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{US}.slice",
}
CONTAINER = {
    ("cgroupfs", "containerd"): CID,
    ("systemd", "containerd"): f"cri-containerd-{CID}.scope",
    ("cgroupfs", "cri-o"): f"crio-{CID}",
    ("systemd", "cri-o"): f"crio-{CID}.scope",
    ("cgroupfs", "docker"): CID,
    ("systemd", "docker"): f"docker-{CID}.scope",
}
CASES = list(
    itertools.product(
        (1, 2), ("cgroupfs", "systemd"), ("Guaranteed", "Burstable", "BestEffort"), ("containerd", "cri-o", "docker")
    )
)


def make_node(tmp_path, version, rel):
    """A node's cgroup mount with the path ``rel``; like the kernel, every cgroup directory
    on the way has its interface files."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        sub = "/".join(parts[:i])
        if version == 1:
            for h in ("cpu", "cpuacct"):
                (tmp_path / h / sub).mkdir(parents=True, exist_ok=True)
            (tmp_path / "cpu" / sub / "cpu.stat").write_text("nr_periods 0\n")
        else:
            (tmp_path / sub).mkdir(parents=True, exist_ok=True)
            (tmp_path / sub / "cpu.stat").write_text("usage_usec 0\n")
    if version == 2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    return tmp_path


@pytest.mark.parametrize("version,driver,qos,runtime", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_resolves_every_layout(tmp_path, version, driver, qos, runtime):
    rel = f"{EXPECTED[(driver, qos)]}/{CONTAINER[(driver, runtime)]}"
    root = make_node(tmp_path, version, rel)
    got, v = resolve(root, container_cgroup_candidates(UID, qos, f"{runtime}://{CID}"))
    assert (got, v) == (rel, version)
    pod, _ = resolve(root, pod_cgroup_candidates(UID, qos))
    assert pod == EXPECTED[(driver, qos)]


def test_missing_cgroup_names_the_candidates(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    with pytest.raises(CollectError, match="none of these cgroups exists"):
        resolve(tmp_path, container_cgroup_candidates(UID, "Burstable", f"containerd://{CID}"))


@pytest.mark.parametrize("bad", ["containerd://../../etc", "rkt://abc", f"containerd://{CID}; rm -rf /", "abc"])
def test_container_ids_are_validated(bad):
    with pytest.raises(CollectError):
        container_cgroup_candidates(UID, "Burstable", bad)


@pytest.mark.parametrize("uid,qos", [("../x", "Burstable"), (UID, "Gold")])
def test_uid_and_qos_are_validated(uid, qos):
    with pytest.raises(CollectError):
        pod_cgroup_candidates(uid, qos)
