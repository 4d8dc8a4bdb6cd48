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
it stores nothing else, so a file showing anything else is rejected, not clamped. The
kernel prints these values with printf's ``%lld``/``%llu``: ASCII digits, no plus sign, no
leading zero, so only that form is read (Python's ``int()`` would take "٥٠٠٠٠", "+5" or
"5_000"). A missing limit file means the kernel's default (no limit); malformed content is
a :class:`CgroupFormatError` naming the file and line and quoting it; a FIFO, device or
socket in a file's place is refused before it is read (no open blocks, no read is
unbounded).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
import re
import stat
from pathlib import Path

from .errors import CgroupFormatError

DEFAULT_PERIOD_US = 100_000


def bundle_period_us(meta: dict) -> int:
    """A bundle's CFS period in µs: its meta.json ``period_us`` (validated by the bundle
    reader), the kernel's default where a hand-made meta lacks it. The one place that
    default is taken."""
    return int(meta.get("period_us") or DEFAULT_PERIOD_US)


def bundle_cpus(meta: dict) -> int | None:
    """The CPUs a bundle's process could run on: the node's (``ncpu``), or fewer where its
    threads' affinity allowed fewer (``cpus_allowed``: a cpuset, taskset). The quota can be
    spent on that many CPUs at once, so many run queues can be throttled, and the Go
    runtime counts as many for GOMAXPROCS. None: neither recorded. The one place the two
    are put together."""
    vals = [v for v in (meta.get("ncpu"), meta.get("cpus_allowed")) if isinstance(v, int) and v > 0]
    return min(vals) if vals else None


MIN_PERIOD_US, MAX_PERIOD_US = 1_000, 1_000_000
MIN_QUOTA_US, MAX_QUOTA_US = 1_000, (1 << 44) - 1  # the kernel's max_cfs_runtime, in µs
# CONFIG_NR_CPUS's largest (x86-64 with MAXSMP, powerpc; arm64's is 4,096): no node has more
MAX_CPUS = 8192
# Without a quota the kernel checks a burst only against the µs -> ns conversion
# (cpu_cfs_burst_write_u64: burst_us <= U64_MAX / 1000).
MAX_BURST_NO_QUOTA_US = ((1 << 64) - 1) // 1_000
_MAX_QUOTE = 64  # bytes of a line an error message quotes
# Read buffers, as gmp-sampler's (collectors/internal/cgroup): the longest legal limit
# file is "17592186044415 1000000\n" (23 bytes); cgroup.controllers is one line of names
# the kernel formats into a page. A read that fills its buffer is refused, so /dev/zero in
# a file's place ends.
_LIMITS_BUF = 128
_CONTROLLERS_BUF = 4096
_HINT = "not what the kernel writes: check that the directory is a cgroup's"

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

# "0", or 1..20 ASCII digits without a leading zero: the kernel's %llu. [0-9], not \d,
# which matches every Unicode decimal digit.
_UINT = re.compile(rb"0|[1-9][0-9]{0,19}")


def _uint(b: bytes) -> int | None:
    """An unsigned decimal as the kernel prints it, at most 2^64-1."""
    if not _UINT.fullmatch(b):
        return None
    v = int(b)  # safe: at most 20 ASCII digits
    return v if v < 1 << 64 else None


def _int(b: bytes) -> int | None:
    """A signed decimal as the kernel prints it (%lld: no "-0", no "+")."""
    v = _uint(b[1:]) if b.startswith(b"-") else _uint(b)
    if v is None or b == b"-0":
        return None
    v = -v if b.startswith(b"-") else v
    return v if -(1 << 63) <= v < 1 << 63 else None


def _escape(c: str) -> str:
    """One character as a message shows it: as is if it prints; a byte that was not UTF-8
    (surrogateescape) as \\xNN; controls and other unprintables (bidi overrides: a hostile
    file must not rewrite the terminal) as \\xNN, \\uNNNN or \\UNNNNNNNN."""
    o = ord(c)
    if 0xDC80 <= o <= 0xDCFF:
        return f"\\x{o - 0xDC00:02x}"
    if c.isprintable():
        return c
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def _printable(s: str) -> str:
    """``s`` with every character that does not print escaped (:func:`_escape`)."""
    return s if s.isprintable() else "".join(_escape(c) for c in s)


def _quote(text: bytes) -> str:
    """The start of a line in double quotes, as collectors/internal/cgroup quotes it: at
    most _MAX_QUOTE bytes of escaped text, then "... (N bytes)"."""
    chars = text.decode("utf-8", "surrogateescape")
    out: list[str] = []
    size = 0
    for c in chars:
        unit = _escape(c)
        size += len(unit.encode())
        if size > _MAX_QUOTE:
            break
        out.append(unit)
    more = f"... ({len(text)} bytes)" if len(out) < len(chars) else ""
    return '"' + "".join(out) + '"' + more


def _error(path: str, line: int, text: bytes, reason: str) -> CgroupFormatError:
    return CgroupFormatError(f"{path} line {line}: {reason}, got {_quote(text)} ({_HINT})")


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
    """``cpu.cfs_burst_us`` (v1) or ``cpu.max.burst`` (v2), checked on its own; the checks
    against the quota are :func:`check_burst`'s."""
    line, v = _single_uint(source, data)
    if v > MAX_BURST_NO_QUOTA_US:
        raise _error(source, 1, line, f"burst must be 0..{MAX_BURST_NO_QUOTA_US} µs")
    return v


