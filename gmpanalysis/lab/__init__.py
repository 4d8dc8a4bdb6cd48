"""Local experiments under real cgroup CPU quotas (needs root and a cpu cgroup controller)."""

from .binaries import ensure_binaries
from .cgroups import LabCgroup
from .run import LabConfig, parse_cpu_limit, run_lab, sweep

__all__ = ["LabCgroup", "LabConfig", "ensure_binaries", "parse_cpu_limit", "run_lab", "sweep"]
