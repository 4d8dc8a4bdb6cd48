"""The one exception family and the one warning family of gmpanalysis.

Every error gmpanalysis raises on purpose is a :class:`GmpError`; every warning it issues
is a :class:`GmpWarning`. Messages name the file, the place in it (offset or line) and
what to do. The classes are also importable from where they were first defined
(``gmpanalysis.bundle.TruncatedLineWarning``, ``gmpanalysis.kube.CollectError``, ...).

Errors::

    GmpError
    ├── TraceFormatError    a Go execution trace that cannot be read
    ├── BundleError         a run bundle with a missing, malformed or inconsistent piece
    │   └── ForeignTraceError   its trace.out is another run's (another collection, host, binary)
    ├── MissingDataError    an analysis needs data the run does not have
    ├── CgroupFormatError   a cgroup interface file not in the kernel's format
    ├── LabError            a lab experiment (or the local cluster) cannot run here
    ├── CollectError        a Kubernetes collection cannot be done
    └── UsageError          a bad argument value (also a ValueError)

Warnings (the data was read, with something tolerated)::

    GmpWarning (a UserWarning)
    ├── TruncatedLineWarning    a CSV's unfinished line was dropped (the last, or one a restarted writer glued to)
    ├── TruncatedTraceWarning   a trace cut inside a generation, or ending in a crash's zero bytes; the complete
    │                           generations were read
    ├── ClockWarning            the trace clock is not CLOCK_MONOTONIC, or a thread's went back
    └── UnknownVersionWarning   a trace version newer than this reader knows
"""

from __future__ import annotations

__all__ = [
    "BundleError",
    "CgroupFormatError",
    "ClockWarning",
    "CollectError",
    "ForeignTraceError",
    "GmpError",
    "GmpWarning",
    "LabError",
    "MissingDataError",
    "NotFoundError",
    "TraceFormatError",
    "TruncatedLineWarning",
    "TruncatedTraceWarning",
    "UnknownVersionWarning",
    "UsageError",
]


class GmpError(Exception):
    """Base class of every error gmpanalysis raises on purpose."""


class TraceFormatError(GmpError):
    """A Go execution trace that cannot be read (unsupported version, corrupt bytes)."""


class BundleError(GmpError):
    """A run bundle with missing, malformed or inconsistent pieces."""


class ForeignTraceError(BundleError):
    """A bundle's trace.out that comes from another run: its clock misses the collection's,
    or its format is not the one the recorded Go version writes. The command line analyses
    the run without it, as it does a trace that cannot be read."""


class NotFoundError(GmpError, FileNotFoundError):
    """A file or directory named in the call does not exist.

    Also a :class:`FileNotFoundError`, so code that handles a missing file the usual way
    catches it."""


class MissingDataError(GmpError):
    """An analysis needs data the run does not have (no trace, no requests, ...)."""


class CgroupFormatError(GmpError):
    """A cgroup interface file whose content does not follow the kernel's format."""


class LabError(GmpError):
    """A lab experiment cannot run here (no root, no cgroup access, no Go toolchain...)."""


class CollectError(GmpError):
    """A collection could not be done; the message says what is missing and what to apply."""


class UsageError(GmpError, ValueError):
    """A function was called with an argument value it does not accept.

    Also a :class:`ValueError`, so ``except ValueError`` written before it existed still
    catches it."""


class GmpWarning(UserWarning):
    """Base class of every warning gmpanalysis issues: the data was read, but something in it
    was tolerated (a dropped line, a cut trace...). :func:`gmpanalysis.to_report` lists them
    under "Data notes"; ``warnings.simplefilter("error", GmpWarning)`` makes them fatal."""


class TruncatedLineWarning(GmpWarning):
    """A CSV line its writer was stopped in the middle of was dropped: the last line, without
    its newline, or a line a restarted writer appended its first row to (more fields than
    the header)."""


class TruncatedTraceWarning(GmpWarning):
    """The trace ends inside a generation; the complete generations before it were read."""


class ClockWarning(GmpWarning):
    """The trace clock is not Linux's nanotime/64 (times are not CLOCK_MONOTONIC ns), or a
    thread's clock went back in a damaged trace (its events were held at its last time)."""


class UnknownVersionWarning(GmpWarning):
    """The trace header names a version newer than this reader knows."""