def check_burst(burst: int, quota: int | None, *, source: str, line: bytes = b"") -> None:
    """The kernel's burst rules against the quota (tg_set_cfs_bandwidth): with a quota, the
    burst is at most the quota and burst + quota at most max_cfs_runtime; without one it is
    not checked against anything else."""
    if quota is None:
        return
    if burst > quota:
        raise _error(source, 1, line or str(burst).encode(), f"burst must not exceed the quota ({quota} µs)")
    if burst + quota > MAX_QUOTA_US:
        raise _error(
            source, 1, line or str(burst).encode(), f"burst + quota ({quota} µs) must be at most {MAX_QUOTA_US} µs"
        )


def parse_cpu_max(data: str | bytes, *, source: str = "cpu.max") -> tuple[int | None, int]:
    """Parse v2 ``cpu.max`` -> (quota_us or None for "max", period_us). The kernel shows
    both fields, always (cpu_max_show: "max PERIOD" or "QUOTA PERIOD"); a write may give
    the quota alone, a read never does."""
    data = data.encode() if isinstance(data, str) else data
    line = _single_line(source, data)
    shape = "expected 'QUOTA PERIOD' in µs (QUOTA may be 'max')"
    q, sp, p = line.partition(b" ")
    v = _uint(p) if sp else None
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


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_interface_file(path: str | Path, size: int = _LIMITS_BUF) -> bytes | None:
    """The bytes of one small cgroup interface file, or None when it does not exist (the
    kernel's default applies). cgroupfs shows its files as regular files: anything else in
    the place (a directory, a FIFO, /dev/zero, a socket) is a :class:`CgroupFormatError`
    found without blocking or reading it, and so is a file that cannot be opened (a symlink
    loop, no permission) or that fills ``size`` bytes (gmp-sampler's read buffer: the
    kernel's longest legal content is far shorter)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        try:  # a socket does not open (ENXIO): name what is there rather than the errno
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        why = f"is {_kind(mode)}" if not stat.S_ISREG(mode) else f"cannot be opened ({e.strerror})"
        raise CgroupFormatError(f"{path}: {why}; expected the cgroup's interface file, a regular file") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CgroupFormatError(f"{path}: is {_kind(mode)}; expected the cgroup's interface file, a regular file")
        chunks: list[bytes] = []
        n = 0
        while n < size:
            try:
                b = os.read(fd, size - n)
            except OSError as e:
                raise CgroupFormatError(
                    f"{path}: read failed ({e.strerror}); the cgroup may have been removed"
                ) from None
            if not b:
                break
            chunks.append(b)
            n += len(b)
        data = b"".join(chunks)
        if n >= size:
            raise _error(str(path), 1, data.partition(b"\n")[0], f"file larger than the {size}-byte read buffer")
        return data
    finally:
        os.close(fd)


_read = read_interface_file


def _burst(path: Path, quota: int | None) -> int:
    data = _read(path)
    if data is None:
        return 0
    burst = parse_burst(data, source=str(path))
    check_burst(burst, quota, source=str(path), line=_single_line(str(path), data))
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


def sampler_error(facts: object) -> CgroupFormatError | None:
    """The error gmp-sampler reported as JSON facts (its summary's ``error``, or the
    ``{"error": {...}}`` line of a run that could not start; collectors/internal/cgroup
    ErrorFacts) as a :class:`CgroupFormatError` when it is about a cgroup file: content the
    kernel does not write (kind "format") or no readable regular file in a file's place
    (kind "file"). None for anything else (no error, a cgroup that went away or does not
    exist: the caller knows what those mean for its run)."""
    if not isinstance(facts, dict) or facts.get("kind") not in ("format", "file"):
        return None
    msg = facts.get("message")
    if not isinstance(msg, str) or not msg:
        msg = f"{facts.get('path', '?')}: {facts.get('reason', 'not a cgroup file as the kernel writes it')}"
    return CgroupFormatError(f"gmp-sampler: {_printable(msg)}")


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
        data = _read(r / "cgroup.controllers", _CONTROLLERS_BUF) or b""
    except CgroupFormatError:
        data = b""  # not a v2 mount's file: look for v1 hierarchies, as gmp-sampler does
    if b"cpu" in data.split():
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
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        return False
    except OSError as e:
        raise CgroupFormatError(
            f"{p}: cannot be examined ({e.strerror}); expected the cgroup's {what}, a regular file"
        ) from None
    if not stat.S_ISREG(mode):
        raise CgroupFormatError(f"{p}: is {_kind(mode)}; expected the cgroup's {what}, a regular file")
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


def process_cpu_limit(proc: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> float | None:
    """The tightest CPU limit (quota / period) on this process's cgroup and its ancestors,
    cgroup v2 or v1; None when there is none or it cannot be read."""
    try:
        # a cgroup's name may hold any byte but "/" and NUL
        lines = Path(proc).read_bytes().decode("utf-8", "surrogateescape").splitlines()
    except OSError:
        return None
    best: float | None = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, rel = parts
        if ctrls == "":
            base, name = Path(root), "cpu.max"
        elif "cpu" in ctrls.split(","):
            dirs = (Path(root) / d for d in (ctrls, *V1_CPU_HIERARCHIES))
            base = next((d for d in dirs if _searchable_dir(d)), None)
            name = "cpu.cfs_quota_us"
            if base is None:
                continue
        else:
            continue
        read = read_cpu_limits_v2 if name == "cpu.max" else read_cpu_limits_v1
        d = base / rel.lstrip("/")
        while True:
            with contextlib.suppress(OSError, ValueError, CgroupFormatError):
                cpus = read(d).cpus
                if cpus is not None:
                    best = cpus if best is None else min(best, cpus)
            if d == base or base not in d.parents:
                break
            d = d.parent
    return best


def _searchable_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:  # not searchable by this user
        return False
