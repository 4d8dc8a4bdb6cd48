"""A lab run killed outright (SIGKILL: no clean-up code runs) at each stage leaves a bundle
that loads, with what was collected, and no process of its own running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

import gmpanalysis as gmp
from gmpanalysis.lab.run import reap_stale_cgroups

pytestmark = pytest.mark.lab

# progress lines of `gmpanalysis lab run` (stderr), in order, and what is on disk by then
STAGES = {
    "before the sampler starts": "cgroup gmp-lab-",
    "mid-sampling, before the app": "sampler pid",
    "mid-load": "load:",
    "mid-trace": "trace:",
}


def _ours(marker: str) -> list[int]:
    """PIDs of live processes whose command line names this run's bundle or cgroup."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (p / "stat").read_text().split()[2]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if marker in cmd and state != "Z" and int(p.name) != os.getpid():
            out.append(int(p.name))
    return out


@pytest.mark.parametrize("stage", list(STAGES))
def test_killed_lab_run_leaves_a_loadable_bundle_and_nothing_running(bins, tmp_path, stage):
    out = tmp_path / f"run-{stage.split()[0]}"
    cmd = [
        sys.executable, "-m", "gmpanalysis.cli", "lab", "run", "--cpu-limit", "500m", "--gomaxprocs", "2",
        "--duration", "3", "--trace-start", "0.5", "--trace-seconds", "1.5", "--work-ms", "5", "--rate", "40",
        "-o", str(out),
    ]  # fmt: skip
    env = dict(os.environ, GMP_BIN_DIR=str(Path(bins["gmp-sampler"]).parent))
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    seen = []
    deadline = time.monotonic() + 120
    try:
        for line in p.stderr:  # the runner reports each stage as it reaches it
            seen.append(line)
            if STAGES[stage] in line:
                time.sleep(0.2)  # a little way into the stage
                p.send_signal(signal.SIGKILL)
                break
            assert time.monotonic() < deadline, seen
    finally:
        p.kill()
        p.wait(30)
    assert any(STAGES[stage] in x for x in seen), "".join(seen)
    run = gmp.load_run(out)  # loads, whatever was on disk
    assert run.meta["complete"] is False
    assert any("did not finish" in n for n in run.notes)
    if stage != "before the sampler starts":
        assert len(run.samples) > 0  # the sampler appended and flushed as it went
    # the sampler, the app and the load generator died with the runner
    time.sleep(1.0)
    assert _ours(str(out)) == [], "processes left running"
    # the cgroup outlives a runner killed outright; the next run (or this call) removes it
    cg = run.meta.get("cgroup")
    if cg:
        assert not _ours(f"--cgroup {cg} ")
        removed = reap_stale_cgroups()
        assert any(r.endswith("/" + cg) for r in removed)
        assert not any(Path(r).exists() for r in removed)


def test_sampler_killed_mid_run_fails_the_run(bins, tmp_path):
    """Only the sampler dies (SIGKILL) while the load runs: the run must fail, say so, mark
    the bundle incomplete with the reason, keep the samples written so far, and stop the
    app and the load generator (before, it ended with exit 0 and `complete: true`)."""
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "gmpanalysis.cli", "lab", "run", "--cpu-limit", "500m", "--gomaxprocs", "2",
        "--duration", "4", "--trace-seconds", "0", "--work-ms", "5", "--rate", "40", "-o", str(out),
    ]  # fmt: skip
    env = dict(os.environ, GMP_BIN_DIR=str(Path(bins["gmp-sampler"]).parent))
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    seen, pid = [], None
    try:
        for line in p.stderr:
            seen.append(line)
            if "sampler pid" in line:
                pid = int(line.split("sampler pid", 1)[1].split()[0])
            if "load:" in line:
                time.sleep(1.0)
                os.kill(pid, signal.SIGKILL)
                break
        rest = p.stderr.read()
        p.wait(60)
    finally:
        p.kill()
        p.wait(30)
    assert pid is not None, "".join(seen)
    assert p.returncode != 0
    assert f"gmp-sampler (pid {pid}) exited" in rest and "incomplete" in rest and "Traceback" not in rest, rest
    run = gmp.load_run(out)
    assert run.meta["complete"] is False and "gmp-sampler" in run.meta["error"]
    assert len(run.samples) > 500  # about a second at 997 µs, flushed as it went
    time.sleep(0.5)
    assert _ours(str(out)) == [], "processes left running"
