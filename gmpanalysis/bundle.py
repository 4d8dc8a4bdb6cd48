"""The run bundle on disk: read, validate, and write its metadata.

A bundle is a directory (see DESIGN §4): ``meta.json``, ``cpu_stat.csv``, optionally
``trace.out`` (raw Go execution trace), ``requests.csv`` (lab runs), ``host_stat.csv``
(the host's /proc/stat about once a second, for steal time) and ``limits.csv`` (each sampled
cgroup's CFS quota, period and burst, a row whenever they changed). Collectors append
raw rows as they go, so a killed collector leaves a last line without its newline: readers
drop that one line and say so. Anything else malformed is a :class:`BundleError` naming the
file, the line and what to do.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import os
import re
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import BundleError, GmpError, GmpWarning, NotFoundError, TruncatedLineWarning
from .goversion import go_minor
from .schema import MAX_NS, READABLE, check, upgrade

CPU_STAT_COLUMNS: dict[str, Any] = {
    "t_ns": np.int64,  # CLOCK_MONOTONIC midpoint of the read
    "read_ns": np.int64,  # how long the read took
    "usage_us": np.float64,  # cumulative CPU time of the cgroup
    "nr_periods": np.int64,  # periods in which the bandwidth timer ran
    "nr_throttled": np.int64,  # periods that ended throttled
    "throttled_us": np.float64,  # cumulative throttled time, summed over CPUs
    "nr_bursts": np.int64,
    "burst_us": np.float64,
}
# cgroup v2's own signals, where the kernel has them (empty fields where a level lacks the
# file; the columns are absent on v1 and from older samplers): the cgroup's cumulative CPU
# pressure stall time (cpu.pressure "some"/"full" total=, wall µs) and its cpu.stat.local
# throttled_usec (6.6+: its run queues' throttled time by its own quota OR an ancestor's,
# summed over CPUs)
CPU_STAT_NULLABLE: dict[str, Any] = {
    "psi_some_us": "Int64",
    "psi_full_us": "Int64",
    "local_throttled_us": "Int64",
}
# limits.csv: the CFS bandwidth settings of every sampled cgroup, read by the sampler about
# every 10 ms after its counter reads; a row at the first read of each cgroup, then one only
# when a value changed. A change (an in-place resize) happened in (prev_ns, t_ns].
LIMITS_COLUMNS: dict[str, Any] = {
    "t_ns": np.int64,  # CLOCK_MONOTONIC midpoint of the read that saw these values
    "cgroup": str,  # the level, as cpu_stat.csv's cgroup column names it
    "period_us": np.int64,
    "burst_us": np.int64,
}
LIMITS_NULLABLE: dict[str, Any] = {
    "prev_ns": "Int64",  # the previous read of that cgroup, which saw the old values (NA: first)
    "quota_us": "Int64",  # NA: no limit
}

REQUEST_COLUMNS: dict[str, Any] = {
    "sched_ns": np.int64,  # when the load schedule wanted the request sent
    "start_ns": np.int64,  # when it was sent
    "end_ns": np.int64,  # when the response was complete
    "status": np.int64,  # HTTP status; 0 = transport error or timeout
}
REQUEST_NULLABLE: dict[str, Any] = {
    # the CPU the service says the request cost (its handler's thread CPU; gmp-demoapp's
    # Gmp-Cpu-Ns header); NA where it said nothing; the column is absent from older files
    "cpu_ns": "Int64",
}


# host_stat.csv: the node's aggregate /proc/stat "cpu" line, read by the sampler about once a
# second. The kernel counts in USER_HZ ticks (10 ms); the sampler converts to µs with the
# USER_HZ the kernel gave it (AT_CLKTCK). Counters are cumulative since boot and summed over
# all CPUs (so they grow up to ncpu µs per µs of wall time).
HOST_STAT_COLUMNS: dict[str, Any] = {
    "t_ns": np.int64,  # CLOCK_MONOTONIC midpoint of the read
    "read_ns": np.int64,  # how long the read took
    "user_us": np.int64,  # includes guest time (the kernel adds guest to user)
    "nice_us": np.int64,  # includes guest_nice
    "system_us": np.int64,
    "idle_us": np.int64,
    "iowait_us": np.int64,
    "irq_us": np.int64,
    "softirq_us": np.int64,
    "steal_us": np.int64,  # time the hypervisor ran something else on our vCPUs
    "cpu_total_us": np.int64,  # user+nice+system+idle+iowait+irq+softirq+steal (guest not twice)
    "ncpu": np.int64,  # CPUs online at the read (per-CPU lines)
}

# What a value in a bundle CSV can be: times are CLOCK_MONOTONIC ns since boot, below
# schema.MAX_NS; counters and µs totals stay below 2^53, where float64 still holds every integer.
MAX_COUNT = 2**53
CPU_STAT_RANGES: dict[str, tuple[float, float]] = {
    "t_ns": (1, MAX_NS),
    "read_ns": (0, MAX_NS),
    **{c: (0, MAX_COUNT) for c in ("usage_us", "nr_periods", "nr_throttled", "throttled_us", "nr_bursts", "burst_us")},
    **{c: (0, MAX_COUNT) for c in CPU_STAT_NULLABLE},
}
REQUEST_RANGES: dict[str, tuple[float, float]] = {
    **{c: (1, MAX_NS) for c in ("sched_ns", "start_ns", "end_ns")},
    "status": (0, 999),
    "cpu_ns": (0, MAX_NS),
}
HOST_STAT_RANGES: dict[str, tuple[float, float]] = {
    "t_ns": (1, MAX_NS),
    **{c: (0, MAX_NS) for c in HOST_STAT_COLUMNS if c not in ("t_ns", "ncpu")},
    "ncpu": (1, 1 << 20),
}
LIMITS_RANGES: dict[str, tuple[float, float]] = {
    "t_ns": (1, MAX_NS),
    "prev_ns": (1, MAX_NS),
    "quota_us": (0, MAX_COUNT),
    "burst_us": (0, MAX_COUNT),
}
# meta.json is a few kB; anything much larger is not one
META_MAX_BYTES = 16 << 20


@dataclasses.dataclass
class Run:
    """One run bundle, loaded.

    ``samples`` is the cpu.stat table (:func:`read_cpu_stat`), ``requests`` the per-request
    table or None, ``trace_path`` the raw Go execution trace or None, ``host_stat`` the
    host's /proc/stat rows (:func:`read_host_stat`) or None, ``limits`` the CFS limits of
    every sampled cgroup over time (:func:`read_limits`) or None, and ``trace`` its
    tables (:class:`~gmpanalysis.gotrace.GoTrace`), parsed on first use. ``notes`` lists
    what the readers tolerated, one sentence each: an unfinished collection, an empty
    trace, and the message of every :class:`~gmpanalysis.errors.GmpWarning` issued while
    loading (a dropped partial CSV line) or, once ``trace`` is first used, while parsing
    the trace (a trace cut mid-generation). :func:`gmpanalysis.to_report` shows them.
    """

    path: Path
    meta: dict[str, Any]
    samples: pd.DataFrame
    trace_path: Path | None
    requests: pd.DataFrame | None
    notes: list[str] = dataclasses.field(default_factory=list)
    host_stat: pd.DataFrame | None = None  # host_stat.csv (read_host_stat), None when absent
    limits: pd.DataFrame | None = None  # limits.csv (read_limits), None when absent
    _trace: Any = dataclasses.field(default=None, repr=False)

    @property
    def trace(self) -> Any:
        """The Go execution trace as GoTrace tables (None if the bundle has no trace)."""
        if self._trace is None and self.trace_path is not None:
            self._trace = self.read_trace()
        return self._trace

    def read_trace(self, tables: tuple[str, ...] | None = None) -> Any:
        """The bundle's trace read afresh (not kept), with only ``tables`` if given (see
        :func:`gmpanalysis.read_trace`), checked to belong to this run; its warnings become
        the run's notes. None if the bundle has no trace."""
        if self.trace_path is None:
            return None
        from .gotrace import read_trace

        check_regular(self.trace_path)  # replaced since loading: a FIFO would block the reader
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GmpWarning)
            tr = read_trace(self.trace_path, tables=tables)
        check_trace_belongs(self, tr)
        for w in caught:
            if issubclass(w.category, GmpWarning) and str(w.message) not in self.notes:
                self.notes.append(str(w.message))
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)  # still shown
        return tr

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.path.name)

    def __repr__(self) -> str:
        m = self.meta
        return (
            f"Run({self.name!r}, gomaxprocs={m.get('gomaxprocs_effective', m.get('gomaxprocs_env'))}, "
            f"quota_us={m.get('quota_us')}/{m.get('period_us')}, samples={len(self.samples)}, "
            f"requests={None if self.requests is None else len(self.requests)}, "
            f"trace={'yes' if self.trace_path else 'no'})"
        )


