"""The Kubernetes collector on both cgroup levels, without a cluster: the sampler's command
line, its limits lines into limits.csv, the levels in meta.json, and what a trace tells of a
third-party process (GOMAXPROCS, the Go release as far as the header says)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import gmpanalysis as gmp
from gmpanalysis.bundle import read_limits
from gmpanalysis.goversion import facts_from_trace, go_version_from_header
from gmpanalysis.kube.config import CollectConfig
from gmpanalysis.kube.sampler import SamplerStderr, record_start, record_summary, sampler_argv

FIXTURE_TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "cpu-0.5cpu-gmp2" / "trace.out"
UID = "0f2c9c1e-6a41-4a8e-9d0b-5d1c2e3f4a5b"
CID = "containerd://" + "ab" * 32


def _cgroups(container_quota=50_000, pod_quota=50_000):
    return [
        {
            "name": "container",
            "path": f"kubepods/burstable/pod{UID}/{'ab' * 32}",
            "version": 1,
            "limits": {"period_us": 100_000, "quota_us": container_quota, "burst_us": 0},
        },
        {
            "name": "pod",
            "path": f"kubepods/burstable/pod{UID}",
            "version": 1,
            "limits": {"period_us": 100_000, "quota_us": pod_quota, "burst_us": 0},
        },
    ]


def test_the_sampler_reads_both_levels_and_their_limits():
    targets = [("container", f"kube-container:{UID}:Burstable:{CID}"), ("pod", f"kube-pod:{UID}:Burstable")]
    argv = sampler_argv(CollectConfig(namespace="ns", pod="p"), targets, 10)
    i = [k for k, a in enumerate(argv) if a == "--cgroup"]
    assert [argv[k + 1] for k in i] == [
        f"container=kube-container:{UID}:Burstable:{CID}",
        f"pod=kube-pod:{UID}:Burstable",
    ]
    assert argv[argv.index("--limits-out") + 1] == "stderr" and argv[argv.index("--duration") + 1] == "10.000s"


def _limits(t, prev, name, quota):
    return json.dumps(
        {"limits": {"t_ns": t, "prev_ns": prev, "cgroup": name, "period_us": 100_000, "quota_us": quota, "burst_us": 0}}
    )


def test_limits_lines_become_limits_csv_rows_at_once_and_a_new_exec_continues_the_file(tmp_path):
    lim = tmp_path / "limits.csv"
    started = []
    err = SamplerStderr(tmp_path / "host_stat.csv", print, lim, started.append)
    err.feed(json.dumps({"start": {"cgroups": _cgroups()}}) + "\n" + _limits(1_000, None, "container", 50_000) + "\n")
    assert started and lim.read_text().splitlines() == [
        "t_ns,prev_ns,cgroup,period_us,quota_us,burst_us",
        "1000,,container,100000,50000,0",
    ]
    err.feed(_limits(1_100, None, "pod", None) + "\n" + _limits(9_000, 8_000, "pod", 200_000)[:20])
    assert len(lim.read_text().splitlines()) == 3  # the cut line waits for its end
    err.feed(_limits(9_000, 8_000, "pod", 200_000)[20:] + "\n")
    err.close()
    # a second exec after a container restart: no second header, its first reads have no prev
    err2 = SamplerStderr(tmp_path / "host_stat.csv", print, lim)
    err2.feed(_limits(20_000, None, "container", 200_000) + "\n" + _limits(20_100, None, "pod", 200_000) + "\n")
    df = read_limits(lim)
    assert df["cgroup"].tolist() == ["container", "pod", "pod", "container", "pod"]
    assert df["quota_us"].isna().tolist() == [False, True, False, False, False]
    assert df["prev_ns"].notna().tolist() == [False, False, True, False, False]
    assert err.prose == [] and err2.prose == []


def test_levels_come_from_the_first_exec_container_first():
    meta = {"cgroup_version": None, "cgroup_paths": [], "sampler": {}, "levels": [], "kernel": None, "ncpu": None}
    cgs = _cgroups()
    cgs[0]["cpus"], cgs[1]["cpus"] = 1, 2  # the container's threads on 1 CPU of a cpuset
    record_start(meta, {"cgroups": cgs, "kernel": "6.18.1", "ncpu": 2})
    assert meta["cpus_allowed"] == 1
    assert [x["level"] for x in meta["levels"]] == ["container", "pod"]
    assert meta["levels"][1] == {
        "level": "pod",
        "cgroup": f"kubepods/burstable/pod{UID}",
        "period_us": 100_000,
        "quota_us": 50_000,
        "burst_us": 0,
    }
    assert (meta["quota_us"], meta["period_us"], meta["burst_us"]) == (50_000, 100_000, 0)
    assert meta["cgroup_paths"] == [meta["levels"][0]["cgroup"], meta["levels"][1]["cgroup"]]
    assert (meta["kernel"], meta["ncpu"]) == ("6.18.1", 2)
    # the same exec's summary, then a restart's exec (a new container, limits resized since):
    # the levels and the bundle's limits stay those at the start; every exec is kept
    record_summary(meta, {"cgroups": _cgroups(), "policy": "SCHED_OTHER"})
    new = _cgroups(200_000, 200_000)
    new[0]["path"] = f"kubepods/burstable/pod{UID}/{'cd' * 32}"
    record_summary(meta, {"cgroups": new, "policy": "SCHED_OTHER"})
    assert meta["levels"][0]["quota_us"] == 50_000 and meta["quota_us"] == 50_000
    assert len(meta["sampler"]["execs"]) == 2 and len(meta["cgroup_paths"]) == 3
    assert meta["sampler"]["execs"][1]["cgroups"][0]["limits"]["quota_us"] == 200_000


@pytest.mark.parametrize(
    "header,want",
    [(22, "go1.22"), (23, "go1.23 or go1.24"), (25, "go1.25"), (26, "go1.26 or later"), (27, "go1.27 or later")],
)
def test_the_trace_header_names_a_format_not_a_release(header, want):
    assert go_version_from_header(header) == want


def test_gomaxprocs_and_go_version_from_the_trace_when_unknown(tmp_path):
    if not FIXTURE_TRACE.exists():
        pytest.skip("the shipped fixture trace is absent")
    path = tmp_path / "trace.out"
    shutil.copy(FIXTURE_TRACE, path)
    procs = int(gmp.read_trace(path).gomaxprocs["procs"].iloc[0])
    meta = {"pod": "p", "gomaxprocs_effective": None, "go_version": None, "default_godebug": None}
    facts_from_trace(meta, path)
    assert meta["gomaxprocs_effective"] == procs and meta["go_version"] == "go1.26 or later"
    assert set(meta["facts_from_trace"]) == {"gomaxprocs_effective", "go_version"}
    assert meta["default_godebug"] is None  # not in a trace: stays unknown
    # what the collector knew is kept; a file that is no trace leaves both unknown, said in the log
    known = {"gomaxprocs_effective": 3, "go_version": "go1.25.1"}
    facts_from_trace(known, path)
    assert known == {"gomaxprocs_effective": 3, "go_version": "go1.25.1"}
    bad = tmp_path / "bad.out"
    bad.write_bytes(b"<html>not a trace</html>" * 4)
    logged: list[str] = []
    m2 = {"pod": "p", "gomaxprocs_effective": None, "go_version": None}
    facts_from_trace(m2, bad, logged.append)
    assert m2["gomaxprocs_effective"] is None and "does not tell" in logged[0]


class _FakeExec:
    """The sampler's exec as the client's WSClient presents it (no cluster): a CSV row per
    update() while it runs; a line on its stdin ends it (gmp-sampler --stop-on-stdin), its
    summary on stderr and exit 0. ``gone_before_write``: it ended on its own just as it was
    told (its time cap), so the write fails as on a closed socket."""

    def __init__(self, gone_before_write: bool = False) -> None:
        self.out, self.err = ["t_ns,read_ns\n"], []
        self.writes: list[str] = []
        self.rows = 0
        self.open = True
        self.returncode: int | None = None
        self.gone_before_write = gone_before_write

    def update(self, timeout: float = 0) -> None:
        if self.open:
            self.rows += 1
            self.out.append(f"{self.rows},1\n")

    def peek_stdout(self) -> bool:
        return bool(self.out)

    def read_stdout(self) -> str:
        s, self.out = "".join(self.out), []
        return s

    def peek_stderr(self) -> bool:
        return bool(self.err)

    def read_stderr(self) -> str:
        s, self.err = "".join(self.err), []
        return s

    def is_open(self) -> bool:
        return self.open

    def _end(self, reason: str) -> None:
        self.err.append(json.dumps({"summary": {"stop_reason": reason}}) + "\n")
        self.open, self.returncode = False, 0

    def write_stdin(self, data: str) -> None:
        self.writes.append(data)
        if self.gone_before_write:
            self._end("duration")
            raise BrokenPipeError(32, "Broken pipe")
        self._end("stdin")


@pytest.mark.parametrize("gone_before_write", [False, True])
def test_the_sampler_is_told_to_stop_through_its_stdin_once_until_says_so(tmp_path, monkeypatch, gone_before_write):
    pytest.importorskip("kubernetes", reason="the [kube] extra is not installed")
    from types import SimpleNamespace

    from gmpanalysis.kube import sampler as ksampler

    fake = _FakeExec(gone_before_write)
    calls = []

    def stream(fn, name, ns, **kw):
        calls.append(kw)
        return fake

    monkeypatch.setattr("kubernetes.stream.stream", stream)
    monkeypatch.setattr(ksampler, "private", lambda core: SimpleNamespace(connect_get_namespaced_pod_exec=None))
    asked = []

    def until() -> bool:
        asked.append(fake.rows)
        return fake.rows >= 5  # the window has passed and the trace has ended

    csv = tmp_path / "cpu_stat.csv"
    targets = [("container", f"kube-container:{UID}:Burstable:{CID}")]
    rc, _, summary = ksampler.stream_sampler(
        None, CollectConfig(namespace="ns", pod="p"), "s", targets, 70.0, csv, lambda m: None, until=until
    )
    argv = calls[0]["command"]
    assert calls[0]["stdin"] is True and "--stop-on-stdin" in argv and argv[argv.index("--duration") + 1] == "70.000s"
    # told once, at the first check after until() turned true; the rows up to then are kept
    assert fake.writes == ["stop\n"] and asked[-1] == 5
    assert rc == 0 and summary["stop_reason"] == ("duration" if gone_before_write else "stdin")
    assert csv.read_text().splitlines() == ["t_ns,read_ns", *[f"{i},1" for i in range(1, 6)]]
    # without until: no stdin, no flag, the duration as given
    calls.clear()
    fake2 = _FakeExec()
    monkeypatch.setattr("kubernetes.stream.stream", lambda fn, name, ns, **kw: calls.append(kw) or fake2)
    fake2.update = lambda timeout=0: fake2._end("duration")  # type: ignore[method-assign]
    ksampler.stream_sampler(None, CollectConfig(namespace="ns", pod="p"), "s", targets, 10.0, csv, lambda m: None)
    assert calls[0]["stdin"] is False and "--stop-on-stdin" not in calls[0]["command"] and fake2.writes == []
