"""gmpanalysis: CFS CPU quotas and the Go runtime, period by period.

import gmpanalysis as gmp
run = gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp8")
run.samples            # cpu.stat reads, units normalised
"""

# _pools first: it sets the native thread pools' environment before numpy loads
from . import _pools, fleet  # noqa: F401
from .advise import advise
from .analysis import Analysis, analyze
from .bundle import Run, load_run, read_cpu_stat, read_host_stat, read_limits, read_requests
from .compare import period_summary
from .errors import (
    BundleError,
    CgroupFormatError,
    ClockWarning,
    CollectError,
    ForeignTraceError,
    GmpError,
    GmpWarning,
    LabError,
    MissingDataError,
    NotFoundError,
    TraceFormatError,
    TruncatedLineWarning,
    TruncatedTraceWarning,
    UnknownVersionWarning,
    UsageError,
)
from .examples import example_dir, example_run, example_runs
from .export import to_chrome_trace
from .fleet import fleet_periods
from .frames import (
    compare_runs,
    df_checks,
    df_freezes,
    df_kernel,
    df_levels,
    df_local_checks,
    df_period_offsets,
    df_periods,
    df_stw_periods,
)
from .gomaxprocs import df_gomaxprocs
from .gotrace import GoTrace, iter_generations, read_trace
from .grid import PeriodGrid, fit_period_grid
from .hostload import host_load
from .mmu import df_mmu
from .periods import df_conservation, df_period_groups
from .plot import plot_advice, plot_compare, plot_mmu, plot_period_heatmap, plot_periods, plot_stw_vs_boundary
from .report import to_report
from .sampling import df_lateness, df_sampling_holes, read_lateness, sampling_summary
from .whatif import what_if

__version__ = "0.1.0"

__all__ = [
    "Analysis",
    "BundleError",
    "CgroupFormatError",
    "ClockWarning",
    "CollectError",
    "ForeignTraceError",
    "GmpError",
    "GmpWarning",
    "GoTrace",
    "LabError",
    "MissingDataError",
    "NotFoundError",
    "PeriodGrid",
    "Run",
    "TraceFormatError",
    "TruncatedLineWarning",
    "TruncatedTraceWarning",
    "UnknownVersionWarning",
    "UsageError",
    "advise",
    "analyze",
    "compare_runs",
    "df_checks",
    "df_local_checks",
    "example_dir",
    "example_run",
    "example_runs",
    "df_lateness",
    "df_conservation",
    "df_freezes",
    "df_gomaxprocs",
    "df_kernel",
    "df_levels",
    "df_mmu",
    "df_period_groups",
    "df_period_offsets",
    "df_periods",
    "df_sampling_holes",
    "df_stw_periods",
    "fit_period_grid",
    "host_load",
    "load_run",
    "period_summary",
    "plot_advice",
    "plot_compare",
    "plot_mmu",
    "plot_period_heatmap",
    "plot_periods",
    "plot_stw_vs_boundary",
    "read_cpu_stat",
    "read_host_stat",
    "read_lateness",
    "read_limits",
    "read_requests",
    "what_if",
    "fleet",
    "fleet_periods",
    "read_trace",
    "iter_generations",
    "sampling_summary",
    "to_chrome_trace",
    "to_report",
]
