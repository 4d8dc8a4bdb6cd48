"""Other kernels for the lab: Debian's kernel packages, unpacked once into the user's cache,
and the small initramfs that boots them with this machine's own filesystem as the guest's.

A series ("6.1", "6.12") names the newest Debian package of that series the machine's apt
lists offer (``linux-image-<version>-amd64``: the generic flavour, whose 9p file system
modules the guest needs to mount the host's root; the cloud flavour has none). The
package is fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x``; only the
kernel image, its config and the modules the initramfs loads are kept.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import LabError

# what the guest loads before it can mount the host's root (virtio's PCI transport is a
# module in 6.1, built in from 6.12 on; modules.dep adds what each needs)
GUEST_MODULES = ("virtio_pci", "9pnet_virtio", "9p")
# Debian's static busybox: the initramfs's only program (insmod, mount, chroot, poweroff)
BUSYBOX = "/bin/busybox"
_NAME = re.compile(r"^linux-image-(\d+)\.(\d+)\.(\d+)(?:-(\d+))?(?:\+deb\d+)?-amd64$")


@dataclasses.dataclass(frozen=True)
class Kernel:
    """An unpacked kernel: ``release`` as uname -r gives it, its image and config, the
    initramfs that boots it into the host's filesystem, and the Debian package it came from."""

    series: str
    release: str
    package: str
    vmlinuz: Path
    config: Path
    initramfs: Path


