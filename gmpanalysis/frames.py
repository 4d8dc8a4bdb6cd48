"""The public tables of one run (``gmp.df_*``): thin accessors over its memoised
:class:`~gmpanalysis.analysis.Analysis`, each a copy of what the analysis built once.

The topic modules below (:mod:`~gmpanalysis.periods`, :mod:`~gmpanalysis.levels`,
:mod:`~gmpanalysis.checks`, :mod:`~gmpanalysis.compare`, :mod:`~gmpanalysis.gomaxprocs`)
hold pure builders that take their inputs; :mod:`~gmpanalysis.analysis` calls them and
keeps the results; this module is the only one above both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from .analysis import analyze
from .bundle import Run
from .cgroup import bundle_period_us
from .compare import compare_table
from .errors import GmpError, MissingDataError
from .grid import PeriodGrid
from .kernelfacts import kernel_table
from .levels import ever_limited, level_names
from .offsets import period_offsets
from .periods import build_periods
from .periodtrace import stw_periods
from .replayinputs import no_quota


def df_periods(run: Run, grid: PeriodGrid | None = None, level: str | None = None) -> pd.DataFrame:
    """One row per CFS period of the reconstructed grid over the sampled span (a copy of
    ``gmp.analyze(run).periods``, built once per run; with ``grid``, built on that grid).

    A bundle may sample several cgroup levels (the container and its pod, each with its own
    quota and its own period timer: :mod:`gmpanalysis.levels`). The table is on the grid of
    the process's own level, or of ``level``; its counter columns are that level's, and the
    ``frozen_*`` columns lay the freezes of every level on it.

    Every row is right, or says how sure it is, or is NA with a ``reason``: holes in the
    samples never turn a count into a silent 0 (see :mod:`gmpanalysis.credits`).

    Columns: ``period`` int k (boundary = phase + k·period); ``segment`` cgroup lifetime
    (counters reset between segments); ``start_ns``, ``end_ns`` boundaries (CLOCK_MONOTONIC);
    ``gap`` bool, a hole in the samples (more than 10 sampling intervals without a read)
    overlaps the period; ``hole_ms`` the longest such hole (ms, 0 if none); ``group`` Int64,
    the ambiguous group the period belongs to (several period ends inside one hole: the
    counters give only their sum, see :func:`df_period_groups`), NA if its counters are exact;
    ``reason`` string, why values are interpolated, unknown or out of the ordinary (a
    quota change, a hole, an exhaustion the reads leave open, a usage counter charged late;
    NA when none applies);
    ``active`` boolean, the period timer ran (nr_periods rose at its end; NA if unknown);
    ``nr_periods``, ``nr_throttled`` Int64 counter increments credited at its end (NA if
    unknown); ``quota_us`` µs; ``usage_us`` µs of CPU the usage counter gained in the
    period, interpolated at the boundaries, with ``usage_lo_us``/``usage_hi_us`` the bracket
    the reads around the boundaries allow (the kernel charges the counter at ticks and
    context switches, a running CPU's time up to a tick late: a period can show more than
    its CPUs could run, short periods above all; ``reason`` says so where it does);
    ``throttled`` boolean, nr_throttled rose at its end (NA if unknown);
    ``throttled_rq_us`` µs of throttled time credited at its end, a SUM over CPUs' run
    queues (NaN if unknown); ``exhausted_at_us`` µs from the start to the last read at which
    usage still rose at a running CPU's pace, or to the read that ended the group's run where
    all that ran after it was runtime left on CPUs (at most a millisecond each, with the
    throttled run-queue time covering the rest of the period: many Ps' threads on many
    CPUs; :func:`gmpanalysis.reads.exhaustion`) (NaN if not throttled, or if the reads leave it
    open by more than 6 ms: see the bracket and ``reason``), inside the bracket
    ``exhausted_lo_us``..``exhausted_hi_us`` (from the read before that one to that read, or
    to the read closing a later stretch where running could hide; widened by the grid's
    uncertainty);
    ``stall_us`` µs of wall time frozen (period - exhaustion; NaN if unknown);
    ``cpus_throttled`` ≈ throttled_rq_us / stall_us, the number of CPUs' run queues that
    stood throttled (at most the CPUs its threads may use, :func:`gmpanalysis.cgroup.bundle_cpus`:
    meta.json's ncpu, or its cpus_allowed where fewer; NaN when unknown or the stall is
    shorter than a 4 ms tick);
    ``frozen_by`` string, the levels whose quota froze the group during the period
    (comma-separated, e.g. "pod,container"; "" none; NA when the period's own throttling is
    unknown, or it lies outside another level's samples and its own quota did not freeze
    it; the table's own level in every period it throttled); ``frozen_us`` µs of wall time
    frozen by any level (the union of the freezes: :func:`gmpanalysis.df_freezes`; NaN
    where the reads leave a freeze's start open in the period, as they leave
    ``exhausted_at_us``, where the own throttling is unknown and outside another level's
    samples; ``reason`` says which), inside the bracket ``frozen_lo_us``..``frozen_hi_us``
    (every freeze whose start the reads leave open taken from its bracket's end, or its
    start; NaN only where frozen_us is for want of samples);
    ``frozen_other_us`` µs frozen by levels other than the table's own, which its own
    cpu.stat does not count (NaN where the reads leave one's start open, or outside another
    level's samples);
    ``psi_some_us``, ``psi_full_us`` µs of wall time in the period that some / every task
    of the group stood stalled for CPU (cpu.pressure, cgroup v2: a group frozen by any
    level's quota is "full"; interpolated at the boundaries), ``local_throttled_us`` µs of
    cpu.stat.local throttled time (6.6+) added in the period: the group's run queues
    throttled by its own quota or an ancestor's, summed over CPUs, credited at the
    unthrottling boundary of whichever level froze it; NaN where the samples lack them
    (cgroup v1, older kernels: ``df.attrs["missing"]`` says why), and in a period a boundary
    of which falls between reads whose cell is empty;
    ``gomaxprocs`` in force at the start; ``stw_us`` µs of stop-the-world inside the period;
    ``stw_max_us`` µs, longest STW starting in it; ``stw_count``; ``stw_spans_boundary`` bool,
    an STW still open when a throttled period ended (counted whenever that boundary is in the
    trace window); ``gc_mark_us`` µs of GC mark phase; ``gc_worker_us`` µs GC worker
    goroutines ran (every interval of a worker goroutine); ``assist_us`` µs of mark assists
    while the assisting goroutine was on a P; ``go_running_us`` µs goroutines ran
    (summed over Ps); ``requests`` arrivals in the period (every status), ``requests_ok``
    (2xx) and ``requests_failed`` (the rest: errors, timeouts); ``latency_p50_ms``,
    ``latency_p99_ms`` of the successful ones, from the scheduled start (NaN without any).
    Trace columns other than ``stw_spans_boundary`` are NaN for periods not wholly inside
    the trace window.

    ``df.attrs``: ``grid`` the :class:`PeriodGrid`; ``level`` the level whose grid it is;
    ``missing`` {column: why it is NaN throughout} for the cgroup v2 signals;
    ``ledger`` the ambiguous groups, the conservation account and the freezes
    (:func:`df_period_groups`, :func:`df_conservation`, :func:`gmpanalysis.df_freezes`).
    """
    if grid is not None:
        return build_periods(run, grid, level=level, level_table=analyze(run).level_table_of)
    return analyze(run).level_periods(level).copy()


def df_period_offsets(run: Run, bucket_ms: float | None = None, per: pd.DataFrame | None = None) -> pd.DataFrame:
    """What happens inside each period: usage in fixed buckets of the offset from the
    period's start (FlameScope's sub-second offset view, on the CFS grid). ``bucket_ms``
    defaults to 10 ms, or a tenth of the period where it is shorter than 100 ms.

    cpuacct usage is charged in scheduler-tick steps (4 ms per CPU at HZ=250): a bucket can
    receive a tick's worth of CPU that ran in the bucket before it, and show more CPUs busy
    than the group can have. What a bucket holds beyond the CPUs available (the host's CPUs,
    and GOMAXPROCS when the run recorded it) is moved back to the buckets before it (what
    the first bucket cannot hold, forward again), inside the same period, so every
    CPU-second stays in its period and no bucket exceeds what the machine can run.

    Columns: ``period``; ``offset_ms`` bucket start (ms from the period start); ``cpus``
    CPUs busy on average in the bucket (Δusage / bucket length, tick steps moved back as
    above); ``frozen`` bool, a freeze of any level covers the bucket's middle (the quota of
    the table's own level ran out, or an ancestor's: :func:`gmpanalysis.df_freezes`);
    ``frozen_by`` which level's (comma-separated; "" none);
    ``unknown`` bool, the period's throttling is unknown (inside a hole in the samples, or
    outside the stretch another level's table covers).
    ``df.attrs["cpus_max"]`` is the cap used.
    """
    return analyze(run).offsets(bucket_ms).copy() if per is None else period_offsets(run, per, bucket_ms)


def df_stw_periods(run: Run, per: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every stop-the-world pause placed on the period grid.

    Columns: ``start_ns``; ``dur_ms`` pause length (ms); ``kind``; ``period`` the period it
    began in; ``offset_ms`` its start inside that period (ms); ``throttled`` bool, that period
    ended throttled; ``exhausted_ms`` when that period's quota ran out (ms, NaN if it did
    not); ``spans_boundary`` bool, still running when a throttled period ended.
    ``df.attrs``: ``period_ms``; ``exhausted_p10_ms``, ``exhausted_p90_ms`` over all
    throttled periods of the run.
    """
    return analyze(run).stw_periods.copy() if per is None else stw_periods(run, per)


def df_levels(run: Run) -> pd.DataFrame:
    """The cgroup levels of a bundle and how each one's quota froze the process.

    One row per level, the process's own first. Columns: ``level``; ``own`` bool, the
    process's own cgroup; ``cgroup`` the path (meta.json ``levels``; NA if not recorded);
    ``period_us``, ``quota_us`` (Int64, NA: no limit) and ``burst_us`` at the start;
    ``quota_last_us`` (Int64) the quota at the end (a limit resized in place: limits.csv);
    ``quota_changes`` how many times the quota changed during the run (limits.csv);
    ``phase_ms`` the level's period boundaries modulo the period (ms, NaN without a quota)
    and ``phase_unc_ms`` its uncertainty; ``offset_ms`` how long after the own level's
    boundary this level's boundary comes (ms, in [0, period)); ``periods`` and
    ``throttled`` rows of its own table (throttled known true); ``frozen_s`` wall seconds
    it stood frozen (sum of its freezes).
    """
    return analyze(run).levels_table.copy()


def df_freezes(run: Run, level: str | None = None) -> pd.DataFrame:
    """Every freeze of every level, placed on one level's period grid (the process's own
    by default).

    One row per throttled period of any level. Columns: ``level`` whose quota froze it;
    ``period`` that level's own period number; ``start_ns`` when its quota ran out (the
    bracket's upper end where the reads leave the moment open: then ``exact`` is False),
    ``start_lo_ns``..``start_hi_ns`` the bracket; ``end_ns`` that level's period end (its
    timer refilled the quota); ``dur_ms``; ``throttled_rq_us`` µs throttled, a sum over CPUs
    (that level's cpu.stat); ``cpus_throttled``; ``ref_period`` the period of the chosen
    level's grid the freeze begins in (NA outside its table); ``from_ms``, ``to_ms`` the
    freeze's start and end as offsets into that period (``to_ms`` above the period length:
    it runs on into the next one).
    """
    return analyze(run).freezes(level).copy()


def df_kernel(run: Run) -> pd.DataFrame:
    """What the run's kernel does with CFS bandwidth control, what the run shows and what the
    analysis assumed (:func:`gmpanalysis.kernelfacts.kernel_table`), with the fitted period
    timer phase of every level it samples (a level whose grid cannot be fitted left out).

    Columns: ``behaviour`` (period timer phase, throttling, cpu.stat.local, cpu.pressure,
    cpu.stat keys); ``kernel`` what the kernel does by its version; ``seen`` what the run
    shows (the phases, ms mod the period; None elsewhere); ``assumed`` what the analysis
    relies on."""
    P = bundle_period_us(run.meta) * 1000
    phases = {}
    for name in level_names(run):
        la = analyze(run).of_level(name)
        if not ever_limited(la.run):
            continue  # no limit, no period timer
        try:
            grid = la.grid  # the level's own fit, memoised
        except GmpError:
            continue
        phases[name] = grid.segments[0].phase_ns % P / 1e6
    return kernel_table(run.meta, phases)


def df_checks(run: Run) -> pd.DataFrame:
    """For each throttled period inside the trace window: did the trace fall silent from
    quota exhaustion to the period's end boundary, as a frozen process must?

    Columns: ``period``; ``end_ns`` (the boundary); ``exhausted_ns`` (start +
    exhausted_at_us); ``last_event_before_ns`` (last trace event before the boundary);
    ``first_event_after_us`` (µs from the boundary to the next trace event); ``silent``
    (no trace event between exhaustion + 1 ms and the boundary). ``df.attrs["silent_fraction"]``
    is the share of silent periods: near 1 when samples and trace agree on the period grid.
    """
    return analyze(run).checks.copy()


def df_local_checks(run: Run) -> pd.DataFrame:
    """The kernel's own answer to "was this cgroup frozen?" (``cpu.stat.local``, Linux 6.6+,
    cgroup v2) against the freezes found from every level's cpu.stat (:func:`gmpanalysis.df_freezes`).

    One row per period of the process's table (:func:`gmpanalysis.df_periods`). Columns:
    ``period``; ``end_ns``; ``local_throttled_us`` (µs, summed over CPUs, as credited in the
    table); ``freezes`` how many freezes of any level end (unthrottle) where the kernel's rise
    is credited to this period; ``levels`` whose quotas those were (comma-separated);
    ``kernel_frozen`` (local_throttled_us ≥ 500 µs) and ``found_frozen`` (a freeze of
    ≥ 500 µs credited here); ``agree`` (boolean, NA where it cannot be told: a shorter
    freeze, or one whose start the samples leave open, is credited there; a freeze ends
    within 2 ms of where the crediting switches periods; or a level's table does not cover
    the period). ``df.attrs["agreement"]`` is the share of known rows
    that agree, ``df.attrs["disagree"]`` the periods that do not.
    """
    return analyze(run).local_checks.copy()


def compare_runs(runs: Iterable[Run], periods: Sequence[pd.DataFrame] | None = None) -> pd.DataFrame:
    """One row per run: the table a GOMAXPROCS sweep is read from.

    Columns: ``name``; ``gomaxprocs`` (effective at the start: recorded, else from the
    trace, else a literal env value; see :attr:`gmpanalysis.Analysis.gomaxprocs`);
    ``cpu_limit`` (as meta.json gives it; "500m → 2" when resized in place); ``quota_level``
    the level whose quota the period table is on, and ``own_level`` whether it is the
    process's own (not where a container without a limit sits in a pod with one);
    ``quota_us`` at the start and ``quota_last_us`` at the end (that level's; limits.csv
    where resized in place, as df_levels' column: :func:`gmpanalysis.levels.quota_at_end`);
    ``burst_us`` that level's CFS burst (0: none);
    ``service`` what the run served (:func:`gmpanalysis.services.service_of`: the lab's
    demo app by what a request does, else the Kubernetes workload); ``load`` (e.g. "open
    poisson 18/s"); ``throughput_rps``; ``latency_p50_ms``,
    ``latency_p99_ms`` (from the scheduled start; both over the requests begun inside the
    sampled span); ``requests_unsampled`` (requests begun before the first or after the last
    sample, left out of those; absent for runs without requests); every key of :func:`period_summary`;
    ``stall_ms_per_period`` (mean over throttled periods); ``stw_p50_us``, ``stw_p99_us``,
    ``stw_max_us``; ``stw_spanning_boundary`` (count; NaN without a trace); ``gc_cpu_pct`` (GC workers + mark
    assists while on a P, as % of goroutine running time in the trace window);
    ``phase_uncertainty_us``; ``latency_p99_lo_ms``, ``latency_p99_hi_ms`` the 95 %
    confidence interval of the p99 latency (NaN where too few requests bound it, see
    :func:`latency_ci`).
    ``periods``: the runs' :func:`df_periods` tables, if the caller has built them already.
    A run that no quota limited at any level has no periods and still gets its row: never
    throttled or frozen (0), what only periods tell NaN (:func:`gmpanalysis.compare.unlimited_summary`).
    """
    runs = list(runs)
    if periods is not None and len(periods) != len(runs):
        raise MissingDataError(f"compare_runs: {len(runs)} runs but {len(periods)} period tables; pass one per run")
    # callers that already hold the per-period tables pass them in ``periods``
    # a run no quota limited has no periods: its row says it never throttled
    per = list(periods) if periods is not None else [None if no_quota(r) else analyze(r).periods for r in runs]
    return compare_table(runs, per, [analyze(r).gomaxprocs for r in runs])
