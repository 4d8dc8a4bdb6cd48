"""One run's derived tables, built once and kept: the period grid, the per-period table and
what is read from it.

``gmp.analyze(run)`` returns the run's :class:`Analysis`; its tables are computed on first
use and memoised, so a report, a comparison and a notebook that all need the period table
build it once. The free functions (``gmp.df_periods(run)``, ``gmp.df_checks(run)``, ...)
are thin wrappers over it. The period length has one carrier: the bundle's ``period_us``
(:func:`period_ns`), which the grid then carries with the phase and its uncertainty.

An Analysis belongs to the exact samples, requests, limits, trace and meta it was built
from: a run whose ``samples`` (or ``requests``, ``limits``, ``meta``, trace) were replaced, or
edited in place, gets a new one. The frames it hands out through the ``df_*`` functions are copies.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd

from .bundle import Run
from .cgroup import bundle_period_us
from .checks import checks, local_checks
from .compare import period_summary
from .errors import BundleError, MissingDataError
from .gomaxprocs import effective as effective_gomaxprocs
from .grid import PeriodGrid, check_period, fit_period_grid, restart_ns, timer_late_ns
from .levels import ever_limited, level_names, level_run, levels_table, period_changes, table_level
from .offsets import period_offsets
from .periods import build_level, build_periods
from .periodtrace import stw_periods
from .reads import read_percentiles


def period_ns(meta: dict[str, Any]) -> int:
    """The CFS period of a bundle, in ns: its ``period_us`` (validated by the bundle reader;
    the kernel's default, 100 ms, when a hand-made meta lacks it)."""
    return bundle_period_us(meta) * 1000


def _fingerprint(df: pd.DataFrame | None) -> tuple[Any, ...] | None:
    """What a frame holds, cheaply: its shape, columns and the sums of its numeric columns
    (an in-place edit of any value changes a sum; a few ms for an hour of samples)."""
    if df is None:
        return None
    sums = df.select_dtypes("number").sum()
    return (len(df), tuple(df.columns), tuple(sums.index), tuple(float(x) for x in sums.to_numpy()))


# The runs whose contents were fingerprinted in the library call under way (:func:`held`):
# id -> (the run, kept so that its id cannot be reused while the call lasts).
_HELD: contextvars.ContextVar[dict[int, Run] | None] = contextvars.ContextVar("gmp_held_runs", default=None)
F = TypeVar("F", bound=Callable[..., Any])


def held(fn: F) -> F:
    """For a library call that edits no run (advise, what_if, the report): within it, each
    run's contents are fingerprinted once, and later :func:`analyze` calls on the same run
    check only that its inputs are the same objects. Fingerprinting an hour of two levels'
    samples takes ~20 ms, and an advice asks for the analysis some 30 times. Edits between
    calls are still seen; a nested held call shares its caller's scope."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _HELD.get() is not None:
            return fn(*args, **kwargs)
        token = _HELD.set({})
        try:
            return fn(*args, **kwargs)
        finally:
            _HELD.reset(token)

    return cast(F, wrapper)


def _inputs(run: Run) -> tuple[Any, ...]:
    # the trace is parsed lazily into run._trace: that object is checked separately, once
    # a table has used it (see analyze)
    return (run.samples, run.requests, run.meta, run.trace_path, run.limits, run.host_stat)


def _contents(run: Run) -> tuple[Any, ...]:
    # in-place edits of the same objects: the meta as JSON text, the frames' fingerprints
    return (
        json.dumps(run.meta, sort_keys=True, default=str),
        _fingerprint(run.samples),
        _fingerprint(run.requests),
        _fingerprint(run.limits),  # the quotas a limit resized in place had, period by period
        _fingerprint(run.host_stat),  # the host's load beside the group (hostload)
    )


@dataclasses.dataclass(eq=False)
class Analysis:
    """The derived tables of one run (see module doc). Attributes are built on first use."""

    run: Run
    _built_from: tuple[Any, ...] = dataclasses.field(repr=False)
    _contents: tuple[Any, ...] = dataclasses.field(repr=False, default=())
    _trace_seen: Any = dataclasses.field(default=None, repr=False)  # the GoTrace the tables used

    def _trace_used(self) -> None:
        self._trace_seen = self.run._trace

    @property
    def period_ns(self) -> int:
        """The CFS period of the grid's level: where several levels are sampled, that level's
        own (its first limits.csv read, else meta.json levels), as :attr:`grid` takes it."""
        if "cgroup" in self.run.samples and len(self.run.samples):
            lr = level_run(self.run, table_level(self.run))
            if lr is not self.run:
                return analyze(lr).period_ns
        return period_ns(self.run.meta)

    @functools.cached_property
    def gomaxprocs(self) -> int | None:
        """GOMAXPROCS at the start of the run (:func:`gmpanalysis.gomaxprocs.effective`)."""
        out = effective_gomaxprocs(self.run)
        self._trace_used()
        return out

    @functools.cached_property
    def grid(self) -> PeriodGrid:
        """The kernel's CFS period grid (:func:`gmpanalysis.fit_period_grid`)."""
        s = self.run.samples
        if s.empty:
            raise MissingDataError(
                f"{self.run.path}: no samples (the collection stopped before the sampler's first read)"
            )
        if "cgroup" in s:  # several levels (or one named): the table's level's grid
            lr = level_run(self.run, table_level(self.run))
            if lr is not self.run:
                return analyze(lr).grid
        P = period_ns(self.run.meta)
        if not len(period_changes(self.run)):  # a changed period has its own error (periods)
            self._check_period(P)
        self._check_spacing(P)
        return fit_period_grid(s, P, restart_ns(self.run.meta), timer_late_ns(self.run.meta))

    def _check_period(self, P: int) -> None:
        """The recorded period against the samples (:func:`gmpanalysis.grid.check_period`):
        a period the timer cannot have is a :class:`BundleError`, a drifting one a note."""
        verdict = check_period(self.run.samples, P, timer_late_ns(self.run.meta), restart_ns(self.run.meta))
        if verdict is None:
            return
        kind, why = verdict
        m = self.run.meta
        level = f" of level {m['level']!r} (meta.json levels, limits.csv)" if isinstance(m.get("level"), str) else ""
        src = self.run.samples.attrs.get("source", "cpu_stat.csv")
        text = f"{self.run.path / 'meta.json'}: the CFS period{level} is {P // 1000} µs, but in {src} {why}"
        if kind == "error":
            raise BundleError(
                f"{text}; set period_us to the cgroup's period (cpu.cfs_period_us, or cpu.max's second field)"
            )
        if text not in self.run.notes:
            self.run.notes.append(text)

    def _check_spacing(self, P: int) -> None:
        """A note where the reads are half a period or more apart (the median): a period's
        counters then come from reads in its neighbours, and one throttled can show as two
        beside one that used nothing (the lab refuses such an interval)."""
        t = self.run.samples["t_ns"].to_numpy()
        if len(t) < 3:
            return
        dt = np.diff(t)
        # the median (numpy's: between the two middle values) is below P/2 where fewer than
        # half the intervals reach it; only then is it worth selecting
        if 2 * int(np.count_nonzero(dt >= P / 2)) < len(dt):
            return
        (gap,) = read_percentiles(dt, (50,))
        if gap >= P / 2:
            lv = self.run.meta.get("level")
            where = f" (level {lv!r})" if isinstance(lv, str) and len(self.run.meta.get("levels") or ()) > 1 else ""
            text = (
                f"{self.run.path / 'cpu_stat.csv'}{where}: reads every {gap / 1e6:.3g} ms (median) on a "
                f"{P / 1e6:g} ms CFS period: the periods' counters are placed from reads in their neighbours, "
                "so a period's throttling can show in the next; read at least twice a period (the sampler's --interval)"
            )
            if text not in self.run.notes:
                self.run.notes.append(text)

    @property
    def levels(self) -> list[str]:
        """The cgroup levels sampled, the process's own first (:func:`gmpanalysis.df_levels`)."""
        return level_names(self.run)

    def of_level(self, name: str) -> Analysis:
        """The analysis of one level of the run, as a run of its own."""
        return analyze(level_run(self.run, name))

    @functools.cached_property
    def level_table(self) -> pd.DataFrame:
        """This (single-level) run's own table, before other levels' freezes are laid on it."""
        out = build_level(self.run, self.grid)
        self._trace_used()
        return out

    def level_table_of(self, name: str) -> pd.DataFrame:
        """A level's own period table (on its own grid), memoised by its analysis."""
        a = self.of_level(name)
        if not ever_limited(a.run):
            raise MissingDataError(f"{self.run.path}: level {name!r} has no CPU limit, so no period timer")
        return a.level_table

    @functools.cached_property
    def periods(self) -> pd.DataFrame:
        """The per-period table (:func:`gmpanalysis.df_periods`) on the grid of the process's own
        level (or the nearest level above with a quota: :func:`gmpanalysis.levels.table_level`)."""
        if "cgroup" not in self.run.samples and not ever_limited(self.run):
            raise MissingDataError(
                f"{self.run.path}: no CPU limit (quota_us is null): there are no CFS periods to align to"
            )
        out = build_periods(self.run, self.grid, level_table=self.level_table_of)
        self._trace_used()
        return out

    def level_periods(self, level: str | None = None) -> pd.DataFrame:
        """The per-period table on one level's grid (memoised per level)."""
        if level is None or level == table_level(self.run):
            return self.periods
        cache = self.__dict__.setdefault("_level_periods", {})
        if level not in cache:
            grid = self.of_level(level).grid
            cache[level] = build_periods(self.run, grid, level=level, level_table=self.level_table_of)
        return cache[level]

    @functools.cached_property
    def levels_table(self) -> pd.DataFrame:
        """:func:`gmpanalysis.df_levels`."""
        return levels_table(self)

    def freezes(self, level: str | None = None) -> pd.DataFrame:
        """:func:`gmpanalysis.df_freezes` on one level's grid."""
        return self.level_periods(level).attrs["ledger"].freezes

    @functools.cached_property
    def summary(self) -> dict[str, float]:
        """:func:`gmpanalysis.period_summary` of the period table."""
        return period_summary(self.periods)

    @functools.cached_property
    def stw_periods(self) -> pd.DataFrame:
        """:func:`gmpanalysis.df_stw_periods`."""
        out = stw_periods(self.run, self.periods)
        self._trace_used()
        return out

    @functools.cached_property
    def checks(self) -> pd.DataFrame:
        """:func:`gmpanalysis.df_checks`."""
        out = checks(self.run, self.periods)
        self._trace_used()
        return out

    @functools.cached_property
    def local_checks(self) -> pd.DataFrame:
        """:func:`gmpanalysis.df_local_checks`."""
        return local_checks(self.periods, self.freezes())

    def offsets(self, bucket_ms: float | None = None) -> pd.DataFrame:
        """:func:`gmpanalysis.df_period_offsets` (memoised per bucket width)."""
        cache = self.__dict__.setdefault("_offsets", {})
        if bucket_ms not in cache:
            cache[bucket_ms] = period_offsets(self.run, self.periods, bucket_ms)
        return cache[bucket_ms]

    @functools.cached_property
    def mmu(self) -> pd.DataFrame:
        """:func:`gmpanalysis.df_mmu` with its default windows."""
        from .mmu import df_mmu

        out = df_mmu(self.run)
        self._trace_used()
        return out


def analyze(run: Run) -> Analysis:
    """The run's :class:`Analysis`, built once per set of inputs and kept on the run."""
    a = getattr(run, "_analysis", None)
    now = _inputs(run)
    same = a is not None and not (
        any(x is not y for x, y in zip(a._built_from, now, strict=True))
        # a copy of the run may carry a trace of its own
        or (a.run is not run and a.run._trace is not run._trace)
        or (a._trace_seen is not None and a._trace_seen is not run._trace)
    )
    seen = _HELD.get()
    if a is not None and same and seen is not None and seen.get(id(run)) is run:
        return a
    contents = _contents(run)
    if a is None or not same or a._contents != contents:  # (the same objects, edited in place)
        a = Analysis(run, now, contents)
        run._analysis = a  # kept on the run (copies of the run share it while their inputs match)
    if seen is not None:
        seen[id(run)] = run
    return a
