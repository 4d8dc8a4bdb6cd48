"""The collector's reading of gmp-sampler's stderr: JSON lines are facts (host rows, the
closing summary), anything else is prose for the log. No cluster needed."""

from __future__ import annotations

import json

import gmpanalysis as gmp
from gmpanalysis.bundle import HOST_STAT_COLUMNS, read_host_stat
from gmpanalysis.kube.collect import SamplerStderr, record_summary


def _host(t: int, steal: int) -> str:
    row = {c: 0 for c in HOST_STAT_COLUMNS}
    row.update(t_ns=t, read_ns=20_000, steal_us=steal, cpu_total_us=10 * steal, ncpu=2)
    return json.dumps({"host_stat": row}) + "\n"


def test_json_lines_split_across_chunks_become_host_rows_and_summary(tmp_path):
    logged: list[str] = []
    err = SamplerStderr(tmp_path / "host_stat.csv", logged.append)
    text = (
        "gmp-sampler: sampling c at kubepods/x (cgroup v1)\n"
        + json.dumps({"start": {"policy": "SCHED_OTHER", "mono_start_ns": 990}})
        + "\n"
        + _host(1_000, 10)
        + _host(1_000_001_000, 20)
        + json.dumps(
            {"summary": {"policy": "SCHED_OTHER", "mono_start_ns": 990, "cgroups": [{"path": "p", "version": 1}]}}
        )
        + "\n"
    )
    first = text.index("}}\n", text.index("host_stat")) + 3
    for i in range(0, first, 7):  # the exec stream hands over arbitrary pieces
        err.feed(text[i : min(i + 7, first)])
    # a row is on disk as soon as its line is complete
    assert len(read_host_stat(tmp_path / "host_stat.csv")) == 1
    for i in range(first, len(text), 5):
        err.feed(text[i : i + 5])
    err.close()
    hs = read_host_stat(tmp_path / "host_stat.csv")
    assert hs["t_ns"].tolist() == [1_000, 1_000_001_000] and hs["steal_us"].tolist() == [10, 20]
    assert logged == ["gmp-sampler: sampling c at kubepods/x (cgroup v1)"]
    assert err.summary["mono_start_ns"] == 990 and err.start["mono_start_ns"] == 990

    meta = {"cgroup_version": None, "cgroup_paths": [], "sampler": {"interval_ns": 997_000}}
    record_summary(meta, err.summary)
    assert meta["cgroup_paths"] == ["p"] and meta["cgroup_version"] == 1
    assert meta["sampler"]["policy"] == "SCHED_OTHER" and meta["sampler"]["mono_start_ns"] == 990
    record_summary(meta, {**err.summary, "mono_start_ns": 5_000})  # a second exec after a restart
    assert meta["sampler"]["mono_start_ns"] == 990 and len(meta["sampler"]["execs"]) == 2


def test_a_cut_json_line_is_logged_not_lost_silently(tmp_path):
    logged: list[str] = []
    err = SamplerStderr(tmp_path / "host_stat.csv", logged.append)
    err.feed('{"host_stat":{"t_ns":1')
    err.close()
    assert logged == ['{"host_stat":{"t_ns":1'] and not (tmp_path / "host_stat.csv").exists()
    assert isinstance(gmp.BundleError("x"), gmp.GmpError)


def test_the_kernels_limits_replace_the_pod_specs():
    """The sampler reports the bandwidth settings of the cgroup it reads; the bundle records
    those (a kubelet may run another CFS period; a limit may have changed in place)."""
    meta = {"cgroup_version": None, "cgroup_paths": [], "sampler": {}, "period_us": 100_000, "quota_us": 50_000}
    lim = {"period_us": 50_000, "quota_us": 30_000, "burst_us": 0}
    record_summary(meta, {"cgroups": [{"path": "p", "version": 2, "limits": lim}, {"path": "pod", "version": 2}]})
    assert (meta["period_us"], meta["quota_us"], meta["burst_us"]) == (50_000, 30_000, 0)
    # a restart's exec (a new container) keeps its own limits in execs; the bundle's are the first's
    record_summary(meta, {"cgroups": [{"path": "p", "version": 2, "limits": {**lim, "quota_us": None}}]})
    assert meta["quota_us"] == 30_000
    assert meta["sampler"]["execs"][1]["cgroups"][0]["limits"]["quota_us"] is None


def test_the_nodes_kernel_and_cpus_come_from_the_sampler():
    meta = {"cgroup_version": None, "cgroup_paths": [], "sampler": {}, "kernel": None, "ncpu": None}
    record_summary(meta, {"cgroups": [], "kernel": "6.18.44", "ncpu": 2})
    assert (meta["kernel"], meta["ncpu"]) == ("6.18.44", 2)


def test_error_line_is_kept_as_facts(tmp_path):
    """A sampler that could not start says why as prose and as one {"error": ...} line;
    the facts are kept (collect raises them as a CgroupFormatError), not logged."""
    from gmpanalysis.cgroup import sampler_error

    logged: list[str] = []
    err = SamplerStderr(tmp_path / "host_stat.csv", logged.append)
    facts = {"kind": "format", "path": "/c/cpu.max", "line": 1, "message": '/c/cpu.max line 1: x, got "max 1"'}
    err.feed('gmp-sampler: /c/cpu.max line 1: x, got "max 1"\n' + json.dumps({"error": facts}) + "\n")
    err.close()
    assert err.error == facts and err.summary is None
    assert logged == ['gmp-sampler: /c/cpu.max line 1: x, got "max 1"']
    assert "cpu.max line 1" in str(sampler_error(err.error))
