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
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .bundlefiles import (
    CPU_STAT_COLUMNS,
    check_regular,
    file_line,
    read_bytes,
    read_cpu_stat,
    read_host_stat,
    read_limits,
    read_requests,
)

# the CSV layer's names, where readers of a bundle have always found them
from .bundlefiles import CPU_STAT_NULLABLE as CPU_STAT_NULLABLE
from .bundlefiles import HOST_STAT_COLUMNS as HOST_STAT_COLUMNS
from .bundlefiles import LIMITS_COLUMNS as LIMITS_COLUMNS
from .bundlefiles import REQUEST_COLUMNS as REQUEST_COLUMNS
from .bundlefiles import parse_cpu_stat as parse_cpu_stat
from .bundlefiles import parse_host_stat as parse_host_stat
from .bundlefiles import parse_limits as parse_limits
from .bundlefiles import parse_requests as parse_requests
from .counters import check_counters as check_counters
from .errors import BundleError, ForeignTraceError, GmpWarning, NotFoundError, TraceFormatError
from .errors import TruncatedLineWarning as TruncatedLineWarning
from .goversion import go_minor
from .grid import restart_ns
from .limitrows import bracket_restarts, stray_limits
from .schema import READABLE, check, upgrade

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
            try:
                tr = read_trace(self.trace_path, tables=tables)
            except TraceFormatError as e:
                advice = NO_TRACE_ADVICE.format(name=self.trace_path.name, path=self.path)
                raise TraceFormatError(f"{e}{advice}") from None
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


# what a run's unreadable trace leaves a user to do (without_trace, which does it, drops it)
NO_TRACE_ADVICE = (
    ". The periods, freezes and advice need no trace: move {name} out of {path} to analyse the run "
    "without it (the gmpanalysis commands go on without it themselves, with a note)"
)


# The trace format version (the header's "go 1.N trace") each Go release writes: Go 1.24
# writes the 1.23 format and 1.27 the 1.26 one (fixtures/README.md, "traces/").
TRACE_FORMAT_OF_GO = {22: 22, 23: 23, 24: 23, 25: 25, 26: 26, 27: 26}


