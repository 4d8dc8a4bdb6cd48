"""The VM lab's pieces that need no VM: choosing Debian's kernel package, the modules the
guest loads, the initramfs archive, the qemu command line and the kernel-facts table."""

from __future__ import annotations

import lzma
import shutil
import subprocess
from pathlib import Path

import pytest

from gmpanalysis.errors import LabError
from gmpanalysis.kernelfacts import kernel_table, kernel_version
from gmpanalysis.lab import kernels
from gmpanalysis.lab.vm import VmSpec, qemu_command

APT_SEARCH = """\
linux-image-6.1.0-47-amd64 - Linux 6.1 for 64-bit PCs (signed)
linux-image-6.1.0-47-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)
linux-image-6.1.0-56-amd64 - Linux 6.1 for 64-bit PCs (signed)
linux-image-6.1.0-9-amd64 - Linux 6.1 for 64-bit PCs (signed)
linux-image-6.1.0-56-amd64-dbg - Debug symbols
linux-image-6.1.0-56-rt-amd64 - Linux 6.1 for 64-bit PCs, PREEMPT_RT (signed)
linux-image-6.12.117+deb12-amd64 - Linux 6.12 for 64-bit PCs (signed)
linux-image-6.12.99+deb12-amd64 - Linux 6.12 for 64-bit PCs (signed)
linux-image-6.12.117+deb12-cloud-amd64 - Linux 6.12 for x86-64 cloud (signed)
"""


def _fake_apt(stdout: str):
    def run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 0, stdout=stdout, stderr="")

    return run


@pytest.mark.parametrize(
    ("series", "want"), [("6.1", "linux-image-6.1.0-56-amd64"), ("6.12", "linux-image-6.12.117+deb12-amd64")]
)
def test_newest_generic_package_of_the_series(series, want, monkeypatch):
    monkeypatch.setattr(kernels.shutil, "which", lambda _: "/usr/bin/apt-cache")
    assert kernels.debian_package(series, run=_fake_apt(APT_SEARCH)) == want


def test_no_package_of_the_series_says_what_to_do(monkeypatch):
    monkeypatch.setattr(kernels.shutil, "which", lambda _: "/usr/bin/apt-cache")
    with pytest.raises(LabError, match="apt-get update"):
        kernels.debian_package("5.10", run=_fake_apt(APT_SEARCH))
    with pytest.raises(LabError, match="MAJOR.MINOR"):
        kernels.check_series("6.12; rm -rf /")


def _module(path: Path, depends: str, xz: bool = False) -> None:
    # the .modinfo strings as the kernel's build writes them: NUL-separated key=value
    data = b"\x7fELF....\0license=GPL\0depends=" + depends.encode() + b"\0name=" + path.name.encode() + b"\0"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(lzma.compress(data) if xz else data)


def test_modules_in_dependency_order_builtins_left_out(tmp_path):
    k = tmp_path / "kernel"
    _module(k / "fs/9p/9p.ko.xz", "9pnet,netfs", xz=True)
    _module(k / "fs/netfs/netfs.ko.xz", "", xz=True)
    _module(k / "net/9p/9pnet.ko.xz", "", xz=True)
    _module(k / "net/9p/9pnet_virtio.ko.xz", "9pnet,virtio_ring", xz=True)
    (tmp_path / "modules.builtin").write_text(
        "kernel/drivers/virtio/virtio_pci.ko\nkernel/drivers/virtio/virtio_ring.ko\n"
    )
    order = kernels.modules_to_load(tmp_path)
    assert order == [
        "kernel/net/9p/9pnet.ko.xz",
        "kernel/net/9p/9pnet_virtio.ko.xz",
        "kernel/fs/netfs/netfs.ko.xz",
        "kernel/fs/9p/9p.ko.xz",
    ]


def test_a_module_neither_built_nor_built_in_is_named(tmp_path):
    _module(tmp_path / "kernel/fs/9p/9p.ko", "9pnet")
    (tmp_path / "modules.builtin").write_text("")
    with pytest.raises(LabError, match="virtio_pci is neither a module nor built in"):
        kernels.modules_to_load(tmp_path)


def test_cpio_newc_unpacks_with_cpio(tmp_path):
    if shutil.which("cpio") is None:
        pytest.skip("GNU cpio is not installed (Debian: cpio); the archive is checked by the VM tests' boots")
    arc = kernels.cpio_newc([("bin", 0o040755, b""), ("bin/x", 0o100755, b"abc"), ("init", 0o100644, b"#!/bin/sh\n")])
    (tmp_path / "a.cpio").write_bytes(arc)
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["cpio", "-idm", "-F", str(tmp_path / "a.cpio")], cwd=out, check=True, capture_output=True)
    assert (out / "bin/x").read_bytes() == b"abc"
    assert (out / "bin/x").stat().st_mode & 0o777 == 0o755
    assert (out / "init").read_text() == "#!/bin/sh\n"


