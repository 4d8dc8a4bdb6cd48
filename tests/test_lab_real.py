"""Short real lab runs: a real quota, the real demo app, sampler, load generator and trace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gmpanalysis as gmp
from gmpanalysis.lab import LabConfig, run_lab

pytestmark = pytest.mark.lab


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not running: look at its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_short_lab_run_records_real_throttling(bins, tmp_path):
    cfg = LabConfig(
        name="t",
        cpu_limit=0.5,
        gomaxprocs=2,
        workload="cpu",
        work_ms=20,
        rate=40,
        duration_s=3.0,
        trace_start_s=0.5,
        trace_s=1.5,
    )
    out = run_lab(cfg, tmp_path / "t", bins=bins)
    run = gmp.load_run(out)
    m = run.meta
    assert m["complete"] and run.notes == []
    assert (m["quota_us"], m["period_us"]) == (50_000, 100_000)
    assert m["gomaxprocs_env"] == "2" and m["gomaxprocs_effective"] == 2
    assert m["go_version"].startswith("go1.") and m["kernel"] and m["cgroup_version"] in (1, 2)
    s = run.samples
    d_thr = s["nr_throttled"].iloc[-1] - s["nr_throttled"].iloc[0]
    assert d_thr > 0, "offered load of 2x the quota must be throttled"
    assert s["throttled_us"].iloc[-1] > s["throttled_us"].iloc[0]
    # the quota caps usage: at most ~50 ms per active period (5 ms slices, enforced at ticks)
    d_use = s["usage_us"].iloc[-1] - s["usage_us"].iloc[0]
    d_per = s["nr_periods"].iloc[-1] - s["nr_periods"].iloc[0]
    assert d_use / d_per < 60_000
    assert np.median(np.diff(s["t_ns"])) == pytest.approx(997_000, abs=20_000)
    assert m["sampler"]["rows"] >= len(s)
    assert run.trace_path is not None and run.trace_path.read_bytes()[:5] == b"go 1."
    # the trace window lies inside the sampled span, on the same clock
    assert s["t_ns"].iloc[0] <= run.trace.meta["first_ns"] and run.trace.meta["last_ns"] <= s["t_ns"].iloc[-1]
    assert m["trace"]["http_status"] == 200
    r = run.requests
    assert len(r) > 20 and (r["status"] == 200).all()
    assert (r["start_ns"] >= r["sched_ns"] - 1_000_000).all()  # sent at (or after) its scheduled time
    # each request's own CPU as the demo app reported it: the 20 ms asked for (calibrated
    # on the thread CPU clock, which a throttled or waiting thread does not advance) and,
    # all together, less than the group's CPU over the requests' span
    cpu = r["cpu_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    assert not np.isnan(cpu).any() and 15e6 < np.median(cpu) < 30e6, np.median(cpu)
    inside = s[(s["t_ns"] >= r["start_ns"].min()) & (s["t_ns"] <= r["end_ns"].max())]["usage_us"]
    assert cpu.sum() / 1000 < inside.iloc[-1] - inside.iloc[0] + 2 * 50_000  # ± a period at each end
    # everything the run started is gone, and so is its cgroup
    assert not alive(m["app_pid"])
    assert not any(Path(p).exists() for p in m["cgroup_paths"])


def test_a_limit_written_onto_a_group_that_had_none(bins, tmp_path):
    """A group without a limit gets one in place mid-run (``systemctl set-property``, an
    operator's echo into cpu.max): the kernel starts its period timer then. The periods
    from then on are tabled, those before carry no quota and count no period, and the
    counters' deltas are conserved."""
    cfg = LabConfig(
        name="t",
        cpu_limit=None,
        cpu_limit_after=0.5,
        resize_at_s=2.0,
        gomaxprocs=2,
        workload="cpu",
        work_ms=20,
        rate=40,
        duration_s=5.0,
        trace_s=0.0,
    )
    run = gmp.load_run(run_lab(cfg, tmp_path / "t", bins=bins))
    assert run.meta["quota_us"] is None
    assert run.limits["quota_us"].isna().iloc[0] and run.limits["quota_us"].iloc[-1] == 50_000
    per = gmp.df_periods(run)
    q = per["quota_us"]
    before, after = per[q.isna()], per[q.notna()]
    assert (q.dropna() == 50_000).all() and len(after) >= 20, per[["period", "quota_us"]]
    # no timer before the limit: no period counted, nothing throttled (the period the limit
    # was written in may be: the write fills the pool with a whole quota at once)
    changed = before["reason"].fillna("").str.contains("limit changed")
    assert 1 <= changed.sum() <= 2, before[["period", "reason"]]  # a read may straddle a boundary
    assert (before[~changed]["nr_periods"] == 0).all() and not before[~changed]["throttled"].fillna(False).any()
    # (the timer stops again once the group idles a whole period: after the load, say)
    assert after["nr_periods"].isin([0, 1]).all() and after["nr_periods"].sum() >= 20
    assert int(after["throttled"].sum()) >= 10
    assert after["exhausted_at_us"].dropna().between(0, 100_000).all()
    for r in gmp.df_conservation(per).itertuples(index=False):
        assert r.rows + r.groups + r.outside == pytest.approx(r.delta, abs=1e-6 * max(1.0, abs(r.delta))), r
    lv = gmp.df_levels(run).iloc[0]
    assert lv["quota_changes"] == 1 and lv["quota_last_us"] == 50_000 and lv["periods"] == len(per)
    assert gmp.period_summary(per)["throttled_pct_active"] > 0


def test_a_pod_with_a_limit_of_its_own_keeps_it_when_the_container_is_resized(bins, tmp_path):
    """Pod-level resources: the pod's limit is its own, not its container's sum, so an
    in-place resize of the container leaves it (the lab gave the pod the container's new
    quota, loosening the limit that bound)."""
    cfg = LabConfig(
        name="t",
        cpu_limit=0.5,
        parent_cpu_limit=0.8,
        cpu_limit_after=0.3,
        resize_at_s=1.0,
        gomaxprocs=2,
        workload="cpu",
        work_ms=20,
        duration_s=2.5,
        trace_s=0.0,
    )
    run = gmp.load_run(run_lab(cfg, tmp_path / "t", bins=bins))
    lim = run.limits
    pod, ctr = lim[lim["cgroup"] == "pod"], lim[lim["cgroup"] == "container"]
    assert pod["quota_us"].tolist() == [80_000]
    assert ctr["quota_us"].tolist() == [50_000, 30_000]
    assert [w["level"] for w in run.meta["resizes"]] == ["container"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to leave one out")
def test_a_process_on_fewer_cpus_than_the_node(bins, tmp_path):
    """The demo app under taskset's affinity (as under a cpuset: the static CPU manager's
    exclusive CPUs) runs on 1 of the node's CPUs, with GOMAXPROCS=2 in its environment: the
    bundle says so, the Go runtime's own rule would give 1, no more than 1 CPU's run queue
    stands throttled, and the replay of the run's own settings spends the quota on 1 CPU, as
    the run did (on 2 it would run out in about 25 ms)."""
    cfg = LabConfig(
        name="t", cpu_limit=0.5, gomaxprocs=2, workload="cpu", work_ms=20, rate=40, duration_s=4.0, trace_s=0.0
    )
    keep = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(keep)})  # inherited by every process the lab starts
    try:
        run = gmp.load_run(run_lab(cfg, tmp_path / "t", bins=bins))
    finally:
        os.sched_setaffinity(0, keep)
    m = run.meta
    assert m["cpus_allowed"] == 1 and m["ncpu"] == os.cpu_count()
    # the sampler finds the same in the cgroup (what a kube collection records)
    assert m["sampler"]["cgroups"][0]["cpus"] == 1
    # Go >= 1.25 unset: min(NumCPU, max(2, ceil(limit))), NumCPU its affinity; here pinned
    assert m["gomaxprocs_effective"] == 2
    g = gmp.df_gomaxprocs(run)
    assert (g["go1.25 default"] == 1).all() and (g["NumCPU"] == 1).all()
    per = gmp.df_periods(run)
    thr = per[per["throttled"].fillna(False)]
    assert len(thr) >= 10 and (thr["cpus_throttled"].dropna() <= 1.0).all()
    w = gmp.what_if(run)
    wt = w[w["throttled"].fillna(False)]
    assert (wt["cpus_throttled"].dropna() <= 1.0).all()
    # one CPU spends 50 ms of quota in no less than 50 ms
    assert wt["exhausted_at_us"].median() >= 45_000 and thr["exhausted_at_us"].median() >= 45_000
    advice = gmp.advise(run, objective="throttle", bursts=(0.0,))
    assert (advice["limit_cpu"] <= 1).all() and "ran on 1 of the node's 2 CPUs" in advice.attrs["recommendation"]


