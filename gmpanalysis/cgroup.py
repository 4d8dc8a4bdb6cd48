"""cgroup CPU limits and layout, for the lab: where the cpu controller is, whether a cgroup
exists, and its CFS bandwidth settings (v1 and v2, µs).

The cgroup reader that production runs is Go: ``collectors/internal/cgroup`` (gmp-sampler
reads cpu.stat / cpuacct.usage with it and normalises the units). This module keeps only
what the Python side needs itself (the lab creates cgroups and reads their limits back),
and follows the same rules, checked against the same golden files as the Go code:
``tests/data/cgroup/expected.json`` (every fixture case: limits or the error) and
``tests/data/cgroup/paths.json`` (layouts and the "does this cgroup exist" rule).

cgroup v1 (``cpu`` and ``cpuacct`` hierarchies, possibly one joined mount):
  ``cpu.cfs_period_us`` (1000..1000000), ``cpu.cfs_quota_us`` (-1 = no limit, else
  1000..2^44-1), ``cpu.cfs_burst_us`` (0..quota).
cgroup v2 (one hierarchy): ``cpu.max`` ("QUOTA PERIOD", QUOTA "max" = no limit),
  ``cpu.max.burst``.
The ranges are the kernel's (Documentation/scheduler/sched-bwc.rst, tg_set_cfs_bandwidth):
it stores nothing else, so a file showing anything else is rejected, not clamped. A missing
limit file means the kernel's default (no limit); malformed content is a
:class:`CgroupFormatError` naming the file and line and quoting it.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from pathlib import Path

from .errors import CgroupFormatError

DEFAULT_PERIOD_US = 100_000
MIN_PERIOD_US, MAX_PERIOD_US = 1_000, 1_000_000
MIN_QUOTA_US, MAX_QUOTA_US = 1_000, (1 << 44) - 1  # the kernel's max_cfs_runtime, in µs
_MAX_QUOTE = 64  # bytes of a line an error message quotes

V1_CPU_HIERARCHIES = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
V1_ACCT_HIERARCHIES = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")


@dataclasses.dataclass(frozen=True)
class CpuLimits:
    """CFS bandwidth settings of one cgroup."""

    version: int  # 1 or 2
    period_us: int  # CFS period; the kernel default is 100 000
    quota_us: int | None  # runtime per period; None = no limit
    burst_us: int = 0  # extra runtime a period may borrow from unused quota (5.14+)

    @property
    def cpus(self) -> float | None:
        """The limit in CPUs (quota / period), None without a limit."""
        return None if self.quota_us is None else self.quota_us / self.period_us


# --- parsing (the grammar of collectors/internal/cgroup/parse.go) -------------------------

_UINT = re.compile(rb"[0-9]{1,20}")


def _uint(b: bytes) -> int | None:
    """An unsigned decimal: ASCII digits only, no sign or space, at most 2^64-1."""
    if not _UINT.fullmatch(b):
        return None
    v = int(b)
    return v if v < 1 << 64 else None


def _int(b: bytes) -> int | None:
    v = _uint(b[1:]) if b.startswith(b"-") else _uint(b)
    if v is None:
        return None
    v = -v if b.startswith(b"-") else v
    return v if -(1 << 63) <= v < 1 << 63 else None


def _error(path: str, line: int, text: bytes, reason: str) -> CgroupFormatError:
    q = text[:_MAX_QUOTE].decode("utf-8", "backslashreplace")
    more = f"... ({len(text)} bytes)" if len(text) > _MAX_QUOTE else ""
    return CgroupFormatError(f'{path} line {line}: {reason}, got "{q}"{more}')


def _single_line(path: str, data: bytes) -> bytes:
    """The one line of a one-value file (its newline optional)."""
    line, nl, rest = data.partition(b"\n")
    if nl and rest:
        raise _error(path, 2, rest.partition(b"\n")[0], "expected one line")
    if not line:
        raise _error(path, 1, line, "expected a value, the file is empty")
    return line


def _period(path: str, line: bytes, v: int) -> int:
    if not MIN_PERIOD_US <= v <= MAX_PERIOD_US:
        raise _error(path, 1, line, f"period must be {MIN_PERIOD_US}..{MAX_PERIOD_US} µs")
    return v


def _single_uint(source: str, data: bytes) -> tuple[bytes, int]:
    """A file of one unsigned decimal line: (the line, its value)."""
    line = _single_line(source, data)
    v = _uint(line)
    if v is None:
        raise _error(source, 1, line, "expected an unsigned decimal integer (µs)")
    return line, v


def parse_period_v1(data: bytes, *, source: str) -> int:
    """``cpu.cfs_period_us``."""
    line, v = _single_uint(source, data)
    return _period(source, line, v)


def parse_quota_v1(data: bytes, *, source: str) -> int | None:
    """``cpu.cfs_quota_us`` -> µs, or None for -1 (no limit)."""
    line = _single_line(source, data)
    v = _int(line)
    if v is None:
        raise _error(source, 1, line, "expected a decimal integer (µs, -1 = no limit)")
    if v == -1:
        return None
    if not MIN_QUOTA_US <= v <= MAX_QUOTA_US:
        raise _error(source, 1, line, f"quota must be -1 (no limit) or {MIN_QUOTA_US}..{MAX_QUOTA_US} µs")
    return v


def parse_burst(data: bytes, *, source: str) -> int:
    """``cpu.cfs_burst_us`` (v1) or ``cpu.max.burst`` (v2)."""
    line, v = _single_uint(source, data)
    if v > MAX_QUOTA_US:
        raise _error(source, 1, line, f"burst must be 0..{MAX_QUOTA_US} µs")
    return v


def parse_cpu_max(data: str | bytes, *, source: str = "cpu.max") -> tuple[int | None, int]:
    """Parse v2 ``cpu.max`` -> (quota_us or None for "max", period_us). The kernel always
    shows both fields; "QUOTA" alone (the form a write may take) keeps the default period."""
    data = data.encode() if isinstance(data, str) else data
    line = _single_line(source, data)
    shape = "expected 'QUOTA PERIOD' in µs (QUOTA may be 'max')"
    q, sp, p = line.partition(b" ")
    period = DEFAULT_PERIOD_US
    if sp:
        v = _uint(p)
        if v is None:
            raise _error(source, 1, line, shape)
        period = _period(source, line, v)
    if q == b"max":
        return None, period
    quota = _uint(q)
    if quota is None:
        raise _error(source, 1, line, shape)
    if not MIN_QUOTA_US <= quota <= MAX_QUOTA_US:
        raise _error(source, 1, line, f"quota must be 'max' or {MIN_QUOTA_US}..{MAX_QUOTA_US} µs")
    return quota, period


def _read(path: Path) -> bytes | None:
    """A cgroup file's bytes; None when missing (the kernel's default applies)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise CgroupFormatError(f"{path}: is a directory (expected the cgroup's interface file)") from None