def cache_dir() -> Path:
    """$GMP_KERNEL_CACHE, else ~/.cache/gmpanalysis/kernels."""
    env = os.environ.get("GMP_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gmpanalysis" / "kernels"


def check_series(series: str) -> str:
    if not re.fullmatch(r"\d+\.\d+", series):
        raise LabError(f"kernel series {series!r}: give MAJOR.MINOR, e.g. 6.1 or 6.12")
    return series


@functools.lru_cache(maxsize=16)
def debian_package(series: str, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str:
    """The newest generic amd64 kernel package of ``series`` in the apt lists (asked once per
    process: every run of a sweep boots the same kernel)."""
    check_series(series)
    if shutil.which("apt-cache") is None:
        raise LabError(f"--kernel {series} takes Debian's kernel packages: apt-cache is not on this machine")
    try:
        out = run(
            ["apt-cache", "search", "--names-only", f"^linux-image-{re.escape(series)}\\."],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    except subprocess.TimeoutExpired:
        raise LabError("apt-cache search did not answer within 120 s (apt lists locked?): try again") from None
    best = newest(series, (line.split(" ", 1)[0] for line in out.splitlines()))
    if best is None:
        raise LabError(
            f"no Debian kernel package of series {series} (linux-image-{series}.*-amd64) in the apt lists: "
            "run 'apt-get update' (root), or choose a series Debian packages (6.1, 6.12)"
        )
    return best


def newest(series: str, names: Iterable[str]) -> str | None:
    """The newest generic amd64 kernel package of ``series`` among package names."""
    best: tuple[tuple[int, int], str] | None = None
    want = tuple(int(x) for x in series.split("."))
    for name in names:
        m = _NAME.match(name)
        if not m or (int(m[1]), int(m[2])) != want:
            continue
        key = (int(m[3]), int(m[4] or 0))
        if best is None or key > best[0]:
            best = (key, name)
    return None if best is None else best[1]


def _modinfo_depends(data: bytes) -> list[str]:
    """The ``depends=`` entry of a module's .modinfo strings (NUL-separated key=value)."""
    i = data.find(b"\0depends=")
    if i < 0:
        return []
    j = data.find(b"\0", i + 1)
    return [d for d in data[i + len(b"\0depends=") : j].decode().split(",") if d]


def modules_to_load(moddir: Path) -> list[str]:
    """GUEST_MODULES and the modules they depend on (their own modinfo; Debian's package
    ships no modules.dep, depmod makes it at install), in load order, as paths relative to
    ``moddir``; those built into the kernel (modules.builtin) are left out."""
    by_name = {
        re.sub(r"\.ko(\.xz|\.zst|\.gz)?$", "", f.name).replace("-", "_"): f.relative_to(moddir).as_posix()
        for f in (moddir / "kernel").rglob("*.ko*")
    }
    order: list[str] = []

    def visit(name: str) -> None:
        rel = by_name.get(name)
        if rel is None:
            if not _builtin(moddir, name):
                raise LabError(f"{moddir}: {name} is neither a module nor built in: this kernel cannot boot the lab")
            return
        for d in _modinfo_depends(_decompress(moddir / rel)):
            visit(d.replace("-", "_"))
        if rel not in order:
            order.append(rel)

    for name in GUEST_MODULES:
        visit(name)
    return order


def _builtin(moddir: Path, name: str) -> bool:
    f = moddir / "modules.builtin"
    return f.exists() and any(
        re.sub(r"\.ko$", "", Path(line).name).replace("-", "_") == name for line in f.read_text().splitlines()
    )


def _decompress(path: Path) -> bytes:
    """A module file as plain ELF (Debian compresses them with xz from 6.12 on)."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".zst":
        if shutil.which("zstd") is None:
            raise LabError(f"{path} is zstd-compressed: install zstd (apt-get install zstd)")
        r = subprocess.run(["zstd", "-dc", str(path)], capture_output=True, timeout=120)
        if r.returncode != 0:
            raise LabError(f"zstd -dc {path} failed: {r.stderr.decode(errors='replace').strip()[-300:]}")
        return r.stdout
    return data


def cpio_newc(entries: list[tuple[str, int, bytes]]) -> bytes:
    """An uncompressed cpio archive in the "newc" format the kernel unpacks as its initramfs:
    (name, mode, data) per entry; a directory has mode 0o040755 and no data."""
    out = io.BytesIO()

    def pad(n: int) -> None:
        out.write(b"\0" * ((4 - n % 4) % 4))

    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], 1):
        nm = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nm), 0]
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        out.write(hdr + nm)
        pad(len(hdr) + len(nm))
        out.write(data)
        pad(len(data))
    return out.getvalue()


INIT = Path(__file__).with_name("vminit.sh")


def build_initramfs(moddir: Path, dest: Path) -> None:
    """busybox, the modules the guest needs (decompressed: busybox's insmod reads plain
    ELF) and /init (vminit.sh)."""
    if not Path(BUSYBOX).is_file():
        raise LabError(f"{BUSYBOX} missing: install Debian's busybox-static (apt-get install busybox-static)")
    if b"ld-linux" in Path(BUSYBOX).read_bytes()[:4096]:
        # the initramfs has no C library: a dynamically linked busybox cannot start there
        raise LabError(f"{BUSYBOX} is dynamically linked: install Debian's busybox-static instead of busybox")
    mods = modules_to_load(moddir)
    entries: list[tuple[str, int, bytes]] = [(d, 0o040755, b"") for d in ("bin", "dev", "proc", "sys", "host", "mods")]
    entries.append(("bin/busybox", 0o100755, Path(BUSYBOX).read_bytes()))
    names = []
    for i, m in enumerate(mods):
        plain = re.sub(r"(\.xz|\.zst|\.gz)$", "", Path(m).name)
        name = f"mods/{i:02d}-{plain}"
        entries.append((name, 0o100644, _decompress(moddir / m)))
        names.append("/" + name)
    entries.append(("modules", 0o100644, ("\n".join(names) + "\n").encode()))
    entries.append(("init", 0o100755, INIT.read_bytes()))
    tmp = dest.with_suffix(".tmp")
    tmp.write_bytes(cpio_newc(entries))
    tmp.replace(dest)


def ensure_kernel(series: str, progress: Callable[[str], None] = lambda _: None) -> Kernel:
    """The newest Debian kernel of ``series``, fetched and unpacked on first use, its
    initramfs rebuilt when busybox or the guest's init script changed. Where the apt lists
    offer none (no apt, lists not fetched), the newest one already cached is used."""
    check_series(series)
    try:
        pkg = debian_package(series)
    except LabError:
        cached = newest(series, (p.parent.name for p in cache_dir().glob("*/.complete")))
        if cached is None:
            raise
        progress(f"kernel {series}: the apt lists offer none; using the cached {cached}")
        pkg = cached
    d = cache_dir() / pkg
    done = d / ".complete"
    if not done.exists():
        t0 = time.monotonic()
        progress(f"kernel {series}: fetching Debian's {pkg} (once; cached in {d})")
        d.mkdir(parents=True, exist_ok=True)
        try:
            _fetch(pkg, d)
        except subprocess.TimeoutExpired as e:
            raise LabError(f"fetching {pkg}: {e.cmd[0]} did not finish within {e.timeout:.0f} s; try again") from None
        done.write_text(f"{pkg}\n")
        progress(f"kernel {series}: {pkg} unpacked in {time.monotonic() - t0:.0f} s")
    release = (d / "release").read_text().strip()
    initramfs = d / "initramfs.cpio"
    stamp = d / ".initramfs-inputs"
    inputs = f"{os.stat(BUSYBOX).st_mtime_ns}:{_digest(INIT)}:{_digest(Path(__file__))}"
    if not initramfs.exists() or not stamp.exists() or stamp.read_text() != inputs:
        build_initramfs(d / "modules", initramfs)
        stamp.write_text(inputs)
    return Kernel(series, release, pkg, d / "vmlinuz", d / "config", initramfs)


def _fetch(pkg: str, d: Path) -> None:
    """apt-get download the package and keep what the VM needs in ``d``."""
    with tempfile.TemporaryDirectory(dir=d.parent) as tmp:
        r = subprocess.run(["apt-get", "download", pkg], cwd=tmp, capture_output=True, text=True, timeout=900)
        debs = list(Path(tmp).glob("*.deb"))
        if r.returncode != 0 or not debs:
            raise LabError(f"apt-get download {pkg} failed: {r.stderr.strip()[-400:]}")
        x = Path(tmp) / "x"
        r = subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(x)], capture_output=True, text=True, timeout=600)
        images = sorted((x / "boot").glob("vmlinuz-*"))
        if r.returncode != 0 or len(images) != 1:
            raise LabError(
                f"{debs[0].name}: dpkg-deb -x gave {len(images)} kernel images under boot/ "
                f"({r.stderr.strip()[-300:] or 'exit ' + str(r.returncode)}); is it a linux-image package?"
            )
        vmlinuz = images[0]
        release = vmlinuz.name.removeprefix("vmlinuz-")
        config = x / "boot" / f"config-{release}"
        if not config.is_file():
            raise LabError(f"{debs[0].name} has no boot/config-{release}: is it a linux-image package?")
        shutil.copy2(vmlinuz, d / "vmlinuz")
        shutil.copy2(config, d / "config")
        mods = x / "lib" / "modules" / release
        keep = d / "modules"
        shutil.rmtree(keep, ignore_errors=True)
        keep.mkdir()
        if (mods / "modules.builtin").exists():
            shutil.copy2(mods / "modules.builtin", keep / "modules.builtin")
        for m in modules_to_load(mods):
            (keep / m).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(mods / m, keep / m)
        (d / "release").write_text(release + "\n")


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16]


def main(argv: list[str]) -> int:
    """``python -m gmpanalysis.lab.kernels SERIES...``: fetch and unpack those kernels now
    (scripts/test.sh does, so the first VM test does not pay for it)."""
    for series in argv:
        t0 = time.monotonic()
        k = ensure_kernel(series, lambda m: print(m, file=sys.stderr, flush=True))
        print(f"{series}: {k.release} ({k.package}) ready in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
