"""What the bundle's kernel does with CFS bandwidth control, and what the analysis assumed.

The kernel's bandwidth control changed under the versions users' nodes run (5.15 to 6.18):
the period timer's phase, what throttled time counts, per-task throttling, the files a
cgroup offers. One table says, for a bundle, which behaviour its kernel has by its version,
what the bundle itself shows where it can (the measured timer phases), and what the
analysis assumed.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from .cgroup import bundle_period_us

# CONFIG_HZ where a bundle does not record its kernel's (meta.json ``hz``): Debian's and
# most distributions' x86 kernels
DEFAULT_HZ = 250


def tick_ns(meta: dict[str, Any]) -> int:
    """The scheduler tick of a bundle's kernel (ns): 1/HZ, from meta.json ``hz``. The tick
    decides when a CPU out of runtime is caught and the steps cpuacct usage moves in."""
    hz = meta.get("hz")
    return 1_000_000_000 // (int(hz) if isinstance(hz, int) and not isinstance(hz, bool) and hz > 0 else DEFAULT_HZ)


# min_cfs_rq_runtime: the runtime a CPU whose group's threads went idle keeps of what it
# drew from the pool (the rest goes back); the same in every kernel users run (ns)
MIN_CFS_RQ_RUNTIME_NS = 1_000_000


# (major, minor) from which each behaviour holds (mainline; a vendor kernel may backport)
RANDOM_PHASE = (6, 4)  # a cgroup's period timer starts at a random phase (41abdba93747)
LOCAL_STAT = (6, 6)  # cpu.stat.local with throttled_usec
NICE_USEC = (6, 13)  # nice_usec in cpu.stat (backported to 6.12.y)
PER_TASK_THROTTLE = (6, 18)  # tasks parked on return to user space; throttled time from the first parked
PSI_CGROUP_FULL = (5, 13)  # cpu.pressure "full" for cgroups, throttling counted as stall


def kernel_version(release: object) -> tuple[int, int] | None:
    """(major, minor) of a ``uname -r`` string, None where there is none."""
    m = re.match(r"(\d+)\.(\d+)", str(release or ""))
    return (int(m[1]), int(m[2])) if m else None


def kernel_table(meta: dict[str, Any], phases_ms: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per kernel behaviour the analysis depends on.

    Columns: ``behaviour``; ``kernel`` what the bundle's kernel (meta ``kernel``,
    ``cgroup_version``) does by its version; ``seen`` what the bundle shows (NA where it
    shows nothing); ``assumed`` what the analysis relies on. ``phases_ms`` (level -> the
    fitted phase of its period grid, ms mod the period) lets the timer row say what was
    measured: before 6.4 every group's timer expires on multiples of the period of
    CLOCK_MONOTONIC, so two levels share their boundaries.
    """
    v = kernel_version(meta.get("kernel"))
    cg = meta.get("cgroup_version")
    rows = []

    def at_least(since: tuple[int, int]) -> bool | None:
        return None if v is None else v >= since

    rand = at_least(RANDOM_PHASE)
    seen = None
    if phases_ms:
        period_ms = bundle_period_us(meta) / 1000
        near0 = {k: min(p % period_ms, period_ms - p % period_ms) < 0.5 for k, p in phases_ms.items()}
        txt = ", ".join(f"{k} {p:.1f} ms" for k, p in phases_ms.items())
        seen = f"phases {txt}" + (" (all on multiples of the period)" if all(near0.values()) else "")
    rows.append(
        {
            "behaviour": "period timer phase",
            "kernel": {True: "random per cgroup (6.4+)", False: "multiples of the period, shared by every cgroup"}.get(
                rand, "unknown kernel"
            ),
            "seen": seen,
            "assumed": "none: each level's phase is fitted from its own nr_periods steps; levels that share "
            "boundaries are attributed by which counter rose",
        }
    )
    per_task = at_least(PER_TASK_THROTTLE)
    rows.append(
        {
            "behaviour": "throttling",
            "kernel": {
                True: "per task (6.18+): the group is marked throttled when the quota runs out and each task is "
                "parked on its return to user space; throttled time starts at the first parked task",
                False: "per run queue: the whole group is dequeued when the quota runs out; throttled time starts then",
            }.get(per_task, "unknown kernel"),
            "seen": None,
            "assumed": "exhaustion is the last read at which usage still rose at a running CPU's pace, before "
            "a trickle of runtime left on CPUs (a millisecond each; a task finishing a system call may trickle "
            "past it too); cpus_throttled divides throttled time by that stall, "
            + ("so it can read low where tasks were parked late" if per_task else "as the kernel counts it"),
        }
    )
    local = at_least(LOCAL_STAT) if cg == 2 else False
    rows.append(
        {
            "behaviour": "cpu.stat.local",
            "kernel": "has it (6.6+, cgroup v2)" if local else ("cgroup v1: none" if cg == 1 else "before 6.6: none"),
            "seen": None,
            "assumed": "local_throttled_us is the group's run queues' throttled time by its own quota or an "
            "ancestor's; without it, which level froze the group comes from the levels' own counters alone",
        }
    )
    full = at_least(PSI_CGROUP_FULL)
    rows.append(
        {
            "behaviour": "cpu.pressure",
            "kernel": "none (cgroup v1)"
            if cg != 2
            else ("PSI some and full per cgroup" if full else "PSI some only (full for cgroups from 5.13)"),
            "seen": None,
            "assumed": "nothing: psi_some_us and psi_full_us are recorded beside the table's own stall, never in "
            "its place (a throttled Go server showed no CPU pressure at all on 6.18, spinning threads as much "
            "as their frozen time)",
        }
    )
    rows.append(
        {
            "behaviour": "cpu.stat keys",
            "kernel": "nice_usec and later keys (6.13, 6.12.y)" if at_least(NICE_USEC) or v == (6, 12) else "",
            "seen": None,
            "assumed": "keys are read by name and unknown ones kept (meta sampler.cgroups[].stat_first/stat_last)",
        }
    )
    return pd.DataFrame(rows, columns=["behaviour", "kernel", "seen", "assumed"])