def _burst(path: Path, quota: int | None) -> int:
    data = _read(path)
    if data is None:
        return 0
    burst = parse_burst(data, source=str(path))
    if quota is not None and burst > quota:
        raise _error(str(path), 1, _single_line(str(path), data), f"burst must not exceed the quota ({quota} µs)")
    return burst


def read_cpu_limits_v1(cpu_dir: str | Path) -> CpuLimits:
    """Read quota, period and burst of a v1 cgroup directory in the cpu hierarchy."""
    d = Path(cpu_dir)
    period_p, quota_p = d / "cpu.cfs_period_us", d / "cpu.cfs_quota_us"
    period_b, quota_b = _read(period_p), _read(quota_p)
    period = DEFAULT_PERIOD_US if period_b is None else parse_period_v1(period_b, source=str(period_p))
    quota = None if quota_b is None else parse_quota_v1(quota_b, source=str(quota_p))
    return CpuLimits(1, period, quota, _burst(d / "cpu.cfs_burst_us", quota))


def read_cpu_limits_v2(cgroup_dir: str | Path) -> CpuLimits:
    """Read quota, period and burst of a v2 cgroup directory."""
    d = Path(cgroup_dir)
    max_b = _read(d / "cpu.max")
    quota, period = parse_cpu_max(max_b, source=str(d / "cpu.max")) if max_b is not None else (None, DEFAULT_PERIOD_US)
    return CpuLimits(2, period, quota, _burst(d / "cpu.max.burst", quota))


