"""The lab's cgroup set-up on fixture trees mirroring v1 and v2 mounts.

This machine binds the cpu controller to v1, so v2 cgroups with quotas cannot be made for
real here: the v2 path is exercised on a tree of ordinary files laid out as a v2 mount.
"""

from __future__ import annotations

import os

import pytest

from gmpanalysis.errors import LabError, UsageError
from gmpanalysis.lab import LabCgroup, LabConfig, parse_cpu_limit
from gmpanalysis.lab.run import preflight


def v2_root(tmp_path, controllers="cpuset cpu io memory pids", enabled=""):
    (tmp_path / "cgroup.controllers").write_text(controllers + "\n")
    (tmp_path / "cgroup.subtree_control").write_text(enabled + "\n")
    return tmp_path


def v1_root(tmp_path):
    for h in ("cpu", "cpuacct"):
        (tmp_path / h).mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    return tmp_path


def test_v2_create_enables_cpu_and_writes_cpu_max(tmp_path):
    root = v2_root(tmp_path)
    cg = LabCgroup("gmp-lab-x", root=root)
    assert cg.version == 2
    cg.create(quota_us=50_000, period_us=100_000, burst_us=10_000)
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"
    assert (root / "gmp-lab-x" / "cpu.max").read_text() == "50000 100000"
    assert (root / "gmp-lab-x" / "cpu.max.burst").read_text() == "10000"
    # the quota, not other load on the machine, bounds the group's CPU
    assert (root / "gmp-lab-x" / "cpu.weight").read_text() == "10000"
    assert cg.procs_files == [str(root / "gmp-lab-x" / "cgroup.procs")]
    assert cg.rel == "gmp-lab-x"
    lim = cg.limits()
    assert (lim.version, lim.quota_us, lim.period_us, lim.burst_us) == (2, 50_000, 100_000, 10_000)


def test_v2_no_limit_is_max(tmp_path):
    root = v2_root(tmp_path, enabled="cpu")
    cg = LabCgroup("gmp-lab-x", root=root)
    cg.create(quota_us=None)
    assert (root / "gmp-lab-x" / "cpu.max").read_text() == "max 100000"
    assert (root / "cgroup.subtree_control").read_text() == "cpu\n"  # already enabled: untouched


def test_v2_under_a_delegated_parent(tmp_path):
    root = v2_root(tmp_path)
    parent = root / "delegated"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpu memory\n")
    (parent / "cgroup.subtree_control").write_text("\n")
    cg = LabCgroup("gmp-lab-y", root=root, parent="delegated")
    cg.create(quota_us=25_000)
    assert cg.rel == "delegated/gmp-lab-y"
    assert (parent / "cgroup.subtree_control").read_text() == "+cpu"
    assert (parent / "gmp-lab-y" / "cpu.max").read_text() == "25000 100000"


def test_v2_without_cpu_controller_says_what_to_do(tmp_path):
    root = v2_root(tmp_path)
    parent = root / "p"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("memory pids\n")
    (parent / "cgroup.subtree_control").write_text("\n")
    with pytest.raises(LabError, match="cpu controller is not available.*--cgroup-parent"):
        LabCgroup("gmp-lab-z", root=root, parent="p").create(quota_us=50_000)


def test_v1_create_in_both_hierarchies(tmp_path):
    root = v1_root(tmp_path)
    cg = LabCgroup("gmp-lab-x", root=root)
    assert cg.version == 1
    cg.create(quota_us=50_000, period_us=100_000)
    assert (root / "cpu" / "gmp-lab-x" / "cpu.cfs_quota_us").read_text() == "50000"
    assert (root / "cpu" / "gmp-lab-x" / "cpu.cfs_period_us").read_text() == "100000"
    assert (root / "cpu" / "gmp-lab-x" / "cpu.shares").read_text() == "262144"
    assert (root / "cpuacct" / "gmp-lab-x").is_dir()
    assert len(cg.procs_files) == 2


def test_join_in_child_writes_own_pid(tmp_path):
    root = v1_root(tmp_path)
    cg = LabCgroup("gmp-lab-x", root=root)
    cg.create(quota_us=50_000)
    cg.join_in_child()
    for f in cg.procs_files:
        assert open(f).read() == str(os.getpid())


def test_existing_cgroup_is_not_reused(tmp_path):
    root = v2_root(tmp_path, enabled="cpu")
    (root / "gmp-lab-x").mkdir()
    with pytest.raises(LabError, match="exists already"):
        LabCgroup("gmp-lab-x", root=root).create(quota_us=1000)


def test_only_own_prefix(tmp_path):
    with pytest.raises(UsageError, match="gmp-lab-"):
        LabCgroup("kubepods", root=v2_root(tmp_path))