def test_ctrl_c_cleans_up(bins, tmp_path):
    """SIGINT mid-run: processes ended by PID, cgroup removed, what was collected kept."""
    out = tmp_path / "b"
    code = (
        # a shell starts background jobs with SIGINT ignored, and Python keeps an inherited
        # SIG_IGN: give the child the Ctrl-C a terminal user has, however the tests were launched
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import sys; from gmpanalysis.lab import LabConfig, run_lab\n"
        "from gmpanalysis.lab import ensure_binaries\n"
        f"run_lab(LabConfig(duration_s=20, trace_s=0, rate=10), {str(out)!r}, bins=ensure_binaries(),"
        " progress=lambda m: print(m, flush=True))\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait until the load has started, then interrupt
    deadline = time.monotonic() + 60
    for line in p.stdout:
        if line.startswith("load:") or time.monotonic() > deadline:
            break
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] is False
    assert not alive(meta["app_pid"])
    assert not any(Path(c).exists() for c in meta["cgroup_paths"])
    run = gmp.load_run(out)
    assert len(run.samples) > 500 and any("did not finish" in n for n in run.notes)


def test_grid_from_1ms_sampling_is_honest(bins, busy_cgroup, tmp_path):
    """Two samplers on the same throttled cgroup at once: 997 µs (slides across the period
    boundary) and exactly 1 ms (divides the period, so every bracket sits near the same
    offset). Honest means the two fits agree within the uncertainty each claims."""
    cg, _ = busy_cgroup
    procs, files = [], {}
    for iv in ("997us", "1ms"):
        files[iv] = tmp_path / f"{iv}.csv"
        procs.append(
            subprocess.Popen(
                [
                    str(bins["gmp-sampler"]),
                    "--cgroup",
                    cg.rel,
                    "--interval",
                    iv,
                    "--duration",
                    "7s",
                    "--fifo",
                    "--out",
                    str(files[iv]),
                ],
                stderr=subprocess.DEVNULL,
            )
        )
    for p in procs:
        assert p.wait(60) == 0
    fine = gmp.fit_period_grid(gmp.read_cpu_stat(files["997us"]), 100_000_000)
    coarse = gmp.fit_period_grid(gmp.read_cpu_stat(files["1ms"]), 100_000_000)
    assert fine.main.boundaries_used >= 60 and coarse.main.boundaries_used >= 60
    got = (fine.phase_ns, fine.uncertainty_ns, coarse.phase_ns, coarse.uncertainty_ns)
    # ±(half the bracket + the timer's 150 µs expiry allowance): 78-111 µs on the shipped runs
    assert fine.uncertainty_ns <= 200_000, got
    d = abs((coarse.phase_ns - fine.phase_ns + 50_000_000) % 100_000_000 - 50_000_000)
    assert d <= coarse.uncertainty_ns + fine.uncertainty_ns, got


