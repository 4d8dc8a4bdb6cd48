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
import io
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import BundleError, GmpWarning, NotFoundError, TruncatedLineWarning
from .schema import READABLE, check, upgrade

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
            from .gotrace import read_trace

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", GmpWarning)
                self._trace = read_trace(self.trace_path)
            for w in caught:
                if issubclass(w.category, GmpWarning) and str(w.message) not in self.notes:
                    self.notes.append(str(w.message))
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)  # still shown
        return self._trace

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


def _parse_csv(
    data: bytes, source: str, columns: dict[str, Any], optional: dict[str, Any] | None = None
) -> tuple[pd.DataFrame, bool]:
    """Parse a house CSV from bytes. Returns (frame, last_line_was_dropped)."""
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
            f"{source} line 1: missing column(s) {', '.join(missing)}; header is {','.join(header)!r}. "
            f"Expected {','.join(columns)} (was it written by the gmp collectors?)"
        )
    dtypes = {c: t for c, t in columns.items()}
    for c, t in (optional or {}).items():
        if c in header:
            dtypes[c] = t
    try:
        df = pd.read_csv(io.BytesIO(data), dtype=dtypes, engine="c")
    except (ValueError, pd.errors.ParserError) as e:
        line = _first_bad_line(data, len(header), [header.index(c) for c in columns])
        where = f"line {line}" if line else "somewhere"
        raise BundleError(
            f"{source} {where}: malformed row ({e}); every row needs {len(header)} fields and "
            f"integers/numbers in {','.join(columns)}. Remove or fix that line."
        ) from None
    bad = df[list(columns)].isna().any(axis=1).to_numpy()
    if bad.any():
        line = int(np.flatnonzero(bad)[0]) + 2
        raise BundleError(f"{source} line {line}: empty field(s) in a required column; fix or remove that line.")
    return df, truncated


def _first_bad_line(data: bytes, nfields: int, numeric: list[int]) -> int | None:
    """Find the first malformed line (only on the error path, so a loop is fine)."""
    for i, raw in enumerate(data.split(b"\n")[1:], 2):
        if not raw:
            continue
        f = raw.split(b",")
        if len(f) != nfields:
            return i
        for j in numeric:
            try:
                float(f[j])
            except ValueError:
                return i
    return None


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


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BundleError(f"{path}: is a directory, expected a CSV file") from None


def _parse_table(
    data: bytes,
    source: str,
    columns: dict[str, Any],
    optional: dict[str, Any] | None = None,
    *,
    sorted_by: str | None = None,
    group: str | None = None,
) -> pd.DataFrame:
    """A house CSV from bytes, its time order checked, a dropped last line announced."""
    df, truncated = _parse_csv(data, source, columns, optional)
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
    return _parse_table(data, source, CPU_STAT_COLUMNS, {"cgroup": str}, sorted_by="t_ns", group="cgroup")


def read_cpu_stat(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a ``cpu_stat.csv`` written by gmp-sampler.

    Columns (one row per read; counters are cumulative since the cgroup was created):
    ``t_ns`` int64 CLOCK_MONOTONIC ns, midpoint of the read; ``read_ns`` int64 ns, duration
    of the read; ``usage_us`` float64 µs of CPU used; ``nr_periods`` int64 periods with the
    bandwidth timer running; ``nr_throttled`` int64 periods that ended throttled;
    ``throttled_us`` float64 µs throttled, SUMMED over CPUs (not wall time); ``nr_bursts``
    int64; ``burst_us`` float64 µs; optional ``cgroup`` str when several were sampled.

    A last line without its newline is dropped with a :class:`TruncatedLineWarning` and
    ``df.attrs["truncated_last_line"] = True``; other malformed lines raise
    :class:`BundleError`.
    """
    return parse_cpu_stat(_read_bytes(path), source=str(path))


def parse_requests(data: bytes, *, source: str = "requests.csv") -> pd.DataFrame:
    """Parse requests.csv bytes; see :func:`read_requests`."""
    return _parse_table(data, source, REQUEST_COLUMNS)


def read_requests(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a lab ``requests.csv``.

    Columns (one row per request, in completion order): ``sched_ns`` int64 CLOCK_MONOTONIC
    ns the load schedule asked for the request (open loop; = start_ns in closed loop);
    ``start_ns`` int64 ns sent; ``end_ns`` int64 ns response complete; ``status`` int64
    HTTP status, 0 for a transport error or timeout.
    """
    return parse_requests(_read_bytes(path), source=str(path))


def parse_host_stat(data: bytes, *, source: str = "host_stat.csv") -> pd.DataFrame:
    """Parse host_stat.csv bytes; see :func:`read_host_stat`."""
    return _parse_table(data, source, HOST_STAT_COLUMNS, sorted_by="t_ns")


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
    df = _parse_table(data, source, LIMITS_COLUMNS, LIMITS_NULLABLE, sorted_by="t_ns", group="cgroup")
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
        text = p.read_text()
    except FileNotFoundError:
        raise BundleError(f"{p}: missing; every bundle needs meta.json (is this a bundle directory?)") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise BundleError(f"{p} line {e.lineno} column {e.colno}: invalid JSON ({e.msg})") from None
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


def load_run(path: str | os.PathLike[str]) -> Run:
    """Load and validate a run bundle directory.

    Raises :class:`BundleError` for a missing or inconsistent piece; tolerates (and lists in
    ``run.notes``) a truncated last CSV line, any other :class:`GmpWarning` of the readers,
    an empty trace.out and a collection that did not finish (even one killed before its
    first sample: its samples are then empty, and the analysis says so).
    """
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
        if unfinished and (not csv.exists() or csv.stat().st_size == 0):
            # killed before the sampler wrote anything: what was collected (meta) is kept
            samples = _empty(CPU_STAT_COLUMNS)
            notes.append(f"{csv}: no samples: the collection stopped before the sampler's first read")
        elif not csv.exists():
            raise BundleError(f"{csv}: missing; a bundle without samples cannot be analysed")
        else:
            samples = read_cpu_stat(csv)
        requests = read_requests(d / "requests.csv") if (d / "requests.csv").exists() else None
        host_stat = read_host_stat(d / "host_stat.csv") if (d / "host_stat.csv").exists() else None
        limits = read_limits(d / "limits.csv") if (d / "limits.csv").exists() else None
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
    start, end = meta.get("mono_start_ns"), meta.get("mono_end_ns")
    t = samples["t_ns"].to_numpy()
    if not len(t):
        start = end = None  # nothing to compare with
    slack = 5_000_000_000
    if isinstance(start, int) and t[0] < start - slack:
        raise BundleError(
            f"{d / 'cpu_stat.csv'} line 2: t_ns {t[0]} is {(start - t[0]) / 1e9:.1f}s before meta.json "
            f"mono_start_ns {start}; samples and meta come from different runs or clocks"
        )
    if isinstance(end, int) and t[-1] > end + slack:
        raise BundleError(
            f"{d / 'cpu_stat.csv'} line {len(t) + 1}: t_ns {t[-1]} is after meta.json mono_end_ns {end}; "
            "samples and meta come from different runs or clocks"
        )
    if requests is not None and len(requests):
        bad = requests["end_ns"].to_numpy() < requests["start_ns"].to_numpy()
        if bad.any():
            line = int(np.flatnonzero(bad)[0]) + 2
            raise BundleError(f"{d / 'requests.csv'} line {line}: end_ns before start_ns; the file is corrupt")

    trace = d / "trace.out"
    if trace.exists() and trace.stat().st_size == 0:
        notes.append("trace.out is empty: the trace capture produced no bytes")
        trace = None
    elif not trace.exists():
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