def test_no_cpu_controller_at_all(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    with pytest.raises(LabError, match="no cgroup cpu controller"):
        LabCgroup("gmp-lab-x", root=tmp_path)


def test_preflight_without_root(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(LabError, match="run it as root"):
        preflight(LabConfig(cgroup_root=str(tmp_path)))


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"workload": "gpu"}, "workload"),
        ({"mode": "sideways"}, "mode"),
        ({"duration_s": 0}, "bounded"),
        ({"duration_s": 2, "trace_start_s": 1, "trace_s": 4}, "does not fit"),
        ({"gomaxprocs": 0}, "gomaxprocs"),
        ({"period_us": 10}, "period_us"),
        ({"duration_s": 3, "resize_at_s": 10, "cpu_limit_after": 2.0, "trace_s": 0}, "no resize would happen"),
        ({"cpu_limit": 0.005}, r"cpu_limit 0.005 CPU is a quota of 500 µs .* below the kernel's least \(1000 µs"),
        ({"cpu_limit": 0.5, "period_us": 1000, "sample_interval_us": 499}, "least .*: 1 CPU"),
        ({"parent_cpu_limit": 0.005}, "parent_cpu_limit 0.005 CPU"),
        ({"resize_at_s": 2, "cpu_limit_after": 0.001}, "cpu_limit_after 0.001 CPU"),
        ({"cpu_limit": 0.5, "burst_us": 80_000}, "burst_us 80000 is above the quota of cpu_limit 0.5 CPU"),
        ({"resize_at_s": 2, "cpu_limit_after": 0.2, "burst_us": 40_000}, "above the quota of cpu_limit_after"),
        ({"period_us": 1000, "cpu_limit": 2}, r"more than half the 1000 µs period.*at most 499 µs"),
    ],
)
def test_preflight_refuses_bad_configs(kw, match):
    with pytest.raises(LabError, match=match):
        preflight(LabConfig(**kw))


def test_parse_cpu_limit():
    assert parse_cpu_limit("500m") == 0.5
    assert parse_cpu_limit("2") == 2.0
    assert parse_cpu_limit("none") is None
    with pytest.raises(LabError):
        parse_cpu_limit("half")


def test_default_rate_is_80_percent_of_capacity():
    assert LabConfig(cpu_limit=0.5, work_ms=25).effective_rate() == 16.0
    # what the group can serve: the least of its limit, its parent's and the machine's CPUs
    assert LabConfig(cpu_limit=None, parent_cpu_limit=0.3, work_ms=30).effective_rate() == 8.0
    assert LabConfig(cpu_limit=0.5, parent_cpu_limit=0.25, work_ms=25).effective_rate() == 8.0
    many = float(os.cpu_count() or 1) + 1
    assert LabConfig(cpu_limit=many, work_ms=25).effective_rate() == round(0.8 * (many - 1) * 40, 2)


@pytest.mark.parametrize(
    "parent",
    ["../..", "..", "a/../../b", "a/..", "/etc", "/", ".", "a/./b", "a//b", "a\0b", "a\nb", "a\rb", "x" * 4097],
    ids=lambda p: repr(p)[:16],
)
def test_cgroup_parent_outside_the_mount_is_refused_everywhere(tmp_path, parent):
    """--cgroup-parent is checked by the library, not only by the command line: the lab
    creates and removes cgroups below it as root."""
    from gmpanalysis.lab.cgroups import check_cgroup_parent

    root = v2_root(tmp_path)
    with pytest.raises(UsageError, match="cgroup parent"):
        check_cgroup_parent(parent)
    with pytest.raises(UsageError, match="cgroup parent"):
        LabCgroup("gmp-lab-x", root=root, parent=parent)
    with pytest.raises(UsageError, match="cgroup parent"):
        preflight(LabConfig(cgroup_root=str(root), cgroup_parent=parent))
    assert sorted(p.name for p in root.iterdir()) == ["cgroup.controllers", "cgroup.subtree_control"]


@pytest.mark.parametrize("parent", ["", "lab.slice", "user.slice/gmp", "a/b/", "gmp-lab"])
def test_cgroup_parent_inside_the_mount_is_kept(tmp_path, parent):
    from gmpanalysis.lab.cgroups import check_cgroup_parent

    assert check_cgroup_parent(parent) == parent.rstrip("/")
    cg = LabCgroup("gmp-lab-x", root=v2_root(tmp_path), parent=parent)
    assert cg.rel == f"{parent.rstrip('/')}/gmp-lab-x".lstrip("/")


def test_cgroup_parent_symlink_out_of_the_mount_is_refused(tmp_path):
    (tmp_path / "mnt").mkdir()
    root = v2_root(tmp_path / "mnt")
    (root / "out").symlink_to(tmp_path)
    with pytest.raises(UsageError, match="outside the cgroup mount"):
        LabCgroup("gmp-lab-x", root=root, parent="out")
