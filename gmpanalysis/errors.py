"""The one exception family of gmpanalysis.

Every message names the file, the place in it (offset or line) and what to do.
"""

from __future__ import annotations


class GmpError(Exception):
    """Base class of every error gmpanalysis raises on purpose."""


class TraceFormatError(GmpError):
    """A Go execution trace that cannot be read (unsupported version, corrupt bytes)."""


class BundleError(GmpError):
    """A run bundle with missing, malformed or inconsistent pieces."""


class MissingDataError(GmpError):
    """An analysis needs data the run does not have (no trace, no requests, ...)."""


class CgroupFormatError(GmpError):
    """A cgroup interface file whose content does not follow the kernel's format."""


class LabError(GmpError):
    """A lab experiment cannot run here (no root, no cgroup access, no Go toolchain...)."""
