"""cgroup limits and layout, Python side, on the SAME golden files as the Go reader.

The cgroup reader that runs in production is Go (collectors/internal/cgroup, tested with
`go test` over the same files). Python keeps the limit readers and the layout rules the lab
needs; these tests hold them to tests/data/cgroup/expected.json (one directory per case
under v1/ and v2/, id = its name) and tests/data/cgroup/paths.json (lookups), so the two
cannot drift.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
from pathlib import Path

import pytest
from conftest import DATA

from gmpanalysis.cgroup import (
    CgroupFiles,
    CpuLimits,
    Mount,
    detect,
    detect_version,
    lookup,
    parse_cpu_max,
    read_cpu_limits_v1,
    read_cpu_limits_v2,
    sampler_error,
    v1_dirs,
)
from gmpanalysis.errors import CgroupFormatError

CG = DATA / "cgroup"
EXPECTED = json.loads((CG / "expected.json").read_text())["cases"]
PATHS = json.loads((CG / "paths.json").read_text())
CASES = sorted(f"{v}/{d.name}" for v in ("v1", "v2") for d in (CG / v).iterdir() if d.is_dir())


def test_every_case_directory_has_an_expectation():
    assert sorted(EXPECTED) == CASES


def check_error(msg: str, case_dir: Path, want: dict) -> None:
    assert str(case_dir / want["file"]) in msg
    if "line" in want:
        assert f"line {want['line']}:" in msg
    if "quote" in want:
        quoted = re.search(r'got "(.*)"', msg)
        assert quoted and want["quote"] in quoted.group(1), msg
    assert want.get("contains", "") in msg
    assert len(msg) < 400


@pytest.mark.parametrize("case", CASES)
def test_limits(case):
    d = CG / case
    version = int(case[1])
    want = EXPECTED[case]["limits"]
    read = read_cpu_limits_v1 if version == 1 else read_cpu_limits_v2
    if "error" in want:
        with pytest.raises(CgroupFormatError) as e:
            read(d)
        check_error(str(e.value), d, want["error"])
        return
    quota = None if want["quota_us"] == -1 else want["quota_us"]
    assert read(d) == CpuLimits(version, want["period_us"], quota, want["burst_us"])


def test_limit_in_cpus():
    assert read_cpu_limits_v2(CG / "v2" / "set").cpus == 0.5
    assert read_cpu_limits_v1(CG / "v1" / "unset").cpus is None


def test_cpu_max_forms():
    assert parse_cpu_max("max 100000") == (None, 100_000)
    assert parse_cpu_max("50000 100000\n") == (50_000, 100_000)
    # a read shows both fields, always; the quota alone is a write's form
    for bad in ("max", "50000", "50000 0", "-5 100000", "50000  100000", " 50000 100000", "50000 100000\n\n", ""):
        with pytest.raises(CgroupFormatError):
            parse_cpu_max(bad)


def make_files(root: Path, files: dict) -> Path:
    """A tree from paths.json: a value is a file's content; None or a path ending in / a directory."""
    for p, content in files.items():
        full = root / p
        if content is None or p.endswith("/"):
            full.mkdir(parents=True, exist_ok=True)
        else:
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_text(content)
    return root


@pytest.mark.parametrize("case", PATHS["lookups"], ids=[c["id"] for c in PATHS["lookups"]])
def test_lookup(tmp_path, case):
    """The "does this cgroup exist" rule of gmp-sampler (collectors/internal/cgroup), on the
    same small mounts as the Go test; a spec's | alternatives are tried in order."""
    root = make_files(tmp_path, case["files"])
    want = case["want"]
    name, _, rels = case["spec"].rpartition("=")
    mount = detect(root)
    if mount is None:
        assert want.get("error") == "no_controller"
        assert detect_version(root) is None
        return
    found, why = None, []
    try:
        for rel in rels.split("|"):
            r = lookup(mount, rel)
            if isinstance(r, CgroupFiles):
                found = r
                break
            why.append(r)
    except CgroupFormatError as e:
        assert want.get("error") == "invalid" and want["contains"] in str(e)
        return
    if "error" in want:
        assert found is None and want["error"] == "not_exist"
        if len(why) == 1:  # the sampler's message for several alternatives is its own
            assert want["contains"] in why[0]
        return
    assert found is not None, why
    usage = root / want["usage"] if want["usage"] else None
    assert (name or found.rel or "/") == want["name"]
    got = (found.rel, found.version, found.stat, found.usage)
    assert got == (want["rel"], want["version"], root / want["stat"], usage)