# --- layout (the rules of collectors/internal/cgroup/layout.go) ---------------------------


@dataclasses.dataclass(frozen=True)
class Mount:
    """A cgroup mount root and where its cpu controller lives."""

    root: Path
    version: int  # 1 or 2
    cpu: Path  # v1: the cpu hierarchy's root; v2: root
    acct: Path | None  # v1: the cpuacct hierarchy's root; v2: None


@dataclasses.dataclass(frozen=True)
class CgroupFiles:
    """A cgroup that exists: the files gmp-sampler reads."""

    rel: str  # relative to the hierarchy root, cleaned ("" = the root cgroup)
    version: int
    dir: Path  # holds cpu.stat and the limit files (v1: in the cpu hierarchy)
    stat: Path  # cpu.stat
    usage: Path | None  # v1: cpuacct.usage in the cpuacct hierarchy; v2: None


def detect(root: str | Path = "/sys/fs/cgroup") -> Mount | None:
    """Where the cpu controller is under ``root``, or None.

    v2 when the root's cgroup.controllers lists cpu; otherwise v1 when one of cpu/,
    cpu,cpuacct/, cpuacct,cpu/ is a directory. The cpu controller is bound to one hierarchy
    only, so a hybrid host (v1 hierarchies beside a cgroup2 mount without cpu) is v1, as for
    the Go runtime. The cpuacct hierarchy is the first of cpuacct/, cpu,cpuacct/,
    cpuacct,cpu/ that is a directory, else the cpu one.
    """
    r = Path(root)
    try:
        controllers = (r / "cgroup.controllers").read_text().split()
    except OSError:
        controllers = []
    if "cpu" in controllers:
        return Mount(r, 2, r, None)
    for h in V1_CPU_HIERARCHIES:
        if (r / h).is_dir():
            acct = next((r / a for a in V1_ACCT_HIERARCHIES if (r / a).is_dir()), r / h)
            return Mount(r, 1, r / h, acct)
    return None


def detect_version(root: str | Path = "/sys/fs/cgroup") -> int | None:
    """Which cgroup version holds the cpu controller under ``root``: 1, 2 or None."""
    m = detect(root)
    return m.version if m else None


def clean_rel(rel: str) -> str:
    """A cgroup path relative to a hierarchy root, cleaned; it cannot climb out of it."""
    return posixpath.normpath("/" + rel).lstrip("/")


def v1_dirs(root: str | Path, rel: str) -> tuple[Path, Path]:
    """(cpu dir, cpuacct dir) of v1 cgroup ``rel`` under the cgroup mount ``root``."""
    m = detect(root)
    rel = clean_rel(rel)
    if m is None or m.version != 1 or m.acct is None:
        return Path(root) / "cpu" / rel, Path(root) / "cpuacct" / rel
    return m.cpu / rel, m.acct / rel


def _is_file(p: Path, what: str) -> bool:
    """True for a regular file, False when nothing is there; anything else is an error."""
    if not p.exists():
        return False
    if not p.is_file():
        raise CgroupFormatError(f"{p}: not a regular file, expected the cgroup's {what}")
    return True


def lookup(mount: Mount, rel: str) -> CgroupFiles | str:
    """The one rule for "cgroup ``rel`` exists": every file the sampler reads is a regular
    file (v1: cpu.stat in the cpu hierarchy and cpuacct.usage in the cpuacct hierarchy; v2:
    cpu.stat). Returns the files, or a str saying why the cgroup does not exist; something
    else where a file should be raises :class:`CgroupFormatError`."""
    rel = clean_rel(rel)
    d = mount.cpu / rel
    if not _is_file(d / "cpu.stat", "cpu.stat"):
        return f"no cpu.stat under {mount.root} (looked for {d / 'cpu.stat'})"
    usage = None
    if mount.version == 1:
        usage = (mount.acct or mount.cpu) / rel / "cpuacct.usage"
        if not _is_file(usage, "cpuacct.usage"):
            return f"found v1 {d / 'cpu.stat'} but no {usage}: create the cgroup in the cpuacct hierarchy too"
    return CgroupFiles(rel, mount.version, d, d / "cpu.stat", usage)
