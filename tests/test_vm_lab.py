"""The lab inside VMs of the kernels users' nodes run (``lab run --kernel``): Debian's 6.1
and 6.12 booted under qemu (TCG), cgroup v2 laid out as a kubelet with the systemd driver
lays it. One short run per kernel, and one VM killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gmpanalysis as gmp

pytestmark = [pytest.mark.lab, pytest.mark.vm]

CLI = [sys.executable, "-m", "gmpanalysis.cli"]


def _lab(out: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "lab", "run", "-o", str(out), *args], capture_output=True, text=True, timeout=timeout)


def _check_conserved(run: gmp.Run, level: str) -> None:
    per = gmp.df_periods(run, level=level) if level else gmp.df_periods(run)
    cons = gmp.df_conservation(per)
    assert len(cons)
    for r in cons.itertuples(index=False):
        assert r.rows + r.groups + r.outside == pytest.approx(r.delta, abs=1e-6 * max(1.0, abs(r.delta))), r


def _check_kube_names(m: dict, layout: str = "kubelet") -> None:
    """The levels have the names a kubelet gives them, and the sampler found them as the node
    agent does: from the pod's UID, its QoS class and the container ID (kube-container:...)."""
    levels = {x["level"]: x for x in m["levels"]}
    pod, ctr = levels["pod"]["cgroup"], levels["container"]["cgroup"]
    uid, cid = m["pod_uid"], m["container_id"]
    crio = layout.endswith("crio")
    if "cgroupfs" in layout:
        assert pod == f"kubepods/burstable/pod{uid}"
        assert ctr == f"{pod}/{'crio-' if crio else ''}{cid}"
    else:
        assert pod == f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        assert ctr == f"{pod}/{'crio' if crio else 'cri-containerd'}-{cid}.scope"
    found = {c["name"]: c["path"] for c in m["sampler"]["cgroups"]}
    assert found == {"container": ctr, "pod": pod}


def _check_v2_bundle(out: Path, series: str, cpus: int) -> gmp.Run:
    run = gmp.load_run(out)
    m = run.meta
    assert m["complete"] is True, m.get("error")
    assert m["kernel"].startswith(series + "."), m["kernel"]
    assert m["cgroup_version"] == 2
    assert m["ncpu"] == cpus
    assert m["virtualization"] == "tcg"
    assert m["vm"]["cpus"] == cpus and m["vm"]["kernel_package"].startswith(f"linux-image-{series}.")
    assert m["hz"] == 250  # Debian's CONFIG_HZ, read from the package's config
    # the kubelet's systemd-driver names, the pod's quota the container's
    _check_kube_names(m)
    levels = {x["level"]: x for x in m["levels"]}
    assert levels["pod"]["quota_us"] == levels["container"]["quota_us"] == m["quota_us"]
    # the counters add up at both levels, and the kernel's own signals are there
    for level in ("container", "pod"):
        _check_conserved(run, level)
    s = run.samples
    for c in ("psi_some_us", "psi_full_us", "local_throttled_us"):
        assert c in s and not s[c].isna().any(), c
    per = gmp.df_periods(run)
    thr = per[per["throttled"].fillna(False).astype(bool)]
    assert len(thr) > 5, "a 0.5 CPU quota under this load throttles"
    # PSI "full" counts a frozen group's wall time: in throttled periods it is there
    assert (thr["psi_full_us"] > 0).mean() > 0.8
    return run


def test_vm_612_done_when(tmp_path):
    """The documented VM lab command: 6.12, 4 vCPUs, GOMAXPROCS 4, 6 s."""
    out = tmp_path / "b612"
    t0 = time.monotonic()
    r = _lab(out, "--kernel", "6.12", "--cpus", "4", "--gomaxprocs", "4", "--duration", "6")
    assert r.returncode == 0, r.stderr[-3000:]
    print(f"6.12 VM run: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    run = _check_v2_bundle(out, "6.12", 4)
    assert run.meta["gomaxprocs_effective"] == 4
    assert len(run.trace.stw) > 0
    # cpu.stat.local (6.6+) has throttled time; its per-period sum equals its delta
    per = gmp.df_periods(run)
    s = run.samples[run.samples["cgroup"] == "container"]
    total = float(s["local_throttled_us"].iloc[-1] - s["local_throttled_us"].iloc[0])
    assert total > 0
    assert per["local_throttled_us"].sum() <= total + 1e-6


def test_vm_61_resize_default_gomaxprocs(tmp_path):
    """6.1 (before cpu.stat.local): an in-place resize with GOMAXPROCS left to Go, which
    follows cpu.max of its own cgroup; the tree as a kubelet with the cgroupfs driver and
    CRI-O lays it."""
    out = tmp_path / "b61"
    r = _lab(
        out,
        *("--kernel", "6.1", "--cpus", "4", "--gomaxprocs", "default", "--duration", "6"),
        *("--layout", "kubelet-cgroupfs-crio"),
        *("--resize-at", "3", "--cpu-limit-after", "2000m", "--trace-start", "1", "--trace-seconds", "4"),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    run = gmp.load_run(out)
    m = run.meta
    assert m["kernel"].startswith("6.1.") and m["cgroup_version"] == 2 and m["ncpu"] == 4
    _check_kube_names(m, "kubelet-cgroupfs-crio")
    assert m["gomaxprocs_effective"] == 2  # Go >= 1.25 under cpu.max 50000/100000 on 4 CPUs: max(2, ceil(0.5))
    assert {d["level"] for d in m["resizes"]} == {"pod", "container"}
    lim = run.limits
    assert set(lim[lim["quota_us"] == 200_000]["cgroup"]) == {"pod", "container"}
    for level in ("container", "pod"):
        _check_conserved(run, level)
    s = run.samples
    assert "psi_some_us" in s and not s["psi_full_us"].isna().any()
    # 6.1 has no cpu.stat.local: the column is empty for every level, never 0
    assert s["local_throttled_us"].isna().all()
    # Go >= 1.25 with GOMAXPROCS unset follows cpu.max of its own cgroup: the limit moved
    # 0.5 -> 2 CPUs and its rule gives 2 at both (no change due), named as such
    g = gmp.df_gomaxprocs(run)
    assert list(g["limit_cpus"].iloc[[0, -1]]) == [0.5, 2.0]
    assert (g["gomaxprocs"] == 2).all()
    assert g["followed"].str.contains("go1.25 default").all()


def test_vm_killed_leaves_a_bundle(tmp_path):
    """qemu killed mid-load: the sampler's flushed rows are in the host's file already."""
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [*CLI, "lab", "run", "-o", str(out), "--kernel", "6.12", "--duration", "20", "--trace-seconds", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            f = out / "cpu_stat.csv"
            if f.exists() and f.stat().st_size > 200_000:
                break
            assert proc.poll() is None, proc.stderr.read()[-2000:] if proc.stderr else ""
            time.sleep(0.5)
        qemu = [p for p in _children(proc.pid) if "qemu-system" in _cmdline(p)]
        assert qemu, "qemu is the runner's child"
        os.kill(qemu[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "without a result" in err, err[-2000:]
    run = gmp.load_run(out)
    assert run.meta["complete"] is False
    assert len(run.samples) > 1000
    t = run.samples["t_ns"].to_numpy()
    assert np.all(np.diff(t) >= 0)
    per = gmp.df_periods(run)
    assert len(per) > 10
    json.loads((out / "meta.json").read_text())


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
