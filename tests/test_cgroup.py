"""cgroup interface files, v1 and v2, on fixture trees that mirror /sys/fs/cgroup.

One directory per case under tests/data/cgroup/v{1,2}/, named for the case; the expected
values follow from the file contents and the kernel's documented units (v1 ns, v2 µs).
"""

from __future__ import annotations

import math

import pytest
from conftest import DATA

from gmpanalysis.cgroup import (
    CpuLimits,
    detect_version,
    normalise_cpu_stat,
    parse_cpu_max,
    parse_keyed,
    read_cpu_limits_v1,
    read_cpu_limits_v2,
    read_cpu_stat_now,
)
from gmpanalysis.errors import CgroupFormatError

V1 = DATA / "cgroup" / "v1"
V2 = DATA / "cgroup" / "v2"

LIMITS = [
    (V1 / "set", CpuLimits(1, 100_000, 50_000, 0)),
    (V1 / "unset", CpuLimits(1, 100_000, None, 0)),  # -1 = no limit
    (V1 / "burst", CpuLimits(1, 100_000, 150_000, 20_000)),
    (V1 / "old-kernel-no-burst", CpuLimits(1, 100_000, 25_000, 0)),  # no cpu.cfs_burst_us before 5.14
    (V1 / "missing-files", CpuLimits(1, 100_000, None, 0)),  # missing file = no limit
    (V2 / "set", CpuLimits(2, 100_000, 50_000, 0)),
    (V2 / "unset", CpuLimits(2, 100_000, None, 0)),  # "max" = no limit
    (V2 / "burst", CpuLimits(2, 100_000, 150_000, 20_000)),
    (V2 / "only-max", CpuLimits(2, 100_000, None, 0)),  # "max" alone: period keeps its default
    (V2 / "unknown-keys", CpuLimits(2, 50_000, 20_000, 0)),
    (V2 / "missing-files", CpuLimits(2, 100_000, None, 0)),
]


@pytest.mark.parametrize("case,want", LIMITS, ids=[f"{p.parent.name}-{p.name}" for p, _ in LIMITS])
def test_limits(case, want):
    read = read_cpu_limits_v1 if want.version == 1 else read_cpu_limits_v2
    assert read(case) == want


def test_limit_in_cpus():
    assert read_cpu_limits_v2(V2 / "set").cpus == 0.5
    assert read_cpu_limits_v1(V1 / "unset").cpus is None


BAD = [
    (V1 / "invalid-quota", read_cpu_limits_v1, "cpu.cfs_quota_us line 1", "'fifty'"),
    (V1 / "invalid-period", read_cpu_limits_v1, "cpu.cfs_period_us line 1", "positive"),
    (V2 / "invalid-max", read_cpu_limits_v2, "cpu.max line 1", "'50000 100000 extra'"),
]


@pytest.mark.parametrize("case,read,where,quote", BAD, ids=[f"{p.parent.name}-{p.name}" for p, *_ in BAD])
def test_invalid_limit_files_quote_the_line(case, read, where, quote):
    with pytest.raises(CgroupFormatError) as e:
        read(case)
    assert where in str(e.value) and quote in str(e.value)
    assert str(case) in str(e.value)


def _stat(case, version):
    raw = parse_keyed((case / "cpu.stat").read_text(), source=str(case / "cpu.stat"))
    usage = int((case / "cpuacct.usage").read_text()) if version == 1 else None
    return normalise_cpu_stat(raw, version, cpuacct_usage_ns=usage)


def test_v1_stat_ns_become_us():
    s = _stat(V1 / "set", 1)
    assert s["usage_us"] == pytest.approx(3012345.678)
    assert s["throttled_us"] == pytest.approx(2636400.123)
    assert (s["nr_periods"], s["nr_throttled"]) == (61, 52)


