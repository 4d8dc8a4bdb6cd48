"""The bundle's CSV files (cpu_stat.csv, requests.csv, host_stat.csv, limits.csv): their
columns and the ranges their values can have, and readers that take bytes (``parse_*``)
beside the ones that take a path (``read_*``). A killed collector leaves a last line without
its newline: the readers drop that one line and say so (:class:`TruncatedLineWarning`);
anything else malformed is a :class:`BundleError` naming the file, the line and what to do."""

from __future__ import annotations

import csv
import errno
import io
import os
import re
import stat
import warnings
from typing import Any

import numpy as np
import pandas as pd

from .cgroup import MAX_CPUS
from .errors import BundleError, GmpError, NotFoundError, TruncatedLineWarning
from .schema import MAX_NS

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
    # the CPUs a kernel can have (CONFIG_NR_CPUS at most), the bound meta.json's ncpu has too
    "ncpu": (1, MAX_CPUS),
}
LIMITS_RANGES: dict[str, tuple[float, float]] = {
    "t_ns": (1, MAX_NS),
    "prev_ns": (1, MAX_NS),
    "quota_us": (0, MAX_COUNT),
    "burst_us": (0, MAX_COUNT),
}


def parse_csv(
    data: bytes,
    source: str,
    columns: dict[str, Any],
    optional: dict[str, Any] | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
    cumulative: bool = False,
) -> tuple[pd.DataFrame, bool]:
    """Parse a house CSV from bytes. Returns (frame, last_line_was_dropped). ``ranges``
    bounds numeric columns (inclusive; float columns must also be finite). ``cumulative``:
    the rows are reads of cumulative counters, so a row glued onto a cut one by a restarted
    writer may go (:func:`_without_glued_lines`). A UTF-8 byte order mark before the header
    (an editor's or a spreadsheet's save) is no part of the first column's name."""
    data = data.removeprefix(b"\xef\xbb\xbf")
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
        df = _read_csv(data, dtypes)
    except (ValueError, OverflowError, TypeError, pd.errors.ParserError) as e:
        df = _without_glued_lines(data, source, header, dtypes) if cumulative else None
        if df is None:
            # pandas names neither the line nor the value (TypeError: a non-integer in a
            # nullable integer column): find them
            found = _first_bad_line(data, header, dtypes)
            where, what = found if found else ("somewhere", "")
            raise BundleError(
                f"{source} {where}: malformed row{what or f' ({str(e)[:200]})'}; every row needs {len(header)} "
                f"fields and integers/numbers in {','.join(columns)}. Remove or fix that line."
            ) from None
    bad = df[list(columns)].isna().any(axis=1).to_numpy()
    if bad.any():
        line = file_line(df, int(np.flatnonzero(bad)[0]))
        raise BundleError(f"{source} line {line}: empty field(s) in a required column; fix or remove that line.")
    _check_ranges(df, source, ranges or {})
    return df, truncated


def _read_csv(data: bytes, dtypes: dict[str, Any]) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # pandas' cast warnings before its error
        return pd.read_csv(io.BytesIO(data), dtype=dtypes, engine="c")


# at most this many glued lines are dropped: each is a writer restarted on the file after a
# crash; more are damage of another kind, which is refused
GLUED_MAX = 10


def _without_glued_lines(data: bytes, source: str, header: list[str], dtypes: dict[str, Any]) -> pd.DataFrame | None:
    """The rows of a file of cumulative counters a writer was stopped in, mid-line, and then
    restarted on (it appends): its first row then stands on the cut line, which has more
    fields than the header (up to twice as many less one: a cut row, the part a field cut in
    two shares, a whole row). A few such lines (:data:`GLUED_MAX`) are dropped, each a cut
    read and the one glued to it (the reads around them hold every increment), with a
    :class:`TruncatedLineWarning`; None where the file has none, more, or other bad lines
    (the caller names the first). Only on the error path, so a loop is fine."""
    lines = data.split(b"\n")
    h = len(header)
    glued = []
    for i in range(1, len(lines)):
        if lines[i].count(b",") < h:
            continue
        try:
            n = len(next(csv.reader([lines[i].decode("utf-8")])))
        except (UnicodeDecodeError, csv.Error):
            return None
        if n == h:
            continue  # a quoted comma (a cgroup name that holds one)
        if not h < n < 2 * h:
            return None
        glued.append(i)
    if not glued or len(glued) > GLUED_MAX:
        return None
    drop = set(glued)
    kept = b"\n".join(ln for i, ln in enumerate(lines) if i not in drop)
    try:
        df = _read_csv(kept, dtypes)
    except (ValueError, OverflowError, TypeError, pd.errors.ParserError):
        return None
    df.attrs["dropped_lines"] = tuple(i + 1 for i in glued)  # what file_line counts back in
    warnings.warn(
        f"{source} line(s) {', '.join(str(i + 1) for i in glued)}: a row cut off by a writer stopped mid-line, "
        f"with the first row of the restarted writer appended to it ({h} fields expected, more found); dropped, "
        f"{len(df)} whole rows kept",
        TruncatedLineWarning,
        stacklevel=5,
    )
    return df


def file_line(df: pd.DataFrame, rows: Any) -> Any:
    """The file's line numbers (1 is the header) of rows of a frame as parsed (their index
    labels: positions at the parse, kept by every filter): ``label + 2``, counting back in
    the glued lines :func:`_without_glued_lines` dropped. An int for an int, else an array."""
    out = np.asarray(rows, dtype=np.int64) + 2
    for d in df.attrs.get("dropped_lines", ()):  # ascending: each shifts the lines from it on
        out = np.where(out >= d, out + 1, out)
    return int(out) if out.ndim == 0 else out


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
            f"{source} line {file_line(df, first[0])}: {first[1]}; the collectors never write such a value "
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
            line = file_line(df, g.index[back[0] + 1])
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


def read_bytes(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
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
    cumulative: bool = False,
) -> pd.DataFrame:
    """A house CSV from bytes, its values in range, its time order checked, a dropped last
    line announced (``cumulative``: :func:`parse_csv`)."""
    df, truncated = parse_csv(data, source, columns, optional, ranges, cumulative)
    if group is not None and group in df and df[group].isna().any():
        line = file_line(df, int(np.flatnonzero(df[group].isna().to_numpy())[0]))
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
        cumulative=True,
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
    return parse_cpu_stat(read_bytes(path), source=str(path))


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
    return parse_requests(read_bytes(path), source=str(path))


def parse_host_stat(data: bytes, *, source: str = "host_stat.csv") -> pd.DataFrame:
    """Parse host_stat.csv bytes; see :func:`read_host_stat`."""
    return _parse_table(data, source, HOST_STAT_COLUMNS, sorted_by="t_ns", ranges=HOST_STAT_RANGES, cumulative=True)


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
    return parse_host_stat(read_bytes(path), source=str(path))


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
        # tg_set_cfs_bandwidth refuses a burst above the quota: no kernel held one
        (df["burst_us"].gt(df["quota_us"]).fillna(False), "burst_us above quota_us, which the kernel refuses"),
        ((df["prev_ns"] >= df["t_ns"]).fillna(False), "prev_ns must be before t_ns"),
    )
    for bad, what in checks:
        b = bad.to_numpy(dtype=bool)
        if b.any():
            line = file_line(df, int(np.flatnonzero(b)[0]))
            raise BundleError(f"{source} line {line}: {what}; fix or remove that line")
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
    return parse_limits(read_bytes(path), source=str(path))