# The trace format version (the header's "go 1.N trace") each Go release writes: Go 1.24
# writes the 1.23 format and 1.27 the 1.26 one (fixtures/README.md, "traces/").
TRACE_FORMAT_OF_GO = {22: 22, 23: 23, 24: 23, 25: 25, 26: 26, 27: 26}


def check_trace_belongs(run: Run, tr: Any) -> None:
    """A trace.out of another run (another collection, another host, another binary) is not
    used as if it were this one's: its clock span must overlap the collection's (the
    samples', and meta.json's mono_start_ns..mono_end_ns), and its format version must be
    the one the recorded Go version writes. Raises :class:`BundleError` naming both files."""
    first, last = tr.meta.get("first_ns"), tr.meta.get("last_ns")
    t = run.samples["t_ns"].to_numpy()
    lo = [int(t.min())] if len(t) else []
    hi = [int(t.max())] if len(t) else []
    for k, into in (("mono_start_ns", lo), ("mono_end_ns", hi)):
        if isinstance(run.meta.get(k), int):
            into.append(run.meta[k])
    if tr.meta.get("events") and first is not None and lo and hi:
        start, end = min(lo), max(hi)
        if last < start or first > end:
            raise BundleError(
                f"{run.trace_path}: its clock spans {first}..{last} ns, which misses the collection's "
                f"{start}..{end} ns (meta.json and cpu_stat.csv of {run.path}): the trace comes from another run "
                "or host. Put this run's trace there, or remove trace.out"
            )
    minor = go_minor(run.meta.get("go_version"))
    version = tr.meta.get("version")
    if minor is None or not isinstance(version, int):
        return
    want = TRACE_FORMAT_OF_GO.get(minor)
    if (want is not None and version != want) or (want is None and (minor < 22 or version > minor)):
        raise BundleError(
            f"{run.trace_path}: written in the go 1.{version} trace format, but meta.json says the target ran "
            f"{run.meta['go_version']}, which writes {f'go 1.{want}' if want else 'another format'}: the trace comes "
            "from another binary. Put this run's trace there, or correct go_version in meta.json"
        )