def check_trace_belongs(run: Run, tr: Any) -> None:
    """A trace.out of another run (another collection, another host, another binary) is not
    used as if it were this one's: its clock span must overlap the collection's (the
    samples', and meta.json's mono_start_ns..mono_end_ns), and its format version must be
    the one the recorded Go version writes. Raises :class:`ForeignTraceError` naming both files."""
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
            raise ForeignTraceError(
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
        raise ForeignTraceError(
            f"{run.trace_path}: written in the go 1.{version} trace format, but meta.json says the target ran "
            f"{run.meta['go_version']}, which writes {f'go 1.{want}' if want else 'another format'}: the trace comes "
            "from another binary. Put this run's trace there, or correct go_version in meta.json"
        )


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a bundle's ``meta.json`` against the contract
    (:mod:`gmpanalysis.schema`); an older version is returned upgraded."""
    p = Path(path)
    try:
        raw = read_bytes(p, limit=META_MAX_BYTES)
    except NotFoundError:
        inside = _bundles_below(p.parent)
        if inside:
            raise BundleError(
                f"{p.parent}: a directory of {inside} bundle(s), not a bundle (it has no meta.json): give the "
                f"bundles ({p.parent}/*), or run gmpanalysis fleet on the directory"
            ) from None
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
    lines = file_line(samples, samples.index.to_numpy())
    if isinstance(start, int) and t[first] < start - slack:
        raise BundleError(
            f"{d / 'cpu_stat.csv'} line {lines[first]}: t_ns {t[first]} is {(start - t[first]) / 1e9:.1f}s before "
            f"meta.json mono_start_ns {start}; samples and meta come from different runs or clocks"
        )
    if isinstance(end, int) and t[last] > end + slack:
        raise BundleError(
            f"{d / 'cpu_stat.csv'} line {lines[last]}: t_ns {t[last]} is {(t[last] - end) / 1e9:.3g}s after meta.json "
            f"mono_end_ns {end}; samples and meta come from different runs or clocks"
        )


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


def _shortest(meta: dict[str, Any], limits: pd.DataFrame | None) -> int | None:
    """The shortest CFS period (µs) meta.json or limits.csv gives any level; None: none."""
    levels = [x for x in meta.get("levels") or () if isinstance(x, dict)]
    vals = [v for v in (meta.get("period_us"), *(x.get("period_us") for x in levels)) if isinstance(v, int)]
    if limits is not None and len(limits):
        vals.append(int(limits["period_us"].min()))
    vals = [v for v in vals if v > 0]
    return min(vals) if vals else None


def _host_cpus(meta: dict[str, Any], host_stat: pd.DataFrame | None, d: Path) -> list[str]:
    """A note where meta.json's ncpu is not the CPUs host_stat.csv counts online at its first
    read (the per-CPU lines of /proc/stat). The replay and the advice take meta.json's ncpu
    for the CPUs the group could run on; one that disagrees with the host's own count at the
    start (CPUs hot-plugged in between aside) is a wrong field or another node's file."""
    n = meta.get("ncpu")
    if host_stat is None or not len(host_stat) or "ncpu" not in host_stat:
        return []
    if not isinstance(n, int) or isinstance(n, bool):
        return []
    online = int(host_stat["ncpu"].iloc[0])
    if online == n:
        return []
    return [
        f"{d / 'meta.json'}: ncpu {n}, but {d / 'host_stat.csv'} counts {online} CPUs online at its first read; "
        f"what_if and advise replay on {n} CPUs: correct ncpu (the node's CPUs), or check that the two files "
        "come from one collection"
    ]


def _optional(p: Path, read: Any, notes: list[str]) -> pd.DataFrame | None:
    """An optional file of a bundle, read where it is there (even as a broken link: what is
    wrong with it is said, not skipped); an empty one (0 bytes: its writer had not written
    its header yet) is taken as absent, with a note."""
    if not os.path.lexists(p):
        return None
    if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) == 0:
        notes.append(f"{p}: empty (0 bytes, not even its header): taken as absent")
        return None
    return read(p)


def _bundles_below(d: Path) -> int:
    """How many directories right under ``d`` hold a meta.json (0 where it cannot be read)."""
    try:
        return sum(1 for c in d.iterdir() if (c / "meta.json").is_file())
    except OSError:
        return 0


def without_trace(run: Run, why: Exception) -> Run:
    """The run without its trace, which cannot be read or is another run's (``why``), and a
    note saying so: what needs no trace (the periods, the freezes, the advice) goes on; the
    trace's columns are empty."""
    out = dataclasses.replace(run, trace_path=None)
    out._trace = None
    what = str(why).removesuffix(NO_TRACE_ADVICE.format(name=run.trace_path.name, path=run.path))
    note = f"{run.trace_path}: cannot be used ({what}); analysed without the trace (its STW and GC columns are empty)"
    out.notes = [*run.notes, note]
    return out


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
        requests = _optional(d / "requests.csv", read_requests, notes)
        host_stat = _optional(d / "host_stat.csv", read_host_stat, notes)
        limits = _optional(d / "limits.csv", read_limits, notes)
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
    # the process's own level: meta.json's first, else the first the samples name
    listed = [x.get("level") for x in meta.get("levels") or () if isinstance(x, dict)]
    first = str(samples["cgroup"].iloc[0]) if "cgroup" in samples and len(samples) else None
    notes += check_counters(
        samples, str(csv), restart_ns(meta), listed[0] if listed else first, _shortest(meta, limits)
    )
    if requests is not None:
        requests, more = _check_requests(requests, str(d / "requests.csv"))
        notes += more
    notes += stray_limits(limits, samples, d / "limits.csv", listed[0] if listed else None)
    notes += _host_cpus(meta, host_stat, d)
    limits, more = bracket_restarts(limits, samples, d / "limits.csv", meta)
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
# are summed per period one generation at a time (periodtrace._running_coverage), unless the run's
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