def test_v2_stat_is_already_us_and_keeps_unknown_keys():
    s = _stat(V2 / "unknown-keys", 2)
    assert s["usage_us"] == 10 and s["throttled_us"] == 30 and s["user_us"] == 6
    assert s["nr_throttled_local"] == 7 and s["future_key_usec"] == 99


def test_v1_and_v2_of_the_same_numbers_agree():
    a, b = _stat(V1 / "set", 1), _stat(V2 / "set", 2)
    for k in ("nr_periods", "nr_throttled"):
        assert a[k] == b[k]
    # v2 rounds to whole µs
    assert a["usage_us"] == pytest.approx(b["usage_us"], abs=1)
    assert a["throttled_us"] == pytest.approx(b["throttled_us"], abs=1)


def test_burst_stats():
    assert _stat(V1 / "burst", 1)["burst_us"] == 4500
    assert _stat(V2 / "burst", 2)["burst_us"] == 4500


def test_old_kernel_without_burst_keys_reads_zero():
    s = _stat(V1 / "old-kernel-no-burst", 1)
    assert s["nr_bursts"] == 0 and s["burst_us"] == 0


def test_no_bandwidth_keys_without_a_limit():
    s = _stat(V2 / "only-max", 2)
    assert s["nr_periods"] == 0 and s["usage_us"] == 5


@pytest.mark.parametrize("case", [V1 / "truncated-stat", V2 / "truncated-stat"], ids=["v1", "v2"])
def test_truncated_stat_line_is_an_error_quoting_it(case):
    with pytest.raises(CgroupFormatError) as e:
        parse_keyed((case / "cpu.stat").read_text(), source=str(case / "cpu.stat"))
    msg = str(e.value)
    assert "line 3" in msg or "line 2" in msg
    assert "throttled_ti" in msg or "user_u" in msg


def test_v1_without_cpuacct_usage_is_nan_not_zero():
    s = normalise_cpu_stat({"nr_periods": 1}, 1)
    assert math.isnan(s["usage_us"])


def test_cpu_max_forms():
    assert parse_cpu_max("max 100000") == (None, 100_000)
    assert parse_cpu_max("50000 100000\n") == (50_000, 100_000)
    with pytest.raises(CgroupFormatError):
        parse_cpu_max("50000 0")
    with pytest.raises(CgroupFormatError):
        parse_cpu_max("-5 100000")


def _tree(tmp_path, version):
    """A minimal mount root: v1 with separate cpu/ and cpuacct/ hierarchies, or v2."""
    if version == 1:
        (tmp_path / "cpu" / "g").mkdir(parents=True)
        (tmp_path / "cpuacct" / "g").mkdir(parents=True)
        for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.stat"):
            (tmp_path / "cpu" / f).write_text((V1 / "set" / f).read_text())
            (tmp_path / "cpu" / "g" / f).write_text((V1 / "set" / f).read_text())
        (tmp_path / "cpuacct" / "g" / "cpuacct.usage").write_text((V1 / "set" / "cpuacct.usage").read_text())
    else:
        (tmp_path / "g").mkdir()
        (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        for f in ("cpu.max", "cpu.stat"):
            (tmp_path / "g" / f).write_text((V2 / "set" / f).read_text())
    return tmp_path


@pytest.mark.parametrize("version", [1, 2])
def test_detect_and_read_now_on_trees(tmp_path, version):
    root = _tree(tmp_path, version)
    assert detect_version(root) == version
    s = read_cpu_stat_now(root, "g")
    assert s["nr_throttled"] == 52
    assert s["usage_us"] == pytest.approx(3012345.678 if version == 1 else 3012345)


def test_hybrid_host_prefers_v1(tmp_path):
    # an empty cgroup2 mount beside a v1 cpu hierarchy, like this machine's /sys/fs/cgroup/unified
    root = _tree(tmp_path, 1)
    (root / "cgroup.controllers").write_text("\n")
    assert detect_version(root) == 1


def test_no_cpu_controller(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    assert detect_version(tmp_path) is None
