"""A watcher that removes a lab run's cgroups when the runner is killed outright.

SIGKILL runs no clean-up code in the runner. Its children die with it (PR_SET_PDEATHSIG),
but an empty cgroup directory has no process to die with: it stays until someone calls
rmdir. So each run starts this small watcher first, in its own session (a Ctrl-C or a
process-group kill aimed at the runner does not reach it), holding the read end of a pipe
whose only write end the runner keeps. The kernel closes that end when the runner exits in
any way, the watcher reads EOF, and then it removes the run's cgroups once the kernel has
reaped the processes in them. A runner that ends normally removes its cgroups itself and
then closes the pipe; the watcher finds nothing left and exits.

The watcher runs ``python -I -S`` with the standard library only (no import of this
package, no site): it starts in tens of milliseconds and has nothing to fail on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

# Runs in the watcher. argv: the cgroup directories, innermost first. The processes in them
# are the run's own (the directories were just created by the runner, under a name with the
# runner's PID); they were sent SIGKILL by PDEATHSIG, and the ones still there after a grace
# period get it again here (a child between fork and prctl can miss its parent's death).
_WATCHER = r"""
import errno, os, signal, sys, time
dirs = sys.argv[1:]
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
deadline = time.monotonic() + 10.0
killed_at = time.monotonic() + 2.0
while dirs and time.monotonic() < deadline:
    left = []
    for d in dirs:
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                continue
            left.append(d)
            if time.monotonic() > killed_at:
                try:
                    with open(os.path.join(d, "cgroup.procs")) as f:
                        pids = [int(x) for x in f.read().split()]
                except (OSError, ValueError):
                    pids = []
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
    dirs = left
    if dirs:
        time.sleep(0.05)
"""


class CgroupReaper:
    """Start the watcher for ``dirs`` (innermost first); call :meth:`close` at the end of
    a run that removed its own cgroups."""

    def __init__(self, dirs: Sequence[str]) -> None:
        r, w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHER, *dirs],
                stdin=r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
        # only this process holds the write end: children are started with close_fds
        os.set_inheritable(w, False)
        self._w: int | None = w

    def close(self, wait_s: float = 12.0) -> None:
        """Let the watcher go (after the runner's own clean-up) and wait for it to exit."""
        if self._w is not None:
            os.close(self._w)
            self._w = None
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
