"""gmpanalysis: CFS CPU quotas and the Go runtime, period by period.

import gmpanalysis as gmp
run = gmp.load_run("fixtures/runs/cpu-0.5cpu-gmp8")
run.samples            # cpu.stat reads, units normalised
"""

from .bundle import Run, load_run, read_cpu_stat, read_requests
from .errors import BundleError, CgroupFormatError, GmpError, LabError, MissingDataError, TraceFormatError
from .gotrace import GoTrace, read_trace

__version__ = "0.1.0"

__all__ = [
    "BundleError",
    "CgroupFormatError",
    "GmpError",
    "GoTrace",
    "LabError",
    "MissingDataError",
    "Run",
    "TraceFormatError",
    "load_run",
    "read_cpu_stat",
    "read_requests",
    "read_trace",
]