def test_v1_dirs_follow_the_mount(tmp_path):
    root = make_files(tmp_path, {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpuacct/": None})
    assert v1_dirs(root, "/a/../g") == (root / "cpu,cpuacct" / "g", root / "cpuacct" / "g")


SPECIAL = json.loads((CG / "special.json").read_text())["cases"]


def make_special(path: Path, kind: str, stack: contextlib.ExitStack) -> None:
    """A file git cannot hold, of a kind named in special.json."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("dev-zero", "dev-null"):
        path.symlink_to(f"/dev/{kind[4:]}")
    elif kind == "socket":
        s = stack.enter_context(socket.socket(socket.AF_UNIX))
        s.bind(str(path))
    elif kind == "symlink-loop":
        path.symlink_to(path.name)
    elif kind == "one-mebibyte":
        path.write_bytes(b"1" * (1 << 20))
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("case", [c for c in SPECIAL if c["reader"] != "stat"], ids=lambda c: c["id"])
def test_special_files(tmp_path, case):
    """A FIFO, a device, a socket, a symlink loop or an oversized file in a cgroup file's
    place: an error naming the file, found without blocking (the Go reader, on the same
    table, also covers cpu.stat and cpuacct.usage)."""
    d = tmp_path / "c"
    if case["base"]:
        shutil.copytree(CG / case["base"], d)
    else:
        d.mkdir()
    path = d / case["file"]
    with contextlib.ExitStack() as stack:
        make_special(path, case["kind"], stack)
        signal.signal(signal.SIGALRM, _blocked)
        signal.alarm(10)
        try:
            if case["reader"] == "detect":
                assert detect(d) is None
                return
            read = read_cpu_limits_v1 if case["id"].startswith("v1") else read_cpu_limits_v2
            with pytest.raises(CgroupFormatError) as e:
                read(d)
        finally:
            signal.alarm(0)
    msg = str(e.value)
    assert str(path) in msg and case["contains"].lower() in msg.lower(), msg


def _blocked(signum: int, frame: object) -> None:
    raise AssertionError("still reading after 10 s")


def test_stat_is_checked_before_it_is_opened(tmp_path):
    """The existence rule refuses a FIFO as cpu.stat by its type, and a symlink loop with the
    reason, rather than calling the cgroup absent."""
    d = tmp_path / "cpu" / "g"
    d.mkdir(parents=True)
    os.mkfifo(d / "cpu.stat")
    mount = Mount(tmp_path, 1, tmp_path / "cpu", tmp_path / "cpu")
    with pytest.raises(CgroupFormatError, match="cpu.stat: is a FIFO; expected the cgroup's cpu.stat"):
        lookup(mount, "g")
    (d / "cpu.stat").unlink()
    (d / "cpu.stat").symlink_to("cpu.stat")
    with pytest.raises(CgroupFormatError, match="cannot be examined"):
        lookup(mount, "g")


# Contents of a limit file that the kernel never writes, each tried in every limit file
# (the fixture cases above hold one tiny file per case; this sweeps the combinations).
ODD = [
    b"",
    b"\n",
    b"\n\n",
    b"-",
    b"--5",
    b"-5",
    b"-0",
    b"0",
    b"1",
    b"999",
    b"1000001",
    "²".encode(),
    "٥٠٠٠٠".encode(),
    "５００００".encode(),
    b"5" * 5000,
    b"\xff",
    b"\xff\n",
    b"\x00",
    b"1000\x00",
    b"+1000",
    b" 1000",
    b"1000 ",
    b"1000\r\n",
    b"1_000",
    b"0x3e8",
    b"1e5",
    b"1000.0",
    b"1000\n1000",
    b"max 1000001",
    b"max 999",
    b"max 100000 1",
    b"50000  100000",
    b"50000\t100000",
    b"MAX 100000",
    b"01000",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"17592186044416",
    b"max 18446744073709551616",
    b"-1 100000",
    "\ufeff1000".encode(),
    "\u202e0001".encode(),
    b"max",
    b"50000",
]


@pytest.mark.parametrize(
    "version,name",
    [(1, "cpu.cfs_period_us"), (1, "cpu.cfs_quota_us"), (1, "cpu.cfs_burst_us"), (2, "cpu.max"), (2, "cpu.max.burst")],
)
def test_odd_contents_are_format_errors(tmp_path, version, name):
    """Every odd content in every limit file: CpuLimits within the kernel's ranges, or a
    CgroupFormatError naming the file and line; never another exception."""
    read = read_cpu_limits_v1 if version == 1 else read_cpu_limits_v2
    for i, content in enumerate(ODD):
        d = tmp_path / str(i)
        shutil.copytree(CG / f"v{version}" / "set", d)
        (d / name).write_bytes(content)
        try:
            lim = read(d)
        except CgroupFormatError as e:
            assert str(d / name) in str(e) and " line " in str(e), (content, str(e))
            assert "\x00" not in str(e) and "\u202e" not in str(e)
            continue
        assert 1000 <= lim.period_us <= 1_000_000, content
        assert lim.quota_us is None or 1000 <= lim.quota_us <= (1 << 44) - 1, content
        assert lim.quota_us is None or lim.burst_us <= lim.quota_us, content


def test_sampler_error_facts():
    """gmp-sampler's error facts (collectors/internal/cgroup ErrorFacts) as a GmpError: the
    file kinds become a CgroupFormatError carrying the sampler's message, escaped."""
    msg = '/sys/fs/cgroup/g/cpu.max line 1: period must be 1000..1000000 µs, got "max 1000001" (...)'
    e = sampler_error({"kind": "format", "path": "/sys/fs/cgroup/g/cpu.max", "line": 1, "message": msg})
    assert isinstance(e, CgroupFormatError) and str(e) == f"gmp-sampler: {msg}"
    e = sampler_error({"kind": "file", "path": "/x/cpu.stat", "reason": "is a FIFO", "message": "\x1b[2J"})
    assert isinstance(e, CgroupFormatError) and str(e) == "gmp-sampler: \\x1b[2J"
    assert "is a FIFO" in str(sampler_error({"kind": "file", "path": "/x/cpu.stat", "reason": "is a FIFO"}))
    for facts in (None, {}, "format", {"kind": "gone", "message": "m"}, {"kind": "not_exist"}, {"kind": "other"}):
        assert sampler_error(facts) is None
