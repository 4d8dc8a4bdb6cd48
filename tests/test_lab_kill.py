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
import gmpanalysis.lab

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
    # the cgroups go too: the run's watcher removes them once the runner is gone
    cg = run.meta.get("cgroup")
    if cg:
        assert not _ours(f"--cgroup {cg} ")
        left = _lab_cgroup_dirs(cg)
        deadline = time.monotonic() + 15
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = _lab_cgroup_dirs(cg)
        assert left == [], "cgroups left behind"


def _lab_cgroup_dirs(name: str) -> list[Path]:
    """Directories named ``name`` (a lab run's cgroup) in any cgroup hierarchy."""
    root = Path("/sys/fs/cgroup")
    return [d for h in [root, *root.iterdir()] if h.is_dir() for d in h.rglob(name) if d.is_dir()]


def test_lab_clean_removes_cgroups_of_dead_runs(tmp_path):
    """When the watcher cannot run (killed with its runner), `lab clean` (and every next run)
    finds the cgroups named after a runner PID that is gone and removes them; a cgroup of a
    live runner stays."""
    dead = subprocess.Popen(["true"])
    dead.wait()  # a PID that no process has now
    stale = gmp.lab.LabCgroup(f"gmp-lab-{dead.pid}-stale", parent="")
    live = gmp.lab.LabCgroup(f"gmp-lab-{os.getpid()}-live", parent="")
    stale.create(quota_us=50_000)
    live.create(quota_us=50_000)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "gmpanalysis.cli", "lab", "clean"], capture_output=True, text=True, cwd=REPO
        )
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.split()) == sorted(stale.paths)
        assert not any(Path(p).exists() for p in stale.paths)
        assert all(Path(p).exists() for p in live.paths)
    finally:
        stale.remove()
        live.remove()


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