def test_go124_module_line_ignores_the_limit(bins, tmp_path):
    """The demo app built from a module whose go line says 1.24: the Go 1.26 toolchain keeps
    1.24's defaults (DefaultGODEBUG containermaxprocs=0), so GOMAXPROCS is the CPU count, not
    the limit's; df_gomaxprocs names that rule from the binary's build facts."""
    cfg = LabConfig(
        name="go124",
        cpu_limit=0.5,
        gomaxprocs=None,
        app_build="go124",
        work_ms=20,
        rate=20,
        duration_s=2.0,
        trace_start_s=0.3,
        trace_s=1.2,
    )
    run = gmp.load_run(run_lab(cfg, tmp_path / "g", bins=bins))
    m = run.meta
    assert "containermaxprocs=0" in m["default_godebug"].split(",")
    assert m["gomaxprocs_env"] is None and m["gomaxprocs_effective"] == m["ncpu"] == os.cpu_count()
    g = gmp.df_gomaxprocs(run)
    assert g.attrs["rule"] == "NumCPU"


def test_collector_binaries_are_static_and_carry_no_build_path(bins):
    """The collectors are built static (CGO off) with -trimpath: no path of this checkout or
    of the build cache inside, so the same sources give the same bytes on any machine."""
    repo = str(Path(__file__).resolve().parents[1]).encode()
    for name, path in bins.items():
        data = Path(path).read_bytes()
        assert repo not in data, f"{name}: holds the checkout's path {repo!r} (built without -trimpath?)"
        assert b"/lib64/ld-linux" not in data and b"/lib/ld-linux" not in data, f"{name}: dynamically linked"
