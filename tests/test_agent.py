"""gmp-agent on real cgroups with real quotas: it watches every cgroup cheaply, captures only
the throttled ones (within its rate limits), and a cgroup that goes away mid-capture leaves
a loadable bundle flagged incomplete. (On Kubernetes: tests/test_kube_agent.py.)"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

import pytest

import gmpanalysis as gmp
from gmpanalysis.periods import df_conservation

pytestmark = pytest.mark.lab

BUSY = ["sh", "-c", "(while :; do :; done) & while :; do :; done"]


def cgroup(name: str, quota_us: int, argv: list[str]):
    from gmpanalysis.lab import LabCgroup

    cg = LabCgroup(f"gmp-lab-agent-{os.getpid()}-{name}-{os.urandom(2).hex()}")
    cg.create(quota_us=quota_us, period_us=100_000)
    p = subprocess.Popen(argv, preexec_fn=cg.join_in_child, start_new_session=True)
    return cg, p


def cpu_stat(cg) -> dict[str, int]:
    """The cgroup's cpu.stat as the kernel has it now."""
    text = (Path(cg.dirs[0]) / "cpu.stat").read_text()
    return {k: int(v) for k, v in (line.split() for line in text.splitlines())}


def end(cg, p) -> None:
    if p.poll() is None:
        os.killpg(p.pid, 9)
        p.wait()
    cg.remove()


class Agent:
    """gmp-agent as a child process, its JSON events read as they come."""

    def __init__(self, bins: dict[str, Path], out: Path, watch: dict[str, str], *extra: str) -> None:
        argv = [str(bins["gmp-agent"]), "--sampler", str(bins["gmp-sampler"]), "--out", str(out)]
        for name, rel in watch.items():
            argv += ["--watch-cgroup", f"{name}={rel}"]
        argv += ["--watch-every", "200ms", "--trigger-periods", "10", "--trigger-share", "0.5", *extra]
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.q: queue.Queue[dict] = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.q.put(json.loads(line))

    def wait_for(self, kind: str, timeout: float, pred=lambda e: True, **match: str) -> dict:
        """The first event of ``kind`` with the ``match`` values for which ``pred`` holds."""

        def hit(e: dict) -> bool:
            return e["event"] == kind and all(e.get(k) == v for k, v in match.items()) and pred(e)

        deadline = time.monotonic() + timeout
        for e in self.seen:
            if hit(e):
                return e
        while time.monotonic() < deadline:
            try:
                e = self.q.get(timeout=0.2)
            except queue.Empty:
                if self.p.poll() is not None:
                    raise AssertionError(f"gmp-agent exited {self.p.returncode}: {self.p.stderr.read()}") from None
                continue
            self.seen.append(e)
            if hit(e):
                return e
        raise AssertionError(f"no {kind} {match} within {timeout} s; events: {self.seen}")

    def stop(self) -> list[dict]:
        self.p.terminate()
        self.p.wait(timeout=30)
        while not self.q.empty():
            self.seen.append(self.q.get())
        return self.seen


def test_agent_captures_only_throttled_cgroups_within_its_budget(bins, tmp_path):
    groups = {
        "busy1": cgroup("busy1", 30_000, BUSY),
        "busy2": cgroup("busy2", 30_000, BUSY),
        # light but real use: its periods run (nr_periods moves), none ends throttled
        "idle": cgroup(
            "idle", 50_000, ["sh", "-c", "while :; do i=0; while [ $i -lt 300 ]; do i=$((i+1)); done; sleep 0.02; done"]
        ),
    }
    try:
        agent = Agent(
            bins, tmp_path, {n: cg.rel for n, (cg, _) in groups.items()}, "--capture", "3s", "--max-per-hour", "1"
        )
        try:
            start = agent.wait_for("capture_start", 30)
            done = agent.wait_for("capture", 30)
            # the other busy group crossed the trigger too and was held back by the node budget
            other = "busy2" if start["pod"] == "busy1" else "busy1"
            skip = agent.wait_for("skip", 10, lambda e: "node budget" in e["reason"], pod=other)
            time.sleep(2)  # the idle group has had time to be judged many times over
            idle = cpu_stat(groups["idle"][0])
        finally:
            events = agent.stop()
    finally:
        for cg, p in groups.values():
            end(cg, p)
    assert start["pod"] in ("busy1", "busy2"), start
    assert "node budget" in skip["reason"], skip
    assert [e for e in events if e["event"] in ("trigger", "capture_start") and e["pod"] == "idle"] == []
    # the idle group was judged: its periods ran (the trigger's share needs 10 of them)
    assert idle["nr_periods"] > 20 and idle["nr_throttled"] == 0, idle
    assert len([e for e in events if e["event"] == "capture_start"]) == 1, events
    trig = start["levels"]["container"]
    # 30 ms of quota against two spinning threads: every period that ran ended throttled
    assert trig["fire"] and trig["throttled_share"] >= 0.9, trig
    assert done["complete"] is True, done
    run = gmp.load_run(done["bundle"])
    assert run.meta["complete"] is True and run.meta["quota_us"] == 30_000
    assert run.meta["levels"][0]["level"] == "container"
    per = gmp.df_periods(run)
    active = per[per["active"]]
    assert len(active) >= 20  # 3 s of 100 ms periods, less the first and last partial ones
    assert active["throttled"].mean() > 0.9
    # the capture's counters add up: the rows (with what falls before the first boundary of the
    # grid) hold the counter's whole increase over the capture
    s = run.samples
    cons = df_conservation(per)
    thr = cons[cons["counter"] == "nr_throttled"]
    assert (thr["rows"] + thr["groups"] + thr["outside"] == thr["delta"]).all()
    assert thr["delta"].sum() == s["nr_throttled"].iloc[-1] - s["nr_throttled"].iloc[0]


def test_a_cgroup_gone_mid_capture_leaves_a_flagged_loadable_bundle(bins, tmp_path):
    cg, p = cgroup("gone", 30_000, BUSY)
    try:
        agent = Agent(bins, tmp_path, {"gone": cg.rel}, "--capture", "20s")
        try:
            agent.wait_for("capture_start", 30)
            time.sleep(2)
            end(cg, p)  # the processes end and the cgroup is removed under the sampler
            done = agent.wait_for("capture", 30)
        finally:
            agent.stop()
    finally:
        if Path(cg.dirs[0]).exists():
            end(cg, p)
    assert done["complete"] is False and "went away" in done["error"], done
    run = gmp.load_run(done["bundle"])
    assert run.meta["complete"] is False and "went away" in run.meta["error"]
    span_s = (run.meta["mono_end_ns"] - run.meta["mono_start_ns"]) / 1e9
    assert 1.0 < span_s < 10, span_s  # what was read before the removal, no more
    assert len(gmp.df_periods(run)) > 5