def _parse_csv(
    data: bytes,
    source: str,
    columns: dict[str, Any],
    optional: dict[str, Any] | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> tuple[pd.DataFrame, bool]:
    """Parse a house CSV from bytes. Returns (frame, last_line_was_dropped). ``ranges``
    bounds numeric columns (inclusive; float columns must also be finite)."""
    truncated = False
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        data = data[: cut + 1] if cut >= 0 else b""
        truncated = True
    if not data:
        raise BundleError(
            f"{source}: empty, not even a header line; the collector wrote nothing. "
            "Re-run the collection (did the sampler start? see its stderr)."
        )
    header_end = data.find(b"\n")
    header = data[:header_end].decode("utf-8", "replace").strip().split(",")
    missing = [c for c in columns if c not in header]
    if missing:
        raise BundleError(
            f"{source} line 1: missing column(s) {', '.join(missing)}; header is {','.join(header)[:200]!r}. "
            f"Expected {','.join(columns)} (was it written by the gmp collectors?)"
        )
    dtypes = {c: t for c, t in columns.items()}
    for c, t in (optional or {}).items():
        if c in header:
            dtypes[c] = t
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # pandas' cast warnings before its error
            df = pd.read_csv(io.BytesIO(data), dtype=dtypes, engine="c")
    except (ValueError, OverflowError, TypeError, pd.errors.ParserError) as e:
        # pandas names neither the line nor the value (TypeError: a non-integer in a nullable
        # integer column): find them
        found = _first_bad_line(data, header, dtypes)
        where, what = found if found else ("somewhere", "")
        raise BundleError(
            f"{source} {where}: malformed row{what or f' ({str(e)[:200]})'}; every row needs {len(header)} "
            f"fields and integers/numbers in {','.join(columns)}. Remove or fix that line."
        ) from None
    bad = df[list(columns)].isna().any(axis=1).to_numpy()
    if bad.any():
        line = int(np.flatnonzero(bad)[0]) + 2
        raise BundleError(f"{source} line {line}: empty field(s) in a required column; fix or remove that line.")
    _check_ranges(df, source, ranges or {})
    return df, truncated


def _check_ranges(df: pd.DataFrame, source: str, ranges: dict[str, tuple[float, float]]) -> None:
    """Every value of a bounded column inside its range (NA of a nullable column allowed)."""
    first: tuple[int, str] | None = None
    for c, (lo, hi) in ranges.items():
        if c not in df:
            continue
        col = df[c]
        plain = isinstance(col.dtype, np.dtype) and col.dtype.kind in "fiu"
        v = col.to_numpy() if plain else col.to_numpy(dtype=np.float64, na_value=np.nan)  # NA of Int64: NaN
        with np.errstate(invalid="ignore"):
            bad = (v < lo) | (v > hi)
            if v.dtype.kind == "f":
                bad |= np.isinf(v) | (np.isnan(v) & ~col.isna().to_numpy())
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            if first is None or i < first[0]:
                first = (i, f"{c} {col.iloc[i]} is outside {_bound(lo)}..{_bound(hi)}")
    if first is not None:
        raise BundleError(
            f"{source} line {first[0] + 2}: {first[1]}; the collectors never write such a value "
            "(a corrupt or hand-edited file): fix or remove that line"
        )


def _bound(x: float) -> str:
    """A range end as written in the module: 2^62 rather than 4611686018427387904."""
    x = int(x)
    return f"2^{x.bit_length() - 1}" if x >= 1 << 20 and x & (x - 1) == 0 else str(x)


_INT = re.compile(rb"^\s*\"?[+-]?\d{1,19}\"?\s*$")


def _first_bad_line(data: bytes, header: list[str], dtypes: dict[str, Any]) -> tuple[str, str] | None:
    """The first line pandas cannot read, and why: (\"line N\", \" (reason)\"). Only on the
    error path, so a loop is fine."""
    cols = [(header.index(c), c, t) for c, t in dtypes.items() if c in header]
    for i, raw in enumerate(data.split(b"\n")[1:], 2):
        raw = raw.rstrip(b"\r")
        if not raw:
            continue
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"line {i}", f" (byte {e.start} of the line is not UTF-8)"
        f = raw.split(b",")
        if len(f) != len(header):
            return f"line {i}", f" ({len(f)} fields, the header has {len(header)})"
        for j, name, t in cols:
            cell = f[j]
            if t is np.int64 or t == "Int64":
                if t == "Int64" and not cell.strip():
                    continue
                if not _INT.match(cell) or not -(2**63) <= int(cell.strip().strip(b'"')) < 2**63:
                    return f"line {i}", f" ({name} {_text(cell)} is not a 64-bit integer)"
            elif t is np.float64:
                try:
                    float(cell)
                except ValueError:
                    return f"line {i}", f" ({name} {_text(cell)} is not a number)"
    return None


def _text(cell: bytes) -> str:
    t = cell.decode("utf-8", "replace")
    return repr(t if len(t) <= 40 else t[:37] + "...")


def _check_sorted(df: pd.DataFrame, col: str, source: str, by: str | None = None) -> None:
    groups = [df] if by is None or by not in df else [g for _, g in df.groupby(by, sort=False)]
    for g in groups:
        t = g[col].to_numpy()
        back = np.flatnonzero(np.diff(t) < 0)
        if back.size:
            line = int(g.index[back[0] + 1]) + 2
            raise BundleError(
                f"{source} line {line}: {col} goes backwards ({t[back[0]]} -> {t[back[0] + 1]}); "
                "rows must be in time order (were two files concatenated?)"
            )


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(path: str, mode: int) -> BundleError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return BundleError(
        f"{path}: is {kind}, not a regular file; a bundle holds the plain files its collector wrote. "
        "Replace it with that file (or remove it where the file is optional)."
    )


def _os_error(path: str, e: OSError) -> GmpError:
    """An OSError met opening or reading a bundle file, as the error of the family that says
    what to do."""
    if e.errno == errno.ENOENT:
        if os.path.islink(path):
            target = os.readlink(path)
            return BundleError(f"{path}: a symlink to {target!r}, which does not exist; point it at the file")
        return NotFoundError(f"{path}: no such file")
    if e.errno in (errno.EACCES, errno.EPERM):
        return BundleError(f"{path}: permission denied; make it readable for this user (chmod a+r) or run as its owner")
    if e.errno == errno.ELOOP:
        return BundleError(f"{path}: a symlink loop (too many levels of symbolic links); point the link at a real file")
    return BundleError(f"{path}: cannot be read ({e.strerror or e}); check the file and the filesystem it is on")


def check_regular(path: str | os.PathLike[str]) -> int:
    """The size of the regular file at ``path`` (symlinks followed). Anything else -- a
    directory, a FIFO, a device, a symlink loop or to nowhere, an unreadable file -- raises a
    :class:`GmpError` naming the file; nothing is opened, so a FIFO cannot block."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise _os_error(p, e) from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(p, st.st_mode)
    if not os.access(p, os.R_OK):
        raise _os_error(p, PermissionError(errno.EACCES, "Permission denied"))
    return st.st_size


def _read_bytes(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of one bundle file: a regular file only (checked before opening, and again
    on the open descriptor, which is opened non-blocking so a FIFO put there in between
    cannot hang the reader), read up to the size it had when opened -- a collector still
    appending cannot make the read endless. ``limit`` caps the size (bytes)."""
    p = os.fspath(path)
    check_regular(p)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _os_error(p, e) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(p, st.st_mode)
        if limit is not None and st.st_size > limit:
            raise BundleError(
                f"{p}: {st.st_size} bytes, more than the {limit} such a file can hold; "
                "it is not the file the collector wrote"
            )
        chunks, left = [], st.st_size
        while left > 0:
            b = os.read(fd, min(left, 1 << 30))
            if not b:  # the file shrank under us: what is there is all there is
                break
            chunks.append(b)
            left -= len(b)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except OSError as e:
        raise _os_error(p, e) from None
    finally:
        os.close(fd)


def _parse_table(
    data: bytes,
    source: str,
    columns: dict[str, Any],
    optional: dict[str, Any] | None = None,
    *,
    sorted_by: str | None = None,
    group: str | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> pd.DataFrame:
    """A house CSV from bytes, its values in range, its time order checked, a dropped last
    line announced."""
    df, truncated = _parse_csv(data, source, columns, optional, ranges)
    if group is not None and group in df and df[group].isna().any():
        line = int(np.flatnonzero(df[group].isna().to_numpy())[0]) + 2
        raise BundleError(f"{source} line {line}: empty {group} field; every row names its {group}: fix that line")
    if sorted_by is not None:
        _check_sorted(df, sorted_by, source, by=group)
    df.attrs["source"] = source
    df.attrs["truncated_last_line"] = truncated
    if truncated:
        warnings.warn(
            f"{source}: last line was incomplete (writer stopped mid-line) and was dropped; "
            f"{len(df)} complete rows kept",
            TruncatedLineWarning,
            stacklevel=4,
        )
    return df


def parse_cpu_stat(data: bytes, *, source: str = "cpu_stat.csv") -> pd.DataFrame:
    """Parse cpu_stat.csv bytes; see :func:`read_cpu_stat`."""
    return _parse_table(
        data,
        source,
        CPU_STAT_COLUMNS,
        {"cgroup": str, **CPU_STAT_NULLABLE},
        sorted_by="t_ns",
        group="cgroup",
        ranges=CPU_STAT_RANGES,
    )


def read_cpu_stat(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a ``cpu_stat.csv`` written by gmp-sampler.

    Columns (one row per read; counters are cumulative since the cgroup was created):
    ``t_ns`` int64 CLOCK_MONOTONIC ns, midpoint of the read; ``read_ns`` int64 ns, duration
    of the read; ``usage_us`` float64 µs of CPU used; ``nr_periods`` int64 periods with the
    bandwidth timer running; ``nr_throttled`` int64 periods that ended throttled;
    ``throttled_us`` float64 µs throttled, SUMMED over CPUs (not wall time); ``nr_bursts``
    int64; ``burst_us`` float64 µs; optional ``cgroup`` str when several were sampled.
    Where the kernel has them (cgroup v2; the columns are absent otherwise), Int64 with NA
    for a level that lacks the file: ``psi_some_us``, ``psi_full_us`` cumulative wall µs
    of CPU pressure stall (cpu.pressure totals: some task / every task of the group
    waiting; throttling counts as stall), ``local_throttled_us`` cumulative µs of
    cpu.stat.local throttled_usec (6.6+: the group's run queues throttled by its own quota
    or an ancestor's, summed over CPUs).

    A last line without its newline is dropped with a :class:`TruncatedLineWarning` and
    ``df.attrs["truncated_last_line"] = True``; other malformed lines raise
    :class:`BundleError`.
    """
    return parse_cpu_stat(_read_bytes(path), source=str(path))


def parse_requests(data: bytes, *, source: str = "requests.csv") -> pd.DataFrame:
    """Parse requests.csv bytes; see :func:`read_requests`."""
    return _parse_table(data, source, REQUEST_COLUMNS, REQUEST_NULLABLE, ranges=REQUEST_RANGES)


def read_requests(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a lab ``requests.csv``.

    Columns (one row per request, in completion order): ``sched_ns`` int64 CLOCK_MONOTONIC
    ns the load schedule asked for the request (open loop; = start_ns in closed loop);
    ``start_ns`` int64 ns sent; ``end_ns`` int64 ns response complete; ``status`` int64
    HTTP status, 0 for a transport error or timeout; ``cpu_ns`` (Int64, where the file has
    it) the CPU ns the service reported for the request (its handler's own thread CPU), NA
    where it reported none.
    """
    return parse_requests(_read_bytes(path), source=str(path))


def parse_host_stat(data: bytes, *, source: str = "host_stat.csv") -> pd.DataFrame:
    """Parse host_stat.csv bytes; see :func:`read_host_stat`."""
    return _parse_table(data, source, HOST_STAT_COLUMNS, sorted_by="t_ns", ranges=HOST_STAT_RANGES)


def read_host_stat(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a ``host_stat.csv`` written by gmp-sampler ``--host-stat``.

    One row per read of the node's /proc/stat (about once a second). Columns: ``t_ns``
    int64 CLOCK_MONOTONIC ns, midpoint of the read; ``read_ns`` int64 ns; then the
    aggregate cpu line as cumulative µs since boot, summed over all CPUs: ``user_us``
    (includes guest), ``nice_us`` (includes guest_nice), ``system_us``, ``idle_us``,
    ``iowait_us``, ``irq_us``, ``softirq_us``, ``steal_us`` (CPU time the hypervisor gave
    to others while our vCPUs wanted to run), ``cpu_total_us`` (the sum of those eight);
    ``ncpu`` int64 CPUs online. The kernel's resolution is one USER_HZ tick (10 ms).

    A last line without its newline is dropped with a :class:`TruncatedLineWarning`; other
    malformed lines raise :class:`BundleError` naming the file and line.
    """
    return parse_host_stat(_read_bytes(path), source=str(path))


def parse_limits(data: bytes, *, source: str = "limits.csv") -> pd.DataFrame:
    """Parse limits.csv bytes; see :func:`read_limits`."""
    df = _parse_table(
        data, source, LIMITS_COLUMNS, LIMITS_NULLABLE, sorted_by="t_ns", group="cgroup", ranges=LIMITS_RANGES
    )
    missing = [c for c in LIMITS_NULLABLE if c not in df.columns]
    if missing:
        raise BundleError(
            f"{source} line 1: missing column(s) {', '.join(missing)}; expected "
            "t_ns,prev_ns,cgroup,period_us,quota_us,burst_us (was it written by gmp-sampler --limits-out?)"
        )
    checks = (
        (df["period_us"].lt(1000) | df["period_us"].gt(1_000_000), "period_us must be 1000..1000000 µs"),
        (df["quota_us"].lt(1000).fillna(False), "quota_us must be empty (no limit) or at least 1000 µs"),
        (df["burst_us"].lt(0), "burst_us must be >= 0"),
        ((df["prev_ns"] >= df["t_ns"]).fillna(False), "prev_ns must be before t_ns"),
    )
    for bad, what in checks:
        b = bad.to_numpy(dtype=bool)
        if b.any():
            raise BundleError(f"{source} line {int(np.flatnonzero(b)[0]) + 2}: {what}; fix or remove that line")
    return df[["t_ns", "prev_ns", "cgroup", "period_us", "quota_us", "burst_us"]]


def read_limits(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a ``limits.csv`` written by gmp-sampler ``--limits-out``.

    The CFS bandwidth settings of every sampled cgroup over time: a row at the first read of
    each cgroup, then a row only when a value changed (the sampler reads them about every
    10 ms). Columns: ``t_ns`` int64 CLOCK_MONOTONIC ns, the read that saw the values;
    ``prev_ns`` Int64 ns, the previous read of that cgroup (the old values; NA for its first
    row): a change happened in (prev_ns, t_ns]; ``cgroup`` str, the level (as in
    cpu_stat.csv); ``period_us`` int64 µs; ``quota_us`` Int64 µs per period (NA: no limit);
    ``burst_us`` int64 µs.
    """
    return parse_limits(_read_bytes(path), source=str(path))


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a bundle's ``meta.json`` against the contract
    (:mod:`gmpanalysis.schema`); an older version is returned upgraded."""
    p = Path(path)
    try:
        raw = _read_bytes(p, limit=META_MAX_BYTES)
    except NotFoundError:
        raise BundleError(f"{p}: missing; every bundle needs meta.json (is this a bundle directory?)") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise BundleError(
            f"{p} line {line} (byte {e.start}): not UTF-8 ({e.reason}); meta.json is UTF-8 JSON as the "
            "collector wrote it: restore that file or fix the byte"
        ) from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors add
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise BundleError(f"{p} line {e.lineno} column {e.colno}: invalid JSON ({e.msg})") from None
    except RecursionError:
        raise BundleError(
            f"{p}: JSON nested too deeply to read; meta.json is an object of the fields in "
            "gmpanalysis.schema, a few levels deep: restore the collector's file"
        ) from None
    except ValueError as e:  # an integer with more digits than Python converts (4300)
        m = re.search(r"\d{4000,}", text)
        where = f" line {text.count(chr(10), 0, m.start()) + 1}" if m else ""
        raise BundleError(
            f"{p}{where}: a number with {len(m.group()) if m else 'too many'} digits ({str(e)[:80]}); "
            "no meta.json field needs more than 19: fix that value"
        ) from None
    if not isinstance(meta, dict):
        raise BundleError(f"{p}: expected a JSON object at the top level")
    schema = meta.get("schema")
    if schema not in READABLE or isinstance(schema, bool):
        raise BundleError(
            f"{p}: schema {schema!r} is not supported (this gmpanalysis reads schemas "
            f"{', '.join(map(str, READABLE))}); upgrade gmpanalysis"
        )
    return upgrade(check(meta, str(p)))


def _empty(columns: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def _check_clock(samples: pd.DataFrame, meta: dict[str, Any], d: Path) -> None:
    """The samples lie inside the collection meta.json records (within 5 s)."""
    t = samples["t_ns"].to_numpy()
    if not len(t):
        return
    sampler = meta.get("sampler") or {}
    start = meta.get("mono_start_ns")
    end = meta.get("mono_end_ns")
    if end is None:  # an unfinished collection: the sampler's own summary may know it
        end = sampler.get("mono_end_ns")
    slack = 5_000_000_000
    first, last = int(np.argmin(t)), int(np.argmax(t))
    if isinstance(start, int) and t[first] < start - slack:
        raise BundleError(
            f"{d / 'cpu_stat.csv'} line {first + 2}: t_ns {t[first]} is {(start - t[first]) / 1e9:.1f}s before "
            f"meta.json mono_start_ns {start}; samples and meta come from different runs or clocks"
        )
    if isinstance(end, int) and t[last] > end + slack:
        raise BundleError(
            f"{d / 'cpu_stat.csv'} line {last + 2}: t_ns {t[last]} is {(t[last] - end) / 1e9:.3g}s after meta.json "
            f"mono_end_ns {end}; samples and meta come from different runs or clocks"
        )


def check_counters(samples: pd.DataFrame, source: str = "cpu_stat.csv") -> list[str]:
    """What the cumulative counters of each sampled cgroup say about the file; returns notes.

    The kernel counts every throttled period in nr_periods too, so nr_throttled never runs
    ahead of nr_periods, from the cgroup's creation or between any two reads (by more than
    one: a read can print nr_periods just before the timer bumps both): a file where it does
    is corrupt, and raises :class:`BundleError` naming the line. A counter that falls is read
    as a recreated cgroup (a restart: every counter starts again, usage included) and the
    analysis starts a new segment there (:func:`gmpanalysis.periods.split_segments`); one that
    falls while usage_us does not has no such evidence, and gets a note naming the line.
    """
    notes: list[str] = []
    groups = [samples] if "cgroup" not in samples else [g for _, g in samples.groupby("cgroup", sort=False)]
    for g in groups:
        if len(g) < 2:
            continue
        line = g.index.to_numpy() + 2
        per = g["nr_periods"].to_numpy()
        thr = g["nr_throttled"].to_numpy()
        usage = g["usage_us"].to_numpy()
        fell = {c: np.diff(g[c].to_numpy()) < 0 for c in ("nr_periods", "nr_throttled", "throttled_us")}
        usage_fell = np.diff(usage) < 0
        cut = usage_fell.copy()
        for c, f in fell.items():
            cut |= f
            odd = np.flatnonzero(f & ~usage_fell)
            if len(odd):
                i = int(odd[0])
                v = g[c].to_numpy()
                notes.append(
                    f"{source} line {line[i + 1]}: {c} fell from {v[i]} to {v[i + 1]} while usage_us did not fall "
                    f"({len(odd)} such place(s)); a recreated cgroup restarts every counter, so this is no "
                    "restart: the reads after it are analysed as a new segment. Check the file (two writers?)"
                )
        seg = np.r_[0, np.cumsum(cut)]  # segment number of every row
        first = np.r_[0, np.flatnonzero(cut) + 1][seg]  # its first row
        over = (thr > per + 1) | ((thr - thr[first]) > (per - per[first]) + 1)
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise BundleError(
                f"{source} line {line[i]}: nr_throttled {thr[i]} has run ahead of nr_periods {per[i]} "
                f"(since line {line[first[i]]}: +{thr[i] - thr[first[i]]} against +{per[i] - per[first[i]]}); "
                "the kernel counts every throttled period in nr_periods, so the file is corrupt "
                "(columns swapped, or rows of another cgroup mixed in)"
            )
    return notes


def _check_requests(requests: pd.DataFrame, source: str) -> tuple[pd.DataFrame, list[str]]:
    """Every request ends after it was scheduled and sent; rows written twice count once."""
    notes: list[str] = []
    if not len(requests):
        return requests, notes
    sched, start, end = (requests[c].to_numpy() for c in ("sched_ns", "start_ns", "end_ns"))
    for bad, what in ((end < start, "end_ns before start_ns"), (end < sched, "end_ns before sched_ns")):
        if bad.any():
            line = int(np.flatnonzero(bad)[0]) + 2
            raise BundleError(
                f"{source} line {line}: {what}: a latency below zero; the file is corrupt (fix or remove that line)"
            )
    # two real requests never share all three times to the ns: a duplicate is a row written
    # twice (a load generator's retry of its own write, files concatenated)
    dup = requests.duplicated(keep="first").to_numpy()
    if dup.any():
        line = int(np.flatnonzero(dup)[0]) + 2
        notes.append(
            f"{source}: {int(dup.sum())} duplicate row(s) (all fields equal to an earlier row; the first at line "
            f"{line}) counted once: a request is never written twice"
        )
        requests = requests[~dup]
    return requests, notes


def load_run(path: str | os.PathLike[str]) -> Run:
    """Load and validate a run bundle directory.

    Raises :class:`BundleError` for a missing or inconsistent piece; tolerates (and lists in
    ``run.notes``) a truncated last CSV line, any other :class:`GmpWarning` of the readers,
    an empty trace.out and a collection that did not finish (even one killed before its
    first sample: its samples are then empty, and the analysis says so).

    ``path`` may also be a URL (``s3://...``, ``file://...``: any fsspec location, such as a
    bundle in a store, :mod:`gmpanalysis.fleet.store`; :mod:`gmpanalysis.location`): the bundle is copied into a local
    cache first (``$GMP_CACHE``, else ~/.cache/gmpanalysis/bundles).
    """
    if "://" in str(path):
        from .location import fetch_bundle

        path = fetch_bundle(str(path))
    d = Path(path)
    if not d.exists():
        raise NotFoundError(f"{d}: no such directory; a run bundle is a directory holding meta.json and cpu_stat.csv")
    if not d.is_dir():
        raise BundleError(f"{d}: not a directory; a run bundle is a directory holding meta.json and cpu_stat.csv")
    meta = read_meta(d / "meta.json")
    notes: list[str] = []
    if meta.get("complete") is False:
        notes.append("collection did not finish (meta.json says complete=false): data ends where the collector stopped")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GmpWarning)
        unfinished = meta.get("complete") is False
        csv = d / "cpu_stat.csv"
        if unfinished and (not os.path.lexists(csv) or check_regular(csv) == 0):
            # killed before the sampler wrote anything: what was collected (meta) is kept
            samples = _empty(CPU_STAT_COLUMNS)
            notes.append(f"{csv}: no samples: the collection stopped before the sampler's first read")
        elif not os.path.lexists(csv):
            raise BundleError(f"{csv}: missing; a bundle without samples cannot be analysed")
        else:
            samples = read_cpu_stat(csv)
        # an optional file that is there (even as a broken link) is read, so that what is
        # wrong with it is said rather than the file silently skipped
        requests = read_requests(d / "requests.csv") if os.path.lexists(d / "requests.csv") else None
        host_stat = read_host_stat(d / "host_stat.csv") if os.path.lexists(d / "host_stat.csv") else None
        limits = read_limits(d / "limits.csv") if os.path.lexists(d / "limits.csv") else None
    for w in caught:
        if issubclass(w.category, GmpWarning):
            notes.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    if samples.empty:
        if not unfinished:
            raise BundleError(
                f"{d / 'cpu_stat.csv'}: header only, no samples; the sampler stopped before its first read"
            )
        if not any("no samples" in n for n in notes):
            notes.append(f"{d / 'cpu_stat.csv'}: no samples: the collection stopped before the sampler's first read")
    _check_clock(samples, meta, d)
    notes += check_counters(samples, str(csv))
    if requests is not None:
        requests, more = _check_requests(requests, str(d / "requests.csv"))
        notes += more

    trace: Path | None = d / "trace.out"
    if not os.path.lexists(trace):
        trace = None
    elif check_regular(trace) == 0:
        notes.append("trace.out is empty: the trace capture produced no bytes")
        trace = None
    return Run(
        path=d,
        meta=meta,
        samples=samples,
        trace_path=trace,
        requests=requests,
        notes=notes,
        host_stat=host_stat,
        limits=limits,
    )


def to_meta(path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Write meta.json atomically (write a temporary file, then rename over the old one),
    so a crash leaves either the previous or the new metadata, never half of it. The dict
    is checked against the contract first (:func:`gmpanalysis.schema.check`)."""
    p = Path(path)
    check(meta, f"{p} (being written)")  # every writer, every write: the contract holds
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename: a host crash leaves old or new, not empty
    os.replace(tmp, p)


# A trace file at least this big is not read whole for df_periods: its running intervals
# are summed per period one generation at a time (see _running_coverage), unless the run's
# trace is in memory already.
STREAM_TRACE_BYTES = 256 << 20


def streams_trace(run: Run) -> bool:
    """Whether the analysis reads the run's trace a generation at a time (a trace.out past
    :data:`STREAM_TRACE_BYTES` not parsed whole yet) rather than whole."""
    p = run.trace_path
    if p is None or run._trace is not None:
        return False
    try:
        return p.stat().st_size >= STREAM_TRACE_BYTES
    except OSError:
        return False  # the full read says what is wrong with it
