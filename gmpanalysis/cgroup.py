"""cgroup CPU interface files: parsing for v1 and v2, with units normalised to µs.

cgroup v1 (``cpu`` and ``cpuacct`` hierarchies, possibly separate mounts):
  ``cpu.cfs_period_us``, ``cpu.cfs_quota_us`` (-1 = no limit), ``cpu.cfs_burst_us``;
  ``cpu.stat``: nr_periods, nr_throttled, throttled_time (ns), nr_bursts, burst_time (ns);
  usage is not in v1 cpu.stat but in ``cpuacct.usage`` (ns).
cgroup v2 (one hierarchy):
  ``cpu.max`` ("QUOTA PERIOD", QUOTA "max" = no limit), ``cpu.max.burst`` (µs);
  ``cpu.stat``: usage_usec, user_usec, system_usec, nr_periods, nr_throttled,
  throttled_usec, nr_bursts, burst_usec, and newer keys, all kept.

Public readers take a directory; each calls an internal parser that takes text, so tests
point them at fixture trees mirroring /sys/fs/cgroup. A missing limit file means "no limit",
as the kernel would say by not having the controller; malformed content is an error that
quotes the offending line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .errors import CgroupFormatError, UsageError

# cpu.stat keys whose v1 values are ns, renamed to their µs form.
_V1_NS_KEYS = {"throttled_time": "throttled_us", "burst_time": "burst_us"}
# v2 keys already in µs, renamed to the house names.
_V2_US_KEYS = {
    "usage_usec": "usage_us",
    "user_usec": "user_us",
    "system_usec": "system_us",
    "throttled_usec": "throttled_us",
    "burst_usec": "burst_us",
}


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


def _text(data: str | bytes) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def parse_keyed(data: str | bytes, *, source: str = "cpu.stat") -> dict[str, int]:
    """Parse ``key value`` lines (cpu.stat and friends) into a dict, keeping every key.

    A last line without its newline is accepted if it is complete ("key int"); a line that
    does not have that shape raises :class:`CgroupFormatError` quoting it.
    """
    out: dict[str, int] = {}
    for lineno, line in enumerate(_text(data).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise CgroupFormatError(
                f"{source} line {lineno}: expected 'key integer', got {line!r}; "
                "is this a cgroup cpu.stat file, and was it read whole?"
            )
        out[parts[0]] = int(parts[1])
    return out


def normalise_cpu_stat(stat: dict[str, int], version: int, *, cpuacct_usage_ns: int | None = None) -> dict[str, float]:
    """Map a raw cpu.stat dict to the house names and units (µs), keeping unknown keys.

    v1 has no usage in cpu.stat: pass ``cpuacct.usage`` (ns) as ``cpuacct_usage_ns``.
    Missing bandwidth keys (older kernels have no nr_bursts) read as 0.
    """
    out: dict[str, float] = {}
    if version == 1:
        for k, v in stat.items():
            if k in _V1_NS_KEYS:
                out[_V1_NS_KEYS[k]] = v / 1000.0
            else:
                out[k] = v
        out["usage_us"] = cpuacct_usage_ns / 1000.0 if cpuacct_usage_ns is not None else float("nan")
    elif version == 2:
        for k, v in stat.items():
            out[_V2_US_KEYS.get(k, k)] = v
    else:
        raise UsageError(
            f"normalise_cpu_stat: cgroup version must be 1 or 2, not {version!r}; pass the version "
            "detect_version() gives for the mount the file came from"
        )
    for k in ("nr_periods", "nr_throttled", "throttled_us", "nr_bursts", "burst_us"):
        out.setdefault(k, 0)
    return out


def parse_single_int(data: str | bytes, *, source: str) -> int:
    """Parse a one-integer file (cpu.cfs_quota_us, cpuacct.usage, cpu.max.burst...)."""
    text = _text(data).strip()
    if not text.lstrip("-").isdigit():
        raise CgroupFormatError(f"{source} line 1: expected one integer, got {text!r}")
    return int(text)


def parse_cpu_max(data: str | bytes, *, source: str = "cpu.max") -> tuple[int | None, int]:
    """Parse v2 ``cpu.max`` -> (quota_us or None for "max", period_us)."""
    text = _text(data).strip()
    parts = text.split()
    if len(parts) == 1:
        parts.append("100000")  # the kernel accepts "QUOTA" alone, period unchanged (default)
    if len(parts) != 2 or not parts[1].isdigit() or not (parts[0] == "max" or parts[0].isdigit()):
        raise CgroupFormatError(f"{source} line 1: expected 'QUOTA PERIOD' (QUOTA may be 'max'), got {text!r}")
    period = int(parts[1])
    if period <= 0:
        raise CgroupFormatError(f"{source} line 1: period must be positive, got {text!r}")
    return (None if parts[0] == "max" else int(parts[0])), period


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def read_cpu_limits_v1(cpu_dir: str | Path) -> CpuLimits:
    """Read quota, period and burst of a v1 cgroup directory in the cpu hierarchy."""
    d = Path(cpu_dir)
    period_t = _read(d / "cpu.cfs_period_us")
    quota_t = _read(d / "cpu.cfs_quota_us")
    burst_t = _read(d / "cpu.cfs_burst_us")
    period = parse_single_int(period_t, source=str(d / "cpu.cfs_period_us")) if period_t is not None else 100_000
    quota = parse_single_int(quota_t, source=str(d / "cpu.cfs_quota_us")) if quota_t is not None else -1
    burst = parse_single_int(burst_t, source=str(d / "cpu.cfs_burst_us")) if burst_t is not None else 0
    if period <= 0:
        raise CgroupFormatError(f"{d / 'cpu.cfs_period_us'} line 1: period must be positive, got {period}")
    return CpuLimits(1, period, None if quota < 0 else quota, burst)


def read_cpu_limits_v2(cgroup_dir: str | Path) -> CpuLimits:
    """Read quota, period and burst of a v2 cgroup directory."""
    d = Path(cgroup_dir)
    max_t = _read(d / "cpu.max")
    burst_t = _read(d / "cpu.max.burst")
    quota, period = parse_cpu_max(max_t, source=str(d / "cpu.max")) if max_t is not None else (None, 100_000)
    burst = parse_single_int(burst_t, source=str(d / "cpu.max.burst")) if burst_t is not None else 0
    return CpuLimits(2, period, quota, burst)


def detect_version(root: str | Path = "/sys/fs/cgroup") -> int | None:
    """Which cgroup version holds the cpu controller under ``root``: 1, 2 or None.

    v1 wins when both exist (a hybrid host with an empty cgroup2 mount), as it does for the
    Go runtime: the cpu controller can be bound to one hierarchy only.
    """
    r = Path(root)
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (r / name / "cpu.cfs_quota_us").exists() or (r / name / "cpu.stat").exists():
            return 1
    controllers = _read(r / "cgroup.controllers")
    if controllers is not None and "cpu" in controllers.split():
        return 2
    return None


def v1_dirs(root: str | Path, rel: str) -> tuple[Path, Path]:
    """(cpu dir, cpuacct dir) of v1 cgroup ``rel`` under the cgroup mount ``root``."""
    r = Path(root)
    rel = rel.strip("/")
    cpu = next((r / n for n in ("cpu", "cpu,cpuacct", "cpuacct,cpu") if (r / n).is_dir()), r / "cpu")
    acct = next((r / n for n in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu") if (r / n).is_dir()), cpu)
    return cpu / rel, acct / rel


def read_cpu_stat_now(root: str | Path, rel: str, version: int | None = None) -> dict[str, float]:
    """One normalised cpu.stat read of cgroup ``rel`` (v1: plus cpuacct.usage)."""
    version = version or detect_version(root)
    if version == 1:
        cpu, acct = v1_dirs(root, rel)
        stat = parse_keyed((cpu / "cpu.stat").read_text(), source=str(cpu / "cpu.stat"))
        usage = parse_single_int((acct / "cpuacct.usage").read_text(), source=str(acct / "cpuacct.usage"))
        return normalise_cpu_stat(stat, 1, cpuacct_usage_ns=usage)
    if version == 2:
        p = Path(root) / rel.strip("/") / "cpu.stat"
        return normalise_cpu_stat(parse_keyed(p.read_text(), source=str(p)), 2)
    raise CgroupFormatError(f"{root}: no cgroup cpu controller found (neither v1 cpu/ nor v2 cgroup.controllers)")
