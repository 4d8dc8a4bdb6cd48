"""gmp-sampler, the real binary: on fixture trees (v1 and v2 layouts, ordinary files that
pread like the kernel's) and, where root and a cpu controller exist, on real cgroups."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import warnings

import pytest
from conftest import DATA

import gmpanalysis as gmp
from gmpanalysis.bundle import to_meta
from gmpanalysis.schema import SCHEMA


def tree(tmp_path, version):
    case = DATA / "cgroup" / f"v{version}" / "set"
    if version == 1:
        for h in ("cpu", "cpuacct"):
            (tmp_path / h / "g").mkdir(parents=True)
        for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.stat"):
            (tmp_path / "cpu" / "g" / f).write_text((case / f).read_text())
        (tmp_path / "cpuacct" / "g" / "cpuacct.usage").write_text((case / "cpuacct.usage").read_text())
    else:
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
        (tmp_path / "g").mkdir()
        for f in ("cpu.max", "cpu.stat"):
            (tmp_path / "g" / f).write_text((case / f).read_text())
    return tmp_path


def sample(bins, root, *cgroups, duration="60ms", extra=()):
    out = root / "out.csv"
    r = subprocess.run(
        [
            str(bins["gmp-sampler"]),
            "--root",
            str(root),
            *sum((["--cgroup", c] for c in cgroups), []),
            "--interval",
            "5ms",
            "--duration",
            duration,
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return r, out


@pytest.mark.parametrize("version", [1, 2])
def test_units_are_normalised_to_us(bins, tmp_path, version):
    r, out = sample(bins, tree(tmp_path, version), "g")
    assert r.returncode == 0, r.stderr
    df = gmp.read_cpu_stat(out)
    assert len(df) >= 5
    # the fixture's v1 ns values and v2 µs values describe the same counters
    want_usage = 3012345.678 if version == 1 else 3012345
    want_thr = 2636400.123 if version == 1 else 2636400
    assert df["usage_us"].iloc[0] == pytest.approx(want_usage)
    assert df["throttled_us"].iloc[0] == pytest.approx(want_thr)
    assert (df["nr_periods"] == 61).all() and (df["nr_throttled"] == 52).all()
    assert "rows" in r.stderr and "lateness" in r.stderr


def test_several_cgroups_add_a_column(bins, tmp_path):
    root = tree(tmp_path, 2)
    (root / "h").mkdir()
    (root / "h" / "cpu.stat").write_text("usage_usec 1\nnr_periods 2\nnr_throttled 0\nthrottled_usec 0\n")
    r, out = sample(bins, root, "pod=g", "ctr=h")
    assert r.returncode == 0, r.stderr
    df = gmp.read_cpu_stat(out)
    assert set(df["cgroup"]) == {"pod", "ctr"}
    assert (df[df.cgroup == "ctr"]["usage_us"] == 1).all()


def test_appends_without_a_second_header(bins, tmp_path):
    root = tree(tmp_path, 2)
    sample(bins, root, "g")
    r, out = sample(bins, root, "g")
    assert r.returncode == 0
    assert out.read_text().count("t_ns") == 1


def test_a_restart_after_a_cut_line_appends_whole_rows(bins, tmp_path):
    """A sampler killed mid-row (a full disk, a node that lost power) and started again on the
    same files: the cut line of each file (samples, limits, /proc/stat rows) is cut off before
    the new rows, so the file reads whole, without a row glued onto a cut one."""
    root = tree(tmp_path, 2)
    extra = ("--limits-out", str(tmp_path / "limits.csv"), "--host-stat", str(tmp_path / "host_stat.csv"))
    r, out = sample(bins, root, "g", extra=extra)
    assert r.returncode == 0, r.stderr
    files = [out, tmp_path / "limits.csv", tmp_path / "host_stat.csv"]
    rows = {}
    for f in files:
        b = f.read_bytes()
        f.write_bytes(b[:-7])  # cut inside the last row
        rows[f] = b.count(b"\n") - 2  # whole rows left, the header aside
    r, _ = sample(bins, root, "g", extra=extra)
    assert r.returncode == 0, r.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error", gmp.GmpWarning)  # no line dropped, none glued
        df = gmp.read_cpu_stat(out)
        lim = gmp.read_limits(tmp_path / "limits.csv")
        hs = gmp.read_host_stat(tmp_path / "host_stat.csv")
    for f, d in zip(files, (df, lim, hs), strict=True):
        assert len(d) > rows[f] and f.read_bytes().count(b"\n") == len(d) + 1, f
    assert df["t_ns"].is_monotonic_increasing


def test_files_a_crash_left_as_zeros_are_begun_again(bins, tmp_path):
    """A node that crashed before the sampler's first rows reached the disk leaves its files
    the size they had, full of zero bytes: started again on them, the sampler writes each
    anew (header and rows), and they read whole."""
    root = tree(tmp_path, 2)
    files = [root / "out.csv", tmp_path / "limits.csv", tmp_path / "host_stat.csv"]
    for f in files:
        f.write_bytes(bytes(300))
    r, out = sample(bins, root, "g", extra=("--limits-out", str(files[1]), "--host-stat", str(files[2])))
    assert r.returncode == 0, r.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error", gmp.GmpWarning)
        assert len(gmp.read_cpu_stat(out)) >= 5
        assert len(gmp.read_limits(files[1])) >= 1 and len(gmp.read_host_stat(files[2])) >= 1
    assert all(b"\x00" not in f.read_bytes() for f in files)


@pytest.mark.parametrize("which", ["limits", "host_stat"])
def test_a_file_another_program_began_is_refused_and_kept(bins, tmp_path, which):
    """A --limits-out or --host-stat file whose first line is not the sampler's header (a
    file of another program, a path given twice) is refused before a row is written: rows
    of the sampler's shape after it would make a file no reader takes, and its own content
    stays as it was, cut line or not."""
    root = tree(tmp_path, 2)
    for before in (b"a,b\n1,2\n", b"a,b\n1,2\n3,", b"a,b"):
        f = tmp_path / f"{which}.csv"
        f.write_bytes(before)
        flag = "--limits-out" if which == "limits" else "--host-stat"
        r, _ = sample(bins, root, "g", extra=(flag, str(f)))
        assert r.returncode != 0 and "not a header this collector writes" in r.stderr, r.stderr
        assert f.read_bytes() == before


def test_unknown_cgroup_is_a_clear_error(bins, tmp_path):
    r, _ = sample(bins, tree(tmp_path, 2), "nope")
    assert r.returncode == 2
    assert 'cgroup "nope": no cpu.stat under' in r.stderr


@pytest.mark.parametrize("summary", ["stderr", "file"])
def test_bad_cgroup_file_reaches_python_as_a_gmp_error(bins, tmp_path, summary):
    """A limit file the kernel would not write stops the sampler before its first row (exit
    2) and its error comes out as JSON facts, which gmpanalysis raises as a
    CgroupFormatError naming the file and the line."""
    import json

    from gmpanalysis.cgroup import sampler_error
    from gmpanalysis.errors import CgroupFormatError

    root = tree(tmp_path, 2)
    (root / "g" / "cpu.max").write_text("max 1000001\n")
    dest = "stderr" if summary == "stderr" else str(tmp_path / "s.json")
    r, _ = sample(bins, root, "g", extra=("--limits-out", str(tmp_path / "l.csv"), "--summary", dest))
    assert r.returncode == 2, r.stderr
    if summary == "stderr":
        facts = [json.loads(x)["error"] for x in r.stderr.splitlines() if x.startswith('{"error"')]
        assert len(facts) == 1
        facts = facts[0]
    else:
        doc = json.loads((tmp_path / "s.json").read_text())
        assert doc["stop_reason"] == "not started"
        facts = doc["error"]
    err = sampler_error(facts)
    assert isinstance(err, CgroupFormatError)
    assert f"{root / 'g' / 'cpu.max'} line 1: period must be 1000..1000000" in str(err)
    assert 'got "max 1000001"' in str(err)


def test_summary_json(bins, tmp_path):
    import json

    r, _ = sample(bins, tree(tmp_path, 2), "g", extra=("--summary", str(tmp_path / "s.json")))
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["interval_ns"] == 5_000_000 and s["rows"] >= 5 and s["policy"] == "SCHED_OTHER"
    assert s["lateness_p99_ns"] >= s["lateness_p50_ns"] >= 0
    # the bandwidth settings as the files hold them (tests/data/cgroup/v2/set/cpu.max)
    quota, period = (DATA / "cgroup" / "v2" / "set" / "cpu.max").read_text().split()
    assert s["cgroups"][0]["limits"] == {"period_us": int(period), "quota_us": int(quota), "burst_us": 0}


@pytest.mark.lab
def test_refuses_to_sample_its_own_cgroup(bins, busy_cgroup):
    cg, _ = busy_cgroup
    r = subprocess.run(
        [str(bins["gmp-sampler"]), "--cgroup", cg.rel, "--duration", "50ms"],
        preexec_fn=cg.join_in_child,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "runs inside cgroup" in r.stderr and "throttled with its target" in r.stderr


@pytest.mark.lab
def test_sigkill_mid_run_leaves_a_bundle_that_loads(bins, busy_cgroup, tmp_path):
    """The sampler appends rows as it goes: SIGKILL at any moment loses at most the last
    flush interval, and the bundle (meta written at start, complete=false) loads."""
    cg, _ = busy_cgroup
    d = tmp_path / "bundle"
    d.mkdir()
    to_meta(
        d / "meta.json",
        {
            "schema": SCHEMA,
            "source": "lab",
            "name": "killed",
            "complete": False,
            "period_us": 100_000,
            "quota_us": 50_000,
            "cgroup_version": cg.version,
            "mono_start_ns": time.monotonic_ns(),
            "mono_end_ns": None,
        },
    )
    p = subprocess.Popen(
        [str(bins["gmp-sampler"]), "--cgroup", cg.rel, "--fifo", "--out", str(d / "cpu_stat.csv")],
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    run = gmp.load_run(d)
    assert any("did not finish" in n for n in run.notes)
    s = run.samples
    assert len(s) > 1000  # ~1.5 s at 997 µs, less at most 10 ms of unflushed rows
    # the cgroup was really throttled while the sampler ran
    assert s["nr_throttled"].iloc[-1] > s["nr_throttled"].iloc[0]


@pytest.mark.lab
def test_stops_cleanly_when_the_cgroup_goes(bins, tmp_path):
    """A removed cgroup (a restarted container) ends the sampler with a readable file."""
    from gmpanalysis.lab import LabCgroup

    cg = LabCgroup(f"gmp-lab-test-gone-{os.getpid()}")
    cg.create(quota_us=50_000)
    out = tmp_path / "s.csv"
    p = subprocess.Popen(
        [str(bins["gmp-sampler"]), "--cgroup", cg.rel, "--out", str(out)], stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(0.5)
        cg.remove()
        _, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
        cg.remove()
    assert p.returncode == 3
    assert "cgroup gone" in err
    assert len(gmp.read_cpu_stat(out)) > 100