def test_qemu_command_shares_root_read_only_and_the_bundle_writable(tmp_path):
    k = kernels.Kernel(
        "6.12", "6.12.1", "linux-image-6.12.1-amd64", tmp_path / "vmlinuz", tmp_path / "c", tmp_path / "i"
    )
    cmd = qemu_command(k, VmSpec("6.12", cpus=4, memory_mb=1024), tmp_path / "state", tmp_path / "out")
    shares = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-virtfs"]
    assert any("path=/," in s and "mount_tag=hostroot" in s and s.endswith("readonly=on") for s in shares)
    assert any(f"path={tmp_path / 'out'}," in s and "readonly" not in s for s in shares)
    assert cmd[cmd.index("-smp") + 1] == "4" and cmd[cmd.index("-m") + 1] == "1024"
    assert "tcg" in cmd[cmd.index("-accel") + 1]
    assert any(f"path={tmp_path / 'state'}," in s and "mount_tag=gmpstate" in s for s in shares)
    assert "psi=1" in cmd[cmd.index("-append") + 1].split()


def test_a_comma_in_a_shared_path_is_escaped_for_qemu(tmp_path):
    files = (tmp_path / "vmlinuz", tmp_path / "config", tmp_path / "initramfs")
    k = kernels.Kernel("6.12", "6.12.1", "linux-image-6.12.1-amd64", *files)
    cmd = qemu_command(k, VmSpec("6.12"), tmp_path / "state", tmp_path / "a,b")
    assert any(f"path={tmp_path}/a,,b,mount_tag=gmpout" in a for a in cmd)


def test_kernel_facts_by_version():
    assert kernel_version("6.12.117+deb12-amd64") == (6, 12) and kernel_version(None) is None
    old = kernel_table({"kernel": "6.1.0-56-amd64", "cgroup_version": 2}, {"container": 0.03, "pod": 99.98})
    new = kernel_table({"kernel": "6.18.44", "cgroup_version": 1}).set_index("behaviour")
    old = old.set_index("behaviour")
    assert "shared by every cgroup" in old.loc["period timer phase", "kernel"]
    assert "all on multiples of the period" in old.loc["period timer phase", "seen"]
    assert "random" in new.loc["period timer phase", "kernel"]
    assert "per task" in new.loc["throttling", "kernel"] and "per run queue" in old.loc["throttling", "kernel"]
    assert old.loc["cpu.stat.local", "kernel"].startswith("before 6.6")
    assert new.loc["cpu.stat.local", "kernel"].startswith("cgroup v1")
    assert new.loc["cpu.pressure", "kernel"].startswith("none")
    assert (
        "some only"
        in kernel_table({"kernel": "5.10.0", "cgroup_version": 2}).set_index("behaviour").loc["cpu.pressure", "kernel"]
    )


def test_without_apt_lists_the_newest_cached_kernel_is_used(tmp_path, monkeypatch):
    for name in ("linux-image-6.12.99+deb12-amd64", "linux-image-6.12.117+deb12-amd64", "linux-image-6.1.0-56-amd64"):
        d = tmp_path / name
        d.mkdir()
        (d / ".complete").write_text(name + "\n")
        (d / "release").write_text(name.removeprefix("linux-image-") + "\n")
    (tmp_path / "linux-image-6.12.200+deb12-amd64").mkdir()  # a fetch that never finished

    def no_lists(series, run=None):
        raise LabError("no Debian kernel package in the apt lists")

    monkeypatch.setenv("GMP_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "debian_package", no_lists)
    monkeypatch.setattr(kernels, "build_initramfs", lambda moddir, dest: dest.write_bytes(b""))
    # the initramfs is stamped with busybox's mtime: a stand-in file, so the test runs where
    # busybox-static is not installed
    (tmp_path / "busybox").write_bytes(b"")
    monkeypatch.setattr(kernels, "BUSYBOX", str(tmp_path / "busybox"))
    said = []
    k = kernels.ensure_kernel("6.12", said.append)
    assert k.package == "linux-image-6.12.117+deb12-amd64" and k.release == "6.12.117+deb12-amd64"
    assert "cached" in said[0]
    with pytest.raises(LabError, match="apt lists"):
        kernels.ensure_kernel("6.6")
